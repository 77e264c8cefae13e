"""The state behind the circuit breaker and the pacer, as one small protocol with atomic operations.

A breaker shared by the conversations of one process needs a lock; a breaker shared by a fleet of workers
needs a shared store (Redis). Both sit behind :class:`RecoveryStateStore`, whose every method is one
atomic unit: it reads and writes in one step and returns what it decided, so a Redis peer can implement
each method as one Lua script and no caller ever does read-modify-write across two calls. Time is passed
in (wall-clock seconds; the Redis store reads them on Redis's clock, so workers on several machines agree
even when their clocks do not), which also makes the stores testable without sleeping.

Breaker operations (keyed by tool name and dedup key; see :mod:`otel_errcompact.recovery.breaker`):

- :meth:`~RecoveryStateStore.breaker_admit` — may a call with this argument fingerprint run? Refuses it
  while a breaker of the tool that this fingerprint tripped is open; moves an open breaker whose cooldown
  has passed to half-open and hands out its single probe, as a lease of ``probe_timeout_s``: a probe that
  has not ended when it runs out (a call hung on a network read) no longer holds it, and the next caller
  gets the probe;
- :meth:`~RecoveryStateStore.breaker_failure` — count one failure of (tool, key); open at the threshold;
  a failed probe re-opens;
- :meth:`~RecoveryStateStore.breaker_success` — a call with this fingerprint succeeded: close the breakers
  it matched (the probe's included) and reset their counts;
- :meth:`~RecoveryStateStore.breaker_release` — a probe ended without a verdict (cancelled, or failed for
  another reason): give the probe back, the breaker stays half-open;
- :meth:`~RecoveryStateStore.breaker_snapshot` — read-only view for metrics and tests.

Pacer operations (keyed by a budget name such as ``api.example:requests``; see
:mod:`otel_errcompact.recovery.pacing`):

- :meth:`~RecoveryStateStore.pace_reserve` — reserve the cost of one request on several budgets at once
  (it counts as in flight) and return how long to wait before sending it;
- :meth:`~RecoveryStateStore.pace_settle` — a response arrived: release its reservation and take in
  what it reported (the server's count is the truth about what others spent).

A request waits for the later of two times. Its turn: the generic cell rate algorithm (GCRA) keeps one
time per budget, when it would be full again (:func:`full_at`); a reservation goes ``limit - 1`` units
ahead of it at most and pushes it one unit later; a report pushes it to what the server counted plus the
units still in flight. It only moves later, so a report read out of order (an older count, arriving after
a newer one) never hands back units that later requests spent. And its share (:func:`share_delay`): the
share of the window used must not outrun the share elapsed, which guards against callers of the same key
that the store does not see. A reservation whose send raised before a response (a dropped
connection, a timeout) is given back by :func:`~otel_errcompact.recovery.pacing.pace`'s client at once
(its turn stays spent: the request may have reached the server); one that nothing gave back (a worker
that died mid-request) expires after ``reservation_ttl_s``, so nothing leaks.

:class:`InMemoryStateStore` is the default and the reference implementation; it is bounded (least
recently used entries are dropped beyond ``max_entries``).
"""

from __future__ import annotations

import asyncio
import contextvars
import functools
import os
import sys
import threading
import time
from collections import OrderedDict, deque
from collections.abc import Callable, Mapping
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any, Literal, Protocol, TypeVar, runtime_checkable

from otel_errcompact._checks import check_integer, check_seconds
from otel_errcompact._forked import new_locks_in_child

__all__ = [
    "Admission",
    "BreakerChange",
    "BreakerSnapshot",
    "BreakerState",
    "BreakerUpdate",
    "InMemoryStateStore",
    "RateBudget",
    "RecoveryStateStore",
    "Refill",
    "full_at",
    "off_loop",
    "off_loop_later",
    "pacing_delay",
    "share_delay",
    "waits_on_io",
]

V = TypeVar("V")

BreakerState = Literal["closed", "open", "half_open"]

_MAX_FINGERPRINTS = 16
"""Argument fingerprints remembered per breaker: enough for a tool retried with a few variations."""


@dataclass(frozen=True, slots=True)
class BreakerSnapshot:
    """One breaker (tool, key) as the store holds it.

    ``failures`` counts failures of this key since the breaker last closed; ``retry_at`` is when an open
    breaker lets a probe through (wall-clock seconds); ``digest`` is the latest digest line of the key;
    ``probe_out`` is True while a half-open breaker's probe holds its lease.
    """

    tool: str
    key: str
    state: BreakerState
    failures: int
    digest: str
    opened_at: float | None = None
    retry_at: float | None = None
    probe_out: bool = False


