"""Trajectory writer throughput, what it costs the agent's thread, and a 10 MB error end to end.

Run from the repository root::

    python benchmarks/bench_trajectory.py [N]

For N records (default 20,000) carrying a real ~2 KB Python traceback, it measures

* records/second from the first ``submit`` until ``shutdown`` has returned (everything stored), through
  SQLiteSink, JSONLSink, both, SQLite with the spool (the ``init()`` default), and the raw + amended
  pattern (2 submissions per failure); variants are interleaved round by round (3 rounds, median), so a
  busy machine weighs on all of them alike;
* what the caller pays per failure on its own thread: building the record, ``submit`` without and with
  the spool (the append that makes the record survive ``kill -9``), interleaved record by record;
* a 10 MB error through the whole ``init()`` pipeline in a fresh process: peak RSS (over the process
  that has read the text), store size on disk, how long until it is stored, and ``shutdown()``.
"""

from __future__ import annotations

import os
import platform
import resource
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Callable
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from benchmarks._machine import cpu_model
from otel_errcompact.compactor import compact_text
from otel_errcompact.sinks import JSONLSink, SQLiteSink, TrajectorySink, TrajectoryWriter
from otel_errcompact.trajectory import DigestInfo, TrajectoryRecord
from tests.realerrors import python_error

APP = """
    import json

    class Repository:
        def __init__(self, rows):
            self.rows = rows

        def find(self, key):
            return self.rows[key]

    def load_settings(path):
        with open(path, encoding="utf-8") as fh:
            return json.load(fh)

    def handler(request):
        repo = Repository({"alpha": 1, "beta": 2})
        try:
            return repo.find(request["customer_id"])
        except KeyError as exc:
            settings = load_settings("/nonexistent/settings-for-" + request["customer_id"] + ".json")
            raise RuntimeError("lookup failed for %r with settings %r" % (request, settings)) from exc

    def dispatch(requests):
        return [handler(r) for r in requests]

    def run_tool(name, requests, depth=6):
        if depth:
            return run_tool(name, requests, depth - 1)
        return dispatch(requests)

    run_tool("lookup", [{"customer_id": "cust-%04d" % i, "payload": "x" * 40} for i in range(3)])
"""


def _make(tb: str, i: int, trace_id: str, span_id: str) -> TrajectoryRecord:
    """What the processor builds per failed span (record_id and recorded_at left to their defaults)."""
    return TrajectoryRecord(
        source="span", scope=f"conv-{i % 50}",
        trace_id=trace_id, span_id=span_id, conversation_id=f"conv-{i % 50}",
        agent_name="planner", tool_name="lookup", tool_call_id=f"call_{i}",
        tool_arguments={"customer_id": f"cust-{i:04d}"}, span_name="execute_tool lookup",
        exception_type="RuntimeError", exception_message="lookup failed", exception_stacktrace=tb,
        raw_error=tb, attributes={"gen_ai.operation.name": "execute_tool", "gen_ai.tool.name": "lookup"},
        resource={"service.name": "bench-agent"},
    )


