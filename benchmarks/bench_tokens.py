"""Token counting beside the agent: how much a counting thread slows Python code on another thread.

Run from the repository root::

    python benchmarks/bench_tokens.py [--rounds 7] [--loop 3000000]

The metrics thread counts the tokens of raw errors. ``tokens.background_counter`` counts with tiktoken's
Rust encoder built from the rank file that ships in ``bpe-openai``, which lets go of the GIL while it
encodes; ``tokens.count_tokens`` is ``bpe-openai``'s own counter, which keeps it. Each round times a
pure-Python loop (standing in for the agent's thread) alone, then with a thread counting four real
tracebacks (``tests/deeperrors.py``) over and over with each counter; the three are interleaved round by
round, and the table gives the median loop time and its ratio to the loop alone. Also: µs per count of
that text with each counter, and that both give the same count.
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
from otel_errcompact.tokens import background_counter, count_tokens
from tests.deeperrors import deep_app, deep_traceback


def _text(folder: Path) -> str:
    """Four real, distinct 43-45-line tracebacks of the small application the span benchmark runs."""
    app = deep_app(folder)
    return "".join(deep_traceback(app, order) for order in range(4))


def _loop(n: int) -> float:
    t0 = time.perf_counter()
    x = 0
    for i in range(n):
        x += i
    return time.perf_counter() - t0


def _beside(counter: Callable[[str], int] | None, text: str, n: int) -> float:
    if counter is None:
        return _loop(n)
    stop = threading.Event()

    def count() -> None:
        while not stop.is_set():
            counter(text)

    thread = threading.Thread(target=count, daemon=True)
    thread.start()
    time.sleep(0.01)  # let it start counting
    try:
        return _loop(n)
    finally:
        stop.set()
        thread.join()


def _per_count(counter: Callable[[str], int], text: str, reps: int = 50) -> float:
    times = []
    for _ in range(reps):
        t0 = time.perf_counter()
        counter(text)
        times.append(time.perf_counter() - t0)
    return statistics.median(times) * 1e6


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--rounds", type=int, default=7)
    parser.add_argument("--loop", type=int, default=3_000_000, help="iterations of the timed Python loop")
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory() as tmp:
        text = _text(Path(tmp))
    released = background_counter()
    variants: dict[str, Callable[[str], int] | None] = {
        "loop alone": None,
        "beside background_counter (tiktoken)": released,
        "beside count_tokens (bpe-openai)": count_tokens,
    }
    assert released(text) == count_tokens(text), "the two counters disagree"
    times: dict[str, list[float]] = {name: [] for name in variants}
    for _ in range(args.rounds):
        for name, counter in variants.items():
            times[name].append(_beside(counter, text, args.loop))
    alone = statistics.median(times["loop alone"])
    print(f"machine: {describe()}; text {len(text):,} chars, {count_tokens(text):,} o200k tokens; {args.rounds} rounds")
    print(f"{'variant':40} {'loop median s':>14} {'vs alone':>9}")
    for name, values in times.items():
        median = statistics.median(values)
        print(f"{name:40} {median:14.3f} {median / alone:8.2f}x")
    fast, slow = _per_count(released, text), _per_count(count_tokens, text)
    print(f"µs per count: background_counter {fast:.0f}, count_tokens {slow:.0f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
