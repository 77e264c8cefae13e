"""``otel_errcompact.langgraph`` with real LangGraph: ``create_react_agent`` driven offline by a scripted
chat model, tools that really fail (a missing SQLite table 6 times, then a missing file 4 times), traced
by OpenInference's LangChain instrumentation into the ``make_otel`` pipeline.

Each behaviour is checked in the documented wiring (``bridge.tool_node`` + ``bridge.pre_model_hook``) and
against LangGraph's own error handling, which is what a user gets without the bridge.
"""

from __future__ import annotations

import re
import warnings
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.integrations import instrumented, require

require("langgraph", "langgraph.prebuilt", "langchain_core", "openinference.instrumentation.langchain")

from langchain_core.messages import AIMessage, BaseMessage, SystemMessage, ToolMessage  # noqa: E402
from langchain_core.tools import tool  # noqa: E402
from openinference.instrumentation.langchain import LangChainInstrumentor  # noqa: E402
from opentelemetry.trace import StatusCode  # noqa: E402

from otel_errcompact import ErrorBudgetExceeded, Thresholds  # noqa: E402
from otel_errcompact.langgraph import BLOCK_NAME, LangGraphBridge  # noqa: E402
from tests.conftest import OTel  # noqa: E402
from tests.integrations.failing_tools import GIVE_UP, SCRIPT, make_read_invoice  # noqa: E402
from tests.integrations.langgraph_script import (  # noqa: E402
    AGENT,
    THREAD,
    ScriptedChatModel,
    build_agent,
    history,
    invoke,
    invoke_stateless,
    scripted_model,
)
from tests.integrations.orders import TOOL_FILE, failing_line, make_count_orders  # noqa: E402

with warnings.catch_warnings():
    warnings.simplefilter("ignore")
    from langgraph.prebuilt import ToolNode


def tool_messages(messages: list[BaseMessage]) -> list[ToolMessage]:
    return [m for m in messages if isinstance(m, ToolMessage)]


@pytest.fixture
def tools(db: Path, tmp_path: Path) -> list[Any]:
    return [tool(make_count_orders(db)), tool(make_read_invoice(tmp_path))]


@pytest.fixture
def traced(make_otel: Callable[..., OTel]) -> Iterator[Callable[..., OTel]]:
    """``make_otel`` with the LangChain instrumentation exporting into the pipeline it builds."""
    yield from instrumented(make_otel, LangChainInstrumentor())


def where(db: Path) -> str:
    return f"{TOOL_FILE}:{failing_line(make_count_orders(db))} in count_orders: no such table: orders"


# -- the documented wiring ----------------------------------------------------------------------------


def test_the_run_stops_at_the_threshold_with_digests_in_the_thread(
    traced: Callable[..., OTel], tools: list[Any], db: Path
) -> None:
    otel = traced(consecutive=3)
    bridge = LangGraphBridge(otel.ec, agent_name=AGENT)
    model = scripted_model()
    agent = build_agent(bridge.tool_node(tools), model, pre_model_hook=bridge.pre_model_hook)

    with pytest.raises(ErrorBudgetExceeded) as raised:
        invoke(agent)
    assert raised.value.escalation.reason == "consecutive" and raised.value.escalation.count == 3
    assert raised.value.escalation.scope == THREAD
    assert len(model.seen) == 3  # three model calls, three tool calls: no fourth turn

    # What the thread holds: one error ToolMessage per failed call, only the digest line and its count.
    fed_back = tool_messages(history(agent))
    assert [m.status for m in fed_back] == ["error", "error"]  # the third raised instead of returning
    assert str(fed_back[0].content) == f"Error: [OperationalError] at {_prefix(fed_back[0])}{where(db)}"
    assert str(fed_back[1].content).endswith(f"{where(db)} (×2)")
    assert [m.tool_call_id for m in fed_back] == ["call_0", "call_1"]

    # Records: one per failure, scoped to the thread, with the agent's name and the call id.
    records = otel.records()
    assert [(r.scope, r.agent_name, r.tool_call_id, r.count) for r in records] == [
        (THREAD, AGENT, f"call_{i}", i + 1) for i in range(3)
    ]
    assert all("in count_orders" in (r.exception_stacktrace or "") for r in records)
    assert otel.ec.history.escalation(THREAD) is not None
    # Token savings are measured against what LangGraph would have fed back, not the raw traceback.
    [point] = otel.metric_points("errcompact.tokens.raw")
    assert dict(point.attributes)["errcompact.basis"] == "model_text"