@dataclass(frozen=True, slots=True)
class BreakerChange:
    """A state change of one breaker, for a span event and a metric."""

    tool: str
    key: str
    old: BreakerState
    new: BreakerState
    failures: int
    digest: str


@dataclass(frozen=True, slots=True)
class BreakerUpdate:
    """What a failure or success did: the breaker afterwards (None when it was dropped) and any change."""

    snapshot: BreakerSnapshot | None
    changes: tuple[BreakerChange, ...] = ()


@dataclass(frozen=True, slots=True)
class Admission:
    """The answer of :meth:`RecoveryStateStore.breaker_admit`.

    ``allowed`` False: the call must not run; ``breaker`` says which open breaker refused it. ``probe``
    True: the call is the single half-open probe of ``breaker`` and must end in a success, a failure or
    a release.
    """

    allowed: bool
    breaker: BreakerSnapshot | None = None
    probe: bool = False
    changes: tuple[BreakerChange, ...] = ()


Refill = Literal["bucket", "window", "hold"]


@dataclass(frozen=True, slots=True)
class RateBudget:
    """One rate-limit dimension as a response reported it: ``remaining`` of ``limit`` units per
    ``window_s`` seconds, fully replenished at ``reset_at`` (wall-clock seconds).

    ``refill`` says how the units come back: ``"bucket"``, a token bucket refilled continuously (OpenAI's
    and Anthropic's limits: ``reset_at`` is when it is full again); ``"window"``, a fixed window that has
    ``remaining`` until ``reset_at`` and then ``limit`` again (the IETF fields); ``"hold"``, nothing at
    all before ``reset_at`` (a 429's retry-after), and no limit after it.
    """

    limit: float
    remaining: float
    reset_at: float
    window_s: float
    refill: Refill = "bucket"


def full_at(budget: RateBudget, now: float) -> float:
    """When the budget would be full again if nothing more were spent: the "theoretical arrival time" of
    the generic cell rate algorithm (GCRA), which paces requests one ``window_s / limit`` apart and lets
    ``limit - 1`` of them ahead of that as a burst.

    A bucket's own report says it (``reset_at``; never earlier than the ``limit - remaining`` units
    missing take to refill). A fixed window may hand its ``remaining`` units out at any time before
    ``reset_at``, so it is taken as full only after those units are also spread past it: the pace never
    outruns either kind. A report whose reset has passed is a full budget.
    """
    if budget.limit <= 0 or budget.window_s <= 0 or now >= budget.reset_at:
        return now
    missing = (budget.limit - budget.remaining) * budget.window_s / budget.limit
    if budget.refill == "window":
        return budget.reset_at + missing
    return max(budget.reset_at, now + missing)


def pacing_delay(budget: RateBudget, now: float, pending: float = 1.0) -> float:
    """Seconds to wait before the ``pending``-th request in flight (this one included) may go, by what
    ``budget`` reports alone.

    GCRA: requests go one ``unit = window_s / limit`` apart, and up to ``limit - 1`` units ahead of the
    budget's :func:`full_at` time: ``delay = max(0, full_at + (pending - 1) * unit - (limit - 1) * unit
    - now)``. A token bucket with units left lets them go now; an empty one lets one go per unit, the
    first as soon as one unit has come back; a fixed window spreads what it has left until its reset.

    >>> bucket = RateBudget(limit=60, remaining=10, reset_at=50.0, window_s=60)
    >>> pacing_delay(bucket, 0.0), pacing_delay(bucket, 0.0, pending=11)
    (0.0, 1.0)
    >>> pacing_delay(RateBudget(60, 10, 50.0, 60, "window"), 0.0)  # 10 left for 50 s: the 1st goes at 41 s
    41.0
    """
    if budget.refill == "hold":
        return max(0.0, budget.reset_at - now)
    if budget.limit <= 0 or budget.window_s <= 0:
        return 0.0
    unit = budget.window_s / budget.limit
    slot = full_at(budget, now) + (pending - 1) * unit - max(0.0, budget.limit - 1) * unit
    return max(0.0, slot - now)


