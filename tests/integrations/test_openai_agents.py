"""The OpenAI Agents SDK, traced by OpenInference's openai-agents instrumentation, with ``init()`` attached.

An ``Agent`` with one function tool is driven offline by a scripted ``Model`` (the SDK's model
interface, returning ``ResponseFunctionToolCall`` items, then a final message); the tool really fails
(it queries a table missing from a real SQLite file). The instrumentation registers an Agents-SDK
tracing processor that mirrors the SDK's spans as OpenTelemetry spans: each tool call becomes an
``openinference.span.kind=TOOL`` span, under an ``AGENT`` span per agent, under an ``AGENT`` root.

The SDK's default ``failure_error_function`` turns the exception into a fixed tool output for the
model and marks the span with an ``SpanError`` only: status ERROR, description
``Error running tool (non-fatal): {... 'error': 'Tool execution failed. Error details are redacted.'}``,
no ``exception`` event, no stack trace. The stack trace exists only in the SDK's own log record
(``openai.agents`` logger, ``exc_info``), which it writes when ``OPENAI_AGENTS_DONT_LOG_TOOL_DATA=0``.
"""

from __future__ import annotations

import functools
import json
import logging
import warnings
from collections.abc import AsyncIterator, Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.integrations import require

require("agents", "openinference.instrumentation.openai_agents")

from agents import (  # noqa: E402
    Agent,
    AgentOutputSchemaBase,
    Handoff,
    Model,
    ModelResponse,
    ModelSettings,
    ModelTracing,
    Runner,
    Tool,
    ToolCallOutputItem,
    TResponseInputItem,
    Usage,
    function_tool,
)
from openai.types.responses import (  # noqa: E402
    ResponseFunctionToolCall,
    ResponseOutputMessage,
    ResponseOutputText,
)
from openai.types.responses.response_prompt_param import ResponsePromptParam  # noqa: E402
from openinference.instrumentation.openai_agents import OpenAIAgentsInstrumentor  # noqa: E402
from opentelemetry.sdk._logs import LoggingHandler  # noqa: E402
from opentelemetry.sdk.trace import ReadableSpan  # noqa: E402
from opentelemetry.trace import StatusCode  # noqa: E402

from otel_errcompact import ErrCompact  # noqa: E402
from tests.conftest import OTel  # noqa: E402
from tests.integrations.orders import TOOL_FILE, failing_line, make_count_orders  # noqa: E402

AGENT_NAME = "orders-agent"
SDK_DEFAULT_TOOL_ERROR = "An error occurred while running the tool. Please try again."


class ScriptedModel(Model):
    """A model that calls ``count_orders`` a fixed number of times, then answers in prose.

    Records what it was sent, so a test can see the tool outputs the SDK fed back.
    """

    def __init__(self, tool_calls: int) -> None:
        self.remaining = tool_calls
        self.inputs: list[str | list[TResponseInputItem]] = []

    async def get_response(
        self,
        system_instructions: str | None,
        input: str | list[TResponseInputItem],
        model_settings: ModelSettings,
        tools: list[Tool],
        output_schema: AgentOutputSchemaBase | None,
        handoffs: list[Handoff],
        tracing: ModelTracing,
        *,
        previous_response_id: str | None,
        conversation_id: str | None,
        prompt: ResponsePromptParam | None,
    ) -> ModelResponse:
        self.inputs.append(input)
        if self.remaining > 0:
            self.remaining -= 1
            n = self.remaining
            call = ResponseFunctionToolCall(
                type="function_call",
                id=f"fc_{n}",
                call_id=f"call_{n}",
                name="count_orders",
                arguments=json.dumps({"customer": "acme"}),
            )
            return ModelResponse(output=[call], usage=Usage(), response_id=None)
        text = ResponseOutputText(type="output_text", text="I could not count the orders.", annotations=[])
        message = ResponseOutputMessage(
            id="msg_final", type="message", role="assistant", status="completed", content=[text]
        )
        return ModelResponse(output=[message], usage=Usage(), response_id=None)

    def stream_response(self, *args: Any, **kwargs: Any) -> AsyncIterator[Any]:
        raise NotImplementedError("the scripted model does not stream")


