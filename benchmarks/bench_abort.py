"""Abort latency: from ``abort(scope)`` to the recovery loop's exit with ``aborted_streaming``.

Run from the repository root::

    python benchmarks/bench_abort.py [N]

For N runs (default 100) of each variant, interleaved, an async ``RecoveryLoop`` drives the real
``AsyncAnthropic`` client (``max_retries=0``) against the local wire-format server, and is aborted while:

* ``model call``: a model call is in flight (the server holds its answer back for 10 s);
* ``read-only tool``: a tool is running (it would sleep 10 s);
* ``rate-limit wait``: the loop sleeps out a 10 s retry-after;
* ``sync model call``: the sync loop (``run``, the sync ``Anthropic`` client on another thread of this
  process) with a model call in flight.

The time is ``abort()`` called → ``arun``/``run`` returned (median, p99, max). Target: < 100 ms. A
mutating tool is let finish by design, so it is not part of this measure.
"""

from __future__ import annotations

import asyncio
import statistics
import sys
import threading
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import anthropic

from benchmarks._machine import describe
from otel_errcompact.recovery.loop import AnthropicMessages, RecoveryLoop
from otel_errcompact.wire_server import ModelWireServer, Reply, serve

VARIANTS = ("model call", "read-only tool", "rate-limit wait")
SYNC = "sync model call"


def _pct(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


async def _search(query: str) -> str:
    await asyncio.sleep(10)
    return "results"


async def one(server: ModelWireServer, model: AnthropicMessages, variant: str) -> float:
    if variant == "model call":
        server.add(Reply("text", delay_s=10))
    elif variant == "read-only tool":
        server.add(Reply("tool", tool="search", arguments={"query": "q"}))
    else:
        server.add(Reply("rate_limited", retry_after_s=10))
    loop = RecoveryLoop(model, {"search": _search})
    before = len(server.requests)
    task = asyncio.ensure_future(loop.arun([{"role": "user", "content": "go"}]))
    while len(server.requests) == before:  # the request reached the server
        await asyncio.sleep(0.002)
    await asyncio.sleep(0.05)  # well inside the call, the tool or the wait
    started = time.perf_counter()
    loop.aborts.abort(loop.scope)
    result = await task
    took = time.perf_counter() - started
    assert result.transition == "aborted_streaming", result
    return took


async def main(n: int) -> dict[str, list[float]]:
    times: dict[str, list[float]] = {v: [] for v in VARIANTS}
    with serve() as (server, url):
        client = anthropic.AsyncAnthropic(api_key="sk-bench", base_url=url, max_retries=0)
        model = AnthropicMessages(client, "bench")
        for _ in range(3):  # warm the connection pool and the code paths
            for variant in VARIANTS:
                await one(server, model, variant)
        for i in range(n):
            order = VARIANTS if i % 2 == 0 else tuple(reversed(VARIANTS))
            for variant in order:
                times[variant].append(await one(server, model, variant))
        sync_model = AnthropicMessages(anthropic.Anthropic(api_key="sk-bench", base_url=url, max_retries=0), "bench")
        times[SYNC] = [one_sync(server, sync_model) for _ in range(n)]
        server.script.clear()
    return times


def one_sync(server: ModelWireServer, model: AnthropicMessages) -> float:
    server.add(Reply("text", delay_s=10))
    loop = RecoveryLoop(model)
    before = len(server.requests)
    returned: list[float] = []
    runner = threading.Thread(
        target=lambda: (loop.run([{"role": "user", "content": "go"}]), returned.append(time.perf_counter()))
    )
    runner.start()
    while len(server.requests) == before:
        time.sleep(0.002)
    time.sleep(0.05)
    started = time.perf_counter()
    loop.aborts.abort(loop.scope)
    runner.join()
    return returned[0] - started


if __name__ == "__main__":
    n = int(sys.argv[1]) if len(sys.argv) > 1 else 100
    times = asyncio.run(main(n))
    print(f"bench_abort: {n} aborts per variant, interleaved; machine: {describe()} (shared: indicative)")
    print()
    print(f"{'aborted during':<18}{'median ms':>11}{'p99 ms':>9}{'max ms':>9}")
    for variant, values in times.items():
        ms = [v * 1000 for v in values]
        print(f"{variant:<18}{statistics.median(ms):>11.2f}{_pct(ms, 0.99):>9.2f}{max(ms):>9.2f}")
