"""The span and log-record processors against the real OpenTelemetry SDK.

Every failure here is a real exception raised by real code (a dict lookup, ``json.loads``, a missing
file, a subprocess); spans go through a real ``TracerProvider`` to an in-memory exporter, logs through a
real ``LoggerProvider``, metrics through an ``InMemoryMetricReader``, records into SQLite.
"""

from __future__ import annotations

import asyncio
import contextvars
import json
import logging
import threading
import time
import traceback
import warnings
from collections.abc import Callable, Iterator, Mapping
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from datetime import UTC
from typing import Any

import pytest
from opentelemetry import trace
from opentelemetry._logs import SeverityNumber
from opentelemetry.sdk._logs import LoggingHandler
from opentelemetry.sdk.trace import ReadableSpan
from opentelemetry.trace import Span, Status, StatusCode, Tracer

import otel_errcompact
from otel_errcompact import ErrorBudgetExceeded, Escalation, Thresholds
from otel_errcompact.sinks.sqlite import TrajectoryStore
from otel_errcompact.trajectory import TrajectoryRecord
from tests.conftest import OTel


@pytest.fixture(params=["simple", "batch"])
def otel(request: pytest.FixtureRequest, make_otel: Callable[..., OTel]) -> OTel:
    """Every test here runs twice: spans exported through a ``SimpleSpanProcessor`` (each failed span's
    digest made inside ``span.end()``) and through a ``BatchSpanProcessor`` (made after the span ended,
    off the agent's thread: see ``otel_errcompact.deferred``)."""
    handle: OTel = make_otel(batch=request.param == "batch")
    assert handle.ec.processor is not None
    assert (handle.ec.processor._gate is not None) == handle.batch
    return handle


# -- real code that fails -----------------------------------------------------------------------------


def lookup_user(users: Mapping[str, str], user_id: str) -> str:
    return users[user_id]


def parse_config(text: str) -> Any:
    return json.loads(text)


def read_settings(path: str) -> str:
    with open(path, encoding="utf-8") as fh:
        return fh.read()


def raise_from(fn: Callable[..., Any], *args: Any) -> BaseException:
    """Run ``fn`` and return the exception it raised (with its traceback)."""
    try:
        fn(*args)
    except Exception as exc:
        return exc
    raise AssertionError(f"{fn.__name__} was expected to fail")


GENAI_TOOL = {"gen_ai.operation.name": "execute_tool", "gen_ai.tool.name": "lookup"}


@contextmanager
def agent(tracer: Tracer, conversation: str | None = None, name: str = "support") -> Iterator[Span]:
    attributes: dict[str, str] = {"gen_ai.operation.name": "invoke_agent", "gen_ai.agent.name": name}
    if conversation is not None:
        attributes["gen_ai.conversation.id"] = conversation
    with tracer.start_as_current_span(f"invoke_agent {name}", attributes=attributes) as span:
        yield span


def failing_tool_span(
    tracer: Tracer,
    fn: Callable[..., Any] = lookup_user,
    args: tuple[Any, ...] = ({"u-1": "ann"}, "user_id"),
    *,
    name: str = "execute_tool lookup",
    attributes: Mapping[str, Any] = GENAI_TOOL,
    record: bool = True,
) -> tuple[Span, BaseException]:
    """A tool span that runs ``fn``, records the real exception it raises and ends with ERROR."""
    with tracer.start_as_current_span(
        name, attributes=dict(attributes), record_exception=False, set_status_on_exception=False
    ) as span:
        try:
            fn(*args)
        except Exception as exc:
            if record:
                span.record_exception(exc)
            span.set_status(Status(StatusCode.ERROR, f"{type(exc).__name__}: {exc}"))
            return span, exc
    raise AssertionError("the tool was expected to fail")


def ok_tool_span(tracer: Tracer, attributes: Mapping[str, Any] = GENAI_TOOL) -> None:
    with tracer.start_as_current_span("execute_tool lookup", attributes=dict(attributes)):
        lookup_user({"u-1": "ann"}, "u-1")


def exported(otel: OTel, span: Span) -> ReadableSpan:
    span_id = span.get_span_context().span_id
    found = [s for s in otel.spans() if s.context is not None and s.context.span_id == span_id]
    assert len(found) == 1
    return found[0]


def only_record(otel: OTel) -> TrajectoryRecord:
    records = otel.records()
    assert len(records) == 1, [r.digest.line if r.digest else r.raw_error[:80] for r in records]
    return records[0]


# -- failed tool spans become records, digests and annotations ----------------------------------------


def test_failed_genai_tool_span_is_audited_byte_for_byte_and_annotated(otel: OTel) -> None:
    with agent(otel.tracer, "conv-1"):
        span, exc = failing_tool_span(otel.tracer)
    expected_stack = "".join(traceback.format_exception(exc))

    out = exported(otel, span)
    event_stack = next(e for e in out.events if e.name == "exception").attributes["exception.stacktrace"]  # type: ignore[index]
    assert event_stack == expected_stack

    record = only_record(otel)
    assert record.source == "span"
    assert record.raw_error == expected_stack
    assert record.exception_stacktrace == expected_stack
    assert record.exception_type == "KeyError"
    assert record.tool_name == "lookup"
    assert record.agent_name == "support"
    assert record.trace_id == f"{span.get_span_context().trace_id:032x}"
    assert record.span_id == f"{span.get_span_context().span_id:016x}"
    assert record.digest is not None and record.count == 1
    line = record.digest.line
    assert line.startswith("[KeyError] at test_processor.py:")
    assert "in lookup_user" in line and "'user_id'" in line
    assert "Traceback" not in line

    attrs = out.attributes or {}
    assert attrs["errcompact.digest"] == line
    assert attrs["errcompact.key"] == record.digest.key
    assert attrs["errcompact.count"] == 1
    assert line in otel.ec.context("conv-1")


