"""``otel_errcompact.openai_agents`` with the real OpenAI Agents SDK: an ``Agent`` driven offline by a
scripted ``Model``, tools that really fail (a missing SQLite table 6 times, then a missing file 4 times),
traced by OpenInference's openai-agents instrumentation into the ``make_otel`` pipeline.

Each behaviour is checked in the documented wiring (``bridge.function_tool`` + ``bridge.instructions`` +
``bridge.run_sync``) and against the SDK's own default failure handling.
"""

from __future__ import annotations

import asyncio
import json
import re
from collections.abc import Callable, Iterator
from http.server import BaseHTTPRequestHandler
from pathlib import Path
from typing import Any

import pytest

from tests.integrations import instrumented, require

require("agents", "openinference.instrumentation.openai_agents")

from agents import (  # noqa: E402
    Agent,
    RunConfig,
    Runner,
    SQLiteSession,
    ToolCallOutputItem,
    function_tool,
)
from agents.memory import OpenAIConversationsSession  # noqa: E402
from openai import AsyncOpenAI  # noqa: E402
from openinference.instrumentation.openai_agents import OpenAIAgentsInstrumentor  # noqa: E402
from opentelemetry.trace import StatusCode  # noqa: E402

from otel_errcompact import ErrorBudgetExceeded, Thresholds  # noqa: E402
from otel_errcompact.openai_agents import AgentsBridge, RunHalted  # noqa: E402
from tests.conftest import OTel  # noqa: E402
from tests.integrations.agents_script import AGENT, INSTRUCTIONS, ScriptedModel  # noqa: E402
from tests.integrations.failing_tools import GIVE_UP, arguments_for, make_read_invoice  # noqa: E402
from tests.integrations.orders import TOOL_FILE, failing_line, make_count_orders  # noqa: E402
from tests.realerrors import loopback_server  # noqa: E402

SDK_DEFAULT_TOOL_ERROR = "An error occurred while running the tool. Please try again."


@pytest.fixture
def traced(make_otel: Callable[..., OTel]) -> Iterator[Callable[..., OTel]]:
    yield from instrumented(make_otel, OpenAIAgentsInstrumentor())


@pytest.fixture
def fns(db: Path, tmp_path: Path) -> list[Callable[..., Any]]:
    return [make_count_orders(db), make_read_invoice(tmp_path)]


def bridged_agent(bridge: AgentsBridge, fns: list[Callable[..., Any]], model: ScriptedModel) -> Agent[Any]:
    return Agent(
        name=AGENT,
        instructions=bridge.instructions(INSTRUCTIONS),
        model=model,
        tools=[bridge.function_tool(f) for f in fns],
    )


def outputs(result: Any) -> list[str]:
    return [str(item.output) for item in result.new_items if isinstance(item, ToolCallOutputItem)]


def where(db: Path) -> str:
    return f"{TOOL_FILE}:{failing_line(make_count_orders(db))} in count_orders: no such table: orders"


# -- the documented wiring ----------------------------------------------------------------------------


def test_the_run_stops_at_the_threshold(traced: Callable[..., OTel], fns: list[Callable[..., Any]], db: Path) -> None:
    otel = traced(consecutive=3)
    bridge = AgentsBridge(otel.ec)
    model = ScriptedModel()
    with pytest.raises(ErrorBudgetExceeded) as raised:
        bridge.run_sync(bridged_agent(bridge, fns, model), "How many orders?", run_config=RunConfig(group_id="chat-42"))
    assert isinstance(raised.value, RunHalted)
    assert raised.value.escalation.count == 3 and raised.value.escalation.scope == "chat-42"
    assert model.calls == 3

    # Digests come from the real exception although the SDK redacts span data by default.
    records = otel.records()
    assert [(r.scope, r.agent_name, r.tool_call_id, r.count) for r in records] == [
        ("chat-42", AGENT, f"call_{i}", i) for i in (1, 2, 3)
    ]
    assert all(r.digest is not None and r.digest.line.endswith(where(db)) for r in records)
    assert all(f"line {failing_line(fns[0])}, in count_orders" in (r.exception_stacktrace or "") for r in records)
    # Token savings are measured against the SDK's own failure text.
    [point] = otel.metric_points("errcompact.tokens.raw")
    assert dict(point.attributes)["errcompact.basis"] == "model_text"

    # The library's spans are children of the SDK's function spans, in the run's trace; the escalation
    # is an event on the agent span; the SDK's own failed tool spans carry the digest and are not
    # counted a second time.
    spans = otel.spans()
    by_id = {s.context.span_id: s for s in spans}
    ours = otel.spans("execute_tool count_orders")
    assert len(ours) == 3
    [agent_span] = [s for s in spans if (s.attributes or {}).get("agent.name") == AGENT]
    for span in ours:
        assert span.parent is not None
        parent = by_id[span.parent.span_id]
        assert parent.name == "count_orders" and (parent.attributes or {}).get("openinference.span.kind") == "TOOL"
        assert str((parent.attributes or {})["errcompact.digest"]).endswith(where(db))
        assert span.context.trace_id == agent_span.context.trace_id
    assert len([e for e in agent_span.events if e.name == "errcompact.escalation"]) == 1
    assert agent_span.status.status_code is StatusCode.ERROR
    [root] = [s for s in spans if s.parent is None]
    assert root.status.status_code is StatusCode.ERROR  # the instrumentation set OK; see otel_errcompact.halted
    assert "error threshold breached" in (root.status.description or "")