def run_agent(tool: Any, tool_calls: int) -> list[str]:
    """Run the agent once; the tool outputs the SDK fed back to the model, in order."""
    model = ScriptedModel(tool_calls)
    agent = Agent(name=AGENT_NAME, instructions="Answer questions about orders.", model=model, tools=[tool])
    result = Runner.run_sync(agent, "How many orders does acme have?")
    assert result.final_output == "I could not count the orders."
    return [str(item.output) for item in result.new_items if isinstance(item, ToolCallOutputItem)]


@pytest.fixture
def traced(make_otel: Callable[..., OTel]) -> Iterator[OTel]:
    """``init()`` on fresh SDK providers, and the instrumentation exporting into them. The instrumentor
    replaces the SDK's default (OpenAI backend) trace processor while instrumented, so nothing leaves
    the process; ``uninstrument()`` puts it back."""
    otel = make_otel(consecutive=3)
    instrumentor = OpenAIAgentsInstrumentor()
    instrumentor.instrument(tracer_provider=otel.tracer_provider)
    try:
        yield otel
    finally:
        instrumentor.uninstrument()


@pytest.fixture
def sdk_error_logs(traced: OTel, monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """The SDK logs a handled tool exception with its traceback, and that log goes through the
    application's OpenTelemetry logs pipeline (the SDK's ``LoggingHandler``), inside the tool span."""
    from agents import _debug

    monkeypatch.setattr(_debug, "DONT_LOG_TOOL_DATA", False)  # what OPENAI_AGENTS_DONT_LOG_TOOL_DATA=0 sets
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)  # moving to opentelemetry-instrumentation-logging
        handler = LoggingHandler(logger_provider=traced.logger_provider)
    sdk_logger = logging.getLogger("openai.agents")
    sdk_logger.addHandler(handler)
    try:
        yield
    finally:
        sdk_logger.removeHandler(handler)


def tool_spans(otel: OTel) -> list[ReadableSpan]:
    return [s for s in otel.spans() if (s.attributes or {}).get("openinference.span.kind") == "TOOL"]


def agent_span(otel: OTel) -> ReadableSpan:
    [span] = [s for s in otel.spans() if (s.attributes or {}).get("agent.name") == AGENT_NAME]
    return span


def escalation_events(span: ReadableSpan) -> list[Any]:
    return [e for e in span.events if e.name == "errcompact.escalation"]


def test_default_failure_handling_is_recorded_without_a_stack_trace(traced: OTel, db: Path) -> None:
    outputs = run_agent(function_tool(make_count_orders(db)), tool_calls=3)
    assert outputs == [SDK_DEFAULT_TOOL_ERROR] * 3

    spans = tool_spans(traced)
    assert len(spans) == 3
    for span in spans:
        attrs = span.attributes or {}
        assert span.name == "count_orders" and attrs["tool.name"] == "count_orders"
        assert span.status.status_code is StatusCode.ERROR
        assert (span.status.description or "").startswith("Error running tool (non-fatal): ")
        assert "no such table" not in (span.status.description or "")  # redacted by the SDK
        assert not [e for e in span.events if e.name == "exception"]
        assert attrs["output.value"] == SDK_DEFAULT_TOOL_ERROR
        assert "errcompact.digest" in attrs
    scope = f"trace:{spans[0].context.trace_id:032x}"  # the SDK's group_id is not recorded as session.id

    # Picked up, counted and escalated, but the digest can only describe the span's redacted status.
    assert "(×3)" in traced.ec.context(scope)
    records = traced.records()
    assert len(records) == 3
    assert all(r.scope == scope and r.tool_name == "count_orders" for r in records)
    assert all(r.exception_stacktrace is None and r.digest is not None and r.digest.line_no is None for r in records)
    assert traced.ec.history.escalation(scope) is not None
    assert len(escalation_events(agent_span(traced))) == 1
    assert len(traced.logs("errcompact.escalation")) == 1


@pytest.mark.usefixtures("sdk_error_logs")
def test_the_sdk_error_log_gives_the_span_its_stack_trace(traced: OTel, db: Path) -> None:
    fn = make_count_orders(db)
    outputs = run_agent(function_tool(fn), tool_calls=3)
    assert outputs == [SDK_DEFAULT_TOOL_ERROR] * 3
    line = failing_line(fn)
    where = f"{TOOL_FILE}:{line} in count_orders: no such table: orders"

    spans = tool_spans(traced)
    assert len(spans) == 3
    assert [str((s.attributes or {})["errcompact.digest"]).endswith(where) for s in spans] == [True] * 3
    scope = f"trace:{spans[0].context.trace_id:032x}"
    assert f"{where} (×3)" in traced.ec.context(scope)

    records = traced.records()
    assert len(records) == 3
    for record in records:
        assert record.exception_type == "OperationalError"
        stack = record.exception_stacktrace or ""
        assert f"line {line}, in count_orders" in stack
        assert stack.rstrip().endswith("sqlite3.OperationalError: no such table: orders")
        assert record.digest is not None and (record.digest.func, record.digest.line_no) == ("count_orders", line)
    events = escalation_events(agent_span(traced))
    assert len(events) == 1
    assert str((events[0].attributes or {})["errcompact.digest"]).endswith(where)