def test_repeats_count_up_on_the_span_and_in_the_store(otel: OTel) -> None:
    with agent(otel.tracer, "conv-2"):
        spans = [failing_tool_span(otel.tracer)[0] for _ in range(2)]
    counts = [exported(otel, s).attributes["errcompact.count"] for s in spans]  # type: ignore[index]
    assert counts == [1, 2]
    records = otel.records()
    assert sorted(r.count or 0 for r in records) == [1, 2]
    assert len({r.digest.key for r in records if r.digest}) == 1
    assert "(×2)" in otel.ec.context("conv-2")


@pytest.mark.parametrize(
    ("attributes", "tool"),
    [
        ({"openinference.span.kind": "TOOL", "tool.name": "search_docs"}, "search_docs"),
        ({"traceloop.span.kind": "tool", "traceloop.entity.name": "fetch_page"}, "fetch_page"),
    ],
    ids=["openinference", "openllmetry"],
)
def test_openinference_and_openllmetry_tool_spans(otel: OTel, attributes: dict[str, str], tool: str) -> None:
    span, exc = failing_tool_span(otel.tracer, parse_config, ("{not json",), name=tool, attributes=attributes)
    record = only_record(otel)
    assert record.tool_name == tool
    assert record.raw_error == "".join(traceback.format_exception(exc))
    assert record.digest is not None
    assert record.digest.type == "JSONDecodeError"
    assert "in parse_config" in record.digest.line  # the in-app frame, not json/decoder.py
    assert exported(otel, span).attributes["errcompact.key"] == record.digest.key  # type: ignore[index]


@pytest.mark.parametrize("batch", [False, True], ids=["simple", "batch"])
def test_an_openinference_tool_failure_keeps_its_call_id(make_otel: Callable[..., OTel], batch: bool) -> None:
    """OpenInference records the model-assigned id of a tool call on its TOOL span as ``tool.id`` (its
    semantic conventions' ``SpanAttributes.TOOL_ID``): the record takes it as the call's id. Its names come
    from OpenInference's own package, which the frameworks' install brings (the lowest-bounds pass has none)."""
    trace_conventions = pytest.importorskip("openinference.semconv.trace")
    OpenInferenceSpanKindValues = trace_conventions.OpenInferenceSpanKindValues
    SpanAttributes = trace_conventions.SpanAttributes

    otel = make_otel(batch=batch)
    attributes = {
        SpanAttributes.OPENINFERENCE_SPAN_KIND: OpenInferenceSpanKindValues.TOOL.value,
        SpanAttributes.TOOL_NAME: "search_docs",
        SpanAttributes.TOOL_ID: "call_mszuSIzqtI65i1wAUOE8w5H4",
    }
    failing_tool_span(otel.tracer, parse_config, ("{not json",), name="search_docs", attributes=attributes)
    record = only_record(otel)
    assert record.tool_name == "search_docs"
    assert record.tool_call_id == "call_mszuSIzqtI65i1wAUOE8w5H4"


def test_an_openllmetry_tool_failure_takes_its_agents_name(otel: OTel) -> None:
    """``traceloop.entity.name`` names the span's own entity: the tool's name on the tool span, the
    agent's on the agent span above it."""
    with otel.tracer.start_as_current_span(
        "planner.agent", attributes={"traceloop.span.kind": "agent", "traceloop.entity.name": "planner"}
    ):
        failing_tool_span(
            otel.tracer, parse_config, ("{not json",), name="web_search.tool",
            attributes={"traceloop.span.kind": "tool", "traceloop.entity.name": "web_search"},
        )
    record = only_record(otel)
    assert (record.tool_name, record.agent_name) == ("web_search", "planner")


@pytest.mark.parametrize("batch", [False, True], ids=["simple", "batch"])
@pytest.mark.parametrize("capture", [True, False], ids=["arguments-captured", "arguments-not-captured"])
def test_identity_from_other_conventions_and_arguments_only_when_captured(
    make_otel: Callable[..., OTel], batch: bool, capture: bool
) -> None:
    """A tool span that names its conversation, agent, call and arguments only in another convention's
    attributes: each is found, and the arguments are kept (as a field and an attribute) only when captured."""
    otel = make_otel(batch=batch, capture_arguments=capture)
    attributes = {
        "openinference.span.kind": "TOOL",
        "tool.name": "search_docs",
        "session.id": "sess-7",
        "agent.name": "researcher",
        "tool_call.id": "call-42",
        "input.value": '{"query": "{not json"}',
        # OpenInference's tool.parameters is the tool's parameter schema, not the call's arguments
        "tool.parameters": '{"type": "object", "properties": {"query": {"type": "string"}}}',
    }
    failing_tool_span(otel.tracer, parse_config, ("{not json",), name="search_docs", attributes=attributes)
    record = only_record(otel)
    assert (record.scope, record.conversation_id) == ("sess-7", "sess-7")
    assert record.agent_name == "researcher"
    assert record.tool_call_id == "call-42"
    assert record.digest is not None and record.digest.type == "JSONDecodeError"
    if capture:
        assert record.tool_arguments == attributes["input.value"]
        assert record.attributes["input.value"] == attributes["input.value"]
    else:
        assert record.tool_arguments is None
        assert "input.value" not in record.attributes
        assert record.attributes["session.id"] == "sess-7"
    assert record.digest.line in otel.ec.context("sess-7")