def test_parallel_calls_the_halt_stopped_are_not_counted(
    traced: Callable[..., OTel], fns: list[Callable[..., Any]]
) -> None:
    """One turn of six parallel calls (the model's default): the third failure breaches and halts, and the
    three calls of the turn that reach ``failure_error_function`` after it are stopped by the standing
    breach. The SDK ends their spans with the halt's message as the error: those are not tool failures,
    so nothing is counted beyond the three, in no other scope, and there is one escalation.

    The tool is async, as many are: the SDK runs the six on its event loop in turn, so all six fail
    before it acts on the halt. (A sync tool runs in a thread of its own; on a loaded machine the calls
    whose threads finish after the halt are cancelled by the SDK instead, and never reach the bridge.)"""
    otel = traced(consecutive=3)
    bridge = AgentsBridge(otel.ec)
    count_orders_sync = fns[0]

    async def count_orders(customer: str) -> int:
        """Count the orders a customer has placed."""
        await asyncio.sleep(0)
        return count_orders_sync(customer)

    model = ScriptedModel(("count_orders",), parallel=6)
    agent = bridged_agent(bridge, [count_orders], model)
    with pytest.raises(RunHalted) as raised:
        bridge.run_sync(agent, "How many orders?", run_config=RunConfig(group_id="chat-42"))
    assert raised.value.escalation.scope == "chat-42" and model.calls == 1

    assert [(r.scope, r.count) for r in otel.records()] == [("chat-42", 1), ("chat-42", 2), ("chat-42", 3)]
    assert otel.ec.history.scopes() == ["chat-42"]
    assert otel.metric_sum("errcompact.escalations") == 1
    sdk_spans = [s for s in otel.spans("count_orders") if (s.attributes or {}).get("openinference.span.kind") == "TOOL"]
    halted = [s for s in sdk_spans if (s.attributes or {}).get("error.type") == f"{RunHalted.__module__}.RunHalted"]
    assert len(halted) == 3 and all(s.status.status_code is StatusCode.ERROR for s in halted)
    assert "error threshold breached" in (halted[0].status.description or "")


def test_the_block_is_in_the_instructions_and_counts_are_exact(
    traced: Callable[..., OTel], fns: list[Callable[..., Any]], db: Path
) -> None:
    otel = traced(thresholds=Thresholds(consecutive=20, budget=None))
    bridge = AgentsBridge(otel.ec)
    model = ScriptedModel()
    result = bridge.run_sync(
        bridged_agent(bridge, fns, model), "How many orders?", run_config=RunConfig(group_id="chat-7"), max_turns=20
    )
    assert result.final_output == GIVE_UP
    fed_back = outputs(result)
    assert len(fed_back) == 10
    assert fed_back[0].startswith("Error: [OperationalError] at ") and fed_back[0].endswith(where(db))
    assert fed_back[5].endswith(f"{where(db)} (×6)")
    assert fed_back[6].startswith("Error: [FileNotFoundError]") and "(×" not in fed_back[6]
    assert fed_back[9].endswith("(×4)") and "in read_invoice" in fed_back[9]

    # One block per model call, in the instructions, rebuilt each time (never in the conversation).
    assert model.instructions[0] == INSTRUCTIONS
    for i, sent in enumerate(model.instructions[1:], start=1):
        assert sent is not None and sent.startswith(INSTRUCTIONS) and sent.count("[RECENT ERRORS]") == 1
        assert f"\n{i} tool failure(s)" in sent
    last = model.instructions[-1] or ""
    assert f"{where(db)} (×6)" in last and re.search(r"in read_invoice: .* \(×4\)", last)
    assert [r.count for r in otel.records()] == [1, 2, 3, 4, 5, 6, 1, 2, 3, 4]


