"""Trajectory sinks and the writer, end to end on real files and the real OTel logs SDK."""

from __future__ import annotations

import json
import logging
import sqlite3
import threading
import uuid
from pathlib import Path

import pytest
from opentelemetry.sdk._logs import LoggerProvider
from opentelemetry.sdk._logs.export import InMemoryLogRecordExporter, SimpleLogRecordProcessor
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import Status, StatusCode, format_span_id, format_trace_id

from otel_errcompact.compactor import compact_text
from otel_errcompact.sinks import (
    AmbiguousRecordId,
    JSONLSink,
    OTLPLogSink,
    SQLiteSink,
    TrajectorySink,
    TrajectoryStore,
    TrajectoryWriter,
    read_jsonl,
)
from otel_errcompact.sinks.spool import read_segment
from otel_errcompact.sinks.writer import Amendment
from otel_errcompact.trajectory import (
    DigestInfo,
    TrajectoryRecord,
    span_id_hex,
    trace_id_hex,
    utc_from_ns,
)
from tests.conftest import GateSink
from tests.realerrors import python_error

TOOL_APP = """
    import sqlite3

    def fetch_orders(conn, customer):
        return conn.execute("SELECT * FROM orders WHERE customer = ?", (customer,)).fetchall()

    def run_tool():
        conn = sqlite3.connect(":memory:")
        return fetch_orders(conn, "ada")

    run_tool()
"""

ATTR_APP = """
    class Config:
        pass

    def read_timeout(cfg):
        return cfg.timeout_seconds * 2

    read_timeout(Config())
"""


@pytest.fixture(scope="module")
def tracebacks(tmp_path_factory: pytest.TempPathFactory) -> dict[str, str]:
    return {
        "sql": python_error(tmp_path_factory.mktemp("sql"), TOOL_APP),
        "attr": python_error(tmp_path_factory.mktemp("attr"), ATTR_APP),
    }


def _raw(tb: str, **fields: object) -> TrajectoryRecord:
    last = tb.strip().splitlines()[-1]
    exc_type, _, message = last.partition(": ")
    base: dict[str, object] = dict(source="span", tool_name="orders", tool_call_id="call_1",
                                   exception_type=exc_type, exception_message=message,
                                   exception_stacktrace=tb, raw_error=tb)
    base.update(fields)
    return TrajectoryRecord.model_validate(base)


def _amend(rec: TrajectoryRecord, count: int = 1, escalation: dict[str, object] | None = None
           ) -> TrajectoryRecord:
    digest = compact_text(rec.raw_error)
    return rec.model_copy(update={"digest": DigestInfo.from_digest(digest), "count": count,
                                  "escalation": escalation})


def test_an_amendment_takes_the_queued_records_place_and_is_refused_once_taken_or_never_queued(
    tmp_path: Path, tracebacks: dict[str, str]
) -> None:
    """A later version offered through a queued record's Amendment is what the writer stores, one write;
    once the writer took the record, or when it never queued it (dropped), the offer is refused, so the
    caller submits the later version itself and nothing is lost."""
    db = tmp_path / "t.db"
    writer = TrajectoryWriter([SQLiteSink(db)], spool_dir=tmp_path / "spool", schedule_delay_s=60)
    raw = _raw(tracebacks["sql"], conversation_id="c1", scope="c1")
    amendment = Amendment()
    writer.submit_values(dict(vars(raw)), amendment=amendment)
    assert amendment.queued
    assert amendment.offer(dict(vars(_amend(raw, count=3))))  # queued, not taken: stored in its place
    assert writer.force_flush(timeout_s=5.0)
    assert writer.written == 1
    with TrajectoryStore(db) as store:
        stored = store.get(raw.record_id)
    assert stored == _amend(raw, count=3)

    taken = _raw(tracebacks["attr"], conversation_id="c1", scope="c1")
    late = Amendment()
    writer.submit_values(dict(vars(taken)), amendment=late)
    assert writer.force_flush(timeout_s=5.0)  # the writer stores the raw version first
    assert not late.offer(dict(vars(_amend(taken))))

    writer.shutdown(timeout_s=10.0)
    dropped = Amendment()
    writer.submit_values(dict(vars(_raw(tracebacks["sql"]))), amendment=dropped)  # after shutdown: dropped
    assert writer.dropped == 1 and not dropped.queued
    assert not dropped.offer(dict(vars(_amend(raw))))


