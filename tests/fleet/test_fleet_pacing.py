"""Pacing shared through Redis: workers draw from one budget, the one the API key really has."""

from __future__ import annotations

import asyncio
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
    assert list(redis_server.client().scan_iter("errcompact:pace:*"))


def test_a_429_seen_by_one_worker_holds_another_through_redis(redis_server: RedisServer) -> None:
    from otel_errcompact.recovery.redis_state import redis_state_store
    from tests.recovery.test_pacing import a_429_seen_by_one_worker_holds_another

    a_429_seen_by_one_worker_holds_another(redis_state_store(redis_server.url))


def test_the_budgets_of_a_key_no_longer_used_expire_while_others_stay_busy(redis_server: RedisServer) -> None:
    """One key's requests, then only another key's: the first key's budgets leave Redis at their TTL,
    though the fleet keeps writing the second's (a rotated-out key, a tenant gone: nothing piles up)."""
    import hashlib

    import openai

    from otel_errcompact.recovery.pacing import Pacer, pace
    from otel_errcompact.recovery.redis_state import RedisStateStore

    pacer = Pacer(RedisStateStore(redis_server.client(), ttl_s=1))
    with serve(ModelWireServer(bucket=TokenBucket(capacity=100, rate=100))) as (_server, url):
        old, new = (
            pace(openai.OpenAI(base_url=f"{url}/v1", api_key=key, max_retries=0), pacer)
            for key in ("key-rotated-out", "key-in-use")
        )
        old.chat.completions.create(model="m", messages=[{"role": "user", "content": "hi"}])
        until = time.monotonic() + 2.5  # past the old key's TTL, writing the new key's budgets all along
        while time.monotonic() < until:
            new.chat.completions.create(model="m", messages=[{"role": "user", "content": "hi"}])
            time.sleep(0.2)
    redis = redis_server.client()
    stored = " ".join(
        f"{key.decode()} {' '.join(f.decode() for f in redis.hkeys(key))}" for key in redis.scan_iter("errcompact:*")
    )
    # The budgets are named by the hash of the Authorization header the client sends.
    hashed = {k: hashlib.sha256(f"Bearer {k}".encode()).hexdigest()[:12] for k in ("key-rotated-out", "key-in-use")}
    assert f"#{hashed['key-in-use']}|requests" in stored
    assert hashed["key-rotated-out"] not in stored


def test_an_async_client_waits_for_the_shared_budget_off_the_event_loop(redis_server: RedisServer) -> None:
    """Redis stops answering (its process paused) as a paced async client sends a request: the pacing
    hooks wait for the shared store off the event loop, so another task of the loop runs meanwhile. Here
    that task, started by a request hook of the client's own just before the pacer's, resumes Redis,
    which then answers within the store's timeout: no fallback to local state, and the key's budget is
    in Redis."""
    import openai

    from otel_errcompact.recovery.pacing import Pacer, pace
    from otel_errcompact.recovery.redis_state import redis_state_store

    store = redis_state_store(redis_server.url, timeout_s=3.0)
    tasks: list[asyncio.Task[None]] = []

    async def resume_redis() -> None:
        redis_server.resume()

    async def resume_redis_soon(_request: object) -> None:  # runs just before the pacer's hook
        tasks.append(asyncio.ensure_future(resume_redis()))

    async def request(url: str) -> str:
        client = openai.AsyncOpenAI(base_url=f"{url}/v1", api_key="k", max_retries=0)
        client._client.event_hooks = {"request": [resume_redis_soon], "response": []}
        pace(client, Pacer(store))
        reply = await client.chat.completions.create(model="m", messages=[{"role": "user", "content": "hi"}])
        await asyncio.gather(*tasks)
        return reply.choices[0].message.content or ""

    with serve(ModelWireServer(bucket=TokenBucket(capacity=100, rate=100))) as (_server, url):
        redis_server.pause()
        assert asyncio.run(request(url))
    assert not store.degraded
    assert list(redis_server.client().scan_iter("errcompact:pace:*"))