def test_async_base_instructions_are_awaited(make_otel: Callable[..., OTel], fns: list[Callable[..., Any]]) -> None:
    """``bridge.instructions(base)`` with an async ``base`` (the SDK accepts one): every model call gets
    the text it returns, with the block after it once something failed."""
    otel = make_otel(consecutive=10)
    bridge = AgentsBridge(otel.ec)

    async def base(ctx: Any, agent: Agent[Any]) -> str:
        return f"{INSTRUCTIONS} You are {agent.name}."

    model = ScriptedModel(("count_orders", "count_orders"))
    agent = Agent(name=AGENT, instructions=bridge.instructions(base), model=model,
                  tools=[bridge.function_tool(f) for f in fns])
    bridge.run_sync(agent, "How many orders?", run_config=RunConfig(group_id="chat-8", tracing_disabled=True))
    expected = f"{INSTRUCTIONS} You are {AGENT}."
    assert model.instructions[0] == expected
    assert len(model.instructions) == 3
    assert all((sent or "").startswith(f"{expected}\n\n[RECENT ERRORS]") for sent in model.instructions[1:])


def test_captured_arguments_are_the_call_s_arguments(
    make_otel: Callable[..., OTel], fns: list[Callable[..., Any]]
) -> None:
    """With argument capture on, the record and the library's span hold the arguments the model sent, as
    a JSON object (the SDK hands them over as JSON text, which is not encoded a second time)."""
    otel = make_otel(capture_arguments=True)
    bridge = AgentsBridge(otel.ec)
    model = ScriptedModel(("count_orders",))
    bridge.run_sync(bridged_agent(bridge, fns, model), "How many orders?",
                    run_config=RunConfig(group_id="chat-9", tracing_disabled=True))
    [record] = otel.records()
    assert json.loads(record.tool_arguments or "") == arguments_for("count_orders")
    [span] = otel.spans("execute_tool count_orders")
    assert json.loads(str((span.attributes or {})["gen_ai.tool.call.arguments"])) == arguments_for("count_orders")


def test_a_method_tool_on_a_new_instance_per_run_is_one_call_for_the_breaker(
    traced: Callable[..., OTel], db: Path
) -> None:
    """``@ec.tool`` on a method, the agent given a new instance's bound method for each run (a request's
    own service object): the instance Python binds is no argument the model chose, so the same failing
    call is one call for the circuit breaker, which refuses the fourth run's call after three failures,
    and the records and spans hold the model's arguments only, not the object's repr."""
    otel = traced(capture_arguments=True, thresholds=Thresholds(consecutive=20, budget=None))
    ec, bridge = otel.ec, AgentsBridge(otel.ec)

    class Orders:
        def __init__(self, db: Path) -> None:
            self.db = db

        @ec.tool
        def count_orders(self, customer: str) -> int:
            """Count the orders a customer has placed."""
            return make_count_orders(self.db)(customer)

    fed_back: list[str] = []
    for request in range(4):
        agent = bridged_agent(bridge, [Orders(db).count_orders], ScriptedModel(("count_orders",)))
        result = bridge.run_sync(agent, "How many orders?", run_config=RunConfig(group_id=f"request-{request}"))
        fed_back += outputs(result)
    assert [text.split(":")[0] for text in fed_back] == ["Error", "Error", "Error", "circuit open"]
    assert fed_back[3].startswith(f"circuit open: [OperationalError] at {_prefix(fed_back[0])}{where(db)} (×3)")
    records = otel.records()
    assert [json.loads(r.tool_arguments or "") for r in records] == [arguments_for("count_orders")] * 3
    spans = otel.spans("execute_tool count_orders")
    assert [json.loads(str((s.attributes or {})["gen_ai.tool.call.arguments"])) for s in spans[:3]] == [
        arguments_for("count_orders")
    ] * 3


def _prefix(text: str) -> str:
    """The path part before the file name in a digest (absolute paths are shortened differently)."""
    start = len("Error: [OperationalError] at ")
    return text[start : text.index(TOOL_FILE)]