def test_raw_then_amended_is_one_row_with_the_digest(tmp_path: Path, tracebacks: dict[str, str]) -> None:
    db = tmp_path / "deep" / "dir" / "trajectory.db"
    writer = TrajectoryWriter([SQLiteSink(db)])
    raw = _raw(tracebacks["sql"], conversation_id="conv-1", scope="conv-1")
    writer.submit(raw)
    assert writer.force_flush(timeout_s=5.0)
    with TrajectoryStore(db) as store:  # read-only, while the writer still has the file open
        assert store.count() == 1
        first = store.get(raw.record_id)
        assert first is not None and first.digest is None
    writer.submit(_amend(raw, count=2))
    writer.shutdown(timeout_s=10.0)

    with TrajectoryStore(db) as store:
        assert store.count() == 1
        got = store.get(raw.record_id)
        (row,) = store.list()
    assert got is not None and got.digest is not None
    assert got.digest == DigestInfo.from_digest(compact_text(tracebacks["sql"]))
    assert got.digest.type == "OperationalError" and "orders" in got.digest.cause
    assert got.raw_error == tracebacks["sql"] and got.count == 2
    assert row.error_type == "OperationalError" and row.key == got.digest.key
    assert row.digest_line == got.digest.line and row.count == 2 and row.escalated is False


def test_record_without_digest_is_stored(tmp_path: Path, tracebacks: dict[str, str]) -> None:
    db = tmp_path / "t.db"
    writer = TrajectoryWriter([SQLiteSink(db)])
    raw = _raw(tracebacks["attr"])
    writer.submit(raw)
    writer.shutdown()
    with TrajectoryStore(db) as store:
        (row,) = store.list()
        got = store.get(raw.record_id)
    assert row.digest_line is None and row.key is None
    assert row.error_type == "AttributeError"  # from exception.type when there is no digest yet
    assert got == raw


def _submit_from_threads(writer: TrajectoryWriter, template: TrajectoryRecord, *, threads: int,
                         per_thread: int) -> list[list[str]]:
    """Submit ``per_thread`` copies of ``template`` (fresh ids, a scope per thread) from ``threads``
    threads started together; the ids each thread submitted."""
    start = threading.Barrier(threads)
    ids: list[list[str]] = [[] for _ in range(threads)]

    def produce(n: int) -> None:
        start.wait()
        for _ in range(per_thread):
            rec = template.model_copy(update={"record_id": uuid.uuid4().hex, "scope": f"t{n}"})
            ids[n].append(rec.record_id)
            writer.submit(rec)

    pool = [threading.Thread(target=produce, args=(n,)) for n in range(threads)]
    for t in pool:
        t.start()
    for t in pool:
        t.join()
    return ids


def test_ten_thousand_records_from_eight_threads_all_arrive(tmp_path: Path,
                                                           tracebacks: dict[str, str]) -> None:
    db, jl = tmp_path / "t.db", tmp_path / "t.jsonl"
    writer = TrajectoryWriter([SQLiteSink(db), JSONLSink(jl)])
    template = _raw(tracebacks["sql"])
    per_thread = 1250
    ids = _submit_from_threads(writer, template, threads=8, per_thread=per_thread)
    writer.shutdown(timeout_s=60.0)  # no force_flush: shutdown alone must drain everything

    assert writer.dropped == 0
    with TrajectoryStore(db) as store:
        assert store.count() == 10_000
        assert len(store.list(limit=20_000, conversation="t3")) == per_thread
    with sqlite3.connect(db) as conn:
        stored = {r[0] for r in conn.execute("SELECT record_id FROM trajectory")}
    assert stored == {i for chunk in ids for i in chunk}
    assert len(read_jsonl(jl)) == 10_000


