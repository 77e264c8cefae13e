"""Failed spans whose digest is made after the span ended (``otel_errcompact.deferred``).

Behind the SDK's ``BatchSpanProcessor``, a failed tool span's digest is made by the digest thread, or
by whoever needs it first. The tests of those other ways hold that thread back (the ``held`` fixture:
its ``wake`` does nothing), so that they are the only ones: a read of the history, the export of a batch,
a flush, shutdown. Every failure is a real exception from real code, through the real SDK.
"""

from __future__ import annotations

import collections
import gc
import logging
import time
from collections.abc import Callable
from typing import Any

import pytest
from opentelemetry import trace
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import StatusCode

import otel_errcompact
from otel_errcompact import ErrorBudgetExceeded, Thresholds
from otel_errcompact import deferred as deferred_module
from otel_errcompact.capture import FailureCapture, is_capture_line, record_of_spool_line
from otel_errcompact.sinks import writer as writer_module
from otel_errcompact.sinks.sqlite import TrajectoryStore
from tests.conftest import OTel, run_threads, spooled_lines
from tests.test_processor import agent, exported, failing_tool_span, ok_tool_span, parse_config


def _pending(otel: OTel) -> int:
    processor = otel.ec.processor
    assert processor is not None and processor._gate is not None
    return len(processor._gate.pending)


def test_only_batch_processors_let_the_digest_wait(make_otel: Callable[..., OTel]) -> None:
    simple = make_otel()
    assert simple.ec.processor is not None and simple.ec.processor._gate is None
    simple.close()
    batch = make_otel(batch=True)
    assert batch.ec.processor is not None and batch.ec.processor._gate is not None


def test_a_synchronous_exporter_added_later_sees_the_digest_at_once(
    make_otel: Callable[..., OTel], held: None
) -> None:
    otel = make_otel(batch=True)
    late = InMemorySpanExporter()
    otel.tracer_provider.add_span_processor(SimpleSpanProcessor(late))
    with agent(otel.tracer, "c-late"):
        failing_tool_span(otel.tracer)
    (tool,) = [s for s in late.get_finished_spans() if s.name == "execute_tool lookup"]
    assert (tool.attributes or {})["errcompact.digest"].startswith("[KeyError]")
    assert _pending(otel) == 0


def test_the_raw_record_is_spooled_before_end_returns_and_superseded_by_its_digest(
    make_otel: Callable[..., OTel], held: None
) -> None:
    otel = make_otel(batch=True)
    with agent(otel.tracer, "c-spool"):
        span, _ = failing_tool_span(otel.tracer)
    assert _pending(otel) == 1  # nothing has made the digest yet
    lines = spooled_lines(otel)
    assert all(is_capture_line(line) for line in lines)  # spooled as its capture: laid out off the agent's thread
    spooled = [record_of_spool_line(line)[0] for line in lines]
    assert [r.digest for r in spooled] == [None]
    assert "user_id" in spooled[0].raw_error
    (record,) = otel.records()  # flush: the digest is made, the record superseded (same id, one row)
    assert record.record_id == spooled[0].record_id
    assert record.digest is not None and record.digest.line.startswith("[KeyError]")
    assert record.count == 1
    assert (exported(otel, span).attributes or {})["errcompact.key"] == record.digest.key