@pytest.mark.parametrize("batch", [False, True], ids=["simple", "batch"])
def test_arguments_and_result_recorded_as_objects_are_read_as_json(make_otel: Callable[..., OTel], batch: bool) -> None:
    """The GenAI conventions record a tool call's arguments and result as objects where the SDK takes
    structured values (the Python SDK does): the record keeps them as the JSON text the conventions give
    for a string, not as a Python repr (single quotes, tuples) that no JSON reader takes."""
    otel = make_otel(batch=batch, capture_arguments=True)
    arguments = {"path": "/nonexistent/settings.toml", "lines": (1, 5)}
    exc = raise_from(read_settings, arguments["path"])
    assert isinstance(exc, OSError)
    result = {"error": str(exc), "errno": exc.errno}
    attributes = {**GENAI_TOOL, "gen_ai.tool.call.arguments": arguments, "gen_ai.tool.call.result": result}
    with otel.tracer.start_as_current_span("execute_tool lookup", attributes=attributes) as span:
        span.set_status(Status(StatusCode.ERROR))  # the failure is reported in the result, not raised
    record = only_record(otel)
    assert record.tool_arguments is not None and json.loads(record.tool_arguments) == {
        "path": "/nonexistent/settings.toml", "lines": [1, 5]
    }
    assert json.loads(record.raw_error) == result
    assert record.digest is not None and "No such file or directory" in record.digest.line


def test_custom_tool_predicate(make_otel: Callable[..., OTel]) -> None:
    otel = make_otel(tool_predicate=lambda span: span.name.startswith("mcp.call "))
    failing_tool_span(otel.tracer, read_settings, ("/nonexistent/settings.toml",),
                      name="mcp.call read_settings", attributes={})
    failing_tool_span(otel.tracer, read_settings, ("/nonexistent/other.toml",),
                      name="http.request", attributes={})
    record = only_record(otel)
    assert record.span_name == "mcp.call read_settings"
    assert record.digest is not None and record.digest.type == "FileNotFoundError"
    assert "settings.toml" in record.digest.line


def test_non_tool_and_successful_tool_spans_produce_nothing(otel: OTel) -> None:
    with agent(otel.tracer, "conv-quiet"):
        failing_tool_span(otel.tracer, name="db.query", attributes={"db.system": "sqlite"})
        ok_tool_span(otel.tracer)
        ok_tool_span(otel.tracer, {"openinference.span.kind": "TOOL", "tool.name": "x"})
    assert otel.ec.flush()
    assert otel.records() == []
    assert otel.ec.context("conv-quiet") == ""
    assert otel.metric_points("errcompact.errors") == []
    for span in otel.spans():
        assert not any(k.startswith("errcompact.") for k in (span.attributes or {}))


def test_a_success_resets_the_consecutive_counter(otel: OTel) -> None:
    with agent(otel.tracer, "conv-reset") as agent_span:
        failing_tool_span(otel.tracer)
        failing_tool_span(otel.tracer)
        ok_tool_span(otel.tracer)
        failing_tool_span(otel.tracer)
        failing_tool_span(otel.tracer)
        assert otel.ec.history.escalation("conv-reset") is None
        otel.ec.check("conv-reset")
        failing_tool_span(otel.tracer)  # third in a row since the success
        assert otel.ec.history.escalation("conv-reset") is not None
    events = [e for e in exported(otel, agent_span).events if e.name == "errcompact.escalation"]
    assert len(events) == 1
    assert events[0].attributes["errcompact.count"] == 3  # type: ignore[index]
    assert "(×5)" in otel.ec.context("conv-reset")


# -- scope ------------------------------------------------------------------------------------------


def test_scope_from_conversation_on_the_tool_span(otel: OTel) -> None:
    with agent(otel.tracer, None):
        failing_tool_span(otel.tracer, attributes={**GENAI_TOOL, "gen_ai.conversation.id": "conv-tool"})
    record = only_record(otel)
    assert record.scope == "conv-tool" and record.conversation_id == "conv-tool"
    assert "'user_id'" in otel.ec.context("conv-tool")


def test_scope_from_conversation_on_the_parent_agent_span_only(otel: OTel) -> None:
    with agent(otel.tracer, "conv-agent", name="billing"):
        span, _ = failing_tool_span(otel.tracer)
    assert "gen_ai.conversation.id" not in (exported(otel, span).attributes or {})
    record = only_record(otel)
    assert record.scope == "conv-agent" and record.conversation_id == "conv-agent"
    assert record.agent_name == "billing"
    assert record.parent_span_id is not None


def test_scope_from_conversation_on_the_workflow_span_around_the_agent(otel: OTel) -> None:
    """The GenAI conventions' ``invoke_workflow`` span (a process of several agents) is an agent run like
    OpenLLMetry's ``workflow`` span: the conversation it records is found for a tool of an agent inside it,
    also when the trace's root is a request span of the service around the workflow."""
    workflow = {"gen_ai.operation.name": "invoke_workflow", "gen_ai.conversation.id": "conv-workflow"}
    with otel.tracer.start_as_current_span("POST /chat"), otel.tracer.start_as_current_span(
        "invoke_workflow support", attributes=workflow
    ), agent(otel.tracer, None, name="billing"):
        failing_tool_span(otel.tracer)
    record = only_record(otel)
    assert record.scope == "conv-workflow" and record.conversation_id == "conv-workflow"
    assert record.agent_name == "billing"


