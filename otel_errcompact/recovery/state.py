"""The state behind the circuit breaker and the pacer, as one small protocol with atomic operations.

A breaker shared by the conversations of one process needs a lock; a breaker shared by a fleet of workers
needs a shared store (Redis). Both sit behind :class:`RecoveryStateStore`, whose every method is one
atomic unit: it reads and writes in one step and returns what it decided, so a Redis peer can implement
each method as one Lua script and no caller ever does read-modify-write across two calls. Time is passed
in (wall-clock seconds, so workers on several machines agree), which also makes the stores testable
without sleeping.

Breaker operations (keyed by tool name and dedup key; see :mod:`otel_errcompact.recovery.breaker`):

- :meth:`~RecoveryStateStore.breaker_admit` — may a call with this argument fingerprint run? Refuses it
  while a breaker of the tool that this fingerprint tripped is open; moves an open breaker whose cooldown
  has passed to half-open and hands out its single probe;
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
- :meth:`~RecoveryStateStore.pace_settle` — a response arrived: release its reservation and replace the
  budgets with what it reported (the server's count is the truth). A reservation whose response never
  came (a dropped connection) expires after ``reservation_ttl_s``, so nothing leaks.

:class:`InMemoryStateStore` is the default and the reference implementation; it is bounded (least
recently used entries are dropped beyond ``max_entries``).
"""

from __future__ import annotations

import threading
from collections import OrderedDict, deque
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from typing import Literal, Protocol, runtime_checkable

__all__ = [
    "Admission",
    "BreakerChange",
    "BreakerSnapshot",
    "BreakerState",
    "BreakerUpdate",
    "InMemoryStateStore",
    "RateBudget",
    "RecoveryStateStore",
    "pacing_delay",
]

BreakerState = Literal["closed", "open", "half_open"]

_MAX_FINGERPRINTS = 16
"""Argument fingerprints remembered per breaker: enough for a tool retried with a few variations."""


@dataclass(frozen=True, slots=True)
class BreakerSnapshot:
    """One breaker (tool, key) as the store holds it.

    ``failures`` counts failures of this key since the breaker last closed; ``retry_at`` is when an open
    breaker lets a probe through (wall-clock seconds); ``digest`` is the latest digest line of the key.
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


@dataclass(frozen=True, slots=True)
class RateBudget:
    """One rate-limit dimension as a response reported it: ``remaining`` of ``limit`` units per
    ``window_s`` seconds, fully replenished at ``reset_at`` (wall-clock seconds)."""

    limit: float
    remaining: float
    reset_at: float
    window_s: float


def pacing_delay(budget: RateBudget, now: float) -> float:
    """Seconds to wait so that usage does not outrun the elapsed fraction of the window.

    With ``used = (limit - remaining) / limit`` and ``elapsed = 1 - (reset_at - now) / window``, a call
    may go when ``used <= elapsed``; otherwise it waits ``(used - elapsed) * window``, which is
    ``(reset_at - now) - remaining * window / limit``: the remaining units, spread evenly, must reach to
    the reset. Once the reset has passed the window is fresh and nothing waits.

    >>> pacing_delay(RateBudget(limit=60, remaining=10, reset_at=50.0, window_s=60), now=0.0)
    40.0
    """
    time_left = budget.reset_at - now
    if time_left <= 0 or budget.limit <= 0 or budget.window_s <= 0:
        return 0.0
    return max(0.0, min(time_left, time_left - budget.remaining * budget.window_s / budget.limit))


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
    probe_out: bool = False
    fingerprints: OrderedDict[str, None] = field(default_factory=OrderedDict)

    def snapshot(self, tool: str, key: str) -> BreakerSnapshot:
        return BreakerSnapshot(
            tool, key, self.state, self.failures, self.digest, self.opened_at, self.retry_at, self.probe_out
        )


@dataclass(slots=True)
class _Pace:
    budget: RateBudget | None = None
    in_flight: deque[tuple[float, float]] = field(default_factory=deque)  # (expires at, cost), oldest first


class InMemoryStateStore:
    """The process-wide default store: dicts behind one lock, bounded to ``max_entries`` breakers and
    ``max_entries`` budgets (least recently used first out; an open breaker is dropped only when every
    entry is open).

    >>> s = InMemoryStateStore()
    >>> for _ in range(3):
    ...     u = s.breaker_failure("fetch", "k1", "args1", "[HTTP 503] …", 0.0, threshold=3, cooldown_s=30)
    >>> u.snapshot.state, s.breaker_admit("fetch", "args1", 1.0).allowed, s.breaker_admit("fetch", "x", 1.0).allowed
    ('open', False, True)
    """

    def __init__(self, max_entries: int = 4096, *, reservation_ttl_s: float = 60.0) -> None:
        self._max = max(1, max_entries)
        self._ttl = reservation_ttl_s
        self._lock = threading.Lock()
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
                    b.state, b.probe_out = "half_open", True
                    changes.append(BreakerChange(tool, key, "open", "half_open", b.failures, b.digest))
                    return Admission(True, b.snapshot(tool, key), probe=True, changes=tuple(changes))
                if b.state == "half_open" and not b.probe_out:
                    b.probe_out = True
                    return Admission(True, b.snapshot(tool, key), probe=True)
                return Admission(False, b.snapshot(tool, key))
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
                b.state, b.opened_at, b.retry_at, b.probe_out = "open", now, now + max(0.0, cooldown_s), False
            elif old == "open" and b.retry_at is not None:
                b.retry_at = max(b.retry_at, now + max(0.0, cooldown_s))  # a straggler extends the cooldown
            change = () if old == b.state else (BreakerChange(tool, key, old, b.state, b.failures, digest),)
            return BreakerUpdate(b.snapshot(tool, key), change)

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
                b.probe_out = False

    def breaker_snapshot(self, tool: str, key: str) -> BreakerSnapshot | None:
        with self._lock:
            b = self._breakers.get((tool, key))
            return b.snapshot(tool, key) if b is not None else None

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
                if now >= budget.reset_at:  # replenished since the report: full again
                    budget = p.budget = replace(budget, remaining=budget.limit, reset_at=now)
                pending = sum(c for _, c in p.in_flight)
                if now >= budget.reset_at and budget.limit > 0:
                    budget = replace(budget, reset_at=now + pending * budget.window_s / budget.limit)
                delay = max(delay, pacing_delay(replace(budget, remaining=budget.remaining - pending), now))
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
                self._pace(name).budget = budget

    def _pace(self, name: str) -> _Pace:
        p = self._paces.get(name)
        if p is None:
            while len(self._paces) >= self._max:
                self._paces.popitem(last=False)
            p = self._paces[name] = _Pace()
        else:
            self._paces.move_to_end(name)
        return p