def test_one_submission_per_failure_and_the_stored_line_made_once(
    make_otel: Callable[..., OTel], held: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A failure is submitted to the writer once, as its capture, and spooled once: its digest reaches the
    queued capture through its amendment, and the stored record's line is made once, by the writer, from
    the record with its digest. The spooled capture lays out to the same record, without the digest."""
    encoded: list[object] = []
    captured: list[str] = []
    submitted: list[object] = []
    real = writer_module.storage_line
    real_capture = writer_module.TrajectoryWriter.submit_capture
    real_submit = writer_module.TrajectoryWriter.submit_values

    def counted(values: dict[str, object]) -> bytes | None:
        encoded.append(values["digest"])
        return real(values)

    def submit_capture(self: writer_module.TrajectoryWriter, capture: FailureCapture, *a: Any, **kw: Any) -> None:
        captured.append(capture.record_id)
        real_capture(self, capture, *a, **kw)

    def submit_values(self: writer_module.TrajectoryWriter, values: dict[str, Any], **kw: Any) -> bytes | None:
        submitted.append(values["record_id"])
        return real_submit(self, values, **kw)

    monkeypatch.setattr(writer_module, "storage_line", counted)
    monkeypatch.setattr(writer_module.TrajectoryWriter, "submit_capture", submit_capture)
    monkeypatch.setattr(writer_module.TrajectoryWriter, "submit_values", submit_values)
    otel = make_otel(batch=True, schedule_delay_s=60)  # the writer takes the record at the flush, not before
    with agent(otel.tracer, "c-once"):
        failing_tool_span(otel.tracer)
    assert encoded == []  # nothing was laid out or encoded as a record on the agent's thread
    processor = otel.ec.processor
    assert processor is not None
    processor.settle()  # the digest is made and handed to the queued capture
    (line,) = spooled_lines(otel)
    raw, _ = record_of_spool_line(line)
    assert raw.digest is None
    (record,) = otel.records()
    assert captured == [raw.record_id] and submitted == []
    assert len(encoded) == 1 and encoded[0] is not None  # the stored line, made once, with the digest
    assert record.record_id == raw.record_id and record.digest is not None and record.count == 1
    assert record.model_dump(exclude={"digest", "count", "escalation"}) == raw.model_dump(
        exclude={"digest", "count", "escalation"})
    store = TrajectoryStore(otel.sqlite_path)
    try:
        (stored_json,) = [row[0] for row in store._conn.execute("SELECT record FROM trajectory")]
    finally:
        store.close()
    assert stored_json.encode() + b"\n" == real(record.__dict__)


def test_a_digest_made_after_the_writer_took_the_raw_record_is_submitted_as_its_later_version(
    make_otel: Callable[..., OTel], held: None
) -> None:
    """When the writer stored the raw record before the digest was made (a flush, a full batch), the
    record with its digest is submitted and supersedes it: the store ends with the digest either way."""
    otel = make_otel(batch=True)
    with agent(otel.tracer, "c-late-digest"):
        failing_tool_span(otel.tracer)
    writer = otel.ec.writer
    assert writer is not None and writer.force_flush()  # the raw record is stored, its digest not made yet
    store = TrajectoryStore(otel.sqlite_path)
    try:
        (summary,) = store.list()
        raw = store.get(summary.record_id)
    finally:
        store.close()
    assert raw is not None and raw.digest is None and _pending(otel) == 1
    written = writer.written
    (record,) = otel.records()  # flush: the digest is made and submitted, the row upserted
    assert record.record_id == raw.record_id and record.digest is not None
    assert record.digest.line.startswith("[KeyError]")
    assert writer.written == written + 1


def test_an_export_makes_the_digests_it_would_otherwise_send_without(
    make_otel: Callable[..., OTel], held: None
) -> None:
    otel = make_otel(batch=True)
    with agent(otel.tracer, "c-export"):
        first, _ = failing_tool_span(otel.tracer)
        second, _ = failing_tool_span(otel.tracer)
    assert _pending(otel) == 2
    assert otel.tracer_provider.force_flush(30_000)  # the batch's exporter waits for them
    assert _pending(otel) == 0
    counts = [(exported(otel, s).attributes or {})["errcompact.count"] for s in (first, second)]
    assert counts == [1, 2]


def test_successes_between_deferred_failures_count_in_their_order(
    make_otel: Callable[..., OTel], held: None
) -> None:
    """fail, fail, succeed, fail, fail: never three in a row, so no breach, though four failures wait
    in the queue with the success between them when the history is first read."""
    otel = make_otel(batch=True, thresholds=Thresholds(consecutive=3, budget=None))
    with agent(otel.tracer, "c-order"):
        failing_tool_span(otel.tracer)
        failing_tool_span(otel.tracer)
        ok_tool_span(otel.tracer)
        failing_tool_span(otel.tracer)
        failing_tool_span(otel.tracer)
        assert _pending(otel) == 4
        assert otel.ec.history.escalation("c-order") is None
        assert _pending(otel) == 0
        assert "(×4)" in otel.ec.context("c-order")
        failing_tool_span(otel.tracer)  # the third in a row
        with pytest.raises(ErrorBudgetExceeded):
            otel.ec.history.check("c-order")


def test_the_block_and_the_halt_check_count_what_is_queued(
    make_otel: Callable[..., OTel], held: None
) -> None:
    otel = make_otel(batch=True)
    with agent(otel.tracer, "c-read"):
        failing_tool_span(otel.tracer, parse_config, ("{not json",))
        block = otel.ec.context("c-read")
        assert "[JSONDecodeError]" in block
        failing_tool_span(otel.tracer, parse_config, ("{not json",))
        failing_tool_span(otel.tracer, parse_config, ("{not json",))
        with pytest.raises(ErrorBudgetExceeded):
            otel.ec.history.check("c-read")


def test_an_escalation_counted_after_its_agent_span_ended_is_still_on_it(
    make_otel: Callable[..., OTel], held: None
) -> None:
    otel = make_otel(batch=True, thresholds=Thresholds(consecutive=3, budget=None, action="human"))
    with agent(otel.tracer, "c-late-event") as agent_span:
        for _ in range(3):
            failing_tool_span(otel.tracer)
    assert _pending(otel) == 3  # the agent span ended first
    events = [e for e in exported(otel, agent_span).events if e.name == "errcompact.escalation"]
    assert len(events) == 1
    assert (events[0].attributes or {})["errcompact.reason"] == "consecutive"


@pytest.mark.parametrize("moment", ["found live", "tested live"])
def test_an_agent_span_that_ends_while_its_escalation_is_added_still_carries_it(
    make_otel: Callable[..., OTel], held: None, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture,
    moment: str,
) -> None:
    """The digest thread adds the escalation while the agent's thread may end the agent span: here the
    span ends at the worst moments, right after the processor took it as the span the escalation goes
    on, or right after it asked the span whether it is still recording. The event must not be dropped,
    and the SDK must not log its ended-span warning into the host's logs."""
    otel = make_otel(batch=True, thresholds=Thresholds(consecutive=3, budget=None, action="human"))
    processor = otel.ec.processor
    assert processor is not None
    agent_span = otel.tracer.start_span(
        "invoke_agent support",
        attributes={"gen_ai.operation.name": "invoke_agent", "gen_ai.conversation.id": "c-race"},
    )
    with trace.use_span(agent_span):
        for _ in range(3):
            failing_tool_span(otel.tracer)
    if moment == "found live":
        look_up = processor._deferred_target

        def found_then_ended(failure: Any) -> Any:
            found = look_up(failure)
            assert found is agent_span and found.end_time is None
            agent_span.end()
            return found

        monkeypatch.setattr(processor, "_deferred_target", found_then_ended)
    else:
        recording = agent_span.is_recording

        def tested_then_ended() -> bool:
            live = recording()
            agent_span.end()
            return live

        monkeypatch.setattr(agent_span, "is_recording", tested_then_ended)
    with caplog.at_level(logging.WARNING):
        processor.settle()  # the failures are counted here, the escalation with them
        if agent_span.end_time is None:  # not ended by the moment above
            agent_span.end()
    assert [r.getMessage() for r in caplog.records if "ended span" in r.getMessage()] == []
    events = [e for e in exported(otel, agent_span).events if e.name == "errcompact.escalation"]
    assert len(events) == 1
    assert (events[0].attributes or {})["errcompact.reason"] == "consecutive"


@pytest.mark.parametrize("still_open", ["request root span", "sibling agent span"])
def test_an_escalation_counted_after_its_agent_span_ended_is_on_it_while_other_anchors_are_open(
    make_otel: Callable[..., OTel], held: None, still_open: str
) -> None:
    """The agent span ends before the failures are counted, while another span that could take the
    event is still open: the web request's root span around the agent (it writes the response), or
    another agent of the trace (a fan-out). The breach is an event on the agent span whose tool failed,
    as it is when the digest is made inside ``span.end()``, and on no other span."""
    otel = make_otel(batch=True, thresholds=Thresholds(consecutive=3, budget=None, action="human"))
    tracer = otel.tracer
    with tracer.start_as_current_span("POST /chat") as root:
        other = None
        if still_open == "sibling agent span":
            writer = {"gen_ai.operation.name": "invoke_agent", "gen_ai.agent.name": "writer"}
            other = tracer.start_span("invoke_agent writer", attributes=writer)
        with agent(tracer, None, name="support") as agent_span:
            for _ in range(3):
                failing_tool_span(tracer)
        assert _pending(otel) == 3  # the agent span ended first
        processor = otel.ec.processor
        assert processor is not None
        processor.settle()  # counted now, the root span (and the other agent's) still open
        assert _pending(otel) == 0
        if other is not None:
            other.end()
    events = [e for e in exported(otel, agent_span).events if e.name == "errcompact.escalation"]
    assert len(events) == 1
    assert (events[0].attributes or {})["errcompact.reason"] == "consecutive"
    assert [e.name for e in exported(otel, root).events] == []
    if other is not None:
        assert [e.name for e in exported(otel, other).events] == []


def test_a_halted_root_that_ended_before_the_breach_was_counted_is_exported_as_an_error(
    make_otel: Callable[..., OTel], held: None
) -> None:
    otel = make_otel(batch=True, thresholds=Thresholds(consecutive=3, budget=None))
    with agent(otel.tracer, "c-root") as root:
        for _ in range(3):
            failing_tool_span(otel.tracer)
    assert _pending(otel) == 3
    status = exported(otel, root).status
    assert status.status_code is StatusCode.ERROR
    assert "error threshold breached" in (status.description or "")


def test_shutdown_makes_every_digest(make_otel: Callable[..., OTel], held: None) -> None:
    otel = make_otel(batch=True)
    with agent(otel.tracer, "c-shutdown"):
        failing_tool_span(otel.tracer)
    assert _pending(otel) == 1
    otel.ec.shutdown()
    with TrajectoryStore(otel.sqlite_path) as store:
        (record,) = store.records()
    assert record.digest is not None and record.digest.line.startswith("[KeyError]")


_NO_EXPORT_MS = 600_000
"""An export delay no test waits for: only the digest thread can make the digests meanwhile (an
export makes the pending ones first, see ExportGate.wait_for)."""


def _made_without_a_reader(otel: OTel) -> bool:
    """The digest thread made every pending digest within 10 s (with exports held off)."""
    processor = otel.ec.processor
    assert processor is not None and processor._gate is not None
    deadline = time.monotonic() + 10
    while processor._gate.pending and time.monotonic() < deadline:
        time.sleep(0.005)
    return not processor._gate.pending


def test_the_digest_thread_makes_them_without_any_reader(make_otel: Callable[..., OTel]) -> None:
    otel = make_otel(batch=True, export_delay_ms=_NO_EXPORT_MS)
    with agent(otel.tracer, "c-thread"):
        failing_tool_span(otel.tracer)
    assert _made_without_a_reader(otel)


def test_the_digest_thread_wakes_again_for_each_failure_after_it_went_idle(
    make_otel: Callable[..., OTel], caplog: pytest.LogCaptureFixture
) -> None:
    """Woken once per quiet spell: a failure after the thread made the last one and went back to
    waiting wakes it again, and failures on several threads at once wake it without an error."""
    otel = make_otel(batch=True, export_delay_ms=_NO_EXPORT_MS)
    for n in range(3):
        with agent(otel.tracer, f"c-idle-{n}"):
            failing_tool_span(otel.tracer)
        assert _made_without_a_reader(otel), n

    def fail_five(_: int) -> None:
        for _ in range(5):
            failing_tool_span(otel.tracer)

    assert run_threads(fail_five, 4) == []
    assert _made_without_a_reader(otel)
    assert len(otel.records()) == 23
    assert not [r for r in caplog.records if r.name == "otel_errcompact" and r.levelno >= logging.WARNING]


def test_a_second_init_on_the_same_provider_gets_the_export_wait(
    make_otel: Callable[..., OTel], held: None
) -> None:
    first = make_otel(batch=True)
    provider, exporter = first.tracer_provider, first.span_exporter
    first.ec.shutdown()
    again = otel_errcompact.init(tracer_provider=provider, sqlite_path=first.sqlite_path.with_name("again.db"))
    try:
        tracer = provider.get_tracer("tests.again")
        with agent(tracer, "c-again"):
            span, _ = failing_tool_span(tracer)
        assert again.processor is not None and again.processor._gate is not None
        assert len(again.processor._gate.pending) == 1
        assert provider.force_flush(30_000)
        (tool,) = [s for s in exporter.get_finished_spans() if s.context.span_id == span.get_span_context().span_id]
        assert (tool.attributes or {})["errcompact.digest"].startswith("[KeyError]")
    finally:
        again.shutdown()


@pytest.mark.parametrize("shared", ["deque", "dict values"])
def test_copying_the_queue_survives_a_collection_that_appends_to_it(shared: str) -> None:
    """The digest thread copies the history's queue, and the export thread the pending failures, while
    agent threads append to them. A garbage collection during the copy runs Python code (finalizers,
    ``gc.callbacks``), in which another thread may append: the copy must not raise then. ``tuple()``
    raises at some collection thresholds here (the control); ``deferred._copy`` at none."""
    items: Any = collections.deque(range(100)) if shared == "deque" else {i: i for i in range(100)}

    def grow(phase: str, info: dict[str, int]) -> None:
        if phase == "start":
            if shared == "deque":
                items.append(len(items))
            else:
                items[len(items) + 1_000] = None

    def raised(copy: Callable[[Any], object]) -> int:
        count = 0
        thresholds = gc.get_threshold()
        gc.callbacks.append(grow)
        try:
            for threshold in range(1, 13):
                gc.collect()
                gc.set_threshold(threshold)
                try:
                    copy(items if shared == "deque" else items.values())
                except RuntimeError:
                    count += 1
                finally:
                    gc.set_threshold(*thresholds)
        finally:
            gc.callbacks.remove(grow)
        return count

    assert raised(tuple) > 0  # the control: a collection does fall inside the copy here
    assert raised(deferred_module._copy) == 0
