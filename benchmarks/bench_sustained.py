"""Sustained load on the audit store: does every failure an agent sees reach SQLite, even past 1 GB?

Run from the repository root::

    python benchmarks/bench_sustained.py [SECONDS] [STORE_GB] [--spans]

Part 1, sustained failures: 4 threads call a tool that really fails (a ``KeyError`` in a chain of real
frames, a different key and depth per call, so tracebacks and dedup keys differ) through the full
``init()`` pipeline with its defaults (SQLite store, spool, tool boundary, compaction, history) for
SECONDS (default 60), spread over 10,000 conversations. It reports failures produced (tool calls that
returned a digest), records stored, dropped and lost, and the deepest the writer's queue got. With
``--spans`` the tool is not wrapped by the library: it raises inside a tool span of an agent span, as a
framework's instrumentation records it, and the span processor records the failure.

Part 2, a big store: it builds a SQLite store past STORE_GB (default 1.1) in a temporary folder (rows
written straight through ``SQLiteSink``), then writes batches of fresh records through the
``TrajectoryWriter`` (spool on, as ``init()`` sets it up) into the big store and into a fresh one,
alternating round by round so that machine load weighs on both alike; it reports records/s (median of
the rounds) and the per-batch commit time (median, p99). The folder is deleted afterwards.
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import sys
import tempfile
import threading
import time
import uuid
from collections.abc import Sequence
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from benchmarks._machine import describe
from otel_errcompact.sinks import SQLiteSink, TrajectoryStore, TrajectoryWriter
from otel_errcompact.trajectory import DigestInfo, TrajectoryRecord, new_record_id

THREADS = 4
CONVERSATIONS = 10_000


def _pct(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


# -- part 1 ------------------------------------------------------------------------------------------


class Inventory:
    """A small piece of real application code whose lookups fail with real tracebacks."""

    def __init__(self) -> None:
        self.items = {"sku-0": 1}

    def find(self, sku: str, depth: int) -> int:
        if depth:
            return self.find(sku, depth - 1)
        return self.items[sku]


def sustained(seconds: float, spans: bool = False) -> None:
    from opentelemetry import trace

    import otel_errcompact
    from otel_errcompact import Thresholds, ToolErrorText

    folder = Path(tempfile.mkdtemp(prefix="errcompact-sustained-"))
    try:
        db = folder / "trajectories.sqlite3"
        ec = otel_errcompact.init("bench-sustained", sqlite_path=db, otlp_logs=False,
                                  thresholds=Thresholds(consecutive=10**9, budget=None))
        inventory = Inventory()

        @ec.tool
        def lookup(sku: str, depth: int) -> int:
            return inventory.find(sku, depth)

        produced = [0] * THREADS
        stop = threading.Event()
        writer = ec.writer
        assert writer is not None
        deepest = 0

        def agent(t: int) -> None:
            i = 0
            while not stop.is_set():
                with ec.conversation(f"conv-{(i * THREADS + t) % CONVERSATIONS}"):
                    result = lookup(f"sku-{t}-{i}", i % 12)
                if isinstance(result, ToolErrorText):
                    produced[t] += 1
                i += 1

        # --spans: the tool is not wrapped by the library; it raises inside a tool span of an agent span, as
        # a framework's instrumentation records it (the SDK records the exception and ends the span as it
        # propagates), and the span processor spools the failure's capture (see otel_errcompact.capture).
        tracer = trace.get_tracer("bench-sustained")
        tool_attributes = {"gen_ai.operation.name": "execute_tool", "gen_ai.tool.name": "lookup"}

        def span_agent(t: int) -> None:
            i = 0
            while not stop.is_set():
                conversation = {"gen_ai.operation.name": "invoke_agent",
                                "gen_ai.conversation.id": f"conv-{(i * THREADS + t) % CONVERSATIONS}"}
                with tracer.start_as_current_span("invoke_agent inventory", attributes=conversation):
                    try:
                        with tracer.start_as_current_span("execute_tool lookup", attributes=tool_attributes):
                            inventory.find(f"sku-{t}-{i}", i % 12)
                    except KeyError:
                        produced[t] += 1
                i += 1

        if spans and (ec.processor is None or ec.processor._gate is None):
            raise SystemExit("expected failed spans' records to be captured and their digests made after the span ends")
        threads = [threading.Thread(target=span_agent if spans else agent, args=(t,)) for t in range(THREADS)]
        t0 = time.perf_counter()
        for th in threads:
            th.start()
        while time.perf_counter() - t0 < seconds:
            time.sleep(0.1)
            deepest = max(deepest, writer.queue_size)
        stop.set()
        for th in threads:
            th.join()
        elapsed = time.perf_counter() - t0
        t1 = time.perf_counter()
        ec.shutdown()
        drain = time.perf_counter() - t1
        with TrajectoryStore(db) as store:
            stored = store.count()
        total = sum(produced)
        size = db.stat().st_size
        print(f"part 1: {THREADS} threads × {elapsed:.0f} s through init() (SQLite + spool), "
              f"{CONVERSATIONS:,} conversations, "
              + ("failed tool spans (the span processor)" if spans else "tool calls through @ec.tool"))
        print(f"  failures produced   {total:>10,}  ({total / elapsed:,.0f}/s)")
        print(f"  records stored      {stored:>10,}")
        print(f"  dropped / failed    {writer.dropped:>10,} / {writer.failed:,}")
        print(f"  lost                {total - stored:>10,}")
        print(f"  deepest queue       {deepest:>10,} records; shutdown drained the rest in {drain:.2f} s; "
              f"store {size / 1e6:,.0f} MB")
    finally:
        shutil.rmtree(folder, ignore_errors=True)


# -- part 2 ------------------------------------------------------------------------------------------


def _traceback(depth: int) -> str:
    import traceback

    try:
        Inventory().find(f"sku-{depth}", depth)
    except KeyError as exc:
        return "".join(traceback.format_exception(exc))
    raise AssertionError("unreachable")


def _records(n: int, tracebacks: list[str], digests: list[DigestInfo]) -> list[TrajectoryRecord]:
    out = []
    for i in range(n):
        tb = tracebacks[i % len(tracebacks)]
        conv = f"conv-{i % CONVERSATIONS}"
        out.append(TrajectoryRecord(
            source="span", scope=conv, conversation_id=conv, trace_id=uuid.uuid4().hex,
            span_id=uuid.uuid4().hex[:16], agent_name="planner", tool_name="lookup",
            tool_call_id=f"call_{i}", tool_arguments={"sku": f"sku-{i}"}, span_name="execute_tool lookup",
            exception_type="KeyError", exception_message=f"'sku-{i}'", exception_stacktrace=tb, raw_error=tb,
            attributes={"gen_ai.operation.name": "execute_tool", "gen_ai.tool.name": "lookup"},
            resource={"service.name": "bench-agent"}, digest=digests[i % len(digests)], count=i % 7 + 1,
        ))
    return out


def _build(db: Path, target_bytes: int, tracebacks: list[str], digests: list[DigestInfo]) -> int:
    sink = SQLiteSink(db)
    template = _records(512, tracebacks, digests)
    rows = 0
    t0 = time.perf_counter()
    while db.stat().st_size < target_bytes:  # the WAL is checkpointed into the file every 64 MiB
        # Time-ordered ids, as the pipeline makes them (trajectory.new_record_id), not random ones.
        batch = [r.model_copy(update={"record_id": new_record_id()}) for r in template]
        sink.write(batch)
        rows += len(batch)
    sink.close()  # checkpoints the WAL into the file
    print(f"  built {db.stat().st_size / 1e9:.2f} GB ({rows:,} records) in {time.perf_counter() - t0:.0f} s")
    return rows


class TimedSink(SQLiteSink):
    """SQLiteSink that notes how long each batch took to commit."""

    def __init__(self, path: Path) -> None:
        super().__init__(path)
        self.batch_ms: list[float] = []
        self.records = 0
        self.cpu_s = 0.0

    def write_encoded(self, items: Sequence[tuple[TrajectoryRecord, str | None]]) -> None:
        t, c = time.perf_counter(), time.thread_time()
        super().write_encoded(items)
        self.batch_ms.append((time.perf_counter() - t) * 1000)
        self.cpu_s += time.thread_time() - c
        self.records += len(items)


def big_store(target_gb: float, rounds: int = 5, per_round: int = 20_000) -> None:
    folder = Path(tempfile.mkdtemp(prefix="errcompact-big-"))
    try:
        tracebacks = [_traceback(d) for d in range(2, 30, 3)]
        from otel_errcompact.compactor import compact_text

        digests = [DigestInfo.from_digest(compact_text(tb)) for tb in tracebacks]
        big = folder / "big.sqlite3"
        print(f"part 2: a store past {target_gb:.2f} GB")
        _build(big, int(target_gb * 1e9), tracebacks, digests)
        rates: dict[str, list[float]] = {"past 1 GB": [], "fresh": []}
        batches: dict[str, list[float]] = {"past 1 GB": [], "fresh": []}
        store_rates: dict[str, list[float]] = {"past 1 GB": [], "fresh": []}
        cpu_rates: dict[str, list[float]] = {"past 1 GB": [], "fresh": []}
        for r in range(rounds):
            for label in ("past 1 GB", "fresh"):
                db = big if label == "past 1 GB" else folder / f"fresh-{r}.sqlite3"
                records = _records(per_round, tracebacks, digests)
                sink = TimedSink(db)
                writer = TrajectoryWriter([sink], spool_dir=db.with_name(db.name + "-spool"))
                t0 = time.perf_counter()
                for rec in records:
                    writer.submit(rec)
                writer.shutdown(timeout_s=600)
                rates[label].append(per_round / (time.perf_counter() - t0))
                batches[label].extend(sink.batch_ms)
                store_rates[label].append(sink.records / (sum(sink.batch_ms) / 1000))
                cpu_rates[label].append(sink.records / sink.cpu_s)
                assert writer.lost == 0, writer.lost
        with TrajectoryStore(big) as store:
            count = store.count()
        print(f"  final size {big.stat().st_size / 1e9:.2f} GB, {count:,} records")
        print(f"  {'store':<11}{'end to end/s':>13}{'min':>8}{'max':>8}{'in sink/s':>11}"
              f"{'per CPU-s':>11}{'batch ms':>10}{'p99':>8}")
        for label in rates:
            v, b = rates[label], batches[label]
            print(f"  {label:<11}{statistics.median(v):>13,.0f}{min(v):>8,.0f}{max(v):>8,.0f}"
                  f"{statistics.median(store_rates[label]):>11,.0f}{statistics.median(cpu_rates[label]):>11,.0f}"
                  f"{statistics.median(b):>10.1f}{_pct(b, 0.99):>8.1f}")
        print("  end to end: records/s from the first submit (one thread) until shutdown() returned, all"
              " stored;\n  in sink: records per second spent inside SQLiteSink.write (wall clock); per CPU-s:"
              " records per\n  CPU-second of the writer thread (what the load of other processes does not"
              " change); a batch is one\n  transaction of 512 records, up to 4,096 when the writer is"
              " behind (medians of the rounds)")
    finally:
        shutil.rmtree(folder, ignore_errors=True)


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("seconds", nargs="?", type=float, default=60.0,
                        help="seconds of sustained failures in part 1 (default 60; 0 skips part 1)")
    parser.add_argument("store_gb", nargs="?", type=float, default=1.1,
                        help="size the big store of part 2 is grown past, in GB (default 1.1; 0 skips part 2)")
    parser.add_argument("--spans", action="store_true",
                        help="part 1's failures as failed tool spans recorded by the span processor, as a framework's "
                             "instrumentation makes them, instead of tool calls through @ec.tool")
    args = parser.parse_args(argv)
    seconds, target_gb = args.seconds, args.store_gb
    print(f"bench_sustained on {describe()}, load average {os.getloadavg()[0]:.1f} "
          "(the machine is shared: other processes compete for both cores)")
    if seconds > 0:
        sustained(seconds, spans=args.spans)
    if target_gb > 0:
        big_store(target_gb)


if __name__ == "__main__":
    main()
