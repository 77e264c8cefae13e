"""Spans that are not failures: successful tool calls, chat spans, agent and root spans.

Their handling is kept off the agent's thread or out of locks (successes are resolved later, anchors are
registered without the lock, plain model spans skip the anchor look-up). These tests pin that what an
immediate handling showed is still what every reader sees: the consecutive counter, the call metric,
the anchors.
"""

from __future__ import annotations

import threading
import time
import traceback
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from typing import Any

from opentelemetry.context import Context
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import InMemoryMetricReader
from opentelemetry.sdk.trace import ReadableSpan, Span, SpanProcessor, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import Status, StatusCode, Tracer

from otel_errcompact import history as history_module
from otel_errcompact.history import ErrorHistory, Thresholds
from otel_errcompact.pipeline import ErrorPipeline
from otel_errcompact.processor import _MAX_ANCHORS_PER_TRACE, ErrorCompactionProcessor
from otel_errcompact.recovery.observe import MODEL_SPAN_SIGNALS, RecoveryTelemetry
from otel_errcompact.telemetry import ErrorMetrics
from tests.conftest import OTel, metric_points, metric_sum, metrics_by_name, run_threads
from tests.test_processor import GENAI_TOOL, agent, failing_tool_span, ok_tool_span, only_record


def _ok_calls(otel: OTel, *, flush: bool) -> int:
    """Successful calls in ``errcompact.tool.calls``, read as a metric reader collects them."""
    # Without a flush, the collection itself must count them.
    name = "errcompact.tool.calls"
    points = otel.metric_points(name) if flush else metric_points(otel.metric_reader, name)
    return sum(int(p.value) for p in points if (p.attributes or {}).get("errcompact.outcome") == "ok")


def test_successful_calls_are_counted_when_the_reader_collects_without_a_flush(otel: OTel) -> None:
    with agent(otel.tracer, "conv-ok"):
        for _ in range(7):
            ok_tool_span(otel.tracer)
    assert _ok_calls(otel, flush=False) == 7
    # The collection hook reports nothing itself.
    assert "errcompact.tool.calls.queued" not in metrics_by_name(otel.metric_reader)


def test_a_success_resets_the_counter_after_its_agent_span_has_ended(otel: OTel) -> None:
    # The conversation is known only from the agent span, which ends before the next failure is counted.
    with agent(otel.tracer, "conv-turns"):
        failing_tool_span(otel.tracer)
        failing_tool_span(otel.tracer)
        ok_tool_span(otel.tracer)
    with agent(otel.tracer, "conv-turns"):  # the next turn: a new trace, the same conversation
        failing_tool_span(otel.tracer)
        failing_tool_span(otel.tracer)
        assert otel.ec.history.escalation("conv-turns") is None  # 2 in a row since the success, not 4
        failing_tool_span(otel.tracer)
        assert otel.ec.history.escalation("conv-turns") is not None


def test_many_successes_between_failures_keep_the_queue_bounded_and_the_counts_exact(otel: OTel) -> None:
    successes = 3 * history_module.SUCCESS_QUEUE_BOUND + 5
    with agent(otel.tracer, "conv-many"):
        failing_tool_span(otel.tracer)
        failing_tool_span(otel.tracer)
        for _ in range(successes):
            ok_tool_span(otel.tracer)
            assert len(otel.ec.history._successes) <= 2 * history_module.SUCCESS_QUEUE_BOUND
        failing_tool_span(otel.tracer)
        failing_tool_span(otel.tracer)
        assert otel.ec.history.escalation("conv-many") is None
    assert _ok_calls(otel, flush=True) == successes


def test_a_framework_span_around_a_failed_call_is_not_a_success(otel: OTel) -> None:
    with agent(otel.tracer, "conv-wrap"):
        for _ in range(3):
            with otel.tracer.start_as_current_span("framework tool", attributes=dict(GENAI_TOOL)):
                failing_tool_span(otel.tracer)
        assert otel.ec.history.escalation("conv-wrap") is not None  # the wrappers reset nothing
    assert _ok_calls(otel, flush=True) == 0