def test_scope_follows_session_group_and_conversation(
    traced: Callable[..., OTel], fns: list[Callable[..., Any]], tmp_path: Path
) -> None:
    otel = traced(consecutive=3)
    bridge = AgentsBridge(otel.ec)
    session = SQLiteSession("session-1", str(tmp_path / "sessions.sqlite3"))
    one = ("count_orders",)
    # Two turns of one chat (one session): one scope, counts carry over between runs.
    bridge.run_sync(bridged_agent(bridge, fns, ScriptedModel(one)), "first", session=session)
    bridge.run_sync(bridged_agent(bridge, fns, ScriptedModel(one)), "second", session=session)
    assert "(×2)" in otel.ec.context("session-1")
    # A plain Runner.run with a group id: the group is the scope.
    Runner.run_sync(bridged_agent(bridge, fns, ScriptedModel(one)), "x", run_config=RunConfig(group_id="group-9"))
    assert "in count_orders" in otel.ec.context("group-9") and "(×" not in otel.ec.context("group-9")
    # A conversation id comes first, as in the SDK's own grouping.
    from otel_errcompact.openai_agents import run_scope

    assert run_scope(conversation_id="conv-1", session=session, run_config=RunConfig(group_id="g")) == "conv-1"
    assert run_scope(session=session, run_config=RunConfig(group_id="g")) == "session-1"
    # A breached chat does not block another one.
    with pytest.raises(RunHalted):
        bridge.run_sync(bridged_agent(bridge, fns, ScriptedModel()), "third", session=session)
    other = ScriptedModel(one)
    result = bridge.run_sync(bridged_agent(bridge, fns, other), "hi", run_config=RunConfig(group_id="group-10"))
    assert result.final_output == GIVE_UP and other.calls == 2
    # The breached chat's next run stops before its model is called.
    again = ScriptedModel(one)
    with pytest.raises(RunHalted):
        bridge.run_sync(bridged_agent(bridge, fns, again), "fourth", session=session)
    assert again.calls == 0


def test_a_plain_run_with_tracing_off_finds_its_group_for_the_model(
    make_otel: Callable[..., OTel], fns: list[Callable[..., Any]], caplog: pytest.LogCaptureFixture
) -> None:
    """A plain ``Runner.run`` with ``group_id`` and the SDK's tracing off: the instructions get no run
    config and there is no trace, yet once a tool call of the run failed its model calls see the group's
    block and its breach. Before that failure they cannot (said once); ``bridge.run`` can."""
    otel = make_otel(consecutive=3)
    bridge = AgentsBridge(otel.ec)
    config = RunConfig(group_id="chat-42", tracing_disabled=True)
    model = ScriptedModel(("count_orders", "count_orders"))
    Runner.run_sync(bridged_agent(bridge, fns, model), "How many orders?", run_config=config)
    assert otel.ec.history.scopes() == ["chat-42"]
    assert model.instructions[0] == INSTRUCTIONS
    assert "\n1 tool failure(s)" in (model.instructions[1] or "")
    assert "(×2)" in (model.instructions[2] or "")

    # A tool failure of the next run breaches the group: the run stops before its next model call.
    second = ScriptedModel(("count_orders", "count_orders"))
    with pytest.raises(RunHalted):
        Runner.run_sync(bridged_agent(bridge, fns, second), "again", run_config=config, max_turns=5)
    assert second.calls == 1
    # A later plain run is stopped at its first tool call; bridge.run stops it before its first model call.
    third = ScriptedModel(("count_orders",))
    with pytest.raises(RunHalted):
        Runner.run_sync(bridged_agent(bridge, fns, third), "third", run_config=config)
    assert third.calls == 1
    fourth = ScriptedModel(("count_orders",))
    with pytest.raises(RunHalted):
        bridge.run_sync(bridged_agent(bridge, fns, fourth), "fourth", run_config=config)
    assert fourth.calls == 0
    [warning] = [r for r in caplog.records if r.name == "otel_errcompact" and "AgentsBridge.run" in r.getMessage()]
    assert "group_id" in warning.getMessage()


def test_on_tool_error_raise_leaves_the_bridge_digesting(
    traced: Callable[..., OTel], fns: list[Callable[..., Any]], db: Path
) -> None:
    """``on_tool_error="raise"`` is for ``@ec.tool`` and ``ec.tool_call``: the bridge still feeds back
    digests and halts at the threshold instead of crashing the run at the first failure."""
    otel = traced(consecutive=3, on_tool_error="raise")
    bridge = AgentsBridge(otel.ec)
    model = ScriptedModel()
    with pytest.raises(RunHalted):
        bridge.run_sync(bridged_agent(bridge, fns, model), "How many orders?", run_config=RunConfig(group_id="chat-3"))
    assert model.calls == 3
    last_output = model.inputs[-1][-1]  # what the model was sent after the second failure
    assert isinstance(last_output, dict) and str(last_output["output"]).endswith(f"{where(db)} (×2)")