def test_a_failing_sink_does_not_stop_the_others(tmp_path: Path, tracebacks: dict[str, str],
                                                 caplog: pytest.LogCaptureFixture) -> None:
    broken_db, jl = tmp_path / "broken.db", tmp_path / "ok.jsonl"
    broken = SQLiteSink(broken_db)
    with sqlite3.connect(broken_db) as conn:  # another process dropped the table under us
        conn.execute("DROP TABLE trajectory")
    writer = TrajectoryWriter([broken, JSONLSink(jl)])
    records = [_raw(tracebacks["attr"]) for _ in range(5)]
    with caplog.at_level(logging.WARNING, logger="otel_errcompact"):
        for rec in records:
            writer.submit(rec)
        assert not writer.force_flush()  # truthful: a sink refused the batch
        assert writer.failed == 5
        writer.submit(_amend(records[0]))
        writer.shutdown()
    assert {r.record_id for r in read_jsonl(jl)} == {r.record_id for r in records}
    assert writer.sink_failures >= 2
    failures = [r for r in caplog.records if "failed to write" in r.getMessage()]
    assert len(failures) == 1  # rate-limited: once per interval, not once per batch
    assert failures[0].exc_info is not None
    assert "no such table" in str(failures[0].exc_info[1])


def test_store_list_filters_and_get_by_unique_prefix(tmp_path: Path, tracebacks: dict[str, str]) -> None:
    db = tmp_path / "t.db"
    writer = TrajectoryWriter([SQLiteSink(db)])
    ids = ["abc1" + uuid.uuid4().hex[4:], "abc2" + uuid.uuid4().hex[4:], "def0" + uuid.uuid4().hex[4:]]
    recs = [
        _amend(_raw(tracebacks["sql"], record_id=ids[0], conversation_id="c1", scope="c1")),
        _amend(_raw(tracebacks["attr"], record_id=ids[1], conversation_id="c1", scope="c1"),
               count=3, escalation={"reason": "consecutive", "threshold": 3}),
        _amend(_raw(tracebacks["sql"], record_id=ids[2], conversation_id="c2", scope="c2")),
    ]
    for rec in recs:
        writer.submit(rec)
    writer.shutdown()

    with TrajectoryStore(db) as store:
        assert store.count() == 3
        newest_first = [r.record_id for r in store.list()]
        assert newest_first == ids[::-1]
        assert [r.record_id for r in store.list(limit=1)] == [ids[2]]
        assert {r.record_id for r in store.list(conversation="c1")} == set(ids[:2])
        sql_key = recs[0].digest.key if recs[0].digest else ""
        assert sql_key != (recs[1].digest.key if recs[1].digest else "")
        assert {r.record_id for r in store.list(key=sql_key[:6])} == {ids[0], ids[2]}
        assert {r.record_id for r in store.list(conversation="c2", key=sql_key)} == {ids[2]}
        assert [r.escalated for r in store.list(conversation="c1")] == [True, False]

        got = store.get("ABC2")
        assert got is not None and got.record_id == ids[1] and got.escalation is not None
        assert got.escalation["threshold"] == 3
        with pytest.raises(AmbiguousRecordId) as err:
            store.get("abc")
        assert set(err.value.candidates) == set(ids[:2])
        assert store.get("ffff") is None
        assert store.get(ids[2]) == recs[2]


def test_store_refuses_a_missing_file_and_a_newer_layout(tmp_path: Path) -> None:
    with pytest.raises(FileNotFoundError):
        TrajectoryStore(tmp_path / "nope.db")
    assert not (tmp_path / "nope.db").exists()
    db = tmp_path / "t.db"
    SQLiteSink(db).close()
    with sqlite3.connect(db) as conn:
        conn.execute("UPDATE errcompact_schema SET version = 99 WHERE component = 'trajectory'")
    with pytest.raises(RuntimeError, match="version 99"):
        SQLiteSink(db)