def test_scope_is_the_trace_without_a_conversation(otel: OTel) -> None:
    with agent(otel.tracer, None) as agent_span:
        failing_tool_span(otel.tracer)
        failing_tool_span(otel.tracer)
    trace_scope = f"trace:{agent_span.get_span_context().trace_id:032x}"
    records = otel.records()
    assert {r.scope for r in records} == {trace_scope}
    assert "(×2)" in otel.ec.context(trace_scope)
    assert otel.ec.context("default") == ""


def test_top_level_tool_spans_share_the_default_scope(otel: OTel) -> None:
    first, _ = failing_tool_span(otel.tracer)
    second, _ = failing_tool_span(otel.tracer)
    assert first.get_span_context().trace_id != second.get_span_context().trace_id
    records = otel.records()
    assert {r.scope for r in records} == {"default"}
    assert all(r.parent_span_id is None for r in records)
    assert "(×2)" in otel.ec.context("default")


# -- exceptions recorded as log records ---------------------------------------------------------------


def test_exception_logged_as_a_log_record_with_exception_argument(otel: OTel) -> None:
    logger = otel.logger_provider.get_logger("tests.agent")
    with (
        agent(otel.tracer, "conv-log"),
        otel.tracer.start_as_current_span("execute_tool lookup", attributes=GENAI_TOOL) as span,
    ):
        exc = raise_from(lookup_user, {}, "account_id")
        logger.emit(
            severity_number=SeverityNumber.ERROR,
            body="tool failed",
            exception=exc,
            context=trace.set_span_in_context(span),
        )
        span.set_status(Status(StatusCode.ERROR))
    logged = [r for r in otel.logs() if r.log_record.body == "tool failed"]
    assert len(logged) == 1
    logged_stack = logged[0].log_record.attributes["exception.stacktrace"]  # type: ignore[index]
    assert "Traceback (most recent call last)" in str(logged_stack)

    assert not [e for e in exported(otel, span).events if e.name == "exception"]
    record = only_record(otel)
    assert record.raw_error == logged_stack
    assert record.exception_stacktrace == logged_stack
    assert record.digest is not None
    assert "in lookup_user" in record.digest.line and "'account_id'" in record.digest.line
    assert exported(otel, span).attributes["errcompact.digest"] == record.digest.line  # type: ignore[index]


def test_exception_logged_as_exception_attributes(otel: OTel) -> None:
    logger = otel.logger_provider.get_logger("tests.agent")
    exc = raise_from(read_settings, "/nonexistent/agent.yaml")
    stack = "".join(traceback.format_exception(exc))
    with otel.tracer.start_as_current_span("execute_tool read", attributes=GENAI_TOOL) as span:
        logger.emit(
            severity_number=SeverityNumber.ERROR,
            attributes={
                "exception.type": type(exc).__name__,
                "exception.message": str(exc),
                "exception.stacktrace": stack,
            },
            context=trace.set_span_in_context(span),
        )
        span.set_status(Status(StatusCode.ERROR))
    record = only_record(otel)
    assert record.raw_error == stack
    assert record.exception_type == "FileNotFoundError"
    assert record.digest is not None and "agent.yaml" in record.digest.line


def test_a_logged_exception_outside_the_failed_span_is_not_used(otel: OTel) -> None:
    """A log record correlated with another span must not become this span's raw error."""
    logger = otel.logger_provider.get_logger("tests.agent")
    with otel.tracer.start_as_current_span("unrelated") as other:
        logger.emit(exception=raise_from(parse_config, "{"), context=trace.set_span_in_context(other))
    _, exc = failing_tool_span(otel.tracer)
    record = only_record(otel)
    assert record.raw_error == "".join(traceback.format_exception(exc))


# -- escalation ---------------------------------------------------------------------------------------


def test_escalation_event_log_and_metrics(otel: OTel) -> None:
    with agent(otel.tracer, "conv-esc") as agent_span:
        tool_spans = [failing_tool_span(otel.tracer)[0] for _ in range(3)]
    assert otel.ec.flush()

    events = [e for e in exported(otel, agent_span).events if e.name == "errcompact.escalation"]
    assert len(events) == 1
    attrs = dict(events[0].attributes or {})
    key = exported(otel, tool_spans[-1]).attributes["errcompact.key"]  # type: ignore[index]
    assert attrs["errcompact.reason"] == "consecutive"
    assert attrs["errcompact.key"] == key
    assert attrs["errcompact.count"] == 3 and attrs["errcompact.threshold"] == 3
    assert attrs["errcompact.action"] == "halt"
    assert str(attrs["errcompact.digest"]).startswith("[KeyError]")
    assert "errcompact.scope" not in attrs
    for span in tool_spans:  # the event is on the agent span, not the tool spans
        assert not [e for e in exported(otel, span).events if e.name == "errcompact.escalation"]

    logs = otel.logs("errcompact.escalation")
    assert len(logs) == 1
    log = logs[0].log_record
    assert log.severity_number == SeverityNumber.WARN
    last = tool_spans[-1].get_span_context()
    assert (log.trace_id, log.span_id) == (last.trace_id, last.span_id)
    assert log.attributes["errcompact.key"] == key  # type: ignore[index]

    escalations = otel.metric_points("errcompact.escalations")
    assert sum(p.value for p in escalations) == 1
    for point in escalations:
        assert set(point.attributes) == {"gen_ai.tool.name", "errcompact.reason", "errcompact.action"}
    errors = otel.metric_points("errcompact.errors")
    assert sum(p.value for p in errors) == 3
    for point in errors:
        assert set(point.attributes) == {
            "gen_ai.tool.name", "error.type", "errcompact.error_type", "errcompact.new_class"
        }
        assert point.attributes["error.type"] == point.attributes["errcompact.error_type"] == "KeyError"
    raw, compact = otel.metric_sum("errcompact.tokens.raw"), otel.metric_sum("errcompact.tokens.compact")
    assert raw > compact > 0


