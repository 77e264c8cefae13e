"""Trajectory writer throughput and the cost it puts on the agent's thread.

Run from the repository root::

    python benchmarks/bench_trajectory.py [N]

For N records (default 20,000) carrying a real ~2 KB Python traceback, it measures

* records/second from the first ``submit`` until ``shutdown`` has returned (everything durable), through
  SQLiteSink, JSONLSink and both together, and for the processor's real pattern: a raw record then its
  amended version (2 submissions per failure, coalesced by the worker when they share a batch);
* what the caller pays per failure on its own thread: building the record, ``submit`` (median, p99),
  and the amended copy.
"""

from __future__ import annotations

import os
import platform
import statistics
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


def _throughput(label: str, make_sinks: Callable[[Path], list[TrajectorySink]],
                records: list[TrajectoryRecord], amended: list[TrajectoryRecord] | None) -> tuple[str, float]:
    with tempfile.TemporaryDirectory() as tmp:
        writer = TrajectoryWriter(make_sinks(Path(tmp)))
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
        assert writer.dropped == 0, writer.dropped
    return label, len(records) / elapsed


def main() -> None:
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
    amend_us: list[float] = []
    amended: list[TrajectoryRecord] = []
    for i, rec in enumerate(records):
        t = time.perf_counter_ns()
        a = rec.model_copy(update={"digest": digest, "count": i % 7 + 1, "escalation": None})
        amend_us.append((time.perf_counter_ns() - t) / 1000)
        amended.append(a)

    submit_us: list[float] = []
    with tempfile.TemporaryDirectory() as tmp:
        writer = TrajectoryWriter([SQLiteSink(Path(tmp) / "t.db")])
        for rec in records:
            t = time.perf_counter_ns()
            writer.submit(rec)
            submit_us.append((time.perf_counter_ns() - t) / 1000)
        writer.shutdown(timeout_s=600)

    rows = [
        _throughput("SQLiteSink", lambda d: [SQLiteSink(d / "t.db")], records, None),
        _throughput("JSONLSink", lambda d: [JSONLSink(d / "t.jsonl")], records, None),
        _throughput("SQLite + JSONL", lambda d: [SQLiteSink(d / "t.db"), JSONLSink(d / "t.jsonl")],
                    records, None),
        _throughput("SQLite, raw + amended", lambda d: [SQLiteSink(d / "t.db")], records, amended),
    ]

    print(f"bench_trajectory: N={n:,} records, raw traceback {len(tb):,} chars")
    print(f"python {platform.python_version()}, nproc {os.cpu_count()}, CPU {cpu_model()}")
    print()
    print(f"{'pipeline (submit → shutdown done)':<36}{'failures/s':>12}")
    for label, rate in rows:
        print(f"{label:<36}{rate:>12,.0f}")
    print()
    print(f"{'caller-thread cost (µs)':<36}{'median':>10}{'p99':>10}")
    for label, values in (("TrajectoryRecord(...) build", build_us), ("writer.submit(rec)", submit_us),
                          ("rec.model_copy(update=digest...)", amend_us)):
        print(f"{label:<36}{statistics.median(values):>10.2f}{_pct(values, 0.99):>10.2f}")


if __name__ == "__main__":
    main()
