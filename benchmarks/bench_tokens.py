"""Token counting beside the agent: what counting for the metrics costs Python code on another thread.

Run from the repository root::

    python benchmarks/bench_tokens.py [--rounds 7] [--loop 3000000] [--starts 5] [--seconds 5]

The metrics thread has the raw errors' tokens counted by ``tokens.background_counter``, which sends a
batch of texts to a child process running ``bpe-openai``'s counter; ``tokens.count_tokens`` is the same
counter in the agent's process, which keeps the GIL while it counts. Three measurements, each a
pure-Python loop standing in for the agent's thread:

- **beside a counting thread**: the loop alone, then with a thread counting a batch of four real, distinct
  tracebacks (``tests/deeperrors.py``) over and over, with each counter; interleaved round by round, the
  median loop time and its ratio to the loop alone;
- **the first failure**: in a fresh process per start (``--starts`` of each kind, alternating), with
  ``init()``'s defaults and a failed tool span with a real traceback, the longest time the loop stood
  still in the ``--seconds`` after it: without a metric reader (nothing is counted), with one (the
  counting process loads the vocabulary), and with one but no counting process (the vocabulary is
  loaded into the agent's process);
- **per batch**: µs for one call with that batch, and that both counters give the same counts.
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Sequence
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from benchmarks._machine import describe  # noqa: E402
from otel_errcompact.tokens import background_counter, count_tokens  # noqa: E402
from tests.deeperrors import deep_app, deep_traceback  # noqa: E402

Counter = Callable[[Sequence[str]], list[int]]


def _in_place(texts: Sequence[str]) -> list[int]:
    return [count_tokens(text) for text in texts]


def _batch(folder: Path) -> list[str]:
    """Four real, distinct 43-45-line tracebacks of the small application the span benchmark runs."""
    app = deep_app(folder)
    return [deep_traceback(app, order) for order in range(4)]


def _loop(n: int) -> float:
    t0 = time.perf_counter()
    x = 0
    for i in range(n):
        x += i
    return time.perf_counter() - t0


def _beside(counter: Counter | None, texts: list[str], n: int) -> float:
    if counter is None:
        return _loop(n)
    stop = threading.Event()

    def count() -> None:
        while not stop.is_set():
            counter(texts)

    thread = threading.Thread(target=count, daemon=True)
    thread.start()
    time.sleep(0.05)  # let it start counting
    try:
        return _loop(n)
    finally:
        stop.set()
        thread.join()


def _per_batch(counter: Counter, texts: list[str], reps: int = 50) -> float:
    times = []
    for _ in range(reps):
        t0 = time.perf_counter()
        counter(texts)
        times.append(time.perf_counter() - t0)
    return statistics.median(times) * 1e6


_FIRST_FAILURE = """
import sys, tempfile, time
sys.path.insert(0, sys.argv[1])
from pathlib import Path
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import InMemoryMetricReader
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.trace import Status, StatusCode
import otel_errcompact
from tests.deeperrors import deep_app, deep_exception

kind = sys.argv[2]
folder = Path(tempfile.mkdtemp())
readers = [] if kind == "metrics off" else [InMemoryMetricReader()]
if kind == "metrics on, counted in place":
    sys.executable = ""  # no counting process can start: background_counter counts in place
provider = TracerProvider()
ec = otel_errcompact.init(tracer_provider=provider, meter_provider=MeterProvider(metric_readers=readers),
                          sqlite_path=folder / "t.db")
exc = deep_exception(deep_app(folder), 0)
time.sleep(0.5)
tool = {"gen_ai.operation.name": "execute_tool", "gen_ai.tool.name": "lookup_order"}
with provider.get_tracer("bench").start_as_current_span(
    "execute_tool lookup_order", attributes=tool, record_exception=False, set_status_on_exception=False
) as span:
    span.record_exception(exc)
    span.set_status(Status(StatusCode.ERROR, str(exc)))
longest = 0.0
last = start = time.perf_counter()
while last - start < float(sys.argv[3]):
    now = time.perf_counter()
    longest = max(longest, now - last)
    last = now
print(longest * 1000)
ec.shutdown()
"""
_KINDS = ("metrics off", "metrics on", "metrics on, counted in place")


def _first_failure(kind: str, seconds: float) -> float:
    """In a fresh interpreter with ``init()``'s defaults: the longest time, in ms, that a Python loop on the
    agent's thread stood still during the ``seconds`` after its first failed tool span."""
    out = subprocess.run(
        [sys.executable, "-c", _FIRST_FAILURE, str(ROOT), kind, str(seconds)],
        capture_output=True, text=True, timeout=120, check=True,
    )
    return float(out.stdout.splitlines()[-1])


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--rounds", type=int, default=7)
    parser.add_argument("--loop", type=int, default=3_000_000, help="iterations of the timed Python loop")
    parser.add_argument("--starts", type=int, default=5, help="fresh processes per kind for the first failure")
    parser.add_argument("--seconds", type=float, default=5.0, help="how long to watch after the first failure")
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory() as tmp:
        texts = _batch(Path(tmp))
    child = background_counter()
    variants: dict[str, Counter | None] = {
        "loop alone": None,
        "beside the counting process": child,
        "beside count_tokens in place": _in_place,
    }
    assert child(texts) == _in_place(texts), "the two counters disagree"
    times: dict[str, list[float]] = {name: [] for name in variants}
    for _ in range(args.rounds):
        for name, counter in variants.items():
            times[name].append(_beside(counter, texts, args.loop))
    alone = statistics.median(times["loop alone"])
    chars = sum(map(len, texts))
    print(f"machine: {describe()}; a batch of {len(texts)} tracebacks, {chars:,} chars, "
          f"{sum(_in_place(texts)):,} o200k tokens; {args.rounds} rounds")
    print(f"{'variant':32} {'loop median s':>14} {'vs alone':>9}")
    for name, values in times.items():
        median = statistics.median(values)
        print(f"{name:32} {median:14.3f} {median / alone:8.2f}x")
    firsts: dict[str, list[float]] = {kind: [] for kind in _KINDS}
    for _ in range(args.starts):
        for kind in _KINDS:
            firsts[kind].append(_first_failure(kind, args.seconds))
    print(f"the agent's thread stood still, longest, in the {args.seconds:g} s after its first failure "
          f"(init() defaults, median of {args.starts} fresh processes; max):")
    for kind, values in firsts.items():
        print(f"  {kind:32} {statistics.median(values):6.1f} ms ({max(values):.1f})")
    print(f"µs per batch: counting process {_per_batch(child, texts):.0f}, in place {_per_batch(_in_place, texts):.0f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
