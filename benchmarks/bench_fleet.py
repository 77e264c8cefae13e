"""Fleet benchmarks: what a shared Redis costs per tool call, and what shared pacing buys.

Run from the repository root (needs redis-server on the PATH; it starts its own on 127.0.0.1)::

    python benchmarks/bench_fleet.py [--calls 3000] [--workers 8] [--seconds 15] [--rate 20]

1. **Latency per tool call.** The breaker work on a successful call (``admit`` before it, ``success`` after
   it) through ``CircuitBreakers``, with the in-process store and with the Redis store on loopback,
   interleaved call by call so load hits both alike. Median and p99 in µs.
2. **Pacing a fleet.** N worker processes call one model API key through the real ``openai`` client
   against a local server with a real token bucket (``rate`` requests/s, ``rate`` burst). Each worker
   would send far faster than the key allows. Once with pacing state per process, once shared in Redis:
   429s, and throughput against the allowed rate (burst included).
"""

from __future__ import annotations

import argparse
import multiprocessing
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from benchmarks._machine import describe
from otel_errcompact.recovery.breaker import BreakerPolicy, CircuitBreakers, fingerprint
from otel_errcompact.recovery.redis_state import RedisStateStore
from otel_errcompact.recovery.state import InMemoryStateStore
from otel_errcompact.wire_server import ModelWireServer, TokenBucket, serve
from tests.fleet import workers
from tests.fleet.conftest import RedisServer


def _pct(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


def latency(server: RedisServer, calls: int) -> None:
    local = CircuitBreakers(BreakerPolicy(), InMemoryStateStore())
    shared = CircuitBreakers(BreakerPolicy(), RedisStateStore(server.client()))
    timings: dict[str, list[float]] = {"in-process": [], "redis (loopback)": []}
    fps = [fingerprint(f'{{"q": {i % 50}}}') for i in range(calls)]
    for i, fp in enumerate(fps):
        for name, breakers in (("in-process", local), ("redis (loopback)", shared)) if i % 2 else (
            ("redis (loopback)", shared), ("in-process", local)
        ):
            started = time.perf_counter()
            breakers.admit("search", fp)
            breakers.success("search", fp)
            timings[name].append((time.perf_counter() - started) * 1e6)
    print(f"\n1. breaker work per successful tool call (admit + success), {calls:,} calls each, interleaved")
    print(f"   {'store':<18} {'median µs':>10} {'p99 µs':>10}")
    for name, values in timings.items():
        print(f"   {name:<18} {statistics.median(values):>10.1f} {_pct(values, 0.99):>10.1f}")


def pacing(server: RedisServer, n: int, seconds: float, rate: float) -> None:
    ctx = multiprocessing.get_context("spawn")
    print(f"\n2. {n} workers × {seconds:.0f} s against one key: {rate:.0f} requests/s, burst {rate:.0f}")
    print(f"   {'pacing state':<14} {'requests ok':>12} {'429s':>7} {'ok/s':>7} {'allowed/s':>10} {'of allowed':>11}"
          f" {'elapsed':>8} {'paced sleep/worker':>19}")
    for label, redis_url in (("per process", None), ("shared (redis)", server.url)):
        bucket = TokenBucket(capacity=rate, rate=rate)
        with serve(ModelWireServer(bucket=bucket)) as (_srv, url):
            results = ctx.Queue()
            start_at = time.time() + 5.0
            procs = [
                ctx.Process(target=workers.paced_requests, args=(url, redis_url, seconds, start_at, results))
                for _ in range(n)
            ]
            for p in procs:
                p.start()
            outcomes = [results.get(timeout=seconds + 120) for _ in procs]
            for p in procs:
                p.join(30)
        ok = sum(o[1] for o in outcomes)
        limited = sum(o[2] for o in outcomes)
        # A worker's last request may wait out its pacing delay past the deadline: measure to the last one.
        elapsed = max(o[3] for o in outcomes) - start_at
        allowed = rate + rate * elapsed  # the burst, then the refill
        slept = statistics.mean(o[4] for o in outcomes)
        print(f"   {label:<14} {ok:>12,} {limited:>7,} {ok / elapsed:>7.1f} {allowed / elapsed:>10.1f} "
              f"{ok / allowed:>11.0%} {elapsed:>7.1f}s {slept:>18.1f}s")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--calls", type=int, default=3000)
    parser.add_argument("--workers", type=int, default=8)
    parser.add_argument("--seconds", type=float, default=15.0)
    parser.add_argument("--rate", type=float, default=20.0)
    args = parser.parse_args()
    print(f"machine: {describe()}")
    with tempfile.TemporaryDirectory() as tmp:
        server = RedisServer(Path(tmp))
        server.start()
        try:
            latency(server, args.calls)
            pacing(server, args.workers, args.seconds, args.rate)
        finally:
            server.stop()


if __name__ == "__main__":
    main()
