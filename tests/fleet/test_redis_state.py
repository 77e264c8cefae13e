"""Breakers and pacing shared by a fleet of worker processes through a real Redis on 127.0.0.1."""

from __future__ import annotations

import multiprocessing
import os
import signal
import time
from typing import Any

import pytest

from otel_errcompact import compact_text
from otel_errcompact.exceptions import ConfigurationError
from otel_errcompact.recovery.breaker import circuit_open_text, fingerprint
from otel_errcompact.recovery.redis_state import FailoverStateStore, RedisStateStore, redis_state_store
from otel_errcompact.recovery.state import InMemoryStateStore, RateBudget
from tests.fleet import workers
from tests.fleet.conftest import RedisServer

SPAWN = multiprocessing.get_context("spawn")


def _collect(queue: Any, n: int, timeout: float = 60) -> list[Any]:
    return [queue.get(timeout=timeout) for _ in range(n)]


def test_the_redis_store_decides_as_the_in_memory_store_does(redis_server: RedisServer) -> None:
    """The same operations, the same clock: the same answers, step by step (times to the millisecond:
    Redis's JSON keeps 14 significant digits, a tenth of a millisecond at today's epoch seconds)."""
    stores = [InMemoryStateStore(), RedisStateStore(redis_server.client())]
    digest = compact_text(workers.real_failure())
    fp, other = fingerprint('{"table": "orders"}'), fingerprint('{"table": "users"}')

    def step(store: Any, now: float) -> list[Any]:
        seen: list[Any] = []
        for t in (now, now + 1, now + 2):
            u = store.breaker_failure("q", digest.key, fp, digest.line, t, threshold=3, cooldown_s=10)
            seen.append((u.snapshot.state, u.snapshot.failures, [(c.old, c.new) for c in u.changes]))
        for t, f in ((now + 3, fp), (now + 3, other), (now + 20, fp), (now + 20.5, fp)):
            a = store.breaker_admit("q", f, t)
            seen.append((a.allowed, a.probe, [(c.old, c.new) for c in a.changes]))
        store.breaker_release("q", digest.key)
        a = store.breaker_admit("q", fp, now + 21)
        seen.append((a.allowed, a.probe))
        u = store.breaker_failure("q", digest.key, fp, digest.line, now + 22, threshold=3, cooldown_s=10)
        seen.append((u.snapshot.state, [(c.old, c.new) for c in u.changes]))
        a = store.breaker_admit("q", fp, now + 40)
        seen.append((a.allowed, a.probe))
        seen.append([(c.old, c.new) for c in store.breaker_success("q", fp, now + 41)])
        seen.append(store.breaker_snapshot("q", digest.key))
        store.pace_settle({"h|requests": RateBudget(60, 10, now + 50, 60)}, now)
        seen.append(round(store.pace_reserve({"h|requests": 1.0}, now), 3))
        seen.append(round(store.pace_reserve({"h|requests": 1.0}, now + 1), 3))  # two in flight
        store.pace_settle({"h|requests": RateBudget(60, 9, now + 49, 60)}, now + 2, {"h|requests": 1.0})
        seen.append(round(store.pace_reserve({"h|requests": 1.0}, now + 2), 3))
        seen.append(round(store.pace_reserve({"h|requests": 1.0}, now + 100), 3))  # the window has reset
        seen.append(store.pace_reserve({"unknown|requests": 1.0}, now))
        store.pace_settle({"o|requests": RateBudget(2, 0, now + 1, 1)}, now)
        seen.append([round(store.pace_reserve({"o|requests": 1.0}, now), 3) for _ in range(4)])  # past the limit
        store.pace_settle({"o|requests": RateBudget(2, 1, now + 0.5, 1)}, now + 0.1, {"o|requests": 1.0})  # older
        seen.append(round(store.pace_reserve({"o|requests": 1.0}, now + 0.1), 3))
        return seen

    now = time.time()
    assert step(stores[0], now) == step(stores[1], now)


def test_three_failures_across_workers_open_the_breaker_for_every_worker(redis_server: RedisServer) -> None:
    results = SPAWN.Queue()
    procs = [SPAWN.Process(target=workers.fail_once, args=(redis_server.url, results)) for _ in range(3)]
    for p in procs:
        p.start()
    outcomes = _collect(results, 3)
    for p in procs:
        p.join(30)
    assert all(allowed for _pid, allowed, _state in outcomes)  # each worker saw only its own single failure
    assert sorted(state for *_rest, state in outcomes) == ["closed", "closed", "open"]

    # A fourth worker, which never failed, is refused at once: the model gets the compact line.
    b = workers.breakers(redis_server.url)
    admission = b.admit(workers.TOOL, fingerprint(workers.ARGS))
    assert not admission.allowed
    text = circuit_open_text(admission, time.time())
    assert text.startswith("circuit open: [OperationalError]") and "no such table: orders (×3)" in text
    # Other arguments of the tool and other tools are unaffected.
    assert b.admit(workers.TOOL, fingerprint('{"table": "users"}')).allowed
    assert b.admit("search", fingerprint(workers.ARGS)).allowed