def _prefix(message: ToolMessage) -> str:
    """The path part before the file name in a digest (absolute paths are shortened differently)."""
    text = str(message.content)
    start = len("Error: [OperationalError] at ")
    return text[start : text.index(TOOL_FILE)]


def test_the_library_spans_are_in_the_graph_trace(traced: Callable[..., OTel], tools: list[Any]) -> None:
    otel = traced(consecutive=3)
    bridge = LangGraphBridge(otel.ec, agent_name=AGENT)
    agent = build_agent(bridge.tool_node(tools), scripted_model(), pre_model_hook=bridge.pre_model_hook)
    with pytest.raises(ErrorBudgetExceeded):
        invoke(agent)

    spans = otel.spans()
    [root] = [s for s in spans if s.parent is None]
    ours = otel.spans("execute_tool count_orders")
    assert len(ours) == 3
    by_id = {s.context.span_id: s for s in spans}
    for span in ours:
        assert span.context.trace_id == root.context.trace_id
        assert span.parent is not None and by_id[span.parent.span_id].name == "tools"
        assert span.status.status_code is StatusCode.ERROR
        attrs = span.attributes or {}
        assert attrs["gen_ai.conversation.id"] == THREAD and attrs["gen_ai.agent.name"] == AGENT
    assert [(s.attributes or {})["errcompact.count"] for s in ours] == [1, 2, 3]
    # The instrumentation's own TOOL spans failed too, inside the claimed calls: not counted twice.
    assert len(otel.records()) == 3
    # The escalation sits on the graph's root span, and the halted run does not end green.
    assert len([e for e in root.events if e.name == "errcompact.escalation"]) == 1
    assert root.status.status_code is StatusCode.ERROR
    assert "error threshold breached" in (root.status.description or "")


def test_the_block_replaces_the_previous_one_and_counts_are_exact(
    traced: Callable[..., OTel], tools: list[Any], db: Path
) -> None:
    otel = traced(thresholds=Thresholds(consecutive=20, budget=None))
    bridge = LangGraphBridge(otel.ec, agent_name=AGENT)
    model = scripted_model()
    agent = build_agent(
        bridge.tool_node(tools), model, prompt="Answer questions about orders.", pre_model_hook=bridge.pre_model_hook
    )
    result = invoke(agent)
    assert result["messages"][-1].content == GIVE_UP
    assert len(model.seen) == len(SCRIPT) + 1

    # Every model call saw at most one block, right after the system prompt, never stored in the state.
    for i, sent in enumerate(model.seen):
        blocks = [m for m in sent if isinstance(m, SystemMessage) and m.name == BLOCK_NAME]
        assert len(blocks) == (0 if i == 0 else 1)
        if blocks:
            assert sent.index(blocks[0]) == 1
            assert str(blocks[0].content).splitlines()[1].startswith(f"{i} tool failure(s)")
    assert not [m for m in result["messages"] if isinstance(m, SystemMessage)]
    last_block = str(next(m for m in model.seen[-1] if isinstance(m, SystemMessage) and m.name == BLOCK_NAME).content)
    assert f"{where(db)} (×6)" in last_block
    assert re.search(r"in read_invoice: .*inv-7\.txt.* \(×4\)", last_block)

    fed_back = tool_messages(result["messages"])
    assert len(fed_back) == 10 and all(m.status == "error" for m in fed_back)
    assert [re.search(r"\(×(\d+)\)$", str(m.content)) is not None for m in fed_back] == [
        False,
        *[True] * 5,
        False,
        *[True] * 3,
    ]
    assert str(fed_back[5].content).endswith(f"{where(db)} (×6)")
    assert str(fed_back[9].content).endswith("(×4)") and "in read_invoice" in str(fed_back[9].content)
    assert all("Traceback" not in str(m.content) for m in fed_back)
    assert [r.count for r in otel.records()] == [1, 2, 3, 4, 5, 6, 1, 2, 3, 4]


def test_threads_are_separate_scopes(traced: Callable[..., OTel], tools: list[Any]) -> None:
    otel = traced(consecutive=3)
    bridge = LangGraphBridge(otel.ec, agent_name=AGENT)
    with pytest.raises(ErrorBudgetExceeded):
        invoke(build_agent(bridge.tool_node(tools), scripted_model(), pre_model_hook=bridge.pre_model_hook), "thread-a")
    # Another thread starts clean: its first call runs and is counted once, in its own scope.
    model_b = scripted_model(("count_orders",))
    result = invoke(build_agent(bridge.tool_node(tools), model_b, pre_model_hook=bridge.pre_model_hook), "thread-b")
    assert result["messages"][-1].content == GIVE_UP
    assert otel.ec.history.escalation("thread-b") is None
    assert "(×" not in otel.ec.context("thread-b") and "in count_orders" in otel.ec.context("thread-b")
    assert "(×3)" in otel.ec.context("thread-a")
    # A new run on the breached thread stops before its model is called.
    model_a = scripted_model(("count_orders",))
    with pytest.raises(ErrorBudgetExceeded):
        invoke(build_agent(bridge.tool_node(tools), model_a, pre_model_hook=bridge.pre_model_hook), "thread-a")
    assert model_a.seen == []