def share_delay(budget: RateBudget, now: float, pending: float = 1.0) -> float:
    """Seconds to wait so that the share of the window used does not outrun the share elapsed: the guard
    for callers of the same key that this pacer does not see (other services, other processes).

    With ``used = (limit - remaining + pending) / limit`` and ``elapsed = 1 - (reset_at - now) / window``,
    a call waits ``(used - elapsed) * window = (reset_at - now) - (remaining - pending) * unit``: what is
    left, spread evenly, must reach to the reset. At the reset the budget is full again, so no one waits past
    it for the first ``limit`` units; beyond those, one unit apart. Each unseen caller that reads the same
    report waits the same way, which keeps a fleet without shared state from spending one report twice.

    >>> share_delay(RateBudget(limit=60, remaining=10, reset_at=50.0, window_s=60), now=0.0)
    41.0
    >>> [share_delay(RateBudget(4, 0, 2.0, 2.0), 0.0, pending) for pending in (1, 4, 5, 6)]
    [2.0, 2.0, 2.5, 3.0]
    """
    time_left = budget.reset_at - now
    if budget.refill == "hold":
        return max(0.0, time_left)
    if time_left <= 0 or budget.limit <= 0 or budget.window_s <= 0:
        return 0.0
    unit = budget.window_s / budget.limit
    spread = time_left - (budget.remaining - pending) * unit
    return max(0.0, min(spread, time_left + max(0.0, pending - budget.limit) * unit))


@runtime_checkable
class RecoveryStateStore(Protocol):
    """Breaker and pacer state; every method is one atomic operation (see the module docstring)."""

    def breaker_admit(self, tool: str, fingerprint: str, now: float) -> Admission:
        """Decide whether a call of ``tool`` with arguments ``fingerprint`` may run now."""
        ...

    def breaker_failure(
        self, tool: str, key: str, fingerprint: str, digest: str, now: float, *, threshold: int, cooldown_s: float
    ) -> BreakerUpdate:
        """Count a failure of (tool, key); open the breaker at ``threshold`` for ``cooldown_s`` seconds."""
        ...

    def breaker_success(self, tool: str, fingerprint: str, now: float) -> tuple[BreakerChange, ...]:
        """Close and reset the tool's breakers that ``fingerprint`` tripped."""
        ...

    def breaker_release(self, tool: str, key: str) -> None:
        """Give back the half-open probe of (tool, key) without a verdict."""
        ...

    def breaker_snapshot(self, tool: str, key: str) -> BreakerSnapshot | None:
        """The breaker (tool, key), or None when it has no failures on record."""
        ...

    def pace_reserve(self, costs: Mapping[str, float], now: float) -> float:
        """Reserve ``costs`` (budget name → units) as in flight; return the seconds to wait before sending."""
        ...

    def pace_settle(
        self, budgets: Mapping[str, RateBudget], now: float, release: Mapping[str, float] | None = None
    ) -> None:
        """Release the reservation ``release`` and replace the estimates of ``budgets`` with a response's."""
        ...


@dataclass(slots=True)
class _Breaker:
    state: BreakerState = "closed"
    failures: int = 0
    digest: str = ""
    opened_at: float | None = None
    retry_at: float | None = None
    probe_until: float = 0.0  # when the half-open probe's lease runs out (0: no probe out)
    fingerprints: OrderedDict[str, None] = field(default_factory=OrderedDict)

    def snapshot(self, tool: str, key: str, now: float) -> BreakerSnapshot:
        probe_out = self.state == "half_open" and self.probe_until > now
        return BreakerSnapshot(
            tool, key, self.state, self.failures, self.digest, self.opened_at, self.retry_at, probe_out
        )


@dataclass(slots=True)
class _Pace:
    budget: RateBudget | None = None
    full_at: float = float("-inf")  # GCRA's theoretical arrival time
    in_flight: deque[tuple[float, float]] = field(default_factory=deque)  # (expires at, cost), oldest first


