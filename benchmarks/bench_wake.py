"""Waking the digest thread, as an agent's thread does after each failed tool span that calls follow apart.

Run from the repository root::

    python benchmarks/bench_wake.py [--rounds 6] [--per-round 100] [--pause-ms 20]

Each failed span ends with ``DigestThread.wake()`` on the agent's thread. Back to back the thread is
still gathering and the wake-up is one flag read; an agent waits for its model between tool calls, so
the thread is usually asleep and each wake-up is a system call that makes it runnable, on a thread that
has gone cold. This times that call, ``--pause-ms`` apart (outside the timing), for:

- ``DigestThread``: the real one, on the pipeline of ``otel_errcompact.init()`` (a scratch SQLite
  store), woken by releasing a bare lock;
- ``Event``: the same loop woken by a ``threading.Event``'s ``set()``, as it was before (its
  ``Condition`` runs Python code around the same system call).

Rounds alternate the two (the first alternates too); the table gives the median and p99 per kind.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from benchmarks._machine import describe
from otel_errcompact import init
from otel_errcompact.deferred import _GATHER_S


class _EventWoken:
    """The digest thread's loop as it was, woken by an Event, with nothing to make."""

    def __init__(self) -> None:
        self._wake = threading.Event()
        self._stopping = False
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def wake(self) -> None:
        wake = self._wake
        if not wake.is_set():
            wake.set()

    def _run(self) -> None:
        while True:
            self._wake.wait()
            time.sleep(_GATHER_S)
            self._wake.clear()
            if self._stopping:
                return

    def stop(self) -> None:
        self._stopping = True
        self._wake.set()
        self._thread.join(5)


def _timed(wake: Callable[[], None], n: int, pause_s: float) -> list[int]:
    times: list[int] = []
    for _ in range(n):
        time.sleep(pause_s)
        t0 = time.perf_counter_ns()
        wake()
        times.append(time.perf_counter_ns() - t0)
    return times


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=6)
    parser.add_argument("--per-round", type=int, default=100)
    parser.add_argument("--pause-ms", type=float, default=20.0)
    args = parser.parse_args()
    pause_s = args.pause_ms / 1000
    with tempfile.TemporaryDirectory() as tmp:
        ec = init("bench-wake", sqlite_path=Path(tmp) / "t.sqlite3")
        try:
            processor = ec.processor
            digests = processor._digests if processor is not None else None
            if digests is None:
                print("the default pipeline has no digest thread here: nothing to time", file=sys.stderr)
                return 1
            event = _EventWoken()
            kinds: dict[str, Callable[[], None]] = {"DigestThread": digests.wake, "Event": event.wake}
            times: dict[str, list[int]] = {name: [] for name in kinds}
            for name in kinds:  # warm-up
                _timed(kinds[name], 10, pause_s)
            for r in range(args.rounds):
                for name in list(kinds) if r % 2 == 0 else list(reversed(kinds)):
                    times[name] += _timed(kinds[name], args.per_round, pause_s)
            event.stop()
        finally:
            ec.shutdown()
    print(f"# wake-ups {args.pause_ms:g} ms apart, {args.rounds} rounds x {args.per_round}; {describe()}")
    print("| wake-up | median | p99 |")
    print("|---|---|---|")
    for name, ns in times.items():
        ns.sort()
        print(f"| {name} | {statistics.median(ns) / 1000:.1f} µs | {ns[int(len(ns) * 0.99)] / 1000:.1f} µs |")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