def test_runs_without_a_thread_are_scoped_by_their_trace(
    traced: Callable[..., OTel], tools: list[Any], caplog: pytest.LogCaptureFixture
) -> None:
    """A stateless agent (no checkpointer, no ``thread_id``): each run is counted in its own trace, so a
    halted run does not stop the next one, and the pre-model hook reads the scope its tools count in."""
    otel = traced(consecutive=3)
    bridge = LangGraphBridge(otel.ec, agent_name=AGENT)
    with pytest.raises(ErrorBudgetExceeded) as raised:
        invoke_stateless(
            build_agent(bridge.tool_node(tools), scripted_model(), stateless=True, pre_model_hook=bridge.pre_model_hook)
        )
    [first_root] = [s for s in otel.spans() if s.parent is None]
    assert raised.value.escalation.scope == f"trace:{first_root.context.trace_id:032x}"

    model = scripted_model(("count_orders",))
    agent = build_agent(bridge.tool_node(tools), model, stateless=True, pre_model_hook=bridge.pre_model_hook)
    assert invoke_stateless(agent)["messages"][-1].content == GIVE_UP
    assert len(model.seen) == 2
    [second_root] = [s for s in otel.spans() if s.parent is None and s is not first_root]
    second = f"trace:{second_root.context.trace_id:032x}"
    assert sorted(otel.ec.history.scopes()) == sorted([raised.value.escalation.scope, second])
    block = next(m for m in model.seen[1] if isinstance(m, SystemMessage) and m.name == BLOCK_NAME)
    assert str(block.content).splitlines()[1].startswith("1 tool failure(s)")
    assert not [r for r in caplog.records if "thread_id" in r.getMessage()]


def test_runs_with_neither_thread_nor_trace_are_named_once(
    make_otel: Callable[..., OTel], tools: list[Any], caplog: pytest.LogCaptureFixture
) -> None:
    """Without a thread and outside any trace, runs can only share the ``default`` scope: the bridge
    says so once, naming the remedy."""
    otel = make_otel(thresholds=Thresholds(consecutive=20, budget=None))
    bridge = LangGraphBridge(otel.ec, agent_name=AGENT)
    for _ in range(2):
        model = scripted_model(("count_orders",))
        agent = build_agent(bridge.tool_node(tools), model, stateless=True, pre_model_hook=bridge.pre_model_hook)
        invoke_stateless(agent)
    assert otel.ec.history.scopes() == ["default"]
    [warning] = [r for r in caplog.records if r.name == "otel_errcompact" and "thread_id" in r.getMessage()]
    assert warning.levelname == "WARNING" and "'default'" in warning.getMessage()


def test_on_tool_error_raise_leaves_the_bridge_digesting(
    traced: Callable[..., OTel], tools: list[Any], db: Path
) -> None:
    """``on_tool_error="raise"`` is for ``@ec.tool`` and ``ec.tool_call``: the bridge still feeds back
    digests and halts at the threshold instead of letting the tool's raw exception out of the graph."""
    otel = traced(consecutive=3, on_tool_error="raise")
    bridge = LangGraphBridge(otel.ec, agent_name=AGENT)
    model = scripted_model()
    agent = build_agent(bridge.tool_node(tools), model, pre_model_hook=bridge.pre_model_hook)
    with pytest.raises(ErrorBudgetExceeded):
        invoke(agent)
    assert len(model.seen) == 3
    fed_back = tool_messages(history(agent))
    assert [m.status for m in fed_back] == ["error", "error"]
    assert str(fed_back[1].content).endswith(f"{where(db)} (×2)")


