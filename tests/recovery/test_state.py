"""The in-memory recovery state store: breaker transitions, the single half-open probe, pacing reservations."""

from __future__ import annotations

import threading
from collections.abc import Callable

import pytest

from otel_errcompact import ConfigurationError
from otel_errcompact.recovery.breaker import BreakerPolicy
from otel_errcompact.recovery.retry import RetryPolicy
from otel_errcompact.recovery.state import (
    InMemoryStateStore,
    RateBudget,
    RecoveryStateStore,
    pacing_delay,
    share_delay,
)


def fail(store: InMemoryStateStore, key: str = "k", fp: str = "a", now: float = 0.0):  # type: ignore[no-untyped-def]
    return store.breaker_failure("fetch", key, fp, f"[HTTP 503] {key}", now, threshold=3, cooldown_s=30.0)


def test_is_a_recovery_state_store() -> None:
    assert isinstance(InMemoryStateStore(), RecoveryStateStore)


def test_opens_at_threshold_and_refuses_only_the_fingerprints_that_tripped_it() -> None:
    s = InMemoryStateStore()
    assert fail(s).snapshot.state == "closed"  # type: ignore[union-attr]
    assert fail(s).changes == ()
    update = fail(s)
    assert update.snapshot is not None and update.snapshot.state == "open"
    assert [(c.old, c.new, c.failures) for c in update.changes] == [("closed", "open", 3)]
    refused = s.breaker_admit("fetch", "a", 10.0)
    assert not refused.allowed and refused.breaker is not None and refused.breaker.retry_at == 30.0
    assert s.breaker_admit("fetch", "other-args", 10.0).allowed
    assert s.breaker_admit("search", "a", 10.0).allowed


def test_other_keys_of_the_same_tool_count_apart() -> None:
    s = InMemoryStateStore()
    fail(s, "k1")
    fail(s, "k2")
    fail(s, "k1")
    assert s.breaker_snapshot("fetch", "k1").state == "closed"  # type: ignore[union-attr]
    assert s.breaker_snapshot("fetch", "k2").failures == 1  # type: ignore[union-attr]


