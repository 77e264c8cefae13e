"""Pacing shared through Redis: workers draw from one budget, the one the API key really has."""

from __future__ import annotations

import multiprocessing
import time

from otel_errcompact.wire_server import ModelWireServer, TokenBucket, serve
from tests.fleet import workers
from tests.fleet.conftest import RedisServer

SPAWN = multiprocessing.get_context("spawn")


def _fleet(base_url: str, redis_url: str | None, n: int, seconds: float) -> tuple[int, int]:
    results = SPAWN.Queue()
    start_at = time.time() + 4.0  # every worker started and imported
    procs = [
        SPAWN.Process(target=workers.paced_requests, args=(base_url, redis_url, seconds, start_at, results))
        for _ in range(n)
    ]
    for p in procs:
        p.start()
    outcomes = [results.get(timeout=120) for _ in procs]
    for p in procs:
        p.join(30)
    return sum(o[1] for o in outcomes), sum(o[2] for o in outcomes)


def test_workers_sharing_pacing_state_stay_under_the_key_limit(redis_server: RedisServer) -> None:
    # 10 requests/s for the whole key; four workers that would each send far more than that.
    bucket = TokenBucket(capacity=10, rate=10)
    with serve(ModelWireServer(bucket=bucket)) as (_server, url):
        ok, limited = _fleet(url, redis_server.url, n=4, seconds=5.0)
    assert limited <= 2, (ok, limited)  # at most the first responses, before any worker has seen a header
    assert ok >= 30  # and they still use most of the budget (10/s for 5 s, plus the burst)
    # The shared budget is in Redis.
    assert redis_server.client().hlen("errcompact:pace") >= 1


def test_a_429_seen_by_one_worker_holds_another_through_redis(redis_server: RedisServer) -> None:
    from otel_errcompact.recovery.redis_state import redis_state_store
    from tests.recovery.test_pacing import a_429_seen_by_one_worker_holds_another

    a_429_seen_by_one_worker_holds_another(redis_state_store(redis_server.url))