def test_a_digest_mode_ec_tool_s_failures_are_error_messages(
    traced: Callable[..., OTel], db: Path, tmp_path: Path
) -> None:
    """``@tool`` over ``@ec.tool`` (digest mode) in the bridge's ToolNode: the tool returns its digest
    instead of raising, and ToolNode makes a "success" ToolMessage of it. The bridge marks it
    ``status="error"``, as LangGraph marks a failed call and as the bridge's own messages for a failure
    are, without counting the failure again; nothing else changes (``compact_messages`` keeps the messages
    as they are), and the pre-model hook stops the run after the third failure. Sync and async graphs."""
    import asyncio

    otel = traced(consecutive=3, breaker_threshold=0)
    bridge = LangGraphBridge(otel.ec, agent_name=AGENT)
    tools = [tool(otel.ec.tool(make_count_orders(db))), tool(otel.ec.tool(make_read_invoice(tmp_path)))]
    breached = f"{where(db)} (×3) — error threshold breached: stop retrying this step."
    for thread in ("thread-sync", "thread-async"):
        agent = build_agent(bridge.tool_node(tools), scripted_model(), pre_model_hook=bridge.pre_model_hook)
        with pytest.raises(ErrorBudgetExceeded):
            if thread == "thread-sync":
                invoke(agent, thread)
            else:
                config = {"configurable": {"thread_id": thread}}
                asyncio.run(agent.ainvoke({"messages": [("user", "How many orders?")]}, config=config))
        fed_back = tool_messages(history(agent, thread))
        assert [(m.status, m.tool_call_id) for m in fed_back] == [("error", f"call_{i}") for i in range(3)]
        assert str(fed_back[0].content).startswith("Error: [OperationalError] at ")
        assert str(fed_back[2].content).endswith(breached)
        assert otel.ec.compact_messages(fed_back) == fed_back
    assert [(r.scope, r.count) for r in otel.records()] == [
        (thread, i) for thread in ("thread-sync", "thread-async") for i in (1, 2, 3)
    ]


def test_handle_tool_errors_true_is_still_stopped_by_the_pre_model_hook(
    traced: Callable[..., OTel], tools: list[Any]
) -> None:
    """A user who keeps ``handle_tool_errors=True`` turns the halt into a ToolMessage; the hook stops the
    run at the next model step instead."""
    otel = traced(consecutive=3)
    bridge = LangGraphBridge(otel.ec, agent_name=AGENT)
    model = scripted_model()
    agent = build_agent(bridge.tool_node(tools, handle_tool_errors=True), model, pre_model_hook=bridge.pre_model_hook)
    with pytest.raises(ErrorBudgetExceeded):
        invoke(agent)
    assert len(model.seen) == 3
    assert len(otel.records()) == 3


# -- LangGraph's own error handling, without the bridge --------------------------------------------------


def test_default_tool_node_raises_the_first_tool_error(traced: Callable[..., OTel], tools: list[Any]) -> None:
    import sqlite3

    traced(consecutive=3)
    model = scripted_model()
    with pytest.raises(sqlite3.OperationalError, match="no such table: orders"):
        invoke(build_agent(tools, model))
    assert len(model.seen) == 1


def test_handle_tool_errors_true_without_the_bridge_never_stops(traced: Callable[..., OTel], tools: list[Any]) -> None:
    otel = traced(consecutive=3)
    model = scripted_model()
    result = invoke(build_agent(ToolNode(tools, handle_tool_errors=True), model))
    assert len(model.seen) == len(SCRIPT) + 1  # the breach after the third failure stopped nothing
    assert otel.ec.history.escalation(THREAD) is not None
    fed_back = tool_messages(result["messages"])
    assert len(fed_back) == 10 and all(str(m.content).startswith("Error: ") for m in fed_back)


def test_the_async_graph_halts_and_counts_once(traced: Callable[..., OTel], tools: list[Any]) -> None:
    """``ainvoke`` goes through ``awrap_tool_call``; the claim follows the call into LangGraph's executor."""
    import asyncio

    otel = traced(consecutive=3)
    bridge = LangGraphBridge(otel.ec, agent_name=AGENT)
    model = scripted_model()
    agent = build_agent(bridge.tool_node(tools), model, pre_model_hook=bridge.pre_model_hook)
    config = {"configurable": {"thread_id": THREAD}}
    with pytest.raises(ErrorBudgetExceeded):
        asyncio.run(agent.ainvoke({"messages": [("user", "How many orders?")]}, config=config))
    assert len(model.seen) == 3
    assert [(r.scope, r.tool_call_id, r.count) for r in otel.records()] == [
        (THREAD, f"call_{i}", i + 1) for i in range(3)
    ]
    assert len(otel.spans("execute_tool count_orders")) == 3