def test_cooldown_gives_exactly_one_probe_to_many_threads() -> None:
    s = InMemoryStateStore()
    for _ in range(3):
        fail(s)
    admitted: list[bool] = []
    barrier = threading.Barrier(8)

    def attempt() -> None:
        barrier.wait()
        admitted.append(s.breaker_admit("fetch", "a", 31.0).probe)

    threads = [threading.Thread(target=attempt) for _ in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert sorted(admitted) == [False] * 7 + [True]
    assert s.breaker_snapshot("fetch", "k").state == "half_open"  # type: ignore[union-attr]


def test_probe_success_closes_probe_failure_reopens_release_gives_probe_back() -> None:
    s = InMemoryStateStore()
    for _ in range(3):
        fail(s)
    assert s.breaker_admit("fetch", "a", 31.0).probe
    s.breaker_release("fetch", "k")
    assert s.breaker_admit("fetch", "a", 31.5).probe
    reopened = fail(s, now=32.0)
    assert [(c.old, c.new) for c in reopened.changes] == [("half_open", "open")]
    assert reopened.snapshot is not None and reopened.snapshot.retry_at == 62.0
    assert not s.breaker_admit("fetch", "a", 40.0).allowed
    assert s.breaker_admit("fetch", "a", 62.0).probe
    closed = s.breaker_success("fetch", "a", 63.0)
    assert [(c.old, c.new) for c in closed] == [("half_open", "closed")]
    assert s.breaker_snapshot("fetch", "k") is None
    assert s.breaker_admit("fetch", "a", 63.0) .allowed


def test_the_half_open_probe_is_a_lease_of_probe_timeout_s() -> None:
    """A probe that never ends (its call hung) holds the half-open breaker for ``probe_timeout_s``, 30 s by
    default as in the Redis store; then the next caller gets the probe. ``probe_out`` says whether one holds it."""
    s = InMemoryStateStore()
    for _ in range(3):
        fail(s)
    first = s.breaker_admit("fetch", "a", 31.0)
    assert first.probe and first.breaker is not None and first.breaker.probe_out
    refused = s.breaker_admit("fetch", "a", 60.5)
    assert not refused.allowed and refused.breaker is not None and refused.breaker.probe_out
    second = s.breaker_admit("fetch", "a", 61.0)  # the first probe's lease has run out
    assert second.probe and second.breaker is not None and second.breaker.probe_out
    assert not second.changes  # still half-open: only the probe changed hands
    assert not s.breaker_admit("fetch", "a", 62.0).allowed  # the second probe's lease holds
    reopened = fail(s, now=63.0)
    assert reopened.snapshot is not None and reopened.snapshot.state == "open" and not reopened.snapshot.probe_out

    short = InMemoryStateStore(probe_timeout_s=0.3)
    for _ in range(3):
        fail(short)
    assert short.breaker_admit("fetch", "a", 31.0).probe
    assert not short.breaker_admit("fetch", "a", 31.2).allowed
    assert short.breaker_admit("fetch", "a", 31.4).probe


def test_bounded() -> None:
    s = InMemoryStateStore(max_entries=4)
    for i in range(50):
        s.breaker_failure("t", f"k{i}", "a", "d", 0.0, threshold=3, cooldown_s=1)
        s.pace_settle({f"b{i}": RateBudget(10, 5, 1.0, 1.0)}, 0.0, None)
    assert len(s._breakers) == 4 and len(s._paces) == 4


def test_pacing_delay_formula() -> None:
    bucket = RateBudget(limit=100, remaining=40, reset_at=36.0, window_s=60.0)  # one unit per 0.6 s
    assert pacing_delay(bucket, now=0.0) == 0.0  # a bucket with units left lets them go at once
    assert pacing_delay(bucket, now=0.0, pending=41) == pytest.approx(0.6)  # the 41st waits for one to come back
    window = RateBudget(limit=100, remaining=40, reset_at=36.0, window_s=60.0, refill="window")
    # a fixed window may spend its 40 at any time before the reset: spread one unit apart, the 40th at 36 s
    assert pacing_delay(window, now=0.0) == pytest.approx(12.6)
    assert pacing_delay(window, now=0.0, pending=40) == pytest.approx(36.0)
    assert pacing_delay(window, now=37.0) == 0.0 == pacing_delay(bucket, now=37.0)  # reset: full again
    hold = RateBudget(1, 0, 5.0, 5.0, refill="hold")
    assert pacing_delay(hold, now=1.0, pending=9) == 4.0 and pacing_delay(hold, now=6.0) == 0.0


def test_an_empty_bucket_lets_one_request_go_per_unit_as_units_come_back() -> None:
    empty = RateBudget(limit=4, remaining=0, reset_at=2.0, window_s=2.0)
    assert [pacing_delay(empty, 0.0, pending) for pending in range(1, 9)] == [0.5 * k for k in range(1, 9)]


def test_an_older_report_read_late_never_hands_back_spent_units() -> None:
    # a token bucket of 6 refilled at 6/s: the later count has spent one more unit
    newer = RateBudget(limit=6, remaining=2, reset_at=10.5 + 1 / 6, window_s=1.0)
    older = RateBudget(limit=6, remaining=3, reset_at=10.5, window_s=1.0)
    in_order, out_of_order = InMemoryStateStore(), InMemoryStateStore()
    for store, reports in ((in_order, [older, newer]), (out_of_order, [newer, older])):
        for _ in reports:
            store.pace_reserve({"api:requests": 1}, 10.0)
        for report in reports:
            store.pace_settle({"api:requests": report}, 10.0, {"api:requests": 1})
    delays = [[round(s.pace_reserve({"api:requests": 1}, 10.0), 6) for _ in range(6)] for s in (in_order, out_of_order)]
    by_newer = [round(max(pacing_delay(newer, 10.0, k), share_delay(newer, 10.0, k)), 6) for k in range(1, 7)]
    assert delays[0] == by_newer and by_newer == sorted(by_newer) and by_newer[-1] > 0
    # read late, the older count hands nothing back; the newer one, read while the older request was still
    # in flight, counted that request twice: out of order errs on the slow side, never the fast one
    assert all(late >= timely for late, timely in zip(delays[1], delays[0], strict=True))


def test_reservations_spread_concurrent_callers_until_responses_release_them() -> None:
    s = InMemoryStateStore(reservation_ttl_s=30.0)
    assert s.pace_reserve({"api:requests": 1}, 0.0) == 0.0  # nothing reported yet
    report = RateBudget(limit=10, remaining=5, reset_at=5.0, window_s=10.0)  # one unit a second
    s.pace_settle({"api:requests": report}, 0.0, {"api:requests": 1})
    delays = [s.pace_reserve({"api:requests": 1}, 0.0) for _ in range(7)]
    # what is left, spread to reach the reset, each reservation one unit later; at the reset it is full again
    assert delays == [1.0, 2.0, 3.0, 4.0, 5.0, 5.0, 5.0]
    for _ in range(7):  # the responses arrive and report the bucket empty
        s.pace_settle({"api:requests": RateBudget(10, 0, 10.1, 10.0)}, 0.1, {"api:requests": 1})
    assert s.pace_reserve({"api:requests": 1}, 0.1) >= 1.0  # at least until a unit has come back
    assert s.pace_reserve({"api:requests": 1}, 40.0) == 0.0  # reservations expired, the bucket refilled


def test_pacing_budget_and_reservations_bounded() -> None:
    s = InMemoryStateStore(max_entries=2)
    for i in range(10):
        s.pace_reserve({f"b{i}": 1}, 0.0)
    assert len(s._paces) == 2


@pytest.mark.parametrize(("make", "named"), [
    (lambda: BreakerPolicy(cooldown_s=float("nan")), "BreakerPolicy.cooldown_s=nan: expected a finite number ≥ 0"),
    (lambda: BreakerPolicy(cooldown_s=float("inf")), "BreakerPolicy.cooldown_s=inf: expected a finite number ≥ 0"),
    (lambda: BreakerPolicy(threshold=float("nan")), "BreakerPolicy.threshold=nan: expected an integer ≥ 1"),
    (lambda: RetryPolicy(initial_s=float("nan")), "RetryPolicy.initial_s=nan: expected a finite number ≥ 0"),
    (lambda: RetryPolicy(attempts=float("nan")), "RetryPolicy.attempts=nan: expected an integer ≥ 1"),
    (lambda: RetryPolicy(attempts=0), "RetryPolicy.attempts=0: expected an integer ≥ 1"),
    (lambda: InMemoryStateStore(probe_timeout_s=-1),
     "InMemoryStateStore.probe_timeout_s=-1: expected a finite number > 0"),
    (lambda: InMemoryStateStore(probe_timeout_s=float("nan")),
     "InMemoryStateStore.probe_timeout_s=nan: expected a finite number > 0"),
    (lambda: InMemoryStateStore(reservation_ttl_s=float("inf")),
     "InMemoryStateStore.reservation_ttl_s=inf: expected a finite number > 0"),
    (lambda: InMemoryStateStore(max_entries=-5), "InMemoryStateStore.max_entries=-5: expected an integer ≥ 1"),
], ids=["cooldown-nan", "cooldown-inf", "threshold-nan", "wait-nan", "attempts-nan", "attempts-zero",
        "probe-lease-negative", "probe-lease-nan", "reservation-inf", "max-entries-negative"])
def test_a_policy_no_clock_or_count_can_honour_is_refused(make: Callable[[], object], named: str) -> None:
    """NaN compares false with every bound: ``BreakerPolicy(cooldown_s=nan)`` made a breaker that never
    half-opened again, and ``RetryPolicy(initial_s=nan)`` raised from ``time.sleep`` into the agent at its
    first retry; ``InMemoryStateStore(probe_timeout_s=-1)`` gave a lease that never held, so every caller
    probed a half-open breaker. They are refused when made, naming the field, as the settings' own errors do."""
    with pytest.raises(ConfigurationError) as refused:
        make()
    assert str(refused.value).startswith(named), refused.value