def _open_breaker(url: str) -> None:
    b = workers.breakers(url, cooldown_s=0.0)
    digest = compact_text(workers.real_failure())
    for _ in range(3):
        b.failure(workers.TOOL, digest.key, fingerprint(workers.ARGS), digest.line)


def test_exactly_one_worker_gets_the_half_open_probe(redis_server: RedisServer) -> None:
    _open_breaker(redis_server.url)
    results = SPAWN.Queue()
    start_at = time.time() + 3.0  # after every worker has started
    procs = [SPAWN.Process(target=workers.race_for_probe, args=(redis_server.url, start_at, results)) for _ in range(8)]
    for p in procs:
        p.start()
    outcomes = _collect(results, 8)
    for p in procs:
        p.join(30)
    probes = [pid for pid, allowed, probe in outcomes if probe]
    assert len(probes) == 1
    assert sum(allowed for _pid, allowed, _probe in outcomes) == 1


def test_a_killed_worker_leaves_no_stuck_probe(redis_server: RedisServer) -> None:
    _open_breaker(redis_server.url)
    lease = 1.0
    results = SPAWN.Queue()
    worker = SPAWN.Process(target=workers.take_probe_and_hang, args=(redis_server.url, lease, results))
    worker.start()
    _pid, allowed, probe = results.get(timeout=60)
    assert allowed and probe
    os.kill(worker.pid or 0, signal.SIGKILL)  # dies holding the probe
    worker.join(10)
    b = workers.breakers(redis_server.url, cooldown_s=0.0, probe_timeout_s=lease)
    fp = fingerprint(workers.ARGS)
    assert not b.admit(workers.TOOL, fp).allowed  # the probe is still out
    time.sleep(lease + 0.2)
    after = b.admit(workers.TOOL, fp)
    assert after.allowed and after.probe  # its lease ran out: the next caller probes


def test_workers_whose_clocks_disagree_keep_one_cooldown_and_one_probe(redis_server: RedisServer) -> None:
    """Each worker passes its own clock's time; the store reads it on Redis's clock, so a worker ten
    minutes behind neither cuts the fleet's cooldown short nor takes a probe lease others see as run out."""
    digest = compact_text(workers.real_failure())
    fp = fingerprint(workers.ARGS)
    behind = workers.breakers(redis_server.url, skew_s=-600.0)
    on_time = workers.breakers(redis_server.url)
    for _ in range(3):
        behind.failure(workers.TOOL, digest.key, fp, digest.line)
    refused = on_time.admit(workers.TOOL, fp)
    assert not refused.allowed and refused.breaker is not None and refused.breaker.retry_at is not None
    assert 20 < refused.breaker.retry_at - on_time.clock() <= 30  # the 30 s cooldown, on this worker's clock
    assert "retry after 30s" in circuit_open_text(refused, on_time.clock())

    on_time.store.breaker_success(workers.TOOL, fp, on_time.clock())
    on_time = workers.breakers(redis_server.url, cooldown_s=0.0)
    behind = workers.breakers(redis_server.url, cooldown_s=0.0, skew_s=-600.0)
    for _ in range(3):
        on_time.failure(workers.TOOL, digest.key, fp, digest.line)
    probe = behind.admit(workers.TOOL, fp)
    assert probe.allowed and probe.probe
    assert not on_time.admit(workers.TOOL, fp).allowed  # the probe is out: one probe fleet-wide


def test_a_slow_first_call_does_not_hold_the_fleets_probe_back(redis_server: RedisServer) -> None:
    """A worker's first call to Redis is slow (here Redis is paused for 80 ms as it arrives; in production,
    the call that also connects): Redis reads ``TIME`` at its end, so the offset measured on it runs 40 ms
    ahead. The worker's next, quick call measures it again, so the breaker it opens with a 0 s cooldown is
    half-open at once for the rest of the fleet, not 40 ms later."""
    import threading

    digest = compact_text(workers.real_failure())
    fp = fingerprint(workers.ARGS)
    opener = workers.breakers(redis_server.url, cooldown_s=0.0)
    other = workers.breakers(redis_server.url, cooldown_s=0.0)
    other.admit(workers.TOOL, fp)  # connected, its offset measured on a quick call
    redis_server.pause()
    threading.Timer(0.08, redis_server.resume).start()
    assert opener.admit(workers.TOOL, fp).allowed  # the slow first call
    for _ in range(3):
        opener.failure(workers.TOOL, digest.key, fp, digest.line)
    probe = other.admit(workers.TOOL, fp)
    assert probe.allowed and probe.probe


