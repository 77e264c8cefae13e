"""Worker processes for the fleet tests: each builds its own store client, as a real worker would."""

from __future__ import annotations

import json
import os
import sqlite3
import time
import traceback
from multiprocessing.queues import Queue
from typing import Any

from otel_errcompact import compact_text
from otel_errcompact.recovery.breaker import BreakerPolicy, CircuitBreakers, fingerprint
from otel_errcompact.recovery.redis_state import RedisStateStore, redis_state_store

TOOL = "query_db"
ARGS = json.dumps({"table": "orders"})


def real_failure() -> str:
    """A real error from running real code: the table the tool queries does not exist."""
    try:
        sqlite3.connect(":memory:").execute("SELECT * FROM orders")
    except sqlite3.OperationalError as exc:
        return "".join(traceback.format_exception(exc))
    raise AssertionError("the query succeeded")


def breakers(
    url: str, *, cooldown_s: float = 30.0, probe_timeout_s: float = 30.0, skew_s: float = 0.0
) -> CircuitBreakers:
    """A worker's breakers on the shared store; ``skew_s``: its clock runs that far ahead (behind when
    negative), as on a host whose clock is off."""
    import redis

    def clock() -> float:
        return time.time() + skew_s

    store = RedisStateStore(
        redis.Redis.from_url(url, socket_timeout=1), probe_timeout_s=probe_timeout_s, clock=clock
    )
    return CircuitBreakers(BreakerPolicy(threshold=3, cooldown_s=cooldown_s), store, clock=clock)


def fail_once(url: str, results: Queue[Any]) -> None:
    """One worker: its call is admitted, fails for real, and is counted in the shared breaker."""
    b = breakers(url)
    fp = fingerprint(ARGS)
    admission = b.admit(TOOL, fp)
    digest = compact_text(real_failure())
    update = b.failure(TOOL, digest.key, fp, digest.line)
    results.put((os.getpid(), admission.allowed, update.snapshot.state if update.snapshot else None))


def race_for_probe(url: str, start_at: float, results: Queue[Any]) -> None:
    """Many workers ask at the same moment; the breaker's cooldown has passed."""
    b = breakers(url, cooldown_s=0.0)
    while time.time() < start_at:
        time.sleep(0.001)
    admission = b.admit(TOOL, fingerprint(ARGS))
    results.put((os.getpid(), admission.allowed, admission.probe))


def take_probe_and_hang(url: str, probe_timeout_s: float, results: Queue[Any]) -> None:
    """A worker that takes the half-open probe and then never answers (the test kills it)."""
    b = breakers(url, cooldown_s=0.0, probe_timeout_s=probe_timeout_s)
    admission = b.admit(TOOL, fingerprint(ARGS))
    results.put((os.getpid(), admission.allowed, admission.probe))
    time.sleep(3600)


def churn(url: str, up: Queue[Any], stop: Any, results: Queue[Any]) -> None:
    """Breaker and pacer operations in a loop through the failover store while Redis may restart."""
    from otel_errcompact.recovery.pacing import Pacer

    degraded: list[str] = []
    store = redis_state_store(url, timeout_s=0.2, on_degraded=degraded.append)
    store.retry_s = 0.3
    b = CircuitBreakers(BreakerPolicy(threshold=3, cooldown_s=0.2), store)
    pacer = Pacer(store)
    fp = fingerprint(ARGS)
    digest = compact_text(real_failure())
    errors: list[str] = []
    calls = 0
    while not stop.is_set():
        try:
            admission = b.admit(TOOL, fp)
            if admission.allowed:
                b.failure(TOOL, digest.key, fp, digest.line)
            pacer.observe("api.test", 200, {"x-ratelimit-limit-requests": "1000",
                                            "x-ratelimit-remaining-requests": "900",
                                            "x-ratelimit-reset-requests": "1s"})
            pacer.reserve("api.test")
            calls += 1
            if calls == 20:
                up.put(os.getpid())
        except BaseException as exc:  # the test asserts there are none
            errors.append(repr(exc))
        time.sleep(0.005)
    results.put((os.getpid(), calls, errors, degraded, store.degraded))


def paced_requests(base_url: str, redis_url: str | None, seconds: float, start_at: float, results: Queue[Any]) -> None:
    """A worker calling a rate-limited model API through the real ``openai`` client, paced by the
    rate-limit headers, with its pacing state in Redis (shared) or in the process (``redis_url=None``)."""
    import openai

    from otel_errcompact.recovery.fleet import fleet_store
    from otel_errcompact.recovery.pacing import Pacer, pace

    client = openai.OpenAI(base_url=f"{base_url}/v1", api_key="test-key", max_retries=0)
    pacer = Pacer(fleet_store(redis_url))
    pace(client, pacer)
    ok = limited = 0
    while time.time() < start_at:
        time.sleep(0.001)
    deadline = time.time() + seconds
    while time.time() < deadline:
        try:
            client.chat.completions.create(model="m", messages=[{"role": "user", "content": "hi"}])
            ok += 1
        except openai.RateLimitError:
            limited += 1
    results.put((os.getpid(), ok, limited, time.time(), pacer.delayed_s))