def test_a_failure_has_one_error_type_on_its_span_metrics_and_log_record(otel: OTel) -> None:
    """The conventions ask for the same ``error.type`` for a failure on its span, its metrics and its log
    record. The tool boundary names the exception's fully-qualified class; the metrics and the trajectory
    log record name it so too, with the digest's shorter type beside it as ``errcompact.error_type``."""

    @otel.ec.tool
    def parse(text: str) -> Any:
        return parse_config(text)

    parse("{not json")
    (span,) = otel.spans("execute_tool parse")
    span_type = (span.attributes or {})["error.type"]
    assert span_type == "json.decoder.JSONDecodeError"
    for name in ("errcompact.errors", "errcompact.classes.new"):
        (point,) = otel.metric_points(name)
        assert point.attributes["error.type"] == span_type, name
        assert point.attributes["errcompact.error_type"] == "JSONDecodeError", name
    logs = otel.logs("errcompact.trajectory")
    assert logs
    for log in logs:
        attributes = log.log_record.attributes or {}
        assert attributes["error.type"] == span_type
    assert (logs[-1].log_record.attributes or {})["errcompact.error_type"] == "JSONDecodeError"


def test_halt_action_raises_at_the_next_boundary_and_on_check(otel: OTel) -> None:
    ran: list[str] = []

    @otel.ec.tool
    def lookup(user_id: str) -> str:
        ran.append(user_id)
        return lookup_user({}, user_id)

    with agent(otel.tracer, "conv-halt"):
        for _ in range(3):
            failing_tool_span(otel.tracer)
        with pytest.raises(ErrorBudgetExceeded) as info:
            otel.ec.check()  # the current scope: the agent span's conversation
        assert info.value.escalation.scope == "conv-halt"
        with otel.ec.conversation("conv-halt"), pytest.raises(ErrorBudgetExceeded):
            lookup("user_id")
    assert ran == []
    with pytest.raises(ErrorBudgetExceeded):
        otel.ec.check("conv-halt")
    otel.ec.check("another-conversation")
    otel.ec.acknowledge("conv-halt")
    otel.ec.check("conv-halt")


def test_human_action_calls_the_hook_once_and_does_not_raise(make_otel: Callable[..., OTel]) -> None:
    called = threading.Event()
    seen: list[Escalation] = []

    def review(escalation: Escalation) -> None:
        seen.append(escalation)
        called.set()

    otel = make_otel(thresholds=Thresholds(consecutive=2, action="human"), human_review=review)
    with agent(otel.tracer, "conv-human"):
        for _ in range(4):
            failing_tool_span(otel.tracer)
        otel.ec.check()
    assert called.wait(10)
    assert otel.ec.flush()
    assert len(seen) == 1
    assert seen[0].action == "human" and seen[0].reason == "consecutive" and seen[0].scope == "conv-human"
    otel.ec.check("conv-human")

    @otel.ec.tool
    def lookup(user_id: str) -> str:
        return lookup_user({"u-1": "ann"}, user_id)

    with otel.ec.conversation("conv-human"):
        assert lookup("u-1") == "ann"


def test_a_review_hook_that_shuts_the_library_down_stops_it_whole(make_otel: Callable[..., OTel]) -> None:
    """A reviewer who stops the agent at a breach: ``shutdown()`` runs on the review thread itself,
    returns, and leaves no handle behind; the next ``init()`` starts afresh."""
    done = threading.Event()
    raised: list[BaseException] = []

    def review(_escalation: Escalation) -> None:
        try:
            otel.ec.shutdown()
        except BaseException as exc:
            raised.append(exc)
        finally:
            done.set()

    otel = make_otel(thresholds=Thresholds(consecutive=2, action="human"), human_review=review)
    with agent(otel.tracer, "conv-stop"):
        for _ in range(2):
            failing_tool_span(otel.tracer)
    assert done.wait(30)
    assert raised == []
    assert otel_errcompact.instance() is None
    with TrajectoryStore(otel.sqlite_path) as store:
        assert store.count() == 2  # the writer was drained before the hook's shutdown returned
    for thread in threading.enumerate():
        if thread.name == "otel-errcompact-review":
            thread.join(30)  # it ends once the hook returned
            assert not thread.is_alive()

    again = otel_errcompact.init(
        tracer_provider=otel.tracer_provider, logger_provider=otel.logger_provider,
        meter_provider=otel.meter_provider, sqlite_path=otel.sqlite_path.with_name("again.sqlite3"),
    )
    try:
        assert again is not otel.ec
        with agent(otel.tracer, "conv-again"):
            failing_tool_span(otel.tracer)
        assert "[KeyError]" in again.context("conv-again")
        assert again.flush()
    finally:
        again.shutdown()