def test_a_raising_ec_tool_under_the_bridge_is_counted_once(
    traced: Callable[..., OTel], fns: list[Callable[..., Any]], db: Path
) -> None:
    """``bridge.function_tool(ec.tool(fn))`` with ``on_tool_error="raise"``: the wrapped tool counts its
    failure and raises it on, and the SDK hands that exception to the bridge, which answers with the
    tool's digest instead of counting it again."""
    otel = traced(consecutive=3, on_tool_error="raise", breaker_threshold=0)
    bridge = AgentsBridge(otel.ec)
    model = ScriptedModel()
    agent = bridged_agent(bridge, [otel.ec.tool(fns[0]), fns[1]], model)
    with pytest.raises(RunHalted) as raised:
        bridge.run_sync(agent, "How many orders?", run_config=RunConfig(group_id="chat-raise"))
    assert raised.value.escalation.count == 3
    assert model.calls == 3
    last_output = model.inputs[-1][-1]  # what the model was sent after the second failure
    assert isinstance(last_output, dict) and str(last_output["output"]).endswith(f"{where(db)} (×2)")
    assert sorted(r.count or 0 for r in otel.records()) == [1, 2, 3]


def test_switched_off_the_bridge_answers_as_the_sdk_does(
    make_otel: Callable[..., OTel], fns: list[Callable[..., Any]]
) -> None:
    """``enabled=False`` (``OTEL_ERRCOMPACT_ENABLED=false``): the run goes on with the SDK's own failure
    text, as it does without the bridge, instead of stopping at the first failure."""
    otel = make_otel(enabled=False)
    bridge = AgentsBridge(otel.ec)
    model = ScriptedModel(("count_orders", "count_orders"))
    result = bridge.run_sync(
        bridged_agent(bridge, fns, model), "How many orders?", run_config=RunConfig(tracing_disabled=True)
    )
    assert result.final_output == GIVE_UP
    assert outputs(result) == [SDK_DEFAULT_TOOL_ERROR] * 2
    assert model.instructions == [INSTRUCTIONS] * 3


class _Conversations(BaseHTTPRequestHandler):
    """The part of OpenAI's Conversations API ``OpenAIConversationsSession`` uses: creating one
    conversation (``conv_1``), and reading and adding its items (kept nowhere: always none)."""

    def do_POST(self) -> None:
        self.rfile.read(int(self.headers.get("Content-Length") or 0))
        if self.path.rstrip("/").endswith("/conversations"):
            self._reply({"id": "conv_1", "object": "conversation", "created_at": 0, "metadata": {}})
        else:
            self._reply({"object": "list", "data": [], "first_id": None, "last_id": None, "has_more": False})

    def do_GET(self) -> None:
        self._reply({"object": "list", "data": [], "first_id": None, "last_id": None, "has_more": False})

    def _reply(self, body: dict[str, Any]) -> None:
        data = json.dumps(body).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def log_message(self, format: str, *args: Any) -> None:
        pass


def test_a_conversations_session_is_the_scope_once_it_has_an_id(
    make_otel: Callable[..., OTel], fns: list[Callable[..., Any]]
) -> None:
    """``OpenAIConversationsSession`` creates its conversation on its first API call, and its
    ``session_id`` raises until then: the first run is scoped by its group, the next by the conversation."""
    otel = make_otel(consecutive=3)
    bridge = AgentsBridge(otel.ec)
    config = RunConfig(group_id="chat-5", tracing_disabled=True)
    with loopback_server(_Conversations) as url:
        client = AsyncOpenAI(api_key="sk-test", base_url=f"{url}/v1", max_retries=0)
        session = OpenAIConversationsSession(openai_client=client)
        first = ScriptedModel(("count_orders",))
        result = bridge.run_sync(bridged_agent(bridge, fns, first), "first", session=session, run_config=config)
        assert result.final_output == GIVE_UP and first.calls == 2
        assert otel.ec.history.scopes() == ["chat-5"]
        second = ScriptedModel(("count_orders",))
        bridge.run_sync(bridged_agent(bridge, fns, second), "second", session=session, run_config=config)
    assert sorted(otel.ec.history.scopes()) == ["chat-5", "conv_1"]
    assert "[RECENT ERRORS]" in (second.instructions[1] or "") and "(×" not in (second.instructions[1] or "")