def test_successes_from_threads_are_all_counted(otel: OTel) -> None:
    def work(_: int) -> None:
        with agent(otel.tracer, None):
            for _ in range(500):
                ok_tool_span(otel.tracer)

    assert run_threads(work, 4) == []
    assert _ok_calls(otel, flush=True) == 2000
    assert not otel.ec.history._successes


def test_a_model_span_listener_is_asked_before_any_anchor_look_up(otel: OTel) -> None:
    processor = otel.ec.processor
    assert processor is not None
    seen: list[tuple[str, Span | None]] = []
    looked_up: list[int] = []
    live_anchor = processor._live_anchor

    def spy(trace_id: int, parent_id: int = 0) -> Span | None:
        looked_up.append(trace_id)
        return live_anchor(trace_id, parent_id)

    def matters(span: ReadableSpan, attrs: Mapping[str, Any]) -> bool:
        return "error.type" in attrs

    processor._live_anchor = spy  # type: ignore[method-assign]
    processor.add_model_span_listener(lambda span, anchor: seen.append((span.name, anchor)), matters)
    chat = {"gen_ai.operation.name": "chat"}
    with agent(otel.tracer, "conv-chat") as agent_span:
        with otel.tracer.start_as_current_span("chat ok", attributes=chat):
            pass
        assert not looked_up and not seen
        with otel.tracer.start_as_current_span("chat failed", attributes={**chat, "error.type": "APIError"}):
            pass
    assert [name for name, _ in seen] == ["chat failed"]
    assert seen[0][1] is agent_span
    assert len(looked_up) == 1  # one look-up shared by every listener that wanted the span


def test_plain_successful_model_spans_add_no_recovery_events(otel: OTel) -> None:
    chat = {"gen_ai.operation.name": "chat", "gen_ai.response.finish_reasons": ("stop",)}
    with agent(otel.tracer, "conv-plain") as agent_span:
        for _ in range(3):
            with otel.tracer.start_as_current_span("chat gpt-4o", attributes=chat):
                pass
    exported_agent = [s for s in otel.spans() if s.context.span_id == agent_span.get_span_context().span_id]
    assert [e.name for e in exported_agent[0].events] == []


def test_anchors_registered_from_threads_are_all_found_and_all_forgotten(otel: OTel) -> None:
    processor = otel.ec.processor
    assert processor is not None

    def work(_: int) -> None:
        for i in range(300):
            with agent(otel.tracer, f"conv-{i}") as span:
                trace_id = span.get_span_context().trace_id
                assert processor.anchor_conversation(trace_id) == f"conv-{i}"

    assert run_threads(work, 4) == []
    assert not processor._anchors and not processor._anchor_touched and not processor._anchor_spans


@contextmanager
def _plain_processor(consecutive: int) -> Iterator[tuple[Tracer, ErrorHistory, ErrorCompactionProcessor]]:
    """A provider with the processor alone on a history of its own: no digest thread and no metrics
    thread, so queued successes wait until the test, or a failure being counted, applies them."""
    provider = TracerProvider()
    history = ErrorHistory(Thresholds(consecutive=consecutive))
    processor = ErrorCompactionProcessor(ErrorPipeline(history))
    provider.add_span_processor(processor)
    try:
        yield provider.get_tracer("tests"), history, processor
    finally:
        provider.shutdown()