def test_jsonl_later_line_supersedes(tmp_path: Path, tracebacks: dict[str, str]) -> None:
    jl = tmp_path / "logs" / "t.jsonl"
    writer = TrajectoryWriter([JSONLSink(jl)])
    raw, other = _raw(tracebacks["sql"]), _raw(tracebacks["attr"])
    writer.submit(raw)
    writer.submit(other)
    assert writer.force_flush()
    writer.submit(_amend(raw, count=4))
    writer.shutdown()

    lines = jl.read_text(encoding="utf-8").splitlines()
    assert [json.loads(line)["record_id"] for line in lines] == [raw.record_id, other.record_id,
                                                                 raw.record_id]
    records = read_jsonl(jl)
    assert [r.record_id for r in records] == [raw.record_id, other.record_id]
    assert records[0].count == 4 and records[0].digest is not None and records[1].digest is None


def test_jsonl_skips_a_truncated_last_line(tmp_path: Path, tracebacks: dict[str, str],
                                           caplog: pytest.LogCaptureFixture) -> None:
    jl = tmp_path / "t.jsonl"
    sink = JSONLSink(jl)
    whole, cut = _raw(tracebacks["sql"]), _raw(tracebacks["attr"])
    sink.write([whole])
    sink.close()
    with open(jl, "ab") as fh:  # a process killed in the middle of a write
        fh.write(cut.to_json().encode()[:100])
    with caplog.at_level(logging.WARNING, logger="otel_errcompact"):
        assert read_jsonl(jl) == [whole]
    assert "skipped 1 line" in caplog.text


def test_coalescing_within_a_batch_writes_the_last_version_once(tmp_path: Path,
                                                               tracebacks: dict[str, str]) -> None:
    jl = tmp_path / "t.jsonl"
    writer = TrajectoryWriter([JSONLSink(jl)], schedule_delay_s=30.0)
    raw = _raw(tracebacks["sql"])
    writer.submit(raw)
    writer.submit(_amend(raw, count=1))
    writer.submit(_amend(raw, count=2))
    writer.shutdown()
    (line,) = jl.read_text(encoding="utf-8").splitlines()
    assert json.loads(line)["count"] == 2
    assert writer.written == 1


def _failed_tool_span(tb: str) -> ReadableSpan:
    """A real execute_tool span that ended in ERROR with a real exception event."""
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    tracer = provider.get_tracer("agent")
    with tracer.start_as_current_span("invoke_agent"), tracer.start_as_current_span(
        "execute_tool orders", attributes={"gen_ai.operation.name": "execute_tool",
                                           "gen_ai.tool.name": "orders"},
        record_exception=False, set_status_on_exception=False,
    ) as span:
        try:
            sqlite3.connect(":memory:").execute("SELECT * FROM orders")
        except sqlite3.OperationalError as exc:
            span.record_exception(exc)
            span.set_status(Status(StatusCode.ERROR, str(exc)))
    provider.shutdown()
    return next(s for s in exporter.get_finished_spans() if s.name == "execute_tool orders")