# -- the SDK's own failure handling, without the bridge --------------------------------------------------


def test_default_failure_handling_never_stops(traced: Callable[..., OTel], fns: list[Callable[..., Any]]) -> None:
    otel = traced(consecutive=3)
    model = ScriptedModel()
    agent = Agent(name=AGENT, instructions=INSTRUCTIONS, model=model, tools=[function_tool(f) for f in fns])
    result = Runner.run_sync(agent, "How many orders?", run_config=RunConfig(group_id="chat-1"), max_turns=20)
    assert outputs(result) == [SDK_DEFAULT_TOOL_ERROR] * 10
    assert model.calls == 11  # the breach after the third failure stopped nothing
    # Scope is the run's trace, not the group; digests describe only the redacted span status.
    [scope] = otel.ec.history.scopes()
    assert scope.startswith("trace:")
    assert all(r.exception_stacktrace is None for r in otel.records())


def test_a_failure_raised_by_the_sdk_is_not_located_in_the_bridge(make_otel: Callable[..., OTel], db: Path) -> None:
    """Arguments the tool's schema refuses fail inside the SDK, with no frame of the user's code. The
    bridge hands the exception on from ``failure_error_function``, which adds its own frame to the stack:
    that frame is the library's, never the failure's location (nor part of its key)."""
    otel = make_otel(consecutive=10)
    bridge = AgentsBridge(otel.ec)
    count_orders = make_count_orders(db)

    def lookup(customer: str) -> int:
        """Look a customer's orders up (the model sends an ``invoice_id`` instead)."""
        return count_orders(customer)

    model = ScriptedModel(("lookup", "lookup"))
    agent = Agent(name=AGENT, instructions=bridge.instructions(INSTRUCTIONS), model=model,
                  tools=[bridge.function_tool(lookup)])
    result = bridge.run_sync(agent, "How many orders?", run_config=RunConfig(group_id="chat-11", tracing_disabled=True))
    fed_back = outputs(result)
    assert len(fed_back) == 2 and fed_back[0].startswith("Error: [ModelBehaviorError]") and fed_back[1].endswith("(×2)")
    records = otel.records()
    assert "failure_error_function" in (records[0].exception_stacktrace or "")  # the frame is there ...
    digests = [r.digest for r in records if r.digest is not None]
    assert len(digests) == 2  # ... but not chosen
    assert all(d.func != "failure_error_function" and "openai_agents.py" not in d.key_where for d in digests)


def test_a_tool_whose_task_was_cancelled_is_neither_a_failure_nor_a_success(
    traced: Callable[..., OTel], fns: list[Callable[..., Any]]
) -> None:
    """A tool whose own task is cancelled (the request it awaited was cancelled under it): the SDK hands
    ``failure_error_function`` its wrapper of the ``CancelledError``. As a cancelled call at the tool
    boundary, it is no failure (no record, no count) and does not end the streak of the failures around
    it, so the third identical failure halts the run; the model is told the call was cancelled."""
    otel = traced(consecutive=3)
    bridge = AgentsBridge(otel.ec)

    async def read_invoice(invoice_id: str) -> str:
        """Read the text of an invoice."""
        pending: asyncio.Future[str] = asyncio.get_running_loop().create_future()
        pending.cancel()  # the request it waited for was cancelled
        return await pending

    model = ScriptedModel(("count_orders", "count_orders", "read_invoice", "count_orders"))
    with pytest.raises(RunHalted) as raised:
        bridge.run_sync(bridged_agent(bridge, [fns[0], read_invoice], model), "How many orders?",
                        run_config=RunConfig(group_id="chat-cancel"))
    assert raised.value.escalation.count == 3 and model.calls == 4
    cancelled = model.inputs[-1][-1]  # what the model was sent for the cancelled call
    assert isinstance(cancelled, dict) and cancelled["output"] == "Cancelled: read_invoice (cancelled)"
    assert [(r.tool_name, r.count) for r in otel.records()] == [("count_orders", i) for i in (1, 2, 3)]
    assert not otel.spans("execute_tool read_invoice")
    [sdk_span] = otel.spans("read_invoice")
    assert (sdk_span.status.description or "").startswith("Tool execution cancelled")  # what the SDK records