def test_a_queued_success_resolves_against_the_agents_it_ran_under_not_those_started_after_it() -> None:
    # The success's parent is no agent span (a step in between), so its conversation is read from the
    # trace's agents, newest first. It is resolved only when the next failure is counted: by then its
    # agent has ended and another agent of the trace, in another conversation, has started.
    with _plain_processor(consecutive=3) as (tracer, history, processor):
        with tracer.start_as_current_span("workflow"):  # a root span: an anchor with no conversation
            with agent(tracer, "conv-a"):
                failing_tool_span(tracer)
                failing_tool_span(tracer)
                with tracer.start_as_current_span("step"):
                    ok_tool_span(tracer)  # queued: nothing reads the counters until the next failure
            assert history.success_queue(), "the success was resolved before the test could look"
            with agent(tracer, "conv-b"):
                failing_tool_span(tracer)  # counted now, the success first
            with agent(tracer, "conv-a"):
                failing_tool_span(tracer)
                # one in a row since the success: it reset conv-a, not conv-b
                assert history.escalation("conv-a") is None
                failing_tool_span(tracer)
                failing_tool_span(tracer)
                assert history.escalation("conv-a") is not None
        assert not processor._anchors and not processor._anchor_spans


def test_an_agent_span_ending_while_successes_wait_is_forgotten_after_them() -> None:
    with _plain_processor(consecutive=2) as (tracer, history, processor):
        with agent(tracer, "conv-ended") as agent_span:
            failing_tool_span(tracer)
            ok_tool_span(tracer)
        # Still registered, ended, behind the success that needs it.
        assert agent_span in processor._anchor_spans
        trace_id = agent_span.get_span_context().trace_id
        assert processor.anchor_conversation(trace_id) is None  # look-ups pass an ended anchor by
        history.apply_successes()
        assert not processor._anchors and not processor._anchor_spans
        with agent(tracer, "conv-ended"):
            failing_tool_span(tracer)
            assert history.escalation("conv-ended") is None  # the success reset the counter


def test_an_agent_span_ending_while_another_thread_resolves_its_success_is_forgotten_after_it() -> None:
    # The queue is empty from the moment the applying thread takes the success until it has read the
    # anchors: the agent span ending in that window must still wait for it.
    inside, release = threading.Event(), threading.Event()
    with _plain_processor(consecutive=2) as (tracer, history, processor):
        resolve = processor._resolve

        def held(span: ReadableSpan, notify: bool = True) -> str | None:
            inside.set()
            release.wait(10)
            return resolve(span, notify)

        processor._resolve = held  # the success below is queued with it
        try:
            with agent(tracer, "conv-race"):
                failing_tool_span(tracer)
                ok_tool_span(tracer)
                applier = threading.Thread(target=history.apply_successes)
                applier.start()
                assert inside.wait(10)
                assert not history.success_queue()  # taken, not resolved yet
            release.set()  # the agent span has ended meanwhile
            applier.join(10)
        finally:
            release.set()
        history.apply_successes()
        assert not processor._anchors and not processor._anchor_spans
        with agent(tracer, "conv-race"):
            failing_tool_span(tracer)
            assert history.escalation("conv-race") is None  # the success reset the conversation's counter


def test_sub_agents_ending_while_successes_wait_never_push_the_root_out_of_its_trace() -> None:
    # A workflow runs more sub-agents in turn than a trace keeps anchors for, each with a successful call
    # and none failing: nothing reads the counters, so every ended sub-agent waits to be forgotten.
    with (
        _plain_processor(consecutive=3) as (tracer, history, processor),
        agent(tracer, "conv-workflow", name="planner") as root,
    ):
        for i in range(_MAX_ANCHORS_PER_TRACE + 6):
            with agent(tracer, name=f"worker-{i}"):
                ok_tool_span(tracer)
        assert history.success_queue(), "the successes were resolved before the test could look"
        trace_id = root.get_span_context().trace_id
        assert processor.anchor_conversation(trace_id) == "conv-workflow"
        assert processor.evicted_anchors == 0  # ended sub-agents are not "never ended" anchors
        assert root in processor._anchor_spans

# --- the hooks: _on_ending does the work, on_end only without it ----------------------------------------