def test_redis_clock_rides_on_the_workers_own_calls(redis_server: RedisServer) -> None:
    """A worker whose clock is ten minutes behind writes times on Redis's clock from its very first call,
    and every command it sends is one of its breaker and pacer scripts: no round trip to ``TIME`` of its
    own on the agent's thread (Redis's slow log, at 0 µs, lists every command with the client that sent
    it; a script's own commands are listed without one)."""
    import json

    import redis

    admin = redis_server.client()
    admin.config_set("slowlog-log-slower-than", 0)
    admin.slowlog_reset()
    skew_s = -600.0
    store = RedisStateStore(
        redis.Redis.from_url(redis_server.url, socket_timeout=1, client_name="agent"),
        clock=lambda: time.time() + skew_s,
    )
    digest = compact_text(workers.real_failure())
    fp = fingerprint(workers.ARGS)
    for _ in range(3):
        store.breaker_failure(workers.TOOL, digest.key, fp, digest.line, store.clock(), threshold=3, cooldown_s=30)
    assert not store.breaker_admit(workers.TOOL, fp, store.clock()).allowed
    store.pace_settle({"h|requests": RateBudget(60, 10, store.clock() + 50, 60)}, store.clock())
    store.pace_reserve({"h|requests": 1.0}, store.clock())
    admin.config_set("slowlog-log-slower-than", 10_000)

    sent = [e["command"].split()[0].upper() for e in admin.slowlog_get(128) if e.get("client_name") == b"agent"]
    assert sent and set(sent) <= {b"EVALSHA", b"EVAL", b"SCRIPT", b"CLIENT"}, sent  # CLIENT: the name, once
    seconds, micros = admin.time()
    (raw,) = admin.hvals(f"errcompact:breakers:{workers.TOOL}")
    assert abs(json.loads(raw)["opened_at"] - (seconds + micros / 1e6)) < 60  # on Redis's clock, not 600 s behind


def test_redis_restarting_mid_run_raises_nothing_and_state_resumes(redis_server: RedisServer) -> None:
    results, up, stop = SPAWN.Queue(), SPAWN.Queue(), SPAWN.Event()
    procs = [SPAWN.Process(target=workers.churn, args=(redis_server.url, up, stop, results)) for _ in range(4)]
    for p in procs:
        p.start()
    _collect(up, 4)  # every worker is running against Redis
    redis_server.restart(down_s=1.0)
    time.sleep(2.0)  # long enough for every worker to retry Redis (retry_s = 0.3 s)
    stop.set()
    outcomes = _collect(results, 4, timeout=90)
    for p in procs:
        p.join(30)
    for _pid, calls, errors, degraded, still_degraded in outcomes:
        assert errors == []
        assert calls > 50
        assert len(degraded) == 1  # said once per outage
        assert not still_degraded  # back on Redis by the end
    # The shared state lives again in the restarted Redis.
    assert redis_server.client().exists("errcompact:breakers:query_db")


def test_one_call_tries_a_hung_redis_again_while_other_threads_answer_locally(redis_server: RedisServer) -> None:
    """Redis accepts connections and answers nothing (its process paused). Once the retry is due, eight
    threads of the worker call at once, and eight more after ``retry_s`` has passed again while the retry
    still waits on its 2 s timeout: one call tries Redis again (one new connection, counted by Redis once
    it runs again), all the others answer from local state instead of each waiting out the timeout."""
    import threading

    admin = redis_server.client()
    store = redis_state_store(redis_server.url, timeout_s=2.0)
    store.retry_s = 0.3
    assert store.breaker_admit("t", "fp", time.time()).allowed  # connected
    before = admin.info("stats")["total_connections_received"]
    redis_server.pause()
    try:
        assert store.breaker_admit("t", "fp", time.time()).allowed and store.degraded  # times out: local state
        time.sleep(store.retry_s + 0.1)  # the retry is due
        threads = []
        for wave in range(2):
            start = threading.Barrier(8)

            def call(start: threading.Barrier = start) -> None:
                start.wait()
                store.breaker_admit("t", "fp", time.time())

            threads += [threading.Thread(target=call) for _ in range(8)]
            for t in threads[-8:]:
                t.start()
            if wave == 0:
                time.sleep(store.retry_s + 0.3)  # past retry_s again, the retry still in flight
        for t in threads:
            t.join(30)
    finally:
        redis_server.resume()
    assert accepted_since(admin, before) == 1