def test_a_review_hook_may_flush_acknowledge_and_check_its_conversation(make_otel: Callable[..., OTel]) -> None:
    """A reviewer who writes everything out, accepts the breach and lets the agent go on: ``flush()`` on
    the review thread does not wait for the hook's own call (it timed out and said False), and the
    acknowledged conversation is no longer halted."""
    done = threading.Event()
    answers: list[object] = []

    def review(escalation: Escalation) -> None:
        try:
            answers.append(otel.ec.flush(timeout_s=5))
            otel.ec.acknowledge(escalation.scope)
            answers.append(otel.ec.check(escalation.scope))
        except BaseException as exc:
            answers.append(exc)
        finally:
            done.set()

    otel = make_otel(thresholds=Thresholds(consecutive=2, action="human"), human_review=review)
    with agent(otel.tracer, "conv-reviewed"):
        for _ in range(2):
            failing_tool_span(otel.tracer)
    assert done.wait(30)
    assert answers == [True, None]
    assert otel.ec.history.escalation("conv-reviewed") is None
    assert otel.ec.flush()


# -- never raises into the host -----------------------------------------------------------------------


class BrokenSink:
    """A trajectory sink whose storage is gone: every write raises a real OSError."""

    def __init__(self, missing_dir: str) -> None:
        self.path = missing_dir + "/records.jsonl"
        self.calls = 0

    def write(self, records: Any) -> None:
        self.calls += 1
        with open(self.path, "a", encoding="utf-8") as fh:  # the directory does not exist
            fh.write(str(len(records)))

    def close(self) -> None:
        return None


def test_a_failing_sink_does_not_stop_the_agent_or_the_other_sinks(
    make_otel: Callable[..., OTel], tmp_path: Any
) -> None:
    broken = BrokenSink(str(tmp_path / "gone"))
    otel = make_otel(sinks=[broken])
    with agent(otel.tracer, "conv-broken"):
        for _ in range(2):
            failing_tool_span(otel.tracer)
    assert not otel.ec.flush(30.0)  # truthful: one sink refused the records
    with TrajectoryStore(otel.sqlite_path) as store:
        assert store.count() == 2  # the SQLite store still has both
    assert broken.calls >= 1
    assert otel.ec.writer is not None and otel.ec.writer.sink_failures >= 1


def test_weird_attributes_do_not_break_the_host(otel: OTel) -> None:
    huge = "x" * 1_000_000
    weird = {
        "gen_ai.operation.name": "execute_tool",
        "gen_ai.tool.name": 12345,
        "gen_ai.tool.call.id": 3.5,
        "gen_ai.conversation.id": 987654321,
        "gen_ai.tool.call.arguments": huge,
        "error.type": 42,
        "blob": b"\x00\xff\xfe binary",
        "flags": (True, False),
        "numbers": [1, 2, 3],
        "\u0000weird key\ud800": "value",
    }
    continued = []
    span, exc = failing_tool_span(otel.tracer, attributes=weird)
    continued.append("after")
    assert continued == ["after"]
    record = only_record(otel)
    assert record.raw_error == "".join(traceback.format_exception(exc))
    assert record.scope == "987654321"
    assert record.tool_name == "12345"
    assert "errcompact.digest" in (exported(otel, span).attributes or {})


def test_a_raising_predicate_and_hook_do_not_break_the_host(make_otel: Callable[..., OTel]) -> None:
    def predicate(span: ReadableSpan) -> bool:
        return bool(lookup_user({}, span.name))

    def review(escalation: Escalation) -> None:
        parse_config("{")

    otel = make_otel(
        tool_predicate=predicate, human_review=review, thresholds=Thresholds(consecutive=1, action="human")
    )
    with otel.tracer.start_as_current_span("anything"):
        pass
    failing_tool_span(otel.tracer)
    assert otel.ec.flush()
    assert len(otel.records()) == 1