def _pct(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


def _throughput(make_sinks: Callable[[Path], list[TrajectorySink]], records: list[TrajectoryRecord],
                amended: list[TrajectoryRecord] | None, spool: bool = False) -> float:
    with tempfile.TemporaryDirectory() as tmp:
        writer = TrajectoryWriter(make_sinks(Path(tmp)), spool_dir=Path(tmp) / "spool" if spool else None)
        t0 = time.perf_counter()
        if amended is None:
            for rec in records:
                writer.submit(rec)
        else:
            for rec, amend in zip(records, amended, strict=True):
                writer.submit(rec)
                writer.submit(amend)
        writer.shutdown(timeout_s=600)
        elapsed = time.perf_counter() - t0
        assert writer.lost == 0, (writer.dropped, writer.failed)
    return len(records) / elapsed


HUGE_APP = """
    def load(blob):
        raise ValueError("payload rejected: " + blob)

    load("0123456789abcdef" * 655_360)
"""


def huge_error(path: str) -> None:
    """Child process: one 10 MB error (read from ``path``) through init(), then shutdown."""
    import otel_errcompact

    tb = Path(path).read_text(encoding="utf-8")
    with tempfile.TemporaryDirectory() as tmp:
        db = Path(tmp) / "t.sqlite3"
        ec = otel_errcompact.init("bench-huge", sqlite_path=db, otlp_logs=False)
        assert ec.writer is not None
        before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
        t0 = time.perf_counter()
        ec.record_error(tb, scope="huge", tool_name="load")
        handled = time.perf_counter() - t0
        t1 = time.perf_counter()
        assert ec.writer.force_flush(600)
        stored_s = time.perf_counter() - t1
        t2 = time.perf_counter()
        ec.shutdown()
        shutdown_s = time.perf_counter() - t2
        peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
        on_disk = sum(p.stat().st_size for p in Path(tmp).glob("t.sqlite3*"))
        print(f"{len(tb)} {before} {peak} {on_disk} {handled:.3f} {stored_s:.3f} {shutdown_s:.3f}")


def main() -> None:
    if sys.argv[1:2] == ["--huge"]:
        huge_error(sys.argv[2])
        return
    n = int(sys.argv[1]) if len(sys.argv) > 1 else 20_000
    with tempfile.TemporaryDirectory() as tmp:
        tb = python_error(Path(tmp), APP)
    digest = DigestInfo.from_digest(compact_text(tb))

    build_us: list[float] = []
    records: list[TrajectoryRecord] = []
    ids = [(uuid.uuid4().hex, uuid.uuid4().hex[:16]) for _ in range(n)]  # the span's ids, given
    for i, (trace_id, span_id) in enumerate(ids):
        t = time.perf_counter_ns()
        rec = _make(tb, i, trace_id, span_id)
        build_us.append((time.perf_counter_ns() - t) / 1000)
        records.append(rec)
    amended = [rec.model_copy(update={"digest": digest, "count": i % 7 + 1, "escalation": None})
               for i, rec in enumerate(records)]

    # Caller-thread cost, interleaved: the same record to a writer without and one with a spool.
    plain_us: list[float] = []
    spool_us: list[float] = []
    encode_us: list[float] = []
    with tempfile.TemporaryDirectory() as tmp:
        plain = TrajectoryWriter([SQLiteSink(Path(tmp) / "a.db")])
        spooled = TrajectoryWriter([SQLiteSink(Path(tmp) / "b.db")], spool_dir=Path(tmp) / "spool")
        for rec in amended:
            t = time.perf_counter_ns()
            plain.submit(rec)
            plain_us.append((time.perf_counter_ns() - t) / 1000)
            t = time.perf_counter_ns()
            spooled.submit(rec)
            spool_us.append((time.perf_counter_ns() - t) / 1000)
            t = time.perf_counter_ns()
            rec.to_storage_json()
            encode_us.append((time.perf_counter_ns() - t) / 1000)
        plain.shutdown(timeout_s=600)
        spooled.shutdown(timeout_s=600)

    variants: list[tuple[str, Callable[[], float]]] = [
        ("SQLiteSink", lambda: _throughput(lambda d: [SQLiteSink(d / "t.db")], amended, None)),
        ("SQLiteSink + spool (default)",
         lambda: _throughput(lambda d: [SQLiteSink(d / "t.db")], amended, None, spool=True)),
        ("JSONLSink", lambda: _throughput(lambda d: [JSONLSink(d / "t.jsonl")], amended, None)),
        ("SQLite + JSONL + spool",
         lambda: _throughput(lambda d: [SQLiteSink(d / "t.db"), JSONLSink(d / "t.jsonl")], amended, None,
                             spool=True)),
        ("SQLite + spool, raw + amended",
         lambda: _throughput(lambda d: [SQLiteSink(d / "t.db")], records, amended, spool=True)),
    ]
    rates: dict[str, list[float]] = {label: [] for label, _ in variants}
    for _ in range(3):
        for label, run in variants:
            rates[label].append(run())

    with tempfile.TemporaryDirectory() as tmp:
        huge_tb = Path(tmp) / "huge.txt"
        huge_tb.write_text(python_error(Path(tmp), HUGE_APP), encoding="utf-8")
        huge = subprocess.run([sys.executable, __file__, "--huge", str(huge_tb)], capture_output=True,
                              text=True, check=True)
    size, before_kb, peak_kb, on_disk, handled_s, stored_s, shutdown_s = huge.stdout.split()

    print(f"bench_trajectory: N={n:,} records, raw traceback {len(tb):,} chars")
    print(f"python {platform.python_version()}, nproc {os.cpu_count()}, CPU {cpu_model()}, "
          f"load average {os.getloadavg()[0]:.1f} (a shared machine)")
    print()
    print(f"{'pipeline (submit → shutdown done)':<36}{'records/s (median of 3)':>26}{'min':>10}{'max':>10}")
    for label, values in rates.items():
        print(f"{label:<36}{statistics.median(values):>26,.0f}{min(values):>10,.0f}{max(values):>10,.0f}")
    print()
    print(f"{'caller-thread cost (µs)':<36}{'median':>10}{'p99':>10}")
    for label, values in (("TrajectoryRecord(...) build", build_us), ("submit, no spool", plain_us),
                          ("submit + spool append", spool_us),
                          ("  of which to_storage_json()", encode_us)):
        print(f"{label:<36}{statistics.median(values):>10.2f}{_pct(values, 0.99):>10.2f}")
    print()
    print(f"a {int(size) / 1e6:.1f} MB error through init(): peak RSS {int(peak_kb) / 1024:.0f} MiB "
          f"(+{(int(peak_kb) - int(before_kb)) / 1024:.0f} MiB over the process before it), store on disk "
          f"{int(on_disk) / 1e6:.1f} MB; record_error {float(handled_s):.2f} s, then stored in "
          f"{float(stored_s):.2f} s; shutdown() {float(shutdown_s):.2f} s")


if __name__ == "__main__":
    main()