class InMemoryStateStore:
    """The process-wide default store: dicts behind one lock, bounded to ``max_entries`` breakers and
    ``max_entries`` budgets (least recently used first out; an open breaker is dropped only when every
    entry is open).

    The half-open probe is a lease of ``probe_timeout_s`` seconds, as in
    :class:`~otel_errcompact.recovery.redis_state.RedisStateStore`: a probe stuck in its call (a read that
    never returns) would otherwise keep every later call with its arguments refused for as long as it
    hangs. Once the lease has run out the next caller gets the probe.

    >>> s = InMemoryStateStore()
    >>> for _ in range(3):
    ...     u = s.breaker_failure("fetch", "k1", "args1", "[HTTP 503] …", 0.0, threshold=3, cooldown_s=30)
    >>> u.snapshot.state, s.breaker_admit("fetch", "args1", 1.0).allowed, s.breaker_admit("fetch", "x", 1.0).allowed
    ('open', False, True)
    """

    def __init__(
        self, max_entries: int = 4096, *, reservation_ttl_s: float = 60.0, probe_timeout_s: float = 30.0
    ) -> None:
        # A lease of -1 s or NaN never holds (every caller would probe a half-open breaker at once), and
        # a NaN reservation never runs out: refused here, not found out in the agent's calls.
        check_integer("InMemoryStateStore", "max_entries", max_entries, 1)
        check_seconds("InMemoryStateStore", "reservation_ttl_s", reservation_ttl_s, zero=False)
        check_seconds("InMemoryStateStore", "probe_timeout_s", probe_timeout_s, zero=False)
        self._max = max_entries
        self._ttl = reservation_ttl_s
        self.probe_timeout_s = probe_timeout_s
        self._lock = threading.Lock()
        new_locks_in_child(self, "_lock")
        self._breakers: OrderedDict[tuple[str, str], _Breaker] = OrderedDict()
        self._paces: OrderedDict[str, _Pace] = OrderedDict()

    # -- breaker -------------------------------------------------------------------------------------

    def breaker_admit(self, tool: str, fingerprint: str, now: float) -> Admission:
        with self._lock:
            changes: list[BreakerChange] = []
            for (t, key), b in self._breakers.items():
                if t != tool or b.state == "closed" or fingerprint not in b.fingerprints:
                    continue
                if b.state == "open" and b.retry_at is not None and now >= b.retry_at:
                    b.state, b.probe_until = "half_open", now + self.probe_timeout_s
                    changes.append(BreakerChange(tool, key, "open", "half_open", b.failures, b.digest))
                    return Admission(True, b.snapshot(tool, key, now), probe=True, changes=tuple(changes))
                if b.state == "half_open" and b.probe_until <= now:  # no probe out, or its lease ran out
                    b.probe_until = now + self.probe_timeout_s
                    return Admission(True, b.snapshot(tool, key, now), probe=True)
                return Admission(False, b.snapshot(tool, key, now))
            return Admission(True)

    def breaker_failure(
        self, tool: str, key: str, fingerprint: str, digest: str, now: float, *, threshold: int, cooldown_s: float
    ) -> BreakerUpdate:
        with self._lock:
            b = self._breakers.get((tool, key))
            if b is None:
                self._make_room()
                b = self._breakers[(tool, key)] = _Breaker()
            else:
                self._breakers.move_to_end((tool, key))
            b.failures += 1
            b.digest = digest
            b.fingerprints[fingerprint] = None
            b.fingerprints.move_to_end(fingerprint)
            while len(b.fingerprints) > _MAX_FINGERPRINTS:
                b.fingerprints.popitem(last=False)
            old = b.state
            if old == "half_open" or (old == "closed" and b.failures >= max(1, threshold)):
                b.state, b.opened_at, b.retry_at, b.probe_until = "open", now, now + max(0.0, cooldown_s), 0.0
            elif old == "open" and b.retry_at is not None:
                b.retry_at = max(b.retry_at, now + max(0.0, cooldown_s))  # a straggler extends the cooldown
            change = () if old == b.state else (BreakerChange(tool, key, old, b.state, b.failures, digest),)
            return BreakerUpdate(b.snapshot(tool, key, now), change)

    def breaker_success(self, tool: str, fingerprint: str, now: float) -> tuple[BreakerChange, ...]:
        with self._lock:
            changes: list[BreakerChange] = []
            for (t, key) in [k for k, b in self._breakers.items() if k[0] == tool and fingerprint in b.fingerprints]:
                b = self._breakers.pop((t, key))
                if b.state != "closed":
                    changes.append(BreakerChange(tool, key, b.state, "closed", b.failures, b.digest))
            return tuple(changes)

    def breaker_release(self, tool: str, key: str) -> None:
        with self._lock:
            b = self._breakers.get((tool, key))
            if b is not None and b.state == "half_open":
                b.probe_until = 0.0

    def breaker_snapshot(self, tool: str, key: str) -> BreakerSnapshot | None:
        """The breaker as it is now: its probe's lease is read against the wall clock, the clock the
        breakers pass in (this call is given no time), as the Redis store reads it."""
        with self._lock:
            b = self._breakers.get((tool, key))
            return b.snapshot(tool, key, time.time()) if b is not None else None

    def _make_room(self) -> None:
        while len(self._breakers) >= self._max:
            victim = next((k for k, b in self._breakers.items() if b.state == "closed"), None)
            if victim is None:
                victim = next(iter(self._breakers))
            del self._breakers[victim]

    # -- pacer ---------------------------------------------------------------------------------------

    def pace_reserve(self, costs: Mapping[str, float], now: float) -> float:
        with self._lock:
            delay = 0.0
            for name, cost in costs.items():
                p = self._pace(name)
                while p.in_flight and p.in_flight[0][0] <= now:  # reservations whose response never came
                    p.in_flight.popleft()
                if cost:
                    p.in_flight.append((now + self._ttl, cost))
                budget = p.budget
                if budget is None:
                    continue  # nothing reported yet: nothing to pace by
                if budget.refill == "hold":
                    delay = max(delay, budget.reset_at - now)
                elif budget.limit > 0 and budget.window_s > 0:
                    unit = budget.window_s / budget.limit
                    tat = max(p.full_at, now)
                    pending = sum(c for _, c in p.in_flight)
                    turn = tat - max(0.0, budget.limit - 1) * unit - now
                    delay = max(delay, turn, share_delay(budget, now, pending))
                    if cost:
                        p.full_at = tat + cost * unit
            return delay

    def pace_settle(
        self, budgets: Mapping[str, RateBudget], now: float, release: Mapping[str, float] | None = None
    ) -> None:
        with self._lock:
            for name, cost in (release or {}).items():
                p = self._pace(name)
                for i, (_, c) in enumerate(p.in_flight):
                    if c == cost:
                        del p.in_flight[i]
                        break
            for name, budget in budgets.items():
                p = self._pace(name)
                if budget.refill == "hold":
                    if p.budget is None or p.budget.refill != "hold" or budget.reset_at > p.budget.reset_at:
                        p.budget = budget
                    continue
                held = p.budget
                if held is None or held.refill == "hold" or now >= held.reset_at or budget.reset_at >= held.reset_at:
                    p.budget = budget  # the latest count; an older one read late stays out of the share
                if budget.limit > 0 and budget.window_s > 0:
                    pending = sum(c for _, c in p.in_flight) * budget.window_s / budget.limit
                    p.full_at = max(p.full_at, full_at(budget, now) + pending)

    def _pace(self, name: str) -> _Pace:
        p = self._paces.get(name)
        if p is None:
            while len(self._paces) >= self._max:
                self._paces.popitem(last=False)
            p = self._paces[name] = _Pace()
        else:
            self._paces.move_to_end(name)
        return p


