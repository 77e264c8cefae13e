"""How close to bare the failed-span throughput of GIL-bound threads can come, with the pipeline cut down.

Run from the repository root::

    python benchmarks/bench_ceiling.py [--rounds 8] [--threads 4 1] [--per-round 2000] [--collector off]
        [--failures premade|raised] [--json]

``bench_processor.py`` gives the throughput of ``--threads`` threads ending failed tool spans at once,
through ``init()`` with its defaults, against the bare SDK. This script asks what is left of that gap
when parts of the pipeline are taken away, to tell what bounds it. Each cut runs in a fresh process of
its own, bare and plugin rounds alternating there (the first side alternates too), with the threads,
spans and real, distinct 43-45-line tracebacks of ``bench_processor.py``:

- ``defaults``: ``init()`` with a metric reader and the SQLite store, as ``bench_processor.py`` runs it;
- ``no metrics``: no meter provider, so nothing is counted;
- ``no metrics, no store``: and ``sqlite_path=None``: no spool, no writer thread;
- ``no metrics, hand-off only``: the store on, but each failure is dropped where the agent's thread
  hands it to the history: its capture is read off the span and spooled, its raw record laid out by the
  writer and stored, and no digest is ever made, nothing is counted and no escalation decided;
- ``no metrics, spooled only, hand-off only``: the capture read off the span and copied into the spool,
  the writer thread taking each batch, laying its records out and releasing the spool's segments, and no
  row written (``TrajectoryWriter._write`` stores nothing), no digest made. (A design that laid the
  records out, made the digests and stored the rows in another process, fed from the spool, would leave
  less in the agent's process than this: not the laying out);
- ``no metrics, no store, hand-off only``: the capture read off the span, and nothing else.

The "hand-off only" cuts are made by this script (it replaces ``ErrorHistory.defer_failure``, the
export gate's wait and the digest thread's wake-up with no-ops in its own process, and for "spooled
only" the writer's ``_write``): no configuration runs them, and they do less than the issue asks of the
plugin. They are floors, not the plugin's cost.

For each side, the time the cyclic garbage collector ran during its rounds is read off ``gc.callbacks``
and given per failed span: the threads' failures are real exceptions with their tracebacks, so full
collections walk thousands of frames, and what the plugin keeps alive makes them come sooner.
``--collector off`` disables the collector in every cut's process, on both sides, to tell its share.

``--failures raised`` has the tool raise inside each span, the SDK's ``start_as_current_span`` recording
the exception with its defaults, instead of recording one made before the timing (see
``bench_processor._threaded``): raising is then timed on both sides, and no thread holds its finished
exceptions and their frames. The collector's time is then less clean a measure: the application's SQLite
failure leaves a connection in a reference cycle, and the collection that frees it closes the connection
without the GIL, so other threads' work can fall inside that collection's time.
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import InMemoryMetricReader
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor

from benchmarks._machine import describe
from benchmarks.bench_processor import _Discard, _Errors, _threaded
from tests.deeperrors import deep_app

CUTS: dict[str, dict[str, bool]] = {
    "defaults": {"metrics": True, "store": True, "rows": True, "digests": True},
    "no metrics": {"metrics": False, "store": True, "rows": True, "digests": True},
    "no metrics, no store": {"metrics": False, "store": False, "rows": False, "digests": True},
    "no metrics, hand-off only": {"metrics": False, "store": True, "rows": True, "digests": False},
    "no metrics, spooled only, hand-off only": {"metrics": False, "store": True, "rows": False, "digests": False},
    "no metrics, no store, hand-off only": {"metrics": False, "store": False, "rows": False, "digests": False},
}


def _drop_at_hand_off() -> None:
    """No digest is made, nothing counted: a failure goes no further than the agent thread's hand-off."""
    from otel_errcompact.deferred import DigestThread, ExportGate
    from otel_errcompact.history import ErrorHistory

    ErrorHistory.defer_failure = lambda self, deferred: None  # type: ignore[method-assign]
    ExportGate.wait_for = lambda self, spans: None  # type: ignore[method-assign]
    DigestThread.wake = lambda self: None  # type: ignore[method-assign]


def _store_no_rows() -> None:
    """The writer thread takes its batches and releases the spool's segments, but stores no row: the
    rows would be another process's work, read from the spool."""
    from otel_errcompact.sinks.writer import TrajectoryWriter

    TrajectoryWriter._write = lambda self, items: True  # type: ignore[method-assign]


class _GcClock:
    """Nanoseconds the cyclic collector ran, charged to the side whose round is running, in all and per
    generation with the number of collections: whether a side collects more often, or walks more each
    time, tells what it keeps alive and for how long."""

    def __init__(self) -> None:
        self.side: str | None = None
        self.ns: dict[str, int] = {"bare": 0, "plugin": 0}
        self.by_generation: dict[str, list[list[int]]] = {side: [[0, 0] for _ in range(3)] for side in self.ns}
        self._started = 0
        gc.callbacks.append(self._callback)

    def _callback(self, phase: str, info: dict[str, Any]) -> None:
        if phase == "start":
            self._started = time.perf_counter_ns()
        elif self.side is not None:
            took = time.perf_counter_ns() - self._started
            self.ns[self.side] += took
            generation = self.by_generation[self.side][info["generation"]]
            generation[0] += 1
            generation[1] += took


