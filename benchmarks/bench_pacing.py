"""Proactive pacing against a real token bucket: 429s and throughput, paced vs unpaced.

Run from the repository root::

    python benchmarks/bench_pacing.py [--seconds 20] [--rounds 3] [--workers 4] [--capacity 20] [--rate 10]

A local server (``otel_errcompact.wire_server``) enforces a token bucket of ``capacity`` requests refilled
at ``rate`` per second and answers 429 with ``retry-after`` when it is empty. ``workers`` threads share one
real ``openai`` client and call ``chat.completions.create`` for ``seconds``, in three variants run
interleaved, round after round (so a load spike on the shared machine hits all alike):

* ``unpaced``: ``max_retries=0``; a 429 is counted and the worker tries again at once;
* ``sdk-retries``: the SDK's own retries (``max_retries=2``, honouring retry-after), no pacing;
* ``paced``: ``max_retries=0`` and ``pace(client)``: the rate-limit headers set the pace.

Reported per variant (median over rounds, and the worst round): the 429s the server sent, the completed
calls per second, that rate as a share of what the bucket allowed in the run (``capacity + rate × seconds``),
and the latency of completed calls (median, p99). Target: ``paced`` gets zero 429s at ≥ 90 % of allowed.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import threading
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import openai

from benchmarks._machine import describe
from otel_errcompact.recovery.pacing import Pacer, pace
from otel_errcompact.wire_server import ModelWireServer, TokenBucket, serve

VARIANTS = ("unpaced", "sdk-retries", "paced")


def _pct(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))] if ordered else float("nan")


def run_once(variant: str, seconds: float, workers: int, capacity: float, rate: float) -> dict[str, Any]:
    bucket = TokenBucket(capacity, rate)
    with serve(ModelWireServer(bucket=bucket)) as (_, url):
        client = openai.OpenAI(
            api_key="sk-bench", base_url=url + "/v1", max_retries=2 if variant == "sdk-retries" else 0
        )
        if variant == "paced":
            pace(client, Pacer())
        latencies: list[float] = []
        lock = threading.Lock()
        started = time.monotonic()
        end = started + seconds

        def work() -> None:
            while time.monotonic() < end:
                t0 = time.perf_counter()
                try:
                    client.chat.completions.create(model="bench", messages=[{"role": "user", "content": "hi"}])
                except openai.RateLimitError:
                    continue
                with lock:
                    latencies.append(time.perf_counter() - t0)

        threads = [threading.Thread(target=work) for _ in range(workers)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        elapsed = time.monotonic() - started
    allowed = capacity + rate * elapsed
    return {
        "429s": bucket.refused,
        "done": len(latencies),
        "per_s": len(latencies) / elapsed,
        "share": len(latencies) / allowed,
        "latencies": latencies,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seconds", type=float, default=20.0)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--workers", type=int, default=4)
    parser.add_argument("--capacity", type=float, default=20.0)
    parser.add_argument("--rate", type=float, default=10.0)
    args = parser.parse_args()
    results: dict[str, list[dict[str, Any]]] = {v: [] for v in VARIANTS}
    for round_no in range(args.rounds):
        order = VARIANTS if round_no % 2 == 0 else tuple(reversed(VARIANTS))
        for variant in order:
            results[variant].append(run_once(variant, args.seconds, args.workers, args.capacity, args.rate))
    print(f"bench_pacing: bucket {args.capacity:g} requests, refill {args.rate:g}/s; {args.workers} workers; "
          f"{args.seconds:g} s × {args.rounds} rounds, variants interleaved")
    print(f"machine: {describe()} (shared with other work: figures are indicative)")
    print()
    header = f"{'variant':<12}{'429s med':>9}{'429s max':>9}{'calls/s':>9}{'of allowed':>11}{'worst':>7}"
    print(header + f"{'lat med ms':>11}{'lat p99 ms':>11}")
    for variant in VARIANTS:
        runs = results[variant]
        lat = [x for r in runs for x in r["latencies"]]
        print(
            f"{variant:<12}{statistics.median(r['429s'] for r in runs):>9.0f}{max(r['429s'] for r in runs):>9}"
            f"{statistics.median(r['per_s'] for r in runs):>9.2f}"
            f"{statistics.median(r['share'] for r in runs):>10.1%}{min(r['share'] for r in runs):>7.0%}"
            f"{statistics.median(lat) * 1000 if lat else float('nan'):>11.1f}{_pct(lat, 0.99) * 1000:>11.1f}"
        )


if __name__ == "__main__":
    main()