def test_exception_logged_through_stdlib_logging(otel: OTel) -> None:
    """``log.exception(...)`` inside the tool span, bridged by the SDK's logging handler."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)
        handler = LoggingHandler(logger_provider=otel.logger_provider)
    log = logging.getLogger("tests.agent.tools")
    log.addHandler(handler)
    log.propagate = False
    try:
        with otel.tracer.start_as_current_span("execute_tool settings", attributes=GENAI_TOOL) as span:
            try:
                read_settings("/nonexistent/tools.ini")
            except OSError:
                log.exception("reading the settings failed")
            span.set_status(Status(StatusCode.ERROR))
    finally:
        log.removeHandler(handler)
    logged = [r for r in otel.logs() if r.log_record.body == "reading the settings failed"]
    assert len(logged) == 1
    record = only_record(otel)
    assert record.raw_error == logged[0].log_record.attributes["exception.stacktrace"]  # type: ignore[index]
    assert record.digest is not None
    assert record.digest.type == "FileNotFoundError" and "tools.ini" in record.digest.line


def test_budget_escalation_over_distinct_errors(make_otel: Callable[..., OTel]) -> None:
    otel = make_otel(thresholds=Thresholds(consecutive=10, budget=4))
    with agent(otel.tracer, "conv-budget") as agent_span:
        failing_tool_span(otel.tracer, lookup_user, ({}, "user_id"))
        failing_tool_span(otel.tracer, parse_config, ("{",))
        failing_tool_span(otel.tracer, read_settings, ("/nonexistent/a.cfg",))
        assert otel.ec.history.escalation("conv-budget") is None
        failing_tool_span(otel.tracer, lookup_user, ({}, "account_id"))
    (event,) = [e for e in exported(otel, agent_span).events if e.name == "errcompact.escalation"]
    assert event.attributes["errcompact.reason"] == "budget"  # type: ignore[index]
    assert event.attributes["errcompact.threshold"] == 4  # type: ignore[index]
    assert "4 tool failure(s), 4 distinct" in otel.ec.context("conv-budget")
    records = otel.records()
    assert [r.escalation is not None for r in records] == [False, False, False, True]


def test_a_slow_human_hook_does_not_block_the_agent(make_otel: Callable[..., OTel]) -> None:
    release = threading.Event()
    entered = threading.Event()

    def review(escalation: Escalation) -> None:
        entered.set()
        release.wait(30)

    otel = make_otel(thresholds=Thresholds(consecutive=1, action="human"), human_review=review)
    try:
        with agent(otel.tracer, "conv-slow-review"):
            failing_tool_span(otel.tracer)
            assert entered.wait(10)
            for _ in range(3):  # the agent carries on while a human looks at the breach
                failing_tool_span(otel.tracer)
        assert "(×4)" in otel.ec.context("conv-slow-review")
    finally:
        release.set()


def test_escalation_goes_to_the_innermost_live_agent_span(otel: OTel) -> None:
    with (
        agent(otel.tracer, "conv-nested", name="planner") as outer,
        agent(otel.tracer, None, name="researcher") as inner,
    ):
        for _ in range(3):
            failing_tool_span(otel.tracer)
    assert [e.name for e in exported(otel, inner).events] == ["errcompact.escalation"]
    assert [e.name for e in exported(otel, outer).events] == []
    assert {r.agent_name for r in otel.records()} == {"researcher"}
    assert {r.scope for r in otel.records()} == {"conv-nested"}


class Turns:
    """Lets concurrent agents (tasks or threads) take their steps in one set order: step ``n`` waits
    until step ``n - 1`` is done, so the test does not depend on a scheduler's order."""

    def __init__(self, count: int) -> None:
        self._done = [threading.Event() for _ in range(count + 1)]
        self._done[0].set()

    def take(self, step: int) -> None:
        assert self._done[step - 1].wait(30), f"step {step - 1} never ran"

    def done(self, step: int) -> None:
        self._done[step].set()

    async def take_async(self, step: int) -> None:
        deadline = time.monotonic() + 30
        while not self._done[step - 1].is_set():
            assert time.monotonic() < deadline, f"step {step - 1} never ran"
            await asyncio.sleep(0.001)


def test_agents_running_at_once_in_one_trace_each_count_in_their_own_conversation(otel: OTel) -> None:
    """``asyncio.gather`` of two conversations' agent runs under one batch root span: conv-A's agent
    starts first, so conv-B's is the newest live agent span of the trace while conv-A's tools run.
    Each tool call, failed or successful, still counts in its own agent's conversation: conv-A's
    success does not reset conv-B's consecutive count, and each breach is on its own agent span."""
    tracer = otel.tracer
    last = 10
    turns = Turns(last)
    script = {  # (step, action): the steps of both runs, in the order they are taken
        "conv-A": [(1, "start"), (5, "ok"), (6, "fail"), (8, "fail"), (9, "fail"), (10, "settle")],
        "conv-B": [(2, "start"), (3, "fail"), (4, "fail"), (7, "fail")],
    }
    spans: dict[str, Span] = {}

    async def run(conversation: str) -> None:
        (first, _), *steps = script[conversation]
        await turns.take_async(first)
        with agent(tracer, conversation) as span:
            spans[conversation] = span
            turns.done(first)
            for step, action in steps:
                await turns.take_async(step)
                if action == "ok":
                    ok_tool_span(tracer)
                elif action == "fail":
                    failing_tool_span(tracer)
                else:  # count what the digest thread has not yet, while both agent spans are live
                    processor = otel.ec.processor
                    assert processor is not None
                    processor.settle()
                turns.done(step)
            await turns.take_async(last + 1)  # both agent runs stay open to the end

    async def main() -> None:
        with tracer.start_as_current_span("nightly batch"):
            await asyncio.gather(run("conv-A"), run("conv-B"))

    asyncio.run(main())
    records = otel.records()
    assert sorted(r.scope for r in records) == ["conv-A"] * 3 + ["conv-B"] * 3
    assert {r.conversation_id for r in records if r.scope == "conv-A"} == {"conv-A"}
    for conversation in ("conv-A", "conv-B"):
        escalation = otel.ec.history.escalation(conversation)
        assert escalation is not None and escalation.reason == "consecutive" and escalation.count == 3
        events = [e for e in exported(otel, spans[conversation]).events if e.name == "errcompact.escalation"]
        assert len(events) == 1, conversation


def test_agents_running_at_once_on_threads_name_their_own_failures_and_carry_their_own_escalation(
    otel: OTel,
) -> None:
    """An orchestrator fans out to two sub-agents on a thread pool: the researcher starts first, so the
    writer is the newest live agent span of the trace while the researcher's tool fails. The records
    still name the researcher, and the breach is an event on the researcher's span only."""
    tracer = otel.tracer
    last = 6
    turns = Turns(last)
    script = {
        "researcher": [(1, "start"), (3, "fail"), (4, "fail"), (5, "fail"), (6, "settle")],
        "writer": [(2, "start")],
    }
    spans: dict[str, Span] = {}

    def run(name: str) -> None:
        (first, _), *steps = script[name]
        turns.take(first)
        with agent(tracer, None, name=name) as span:
            spans[name] = span
            turns.done(first)
            for step, action in steps:
                turns.take(step)
                if action == "fail":
                    failing_tool_span(tracer)
                else:  # count what the digest thread has not yet, while both agent spans are live
                    processor = otel.ec.processor
                    assert processor is not None
                    processor.settle()
                turns.done(step)
            turns.take(last + 1)  # both sub-agents stay open to the end

    with agent(tracer, None, name="orchestrator") as orchestrator, ThreadPoolExecutor(2) as pool:
        runs = [pool.submit(contextvars.copy_context().run, run, name) for name in script]
        for done in runs:
            done.result(60)
    assert [r.agent_name for r in otel.records()] == ["researcher"] * 3
    assert [e.name for e in exported(otel, spans["researcher"]).events] == ["errcompact.escalation"]
    assert [e.name for e in exported(otel, spans["writer"]).events] == []
    assert [e.name for e in exported(otel, orchestrator).events] == []


