"""LangGraph, traced by OpenInference's LangChain instrumentation, with ``init()`` attached.

A hand-built ReAct graph (model node, ``ToolNode``, ``tools_condition``) is driven offline by
langchain-core's ``FakeMessagesListChatModel``, scripted to call a tool that really fails: it queries a
table that does not exist in a real SQLite file. The instrumentation turns each tool run into an
``openinference.span.kind=TOOL`` span with an ``exception`` event (the real stack trace), status ERROR
and ``session.id`` taken from the graph's ``thread_id``; the tests check what ``init()`` makes of them.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from tests.integrations import require

require("langgraph", "langgraph.prebuilt", "langchain_core", "openinference.instrumentation.langchain")

from langchain_core.language_models.fake_chat_models import FakeMessagesListChatModel  # noqa: E402
from langchain_core.messages import AIMessage, BaseMessage, HumanMessage, ToolMessage  # noqa: E402
from langchain_core.tools import BaseTool, tool  # noqa: E402
from langgraph.config import get_config  # noqa: E402
from langgraph.graph import START, MessagesState, StateGraph  # noqa: E402
from langgraph.prebuilt import ToolNode, tools_condition  # noqa: E402
from openinference.instrumentation.langchain import LangChainInstrumentor  # noqa: E402
from opentelemetry.sdk.trace import ReadableSpan  # noqa: E402
from opentelemetry.trace import StatusCode  # noqa: E402

from otel_errcompact import ErrCompact  # noqa: E402
from tests.conftest import OTel  # noqa: E402
from tests.integrations.orders import TOOL_FILE, failing_line, make_count_orders  # noqa: E402

THREAD = "thread-orders-1"
ToolHandler = bool | Callable[[Exception], str]


def scripted_model(tool_calls: int) -> FakeMessagesListChatModel:
    """A chat model that asks for ``count_orders`` ``tool_calls`` times, then gives up in prose."""
    calls: list[BaseMessage] = [
        AIMessage(
            content="",
            tool_calls=[{"name": "count_orders", "args": {"customer": "acme"}, "id": f"call_{i}", "type": "tool_call"}],
        )
        for i in range(tool_calls)
    ]
    return FakeMessagesListChatModel(responses=[*calls, AIMessage(content="I could not count the orders.")])


def run_graph(lc_tool: BaseTool, *, tool_calls: int, handle_tool_errors: ToolHandler) -> list[BaseMessage]:
    """Build and run the ReAct graph once on ``THREAD``; the final message list."""
    model = scripted_model(tool_calls)

    def call_model(state: MessagesState) -> dict[str, list[BaseMessage]]:
        return {"messages": [model.invoke(state["messages"])]}

    graph = StateGraph(MessagesState)
    graph.add_node("model", call_model)
    graph.add_node("tools", ToolNode([lc_tool], handle_tool_errors=handle_tool_errors))
    graph.add_edge(START, "model")
    graph.add_conditional_edges("model", tools_condition)
    graph.add_edge("tools", "model")
    app = graph.compile()
    result = app.invoke(
        {"messages": [HumanMessage("How many orders does acme have?")]},
        config={"configurable": {"thread_id": THREAD}},
    )
    return list(result["messages"])


def tool_messages(messages: list[BaseMessage]) -> list[ToolMessage]:
    return [m for m in messages if isinstance(m, ToolMessage)]


@pytest.fixture
def traced(make_otel: Callable[..., OTel]) -> Iterator[OTel]:
    """``init()`` on fresh SDK providers, and the LangChain instrumentation exporting into them."""
    otel = make_otel(consecutive=3)
    instrumentor = LangChainInstrumentor()
    instrumentor.instrument(tracer_provider=otel.tracer_provider)
    try:
        yield otel
    finally:
        instrumentor.uninstrument()


def openinference_tool_spans(otel: OTel) -> list[ReadableSpan]:
    return [s for s in otel.spans() if (s.attributes or {}).get("openinference.span.kind") == "TOOL"]


def test_failed_tool_spans_become_digests_records_and_an_escalation(traced: OTel, db: Path) -> None:
    fn = make_count_orders(db)
    messages = run_graph(tool(fn), tool_calls=3, handle_tool_errors=True)
    line = failing_line(fn)

    # What the instrumentation produced for each failed run of the tool.
    spans = openinference_tool_spans(traced)
    assert len(spans) == 3
    for span in spans:
        attrs = span.attributes or {}
        assert span.name == "count_orders"
        assert attrs["tool.name"] == "count_orders"
        assert attrs["session.id"] == THREAD
        assert span.status.status_code is StatusCode.ERROR
        [event] = [e for e in span.events if e.name == "exception"]
        assert (event.attributes or {})["exception.type"] == "sqlite3.OperationalError"
        # init()'s processor picked the span up and annotated it before export.
        digest = str(attrs["errcompact.digest"])
        assert digest.startswith("[OperationalError] at ")
        assert digest.endswith(f"{TOOL_FILE}:{line} in count_orders: no such table: orders")
    assert [(s.attributes or {})["errcompact.count"] for s in spans] == [1, 2, 3]

    # The prompt context for the conversation (the graph's thread): one class, counted three times.
    block = traced.ec.context(THREAD)
    assert f"{TOOL_FILE}:{line} in count_orders: no such table: orders (×3)" in block
    assert "1 distinct" in block

    # One trajectory record per failure, each with the real stack trace through the user's tool.
    records = traced.records()
    assert len(records) == 3
    for record in records:
        assert record.source == "span"
        assert record.scope == THREAD
        assert record.tool_name == "count_orders"
        assert record.exception_type == "sqlite3.OperationalError"
        stack = record.exception_stacktrace or ""
        assert stack.startswith("Traceback (most recent call last):")
        assert f"line {line}, in count_orders" in stack
        assert stack.rstrip().endswith("sqlite3.OperationalError: no such table: orders")
        assert record.digest is not None
        assert (record.digest.func, record.digest.line_no) == ("count_orders", line)
        assert (record.digest.file or "").endswith(TOOL_FILE)
    assert [r.count for r in records] == [1, 2, 3]
    assert records[2].escalation is not None and records[2].escalation["reason"] == "consecutive"

    # The escalation: a standing breach, an event on the graph's root span, and a log record.
    breach = traced.ec.history.escalation(THREAD)
    assert breach is not None and breach.count == 3
    [root] = [s for s in traced.spans() if s.parent is None]
    events = [e for e in root.events if e.name == "errcompact.escalation"]
    assert len(events) == 1
    assert (events[0].attributes or {})["gen_ai.tool.name"] == "count_orders"
    assert len(traced.logs("errcompact.escalation")) == 1

    # What LangGraph fed back to the model: its own template around repr(exception), no traceback.
    fed_back = tool_messages(messages)
    assert len(fed_back) == 3
    for message in fed_back:
        assert message.status == "error"
        assert str(message.content).startswith("Error: OperationalError('no such table: orders')")
        assert "Traceback" not in str(message.content)


def test_default_tool_node_reraises_and_the_failure_is_still_recorded(traced: OTel, db: Path) -> None:
    fn = make_count_orders(db)
    from langgraph.prebuilt.tool_node import _default_handle_tool_errors

    with pytest.raises(sqlite3.OperationalError, match="no such table: orders"):
        run_graph(tool(fn), tool_calls=1, handle_tool_errors=_default_handle_tool_errors)
    [record] = traced.records()
    assert record.scope == THREAD
    assert record.digest is not None and record.digest.line_no == failing_line(fn)
    assert "in count_orders: no such table: orders" in traced.ec.context(THREAD)


def test_tool_error_handler_feeds_the_model_the_recent_errors_block(traced: OTel, db: Path) -> None:
    """``handle_tool_errors`` as a callable: the span was already handled when LangGraph calls it (the
    instrumentation ends the tool span inside the tool run), so the block already counts this failure."""
    ec: ErrCompact = traced.ec

    def recent_errors(error: Exception) -> str:
        return ec.context(get_config()["configurable"]["thread_id"])

    fn = make_count_orders(db)
    messages = run_graph(tool(fn), tool_calls=3, handle_tool_errors=recent_errors)
    fed_back = [str(m.content) for m in tool_messages(messages)]
    assert len(fed_back) == 3
    assert all(text.startswith("[RECENT ERRORS]") and "Traceback" not in text for text in fed_back)
    assert "in count_orders: no such table: orders\n" in fed_back[0]
    assert "in count_orders: no such table: orders (×2)" in fed_back[1]
    assert "in count_orders: no such table: orders (×3)" in fed_back[2]
    assert "no such table: orders (×3) ← Escalated: 3 times in a row (threshold 3)" in fed_back[2]
    assert fed_back[2].count("no such table: orders") == 1  # the escalated digest is not quoted twice
    assert ec.history.escalation(THREAD) is not None
    assert len(traced.records()) == 3


def test_ec_tool_puts_the_digest_in_the_tool_message(traced: OTel, db: Path) -> None:
    """``@tool`` over ``@ec.tool``: the tool returns the digest instead of raising, so LangGraph's
    ToolMessage carries ``Error: [Type] at file:line in func: cause (×N)``, not a traceback."""
    ec: ErrCompact = traced.ec
    fn = make_count_orders(db)
    line = failing_line(fn)
    with ec.conversation(THREAD):  # the boundary's spans are not children of LangChain's (see below)
        messages = run_graph(tool(ec.tool(fn)), tool_calls=3, handle_tool_errors=True)

    fed_back = tool_messages(messages)
    assert len(fed_back) == 3
    where = f"{TOOL_FILE}:{line} in count_orders: no such table: orders"
    assert str(fed_back[0].content).startswith("Error: [OperationalError] at ")
    assert str(fed_back[0].content).endswith(where)
    assert str(fed_back[1].content).endswith(f"{where} (×2)")
    # the third in a row breaches the default threshold, and the agent is told to stop
    assert str(fed_back[2].content).endswith(f"{where} (×3) — error threshold breached: stop retrying this step.")
    assert f"{where} (×3)" in ec.context(THREAD)

    records = traced.records()
    assert len(records) == 3
    assert all(r.source == "span" and r.scope == THREAD for r in records)
    assert all(f"line {line}, in count_orders" in (r.exception_stacktrace or "") for r in records)

    # The boundary's execute_tool spans failed; LangChain's TOOL spans around them ended OK. The
    # instrumentation never attaches its spans to the OTel context, so each boundary span is the root
    # of a trace of its own (hence ec.conversation above, to share the thread's scope).
    boundary_spans = traced.spans("execute_tool count_orders")
    assert len(boundary_spans) == 3
    assert all(s.status.status_code is StatusCode.ERROR and s.parent is None for s in boundary_spans)
    assert all(s.status.status_code is StatusCode.OK for s in openinference_tool_spans(traced))


def test_ec_tool_over_tool_is_refused_where_the_tool_is_defined(traced: OTel, db: Path) -> None:
    """``@ec.tool`` over ``@tool``: LangChain's tool object is not a function to wrap (every call would
    fail with a ``TypeError`` fed to the model as the tool's error, and LangGraph would no longer see a
    tool); refused at once, naming the order that works."""
    with pytest.raises(TypeError, match=r"@tool over @ec\.tool"):
        traced.ec.tool(tool(make_count_orders(db)))


def test_ec_tool_failures_escalate_on_consecutive_repeats(traced: OTel, db: Path) -> None:
    ec: ErrCompact = traced.ec
    with ec.conversation(THREAD):
        run_graph(tool(ec.tool(make_count_orders(db))), tool_calls=3, handle_tool_errors=True)
    assert ec.history.escalation(THREAD) is not None