def waits_on_io(store: RecoveryStateStore) -> bool:
    """Whether ``store``'s operations may wait on I/O: any store but the in-process one (a shared store's
    round trip, or up to its timeout while the server is down). Async callers run them with
    :func:`off_loop` then; the in-process store's, a lock and a few dict operations, run in line."""
    return not isinstance(store, InMemoryStateStore)


_executor: ThreadPoolExecutor | None = None
_executor_pid = 0
_executor_lock = threading.Lock()
new_locks_in_child(sys.modules[__name__], "_executor_lock")


def _store_threads() -> ThreadPoolExecutor:
    """The threads async callers wait for a shared store on: the library's own, made in each process (a
    forked worker's copy of its parent's pool has no threads). Not the event loop's default executor:
    hosts run their blocking work there (LangGraph its sync tools), and a breaker's admission must not
    queue behind a slow tool."""
    global _executor, _executor_pid
    with _executor_lock:
        if _executor is None or _executor_pid != os.getpid():
            _executor = ThreadPoolExecutor(max_workers=4, thread_name_prefix="errcompact-state")
            _executor_pid = os.getpid()
        return _executor


async def off_loop(operation: Callable[..., V], *args: Any) -> V:
    """``operation(*args)``, an operation on a shared store, from async code without blocking the event
    loop: on one of the library's threads, in a copy of the caller's context (so the current span there
    is the caller's, and gets the events of a breaker's changes). Run in line when no thread can be
    started (the interpreter is shutting down)."""
    loop = asyncio.get_running_loop()
    try:
        run = functools.partial(contextvars.copy_context().run, operation, *args)
        waiting = loop.run_in_executor(_store_threads(), run)
    except RuntimeError:
        return operation(*args)
    return await waiting


def off_loop_later(operation: Callable[..., object], *args: Any) -> None:
    """``operation(*args)`` on one of the library's threads, not waited for (see :func:`off_loop`)."""
    try:
        _store_threads().submit(contextvars.copy_context().run, operation, *args)
    except RuntimeError:
        operation(*args)