def test_otlp_log_records_are_correlated_with_the_span(tracebacks: dict[str, str]) -> None:
    span = _failed_tool_span(tracebacks["sql"])
    ctx = span.get_span_context()
    assert ctx is not None
    event = span.events[0]
    assert event.attributes is not None
    raw = TrajectoryRecord(
        source="span", trace_id=trace_id_hex(ctx.trace_id), span_id=span_id_hex(ctx.span_id),
        tool_name="orders",
        tool_call_id="call_7", conversation_id="conv-9", span_name=span.name,
        status_description=span.status.description,
        exception_type=str(event.attributes["exception.type"]),
        exception_message=str(event.attributes["exception.message"]),
        exception_stacktrace=str(event.attributes["exception.stacktrace"]),
        raw_error=str(event.attributes["exception.stacktrace"]),
        started_at=utc_from_ns(span.start_time), ended_at=utc_from_ns(span.end_time),
        attributes=dict(span.attributes or {}),
    )
    exporter = InMemoryLogRecordExporter()  # type: ignore[no-untyped-call]
    provider = LoggerProvider()
    provider.add_log_record_processor(SimpleLogRecordProcessor(exporter))
    writer = TrajectoryWriter([OTLPLogSink(provider)])
    writer.submit(raw)
    assert writer.force_flush()
    writer.submit(_amend(raw))
    writer.shutdown()

    logs = exporter.get_finished_logs()
    assert len(logs) == 2
    for log in logs:
        lr = log.log_record
        assert lr.event_name == "errcompact.trajectory"
        assert format_trace_id(lr.trace_id or 0) == raw.trace_id == format_trace_id(ctx.trace_id)
        assert format_span_id(lr.span_id or 0) == raw.span_id == format_span_id(ctx.span_id)
        assert lr.severity_text == "ERROR"
        assert span.end_time is not None and lr.timestamp == span.end_time // 1000 * 1000
        attrs = dict(lr.attributes or {})
        assert attrs["errcompact.record_id"] == raw.record_id
        assert attrs["gen_ai.tool.name"] == "orders" and attrs["gen_ai.tool.call.id"] == "call_7"
        assert attrs["gen_ai.conversation.id"] == "conv-9"
        assert attrs["exception.type"] == event.attributes["exception.type"] == "sqlite3.OperationalError"
        assert "no such table: orders" in str(attrs["exception.message"])
        assert isinstance(lr.body, dict) and lr.body["record_id"] == raw.record_id
        assert lr.body["raw_error"] == raw.raw_error
    amended = logs[1].log_record
    assert amended.attributes is not None and amended.body is not None
    assert amended.attributes["errcompact.digest"] == compact_text(raw.raw_error).line
    assert amended.attributes["errcompact.key"] == compact_text(raw.raw_error).key
    # error.type as the span's exception names it; the digest's type beside it
    assert amended.attributes["error.type"] == "sqlite3.OperationalError"
    assert amended.attributes["errcompact.error_type"] == "OperationalError"
    assert isinstance(amended.body, dict) and amended.body["digest"]["type"] == "OperationalError"
    assert "errcompact.digest" not in (logs[0].log_record.attributes or {})


def test_otlp_record_without_span_has_no_ids(tracebacks: dict[str, str]) -> None:
    exporter = InMemoryLogRecordExporter()  # type: ignore[no-untyped-call]
    provider = LoggerProvider()
    provider.add_log_record_processor(SimpleLogRecordProcessor(exporter))
    tracer_provider = TracerProvider()
    sink = OTLPLogSink(provider)
    # Even with some unrelated span current on this thread, the record must not borrow its ids.
    with tracer_provider.get_tracer("x").start_as_current_span("unrelated"):
        sink.write([_raw(tracebacks["attr"], source="tool")])
    (log,) = exporter.get_finished_logs()
    assert not log.log_record.trace_id and not log.log_record.span_id


def test_a_megabyte_raw_error_is_kept_byte_for_byte(tmp_path: Path) -> None:
    tb = python_error(tmp_path, """
        import json

        def save(report):
            raise ValueError("report rejected: " + json.dumps(report, ensure_ascii=False))

        save({"rows": [{"id": i, "name": "naïve café ✓", "tab": "\\t"} for i in range(20_000)]})
    """)
    assert len(tb.encode("utf-8")) > 1_000_000
    db, jl = tmp_path / "t.db", tmp_path / "t.jsonl"
    exporter = InMemoryLogRecordExporter()  # type: ignore[no-untyped-call]
    provider = LoggerProvider()
    provider.add_log_record_processor(SimpleLogRecordProcessor(exporter))
    writer = TrajectoryWriter([SQLiteSink(db), JSONLSink(jl), OTLPLogSink(provider)])
    raw = _raw(tb)
    writer.submit(raw)
    writer.submit(_amend(raw))
    writer.shutdown()

    with TrajectoryStore(db) as store:
        got = store.get(raw.record_id)
    assert got is not None and got.raw_error.encode("utf-8") == tb.encode("utf-8")
    assert got.digest is not None and got.digest.type == "ValueError"
    assert len(got.digest.line) < 400
    (from_jsonl,) = read_jsonl(jl)
    assert from_jsonl.raw_error.encode("utf-8") == tb.encode("utf-8")
    (log,) = exporter.get_finished_logs()
    body = log.log_record.body
    assert isinstance(body, dict) and body["raw_error_chars"] == len(tb)  # OTLP gets a bounded copy
    assert len(body["raw_error"]) < 66_000 and "characters omitted" in body["raw_error"]
    assert body["raw_error"].startswith(tb[:1000]) and body["raw_error"].endswith(tb[-1000:])
    assert log.log_record.attributes is not None
    assert len(str(log.log_record.attributes["exception.stacktrace"])) < 66_000