def accepted_since(admin: Any, before: int) -> int:
    """Connections Redis has accepted since its count was ``before``, once it accepted the first of them.

    A connection made while Redis was paused waits in the kernel's queue until Redis runs again, and
    Redis may answer the admin client's ``INFO`` before it accepts it; it then accepts every queued
    connection at once, so the count that first moves is the count of them all."""
    deadline = time.monotonic() + 10
    while True:
        count: int = admin.info("stats")["total_connections_received"] - before
        if count or time.monotonic() > deadline:
            return count
        time.sleep(0.01)


def test_a_retry_interrupted_mid_call_leaves_the_next_one_due(redis_server: RedisServer) -> None:
    """The call that tries a hung Redis again is interrupted (Ctrl-C lands while it waits): the interrupt
    reaches the host, and its claim on the retry ends with it, so a later call tries Redis again and the
    store is shared again once Redis answers, rather than answering locally for good."""
    import signal

    store = redis_state_store(redis_server.url, timeout_s=1.0)
    store.retry_s = 0.1
    assert store.breaker_admit("t", "fp", time.time()).allowed  # connected
    redis_server.pause()
    previous = signal.signal(signal.SIGALRM, signal.default_int_handler)
    try:
        assert store.breaker_admit("t", "fp", time.time()).allowed and store.degraded  # times out: local state
        time.sleep(store.retry_s + 0.1)
        signal.setitimer(signal.ITIMER_REAL, 0.2)
        with pytest.raises(KeyboardInterrupt):
            store.breaker_admit("t", "fp", time.time())  # the retry, interrupted
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)
        redis_server.resume()
    time.sleep(store.retry_s + 0.1)
    assert store.breaker_admit("t", "fp", time.time()).allowed
    assert not store.degraded


def test_a_dead_redis_degrades_within_the_timeout(tmp_path: Any) -> None:
    from tests.fleet.conftest import free_port

    degraded: list[str] = []
    store = redis_state_store(f"redis://127.0.0.1:{free_port()}/0", timeout_s=0.2, on_degraded=degraded.append)
    started = time.monotonic()
    for _ in range(50):
        assert store.breaker_admit("t", "fp", time.time()).allowed
        store.pace_settle({"h|requests": RateBudget(10, 5, time.time() + 5, 10)}, time.time())
    assert time.monotonic() - started < 5  # one failed connect, then local answers until retry_s
    assert isinstance(store, FailoverStateStore) and store.degraded and len(degraded) == 1


@pytest.mark.parametrize(("setting", "want"), [
    ({"probe_timeout_s": -1}, "RedisStateStore.probe_timeout_s=-1: expected a finite number > 0"),
    ({"probe_timeout_s": float("nan")}, "RedisStateStore.probe_timeout_s=nan: expected a finite number > 0"),
    ({"reservation_ttl_s": 0}, "RedisStateStore.reservation_ttl_s=0: expected a finite number > 0"),
    ({"ttl_s": 0}, "RedisStateStore.ttl_s=0: expected an integer ≥ 1"),
    ({"max_breakers_per_tool": 0}, "RedisStateStore.max_breakers_per_tool=0: expected an integer ≥ 1"),
    ({"max_fingerprints": 2.5}, "RedisStateStore.max_fingerprints=2.5: expected an integer ≥ 1"),
    ({"clock_check_s": float("inf")}, "RedisStateStore.clock_check_s=inf: expected a finite number > 0"),
], ids=["probe-negative", "probe-nan", "reservation-zero", "ttl-zero", "breakers-zero", "fingerprints-float",
        "clock-inf"])
def test_the_redis_store_refuses_a_bad_setting_naming_it(
    redis_server: RedisServer, setting: dict[str, Any], want: str
) -> None:
    """A shared store's settings are checked as the in-process store's are, when it is made: a negative
    probe lease let every worker probe a half-open breaker at once, and a NaN one never expired."""
    with pytest.raises(ConfigurationError) as refused:
        RedisStateStore(redis_server.client(), **setting)
    assert str(refused.value) == want
    RedisStateStore(redis_server.client())  # the defaults pass
