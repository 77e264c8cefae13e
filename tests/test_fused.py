"""The error processor fused with the provider's BatchSpanProcessor, and anchors registered when needed.

On a provider whose exporting processor is the SDK's ``BatchSpanProcessor``, ``init()`` adds no second
processor: one entry runs the library's ``on_start`` and ``_on_ending`` and the batch processor's
``on_end`` (``otel_errcompact/fused.py``). Everything a span carries, every flush and every shutdown must
work as with two entries. Agent and root spans are registered as escalation anchors only when a span of
their trace needs them.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor, SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import Status, StatusCode

import otel_errcompact
from otel_errcompact.fused import FusedSpanProcessor
from otel_errcompact.processor import STARTED_ANCHORS_BOUND, ErrorCompactionProcessor
from tests.conftest import OTel

_TOOL = {"gen_ai.operation.name": "execute_tool", "gen_ai.tool.name": "lookup"}
_AGENT = {"gen_ai.operation.name": "invoke_agent", "gen_ai.agent.name": "support"}


def _fail(otel: OTel, conversation: str) -> None:
    """A real KeyError recorded on a tool span under an agent span of ``conversation``."""
    with otel.tracer.start_as_current_span("invoke_agent support", attributes={
        **_AGENT, "gen_ai.conversation.id": conversation
    }), otel.tracer.start_as_current_span("execute_tool lookup", attributes=_TOOL) as span:
        try:
            {"a": 1}["missing"]
        except KeyError as exc:
            span.record_exception(exc)
            span.set_status(Status(StatusCode.ERROR, str(exc)))


def test_init_fuses_with_the_batch_processor_and_exported_spans_carry_the_digest(
    make_otel: Callable[..., OTel]
) -> None:
    otel = make_otel(batch=True)
    (entry,) = otel.tracer_provider._active_span_processor._span_processors
    assert isinstance(entry, FusedSpanProcessor)
    assert entry.processor is otel.ec.processor and type(entry.batch) is BatchSpanProcessor
    # The SDK calls the library's hooks and the batch processor's on_end, with nothing in between.
    assert entry.on_start == otel.ec.processor.on_start
    assert entry._on_ending == otel.ec.processor._on_ending
    assert entry.on_end == entry.batch.on_end

    for _ in range(3):
        _fail(otel, "conv-fused")
    assert otel.tracer_provider.force_flush()
    failed = otel.spans("execute_tool lookup")
    assert len(failed) == 3
    assert [s.attributes["errcompact.count"] for s in failed] == [1, 2, 3]  # type: ignore[index]
    assert all(str(s.attributes["errcompact.digest"]).startswith("[KeyError]") for s in failed)  # type: ignore[index]
    agent = otel.spans("invoke_agent support")[-1]
    assert [e.name for e in agent.events] == ["errcompact.escalation"]  # the third failure breached
    assert otel.store().count() == 3


def test_provider_shutdown_reaches_both_and_a_later_init_takes_the_fused_entry_over(tmp_path: Path) -> None:
    provider = TracerProvider()
    exporter = InMemorySpanExporter()
    batch = BatchSpanProcessor(exporter)
    provider.add_span_processor(batch)
    ec = otel_errcompact.init(tracer_provider=provider, sqlite_path=tmp_path / "a.sqlite3")
    try:
        processor = ec.processor
        assert processor is not None
        with provider.get_tracer("t").start_as_current_span("execute_tool lookup", attributes=_TOOL):
            pass
        assert batch.force_flush()  # the batch processor, held by the caller, works as before
        assert [s.name for s in exporter.get_finished_spans()] == ["execute_tool lookup"]
    finally:
        ec.shutdown()
    assert processor.closed
    ec = otel_errcompact.init(tracer_provider=provider, sqlite_path=tmp_path / "b.sqlite3")
    try:
        assert ec.processor is processor and not processor.closed  # reopened inside the fused entry
        (entry,) = provider._active_span_processor._span_processors
        assert isinstance(entry, FusedSpanProcessor) and entry.batch is batch
    finally:
        ec.shutdown()
    provider.shutdown()
    assert batch._batch_processor._shutdown  # the provider's shutdown reached the batch processor


def test_without_a_batch_processor_the_processor_is_added_as_its_own(otel: OTel) -> None:
    entries = otel.tracer_provider._active_span_processor._span_processors
    assert [type(e) for e in entries] == [SimpleSpanProcessor, ErrorCompactionProcessor]
    for _ in range(2):
        _fail(otel, "conv-simple")
    assert [s.attributes["errcompact.count"] for s in otel.spans("execute_tool lookup")] == [1, 2]  # type: ignore[index]


def test_anchors_are_registered_only_when_a_span_of_their_trace_needs_them(
    make_otel: Callable[..., OTel]
) -> None:
    otel = make_otel(batch=True)
    processor = otel.ec.processor
    assert processor is not None
    for i in range(100):  # agent runs in which no tool is called: nothing to register, nothing to forget
        with otel.tracer.start_as_current_span("invoke_agent support", attributes={
            **_AGENT, "gen_ai.conversation.id": f"quiet-{i}"
        }), otel.tracer.start_as_current_span("chat gpt-4o", attributes={"gen_ai.operation.name": "chat"}):
            pass
    assert not processor._anchors and not processor._anchor_spans
    # A tool span's end registers its trace's live anchors: the conversation recorded on the agent span
    # is the failure's, although the agent span started before anything was registered.
    _fail(otel, "conv-late")
    assert otel.ec.flush()
    (record,) = list(otel.store().records())
    assert record.conversation_id == "conv-late" and record.agent_name == "support"
    assert not processor._anchors and not processor._anchor_spans  # ended, forgotten
    assert len(processor._starts) < 100  # bounded: ended spans are dropped when registration comes


def test_started_agent_spans_are_held_up_to_the_bound_then_registered_or_dropped(
    make_otel: Callable[..., OTel]
) -> None:
    """Ended agent runs do not linger in the queue of started spans past its bound, and live ones past
    it are registered as anchors, so the queue never holds more than the bound."""
    otel = make_otel(batch=True)
    processor = otel.ec.processor
    assert processor is not None
    for i in range(3 * STARTED_ANCHORS_BOUND):
        with otel.tracer.start_as_current_span("invoke_agent support", attributes={
            **_AGENT, "gen_ai.conversation.id": f"quiet-{i}"
        }):
            pass
    assert len(processor._starts) < STARTED_ANCHORS_BOUND
    assert not processor._anchors and not processor._anchor_spans  # ended: dropped, never registered
    live = [
        otel.tracer.start_span("invoke_agent support", attributes={**_AGENT, "gen_ai.conversation.id": f"live-{i}"})
        for i in range(STARTED_ANCHORS_BOUND + 1)
    ]
    assert len(processor._starts) < STARTED_ANCHORS_BOUND
    assert processor._anchor_spans and set(processor._anchor_spans) <= set(live)  # the bound registered them
    for span in live:
        span.end()
    assert not processor._anchor_spans  # ended, forgotten


def test_force_flush_gives_both_processors_one_deadline() -> None:
    """The provider's force_flush(timeout) gave its processors one deadline in all; the fused entry does
    too: the error processor gets what the batch processor's flush left of it, not a timeout of its own."""
    import time

    from opentelemetry.sdk.trace import SpanProcessor
    from opentelemetry.sdk.trace.export import SpanExporter, SpanExportResult

    class SlowExporter(SpanExporter):  # an endpoint that takes 0.3 s to answer
        def export(self, spans: object) -> SpanExportResult:
            time.sleep(0.3)
            return SpanExportResult.SUCCESS

        def shutdown(self) -> None:
            return None

    given: list[int] = []

    class Recording(SpanProcessor):
        def force_flush(self, timeout_millis: int = 30000) -> bool:
            given.append(timeout_millis)
            return True

    provider = TracerProvider()
    batch = BatchSpanProcessor(SlowExporter())
    fused = FusedSpanProcessor(Recording(), batch)
    provider._active_span_processor._span_processors = (fused,)
    with provider.get_tracer("t").start_as_current_span("work"):
        pass
    assert provider.force_flush(1000)
    assert given and given[0] <= 750  # the batch flush took about 0.3 s of the second
    batch.shutdown()