def test_record_times_are_the_span_times_to_the_microsecond(otel: OTel) -> None:
    from datetime import datetime, timedelta

    epoch = datetime(1970, 1, 1, tzinfo=UTC)
    with agent(otel.tracer, "conv-times"):
        span, _ = failing_tool_span(otel.tracer)
    out = exported(otel, span)
    record = only_record(otel)
    assert out.start_time is not None and out.end_time is not None
    assert record.started_at == epoch + timedelta(microseconds=out.start_time // 1000)
    assert record.ended_at == epoch + timedelta(microseconds=out.end_time // 1000)
    assert record.started_at is not None and record.started_at.tzinfo is not None


def test_the_last_exception_event_is_the_failure(otel: OTel) -> None:
    first = raise_from(parse_config, "{not json")
    with (
        agent(otel.tracer, "conv-two-events"),
        otel.tracer.start_as_current_span(
            "execute_tool lookup", attributes=dict(GENAI_TOOL), record_exception=False, set_status_on_exception=False
        ) as span,
    ):
        span.record_exception(first)  # retried inside the tool, then failed for good
        span.add_event("retrying", {"attempt": 2})
        last = raise_from(lookup_user, {}, "u-9")
        span.record_exception(last)
        span.set_status(Status(StatusCode.ERROR, "lookup failed"))
    record = only_record(otel)
    assert record.exception_type == "KeyError"
    assert record.raw_error == "".join(traceback.format_exception(last))


def test_annotations_respect_the_providers_span_limits() -> None:
    from opentelemetry.sdk.trace import SpanLimits, TracerProvider
    from opentelemetry.sdk.trace.export import SimpleSpanProcessor
    from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

    from otel_errcompact.history import ErrorHistory
    from otel_errcompact.pipeline import ErrorPipeline
    from otel_errcompact.processor import ErrorCompactionProcessor

    exporter = InMemorySpanExporter()
    provider = TracerProvider(span_limits=SpanLimits(max_span_attributes=4, max_attribute_length=12))
    provider.add_span_processor(ErrorCompactionProcessor(ErrorPipeline(ErrorHistory())))
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    tracer = provider.get_tracer("tests.limits")
    try:
        failing_tool_span(tracer, attributes={**GENAI_TOOL, "app.a": "1", "app.b": "2"})
        (out,) = exporter.get_finished_spans()
        attrs = dict(out.attributes or {})
        assert len(attrs) == 4  # the SDK dropped the oldest to make room, as for any late attribute
        assert attrs["errcompact.count"] == 1
        assert len(str(attrs["errcompact.digest"])) == 12  # cut at the provider's attribute length
        assert "errcompact.key" in attrs
    finally:
        provider.shutdown()


def test_nanosecond_times_convert_exactly_to_the_microsecond() -> None:
    import random
    from datetime import datetime, timedelta

    from otel_errcompact.capture import _utc as _utc_from_ns

    epoch = datetime(1970, 1, 1, tzinfo=UTC)
    rng = random.Random(9)
    samples = [rng.randrange(0, 4_102_444_800 * 10**9) for _ in range(20_000)]  # up to the year 2100
    samples += [1_763_840_000_999_999_999, 1_763_840_000_000_000_500, 10**9 - 1, 0]
    for ns in samples:
        assert _utc_from_ns(ns) == epoch + timedelta(microseconds=ns // 1000), ns


def test_the_last_exception_event_is_read_from_live_and_copied_events() -> None:
    """The SDK's live event list (read through its deque and its events' fields) and the read-only
    copy's tuple give the same answer: the newest ``exception`` event that has attributes."""
    from opentelemetry.sdk.trace import TracerProvider

    from otel_errcompact.semconv import exception_from_events

    first = raise_from(lookup_user, {}, "u1")
    last = raise_from(parse_config, "{not json")
    tracer = TracerProvider().get_tracer("t")
    with tracer.start_as_current_span("execute_tool lookup", record_exception=False) as span:
        span.record_exception(first)
        span.record_exception(last)
        span.add_event("exception")  # no attributes: skipped
        span.add_event("retry", {"exception.type": "NotThisOne"})  # another event's name: skipped
        live = exception_from_events(span._events)  # type: ignore[attr-defined]
    assert live is not None
    assert live[0] is not None and live[0].endswith(type(last).__name__) and live[1] == str(last)
    assert live[2] is not None and live[2].rstrip().endswith(f"{type(last).__name__}: {last}")
    assert isinstance(span, ReadableSpan)
    assert exception_from_events(span.events) == live  # the property's copy, a tuple
    assert exception_from_events(iter(span.events)) == live  # any iterable
    assert exception_from_events(()) is None