def test_ec_tool_puts_the_digest_in_the_tool_output(traced: OTel, db: Path) -> None:
    """``function_tool`` over ``ec.tool``: the model gets ``Error: [Type] at file:line in func: cause (×N)``
    instead of the SDK's fixed text, and the boundary's span is a child of the SDK's tool span."""
    ec: ErrCompact = traced.ec
    fn = make_count_orders(db)
    outputs = run_agent(function_tool(ec.tool(fn)), tool_calls=3)
    where = f"{TOOL_FILE}:{failing_line(fn)} in count_orders: no such table: orders"
    assert outputs[0].startswith("Error: [OperationalError] at ") and outputs[0].endswith(where)
    assert outputs[1].endswith(f"{where} (×2)")
    # the third in a row breaches the default threshold, and the agent is told to stop
    assert outputs[2].endswith(f"{where} (×3) — error threshold breached: stop retrying this step.")

    sdk_spans = {s.context.span_id: s for s in tool_spans(traced)}
    boundary = traced.spans("execute_tool count_orders")
    assert len(boundary) == 3 and len(sdk_spans) == 3
    for span in boundary:
        assert span.status.status_code is StatusCode.ERROR
        assert span.parent is not None and span.parent.span_id in sdk_spans
    assert all(s.status.status_code is StatusCode.OK for s in sdk_spans.values())  # the tool returned

    scope = f"trace:{boundary[0].context.trace_id:032x}"
    assert f"{where} (×3)" in ec.context(scope)
    records = traced.records()
    assert len(records) == 3
    assert all(r.scope == scope and "in count_orders" in (r.exception_stacktrace or "") for r in records)


def test_ec_tool_failures_escalate_on_consecutive_repeats(traced: OTel, db: Path) -> None:
    run_agent(function_tool(traced.ec.tool(make_count_orders(db))), tool_calls=3)
    [scope] = traced.ec.history.scopes()
    assert traced.ec.history.escalation(scope) is not None


def count_orders(db: Path, customer: str) -> int:
    """Count the orders a customer has placed."""
    return make_count_orders(db)(customer)


class CountOrders:
    """Count the orders a customer has placed."""

    def __init__(self, db: Path) -> None:
        self.db = db

    def __call__(self, customer: str) -> int:
        return make_count_orders(self.db)(customer)


def test_a_partial_or_a_callable_object_under_ec_tool_is_the_tool_the_sdk_derives(traced: OTel, db: Path) -> None:
    """``function_tool`` reads a tool's name, docstring and type hints: over ``ec.tool`` of a
    ``functools.partial`` or of a callable object it derives what it derives from the equivalent function
    (the object itself), and the calls are named after the tool."""

    def described(tool: Any) -> tuple[str, str, dict[str, Any]]:
        return tool.name, tool.description, tool.params_json_schema

    ec: ErrCompact = traced.ec
    partial = functools.partial(count_orders, db)
    assert described(function_tool(ec.tool(partial))) == described(function_tool(make_count_orders(db)))
    assert described(function_tool(ec.tool(CountOrders(db)))) == described(function_tool(CountOrders(db)))

    outputs = run_agent(function_tool(ec.tool(partial)), tool_calls=2)
    assert [o.startswith("Error: [OperationalError] at ") for o in outputs] == [True, True]
    assert outputs[1].endswith("no such table: orders (×2)")
    assert len(traced.spans("execute_tool count_orders")) == 2


def test_ec_tool_over_function_tool_is_refused_where_the_tool_is_defined(traced: OTel, db: Path) -> None:
    """``ec.tool(function_tool(fn))``: the SDK's ``FunctionTool`` is not a function to wrap; refused at
    once, naming the order that works."""
    with pytest.raises(TypeError, match=r"function_tool\(ec\.tool\(fn\)\)"):
        traced.ec.tool(function_tool(make_count_orders(db)))