class _WithoutOnEnding(SpanProcessor):
    """Forwards on_start and on_end only, as an SDK without ``_on_ending`` calls a processor."""

    def __init__(self, inner: SpanProcessor) -> None:
        self._inner = inner

    def on_start(self, span: Span, parent_context: Context | None = None) -> None:
        self._inner.on_start(span, parent_context=parent_context)

    def on_end(self, span: ReadableSpan) -> None:
        self._inner.on_end(span)


def test_without_on_ending_on_end_counts_failures_resets_and_forgets_anchors() -> None:
    provider = TracerProvider()
    exporter = InMemorySpanExporter()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    history = ErrorHistory(Thresholds(consecutive=2))
    processor = ErrorCompactionProcessor(ErrorPipeline(history))
    seen: list[tuple[str, Span | None]] = []
    processor.add_model_span_listener(lambda span, anchor: seen.append((span.name, anchor)))
    provider.add_span_processor(_WithoutOnEnding(processor))
    tracer = provider.get_tracer("tests")
    try:
        with agent(tracer, "conv-old-sdk") as agent_span:
            failing_tool_span(tracer)
            ok_tool_span(tracer)  # resets the consecutive counter
            failing_tool_span(tracer)
            assert history.escalation("conv-old-sdk") is None
            with tracer.start_as_current_span("chat gpt-4o", attributes={"gen_ai.operation.name": "chat"}):
                pass
            failing_tool_span(tracer)
            assert history.escalation("conv-old-sdk") is not None
        assert seen == [("chat gpt-4o", agent_span)]
        assert not processor._anchors and not processor._anchor_spans
        # no annotation without _on_ending: the exported failed spans carry no digest
        failed = [s for s in exporter.get_finished_spans() if s.status.status_code is StatusCode.ERROR]
        assert failed and all("errcompact.digest" not in (s.attributes or {}) for s in failed)
    finally:
        provider.shutdown()


def test_on_end_has_nothing_left_to_do_after_on_ending(otel: OTel) -> None:
    processor = otel.ec.processor
    assert processor is not None
    with agent(otel.tracer, "conv-once"):
        failing_tool_span(otel.tracer)
    calls: list[str] = []
    processor._process = lambda *a, **k: calls.append("process")  # type: ignore[method-assign]
    readable = otel.spans("execute_tool lookup")[0]
    processor.on_end(readable)  # a second end of a handled span: on_end must not handle it again
    assert calls == []
    assert processor._saw_on_ending and processor._slow is False


def test_an_exception_held_from_a_log_record_is_used_and_the_fast_path_comes_back(otel: OTel) -> None:
    processor = otel.ec.processor
    assert processor is not None
    with agent(otel.tracer, "conv-logged"):
        ok_tool_span(otel.tracer)
        assert processor._slow is False
        with otel.tracer.start_as_current_span("execute_tool lookup", attributes=dict(GENAI_TOOL)) as span:
            try:
                {"u-1": "ann"}["user_id"]
            except KeyError as exc:
                stack = "".join(traceback.format_exception(exc))
                processor.hold_exception(span.get_span_context().span_id, ("KeyError", "'user_id'", stack))
            assert processor._slow is True
            span.set_status(Status(StatusCode.ERROR, "KeyError"))
        with otel.tracer.start_as_current_span("chat gpt-4o", attributes={"gen_ai.operation.name": "chat"}):
            pass
    record = only_record(otel)
    assert record.exception_stacktrace == stack
    assert processor._slow is False and not processor._pending