def run_cut(cut: str, threads: int, rounds: int, per_round: int, *, collector: bool = True,
            raised: bool = False) -> dict[str, Any]:
    """One cut, in this process: failed spans per second on each side, and the collector's share."""
    parts = CUTS[cut]
    if not collector:
        gc.disable()
    if not parts["digests"]:
        _drop_at_hand_off()
    if parts["store"] and not parts["rows"]:
        _store_no_rows()
    from otel_errcompact import init

    with tempfile.TemporaryDirectory() as tmp:
        scratch = Path(tmp)
        errors = _Errors(deep_app(scratch), scratch)
        providers = {side: TracerProvider() for side in ("bare", "plugin")}
        for provider in providers.values():
            provider.add_span_processor(BatchSpanProcessor(_Discard(), max_queue_size=1 << 16))
        meters = MeterProvider(metric_readers=[InMemoryMetricReader()]) if parts["metrics"] else None
        ec = init("bench", tracer_provider=providers["plugin"], meter_provider=meters,
                  sqlite_path=scratch / "trajectories.sqlite3" if parts["store"] else None)
        tracers = {side: provider.get_tracer("bench") for side, provider in providers.items()}
        order = 1_000_000
        for side in ("bare", "plugin"):  # warm-up: imports, caches, the store's first transaction
            _threaded(tracers[side], errors, order, threads, 100, raised=raised)
            order += threads * 100
        ec.flush(60)
        clock = _GcClock()
        rates: dict[str, list[float]] = {"bare": [], "plugin": []}
        per_thread = max(1, per_round // threads)
        for rnd in range(rounds):
            for side in ("bare", "plugin") if rnd % 2 == 0 else ("plugin", "bare"):
                clock.side = side
                rates[side].append(_threaded(tracers[side], errors, order, threads, per_thread, raised=raised))
                clock.side = None
                if side == "plugin":
                    ec.flush(120)  # outside the timing: one side's backlog never lands in the other's round
            order += threads * per_thread
        ec.shutdown()
        for provider in providers.values():
            provider.shutdown()
    spans = rounds * threads * per_thread
    rate = {side: statistics.median(values) for side, values in rates.items()}
    return {
        "cut": cut,
        "threads": threads,
        "collector": collector,
        "failures": "raised" if raised else "premade",
        "per_s": rate,
        "ratio": rate["plugin"] / rate["bare"],
        "gc_us_per_span": {side: ns / spans / 1000 for side, ns in clock.ns.items()},
        "gc_collections": {side: [{"count": n, "ms_each": ns / n / 1e6 if n else 0.0} for n, ns in generations]
                           for side, generations in clock.by_generation.items()},
    }


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rounds", type=int, default=8, help="alternating rounds per cut (default 8)")
    parser.add_argument("--threads", type=int, nargs="+", default=[4, 1], help="thread counts (default 4 1)")
    parser.add_argument("--per-round", type=int, default=2000, help="failed spans per side per round (default 2000)")
    parser.add_argument("--collector", choices=("on", "off"), default="on",
                        help="the cyclic garbage collector in the cuts' processes (default on)")
    parser.add_argument("--failures", choices=("premade", "raised"), default="premade",
                        help="exceptions made before the timing, or raised by the tool inside each span")
    parser.add_argument("--json", action="store_true", help="print JSON instead of a table")
    parser.add_argument("--one", nargs=2, metavar=("CUT", "THREADS"), help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    for name in [n for n in os.environ if n.startswith(("OTEL_EXPORTER_OTLP", "OTEL_ERRCOMPACT_"))]:
        del os.environ[name]  # the defaults, not whatever the calling shell set
    if args.one:  # a child: one cut, in a process of its own
        print(json.dumps(run_cut(args.one[0], int(args.one[1]), args.rounds, args.per_round,
                                 collector=args.collector == "on", raised=args.failures == "raised")))
        return 0

    results = []
    for threads in args.threads:
        for cut in CUTS:
            child = subprocess.run(
                [sys.executable, __file__, "--one", cut, str(threads), "--rounds", str(args.rounds),
                 "--per-round", str(args.per_round), "--collector", args.collector, "--failures", args.failures],
                capture_output=True, text=True, check=True,
            )
            results.append(json.loads(child.stdout.strip().splitlines()[-1]))
            if not args.json:
                row = results[-1]
                gc_us = row["gc_us_per_span"]
                generations = "; ".join(
                    f"{side} " + ", ".join(f"{g['count']}×{g['ms_each']:.2f} ms" for g in row["gc_collections"][side])
                    for side in ("bare", "plugin"))
                print(f"{threads} thread(s), {cut:<36} bare {row['per_s']['bare']:>6.0f}/s  "
                      f"plugin {row['per_s']['plugin']:>6.0f}/s  ratio {row['ratio']:.2f}  "
                      f"collector per span: bare {gc_us['bare']:.0f} µs, plugin {gc_us['plugin']:.0f} µs "
                      f"(collections by generation 0, 1, 2: {generations})", flush=True)
    if args.json:
        print(json.dumps({"machine": describe(), "rounds": args.rounds, "per_round": args.per_round,
                          "collector": args.collector, "failures": args.failures, "results": results}, indent=2))
    else:
        print(f"machine: {describe()}; {args.rounds} rounds × {args.per_round} failed spans per side per cut; "
              f"collector {args.collector}; failures {args.failures}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