def test_without_instrumentation_the_spans_join_the_application_trace(
    make_otel: Callable[..., OTel], tools: list[Any], caplog: pytest.LogCaptureFixture
) -> None:
    """No LangChain instrumentation: the library's spans are children of the application's own span
    around the graph run, and asking for a framework span costs no warning per call."""
    otel = make_otel(consecutive=3)
    bridge = LangGraphBridge(otel.ec, agent_name=AGENT)
    agent = build_agent(bridge.tool_node(tools), scripted_model(), pre_model_hook=bridge.pre_model_hook)
    attrs = {"gen_ai.operation.name": "invoke_agent", "gen_ai.agent.name": AGENT}
    with (
        pytest.raises(ErrorBudgetExceeded),
        otel.tracer.start_as_current_span("invoke_agent orders-agent", attributes=attrs),
    ):
        invoke(agent)
    [root] = otel.spans("invoke_agent orders-agent")
    ours = otel.spans("execute_tool count_orders")
    assert len(ours) == 3 and all(s.parent is not None and s.parent.span_id == root.context.span_id for s in ours)
    assert root.status.status_code is StatusCode.ERROR
    assert len([e for e in root.events if e.name == "errcompact.escalation"]) == 1
    assert not [r for r in caplog.records if "Missing `tracer`" in r.getMessage()]


def test_invalid_arguments_are_digested_by_field_and_halt_at_the_threshold(
    make_otel: Callable[..., OTel], tools: list[Any]
) -> None:
    """The one failure LangGraph's default ``handle_tool_errors`` turns into a message itself: arguments
    that do not validate. Wired as documented (no instrumentation recording the exception), the bridge has
    only that message: its digest names the tool and the field (not the template's closing request to try
    again, which read as a transient failure that never escalates), and the third identical call stops the
    run as any other failure does."""
    otel = make_otel(consecutive=3)
    bridge = LangGraphBridge(otel.ec, agent_name=AGENT)
    calls = [{"name": "count_orders", "args": {"client": "acme"}, "id": f"call_{i}", "type": "tool_call"}
             for i in range(6)]  # fmt: skip
    model = ScriptedChatModel(responses=[*(AIMessage(content="", tool_calls=[c]) for c in calls), AIMessage(GIVE_UP)])
    agent = build_agent(bridge.tool_node(tools), model, pre_model_hook=bridge.pre_model_hook)
    with pytest.raises(ErrorBudgetExceeded) as raised:
        invoke(agent)
    assert raised.value.escalation.reason == "consecutive" and raised.value.escalation.count == 3
    assert len(model.seen) == 3
    fed_back = tool_messages(history(agent))
    assert [str(m.content) for m in fed_back] == [
        "Error: [ToolInvocationError]: count_orders: customer: Field required",
        "Error: [ToolInvocationError]: count_orders: customer: Field required (×2)",
    ]
    records = otel.records()
    assert [r.count for r in records] == [1, 2, 3]
    assert all(r.digest is not None and r.digest.error_class == "permanent" for r in records)
    assert all("'client': 'acme'" in (r.raw_error or "") for r in records)  # the audit copy keeps the arguments


def test_an_agent_used_as_a_tool_counts_its_own_tool_failures(
    traced: Callable[..., OTel], tools: list[Any], db: Path
) -> None:
    """An agent run inside a bridged tool call (an agent used as a tool): its tool failures end inside
    the outer call, but are not that call's, so the claim must not take them. Here the inner agent is
    wired with ``init()`` alone (``handle_tool_errors=True``): its failure is counted by the span
    processor, in the outer thread's conversation, while the outer call itself succeeded."""
    otel = traced(consecutive=3)
    bridge = LangGraphBridge(otel.ec, agent_name=AGENT)
    inner = build_agent(ToolNode(tools[:1], handle_tool_errors=True), scripted_model(("count_orders",)), stateless=True)

    @tool
    def ask_orders_agent(question: str) -> str:
        """Ask the orders agent a question."""
        return str(invoke_stateless(inner)["messages"][-1].content)

    outer_model = ScriptedChatModel(
        responses=[
            AIMessage(content="", tool_calls=[
                {"name": "ask_orders_agent", "args": {"question": "How many?"}, "id": "call_outer", "type": "tool_call"}
            ]),
            AIMessage(content="Done."),
        ]
    )  # fmt: skip
    outer = build_agent(bridge.tool_node([ask_orders_agent]), outer_model, pre_model_hook=bridge.pre_model_hook)
    result = invoke(outer)
    assert [str(m.content) for m in tool_messages(result["messages"])] == [GIVE_UP]

    records = otel.records()
    assert [(r.scope, r.tool_name) for r in records] == [(THREAD, "count_orders")]
    assert records[0].digest is not None and records[0].digest.line.endswith(where(db))
    assert "1 tool failure(s), 1 distinct" in otel.ec.context(THREAD)
    assert otel.metric_sum("errcompact.errors") == 1