def test_model_spans_that_cannot_matter_pass_the_gate_without_a_call(otel: OTel) -> None:
    processor = otel.ec.processor
    assert processor is not None and processor._model_signals is not None
    listener, matters = processor._model_listeners[0]
    asked: list[str] = []

    def counting(span: ReadableSpan, attrs: Mapping[str, Any]) -> bool:
        asked.append(span.name)
        assert matters is not None
        return matters(span, attrs)

    processor._model_listeners[0] = (listener, counting)
    chat = {"gen_ai.operation.name": "chat"}
    with agent(otel.tracer, "conv-gate") as agent_span:
        with otel.tracer.start_as_current_span("chat plain", attributes=chat):
            pass
        ok: dict[str, Any] = {**chat, "http.response.status_code": 200, "gen_ai.response.finish_reasons": ("stop",)}
        with otel.tracer.start_as_current_span("chat ok", attributes=ok):
            pass
        with otel.tracer.start_as_current_span("chat limited", attributes={**chat, "http.response.status_code": 429}):
            pass
    assert asked == ["chat ok", "chat limited"]  # the plain one carries none of the signals
    exported_agent = [s for s in otel.spans() if s.context.span_id == agent_span.get_span_context().span_id]
    assert [e.name for e in exported_agent[0].events] == ["errcompact.transition"]


def test_model_span_matters_answers_false_for_plain_successes_only() -> None:
    telemetry = RecoveryTelemetry(MeterProvider().get_meter("tests"))
    span = ReadableSpan("chat")
    cases: list[tuple[dict[str, Any], bool]] = [
        ({"http.response.status_code": 200, "gen_ai.response.finish_reasons": ("stop",)}, False),
        ({"gen_ai.response.finish_reasons": "tool_calls"}, False),
        ({"gen_ai.response.finish_reasons": ["stop"]}, False),  # a list: classified, not looked up
        ({"gen_ai.response.finish_reasons": ("length",)}, True),
        ({"gen_ai.response.finish_reasons": ["max_tokens"]}, True),
        ({"http.response.status_code": 503}, True),
        ({"http.response.status_code": "200"}, True),  # not an int: on_model_span decides
        ({"error.type": "RateLimitError"}, True),
    ]
    for attrs, expected in cases:
        assert telemetry.model_span_matters(span, attrs) is expected, attrs
    assert set(MODEL_SPAN_SIGNALS) == {"error.type", "http.response.status_code", "gen_ai.response.finish_reasons"}


def test_successes_are_counted_at_collection_without_a_metrics_thread() -> None:
    reader = InMemoryMetricReader()
    metrics = ErrorMetrics(MeterProvider(metric_readers=[reader]).get_meter("tests"), token_counts=False)
    assert not metrics.counts_tokens
    for _ in range(5):
        metrics.on_success("lookup")
    assert metric_sum(reader, "errcompact.tool.calls") == 5


def test_a_full_batch_of_successes_is_handed_to_the_metrics_thread_even_when_two_threads_pass_it_together() -> None:
    """Two threads can both append a success before either reads the queue's length: each then reads one
    past the batch. The batch must still be handed to the metrics thread, once, rather than left queued
    until the next collection (a reader may collect once a minute, or never)."""
    from otel_errcompact.telemetry import _SUCCESS_BATCH

    metrics = ErrorMetrics(MeterProvider(metric_readers=[InMemoryMetricReader()]).get_meter("tests"))
    assert metrics.counts_tokens  # the metrics thread runs
    handed: list[int] = []
    request_drain = metrics._request_drain

    def hand_over() -> bool:  # the metrics thread's hand-over, seen
        handed.append(len(metrics._successes))
        return request_drain()

    metrics._request_drain = hand_over  # type: ignore[method-assign]
    try:
        queue = metrics._successes
        for _ in range(_SUCCESS_BATCH):  # the second thread's append landed before the first one's check
            queue.append("lookup")
        metrics.on_success("lookup")  # the first thread's check, which reads one past the batch
        assert handed == [_SUCCESS_BATCH + 1]
        deadline = time.monotonic() + 30
        while queue and time.monotonic() < deadline:  # the metrics thread counts them
            time.sleep(0.01)
        assert not queue
        for _ in range(_SUCCESS_BATCH):
            metrics.on_success("lookup")
        assert handed == [_SUCCESS_BATCH + 1, _SUCCESS_BATCH]  # the next batch is handed over too
    finally:
        metrics.shutdown(30)