def test_overflow_drops_new_records_counts_and_warns(tmp_path: Path, tracebacks: dict[str, str],
                                                     caplog: pytest.LogCaptureFixture) -> None:
    gate = GateSink()
    assert isinstance(gate, TrajectorySink)
    db = tmp_path / "t.db"
    writer = TrajectoryWriter([gate, SQLiteSink(db)], max_queue_size=10, max_batch_size=4,
                              schedule_delay_s=0.01, max_block_s=0.05)
    first = _raw(tracebacks["sql"])
    writer.submit(first)
    assert gate.entered.wait(10)  # the worker is now busy with the first batch
    queued = [_raw(tracebacks["sql"]) for _ in range(10)]
    overflow = [_raw(tracebacks["attr"]) for _ in range(5)]
    with caplog.at_level(logging.WARNING, logger="otel_errcompact"):
        for rec in queued + overflow:
            writer.submit(rec)
        assert writer.dropped == 5
        gate.release.set()
        writer.shutdown()
    assert gate.seen == [first.record_id] + [r.record_id for r in queued]  # oldest kept, order kept
    with TrajectoryStore(db) as store:
        assert store.count() == 11
    assert "dropped 5 record(s)" in caplog.text


def test_submit_never_raises_and_shutdown_is_idempotent(tmp_path: Path,
                                                        tracebacks: dict[str, str]) -> None:
    db = tmp_path / "t.db"
    writer = TrajectoryWriter([SQLiteSink(db)])
    writer.submit("not a record")  # type: ignore[arg-type]
    writer.submit(_raw(tracebacks["sql"]))
    writer.shutdown()
    writer.shutdown()
    writer.submit(_raw(tracebacks["sql"]))  # after shutdown: dropped, not raised
    assert writer.dropped == 2
    assert not writer.force_flush(timeout_s=0.5)  # truthful: two records were dropped
    with TrajectoryStore(db) as store:
        assert store.count() == 1


def test_spool_lines_written_by_eight_threads_at_once_stay_whole(tmp_path: Path,
                                                               tracebacks: dict[str, str]) -> None:
    """Agent threads append to the spool outside the writer's lock: every line must still be whole, every
    record stored, and a segment being written to never deleted under the writer (small segments force
    rotations and releases during the run)."""
    db, spool_dir = tmp_path / "t.db", tmp_path / "t.db-spool"
    gate = GateSink()
    writer = TrajectoryWriter([gate, SQLiteSink(db)], spool_dir=spool_dir, max_batch_size=64)
    assert writer._spool is not None
    writer._spool.segment_bytes = 16 * 1024
    template = _raw(tracebacks["sql"])
    per_thread = 150
    ids = _submit_from_threads(writer, template, threads=8, per_thread=per_thread)
    # The worker is held inside its first batch: everything since is only in the spool.
    spooled: list[str] = []
    for segment in sorted(spool_dir.glob("*.spool")):
        # The reader recovery uses: a mapped segment holds zero bytes where its mapping is unused.
        for lines in read_segment(segment):
            for line in lines:
                spooled.append(TrajectoryRecord.from_storage_json(line).record_id)  # raises on a cut line
    submitted = {i for chunk in ids for i in chunk}
    assert set(spooled) == submitted and len(spooled) == len(submitted)
    gate.release.set()
    writer.shutdown(timeout_s=60.0)
    assert writer.lost == 0 and writer.spool_failures == 0
    with sqlite3.connect(db) as conn:
        assert {r[0] for r in conn.execute("SELECT record_id FROM trajectory")} == submitted
    assert not spool_dir.exists() or not list(spool_dir.glob("*.spool"))
