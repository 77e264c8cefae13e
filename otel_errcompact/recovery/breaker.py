"""A circuit breaker at the tool boundary, keyed by (tool, dedup key) and shared by every conversation.

Why keyed by the failure, not by the tool: "the test runner always times out" and "this one file does not
exist" are two different failures of one tool; the second must not block the first's other calls. So a
breaker counts the failures of one (tool, key); it opens after ``threshold`` (default 3) of them; while it
is open, the calls that tripped it (the same tool with the same arguments, by fingerprint) are refused and
the model gets a compact line instead, e.g. ``circuit open: [HTTP 503]: upstream down (×3); retry after
30s``. Other arguments of the tool, other error classes and other tools run as usual; a call with new
arguments that fails the same way joins the open breaker. After ``cooldown_s`` (default 30 s) the breaker
goes half-open and lets exactly one probe through: a success closes it, a failure re-opens it for another
cooldown. The probe is a lease of the store's ``probe_timeout_s`` (default 30 s): a probe hung in its call
no longer holds it once it runs out, and the next caller probes. Every state change goes to the listeners
(span event ``errcompact.breaker`` and the counter ``errcompact.breaker.changes`` when wired by ``init()``).

Why not pybreaker or aiobreaker: both wrap one call in one breaker object chosen *before* the call, while
the key here is known only *after* it failed (the dedup key of its error); both count every exception of
the wrapped call alike; pybreaker's storage interface is read-modify-write across separate calls
(``counter`` then ``increment_counter`` then ``state = …``), so a fleet sharing Redis can double-open or
let several probes through in half-open; and neither limits half-open to a single concurrent probe. The
state here sits behind :class:`~otel_errcompact.recovery.state.RecoveryStateStore`, whose operations are
atomic units.
"""

from __future__ import annotations

import hashlib
import logging
import threading
import time
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass

from otel_errcompact._checks import check_integer, check_seconds
from otel_errcompact._forked import new_locks_in_child
from otel_errcompact.recovery.state import (
    Admission,
    BreakerChange,
    BreakerUpdate,
    InMemoryStateStore,
    RecoveryStateStore,
    waits_on_io,
)

__all__ = [
    "BreakerListener", "BreakerPolicy", "CircuitBreakers", "ScopeTrips", "circuit_open_text", "fingerprint",
]

_log = logging.getLogger("otel_errcompact")

BreakerListener = Callable[[BreakerChange], None]


@dataclass(frozen=True, slots=True)
class BreakerPolicy:
    """When a breaker opens and how long it stays open. Plain, immutable, printable.

    >>> BreakerPolicy()
    BreakerPolicy(threshold=3, cooldown_s=30.0)
    """

    threshold: int = 3
    cooldown_s: float = 30.0

    def __post_init__(self) -> None:
        check_integer("BreakerPolicy", "threshold", self.threshold, 1)
        check_seconds("BreakerPolicy", "cooldown_s", self.cooldown_s)  # a NaN cooldown never ends


def fingerprint(arguments_json: str) -> str:
    """A short, stable hash of a call's arguments (JSON text): which calls tripped a breaker."""
    return hashlib.blake2b(arguments_json.encode("utf-8", "replace"), digest_size=8).hexdigest()


def circuit_open_text(admission: Admission, now: float) -> str:
    """The line the model gets instead of the tool's result while the breaker is open.

    >>> from otel_errcompact.recovery.state import BreakerSnapshot
    >>> b = BreakerSnapshot("fetch", "k", "open", 3, "[HTTP 503]: upstream down", 0.0, 30.0)
    >>> circuit_open_text(Admission(False, b), now=0.0)
    'circuit open: [HTTP 503]: upstream down (×3); retry after 30s'
    """
    b = admission.breaker
    if b is None:
        return "circuit open"
    wait = max(0.0, (b.retry_at or now) - now)
    when = f"retry after {wait:.0f}s" if b.state == "open" else "a probe is running; retry shortly"
    return f"circuit open: {b.digest} (×{b.failures}); {when}"


class CircuitBreakers:
    """All breakers of a process (or fleet, with a shared store), with listeners for state changes.

    Never raises: a store failure admits the call (a broken breaker must not stop the agent).
    """

    def __init__(
        self,
        policy: BreakerPolicy | None = None,
        store: RecoveryStateStore | None = None,
        *,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self.policy = policy or BreakerPolicy()
        self.store: RecoveryStateStore = store or InMemoryStateStore()
        self.clock = clock
        self._listeners: list[BreakerListener] = []
        self._refusal_listeners: list[Callable[[str], None]] = []
        self._lock = threading.Lock()
        new_locks_in_child(self, "_lock")

    @property
    def blocking(self) -> bool:
        """Whether the store's operations may wait on I/O: any store but the in-process one (a shared
        store's round trip, or up to its timeout while the server is down). Async callers run them off the
        event loop then."""
        return waits_on_io(self.store)

    def add_listener(self, listener: BreakerListener) -> None:
        """Call ``listener(change)`` on every state change."""
        with self._lock:
            self._listeners.append(listener)

    def add_refusal_listener(self, listener: Callable[[str], None]) -> None:
        """Call ``listener(tool)`` for every call an open breaker refuses (a per-worker signal that a
        fleet-wide alert counts across workers)."""
        with self._lock:
            self._refusal_listeners.append(listener)

    def admit(self, tool: str, fp: str, *, notify: bool = True) -> Admission:
        """May a call of ``tool`` with argument fingerprint ``fp`` run now? (``notify=False``: the caller
        passes ``admission.changes`` to :meth:`notify` itself, e.g. once the call's span is open.)"""
        try:
            admission = self.store.breaker_admit(tool, fp, self.clock())
        except Exception:
            _log.exception("otel-errcompact: breaker store failed; admitting the call")
            return Admission(True)
        if notify:
            self._tell(admission.changes)
        if not admission.allowed:
            for listener in list(self._refusal_listeners):
                try:
                    listener(tool)
                except Exception:
                    _log.exception("otel-errcompact: breaker refusal listener %r failed", listener)
        return admission

    def notify(self, changes: tuple[BreakerChange, ...]) -> None:
        """Tell the listeners about ``changes`` (see :meth:`admit`)."""
        self._tell(changes)

    def failure(self, tool: str, key: str, fp: str, digest: str) -> BreakerUpdate:
        """Count a failure of (tool, key) made by a call with fingerprint ``fp``."""
        try:
            update = self.store.breaker_failure(
                tool, key, fp, digest, self.clock(),
                threshold=self.policy.threshold, cooldown_s=self.policy.cooldown_s,
            )  # fmt: skip
        except Exception:
            _log.exception("otel-errcompact: breaker store failed; failure not counted")
            return BreakerUpdate(None)
        self._tell(update.changes)
        return update

    def success(self, tool: str, fp: str) -> None:
        """A call with fingerprint ``fp`` succeeded: the breakers it tripped close."""
        try:
            changes = self.store.breaker_success(tool, fp, self.clock())
        except Exception:
            _log.exception("otel-errcompact: breaker store failed; success not recorded")
            return
        self._tell(changes)

    def close(self, calls: list[tuple[str, str]]) -> None:
        """Close the breakers that these calls (tool, argument fingerprint) tripped, as a success of each
        would: a person reviewed the conversation that made them and lets it go on (``acknowledge``)."""
        for tool, fp in calls:
            self.success(tool, fp)

    def release(self, admission: Admission) -> None:
        """A probe ended without a verdict (cancelled, or failed another way): hand the probe back."""
        if admission.probe and admission.breaker is not None:
            try:
                self.store.breaker_release(admission.breaker.tool, admission.breaker.key)
            except Exception:
                _log.exception("otel-errcompact: breaker store failed; probe not released")

    def _tell(self, changes: tuple[BreakerChange, ...]) -> None:
        if not changes:
            return
        with self._lock:
            listeners = list(self._listeners)
        for change in changes:
            for listener in listeners:
                try:
                    listener(change)
                except Exception:
                    _log.exception("otel-errcompact: breaker listener %r failed", listener)


MAX_TRIPPED_SCOPES = 4096
"""Conversations whose breaker calls :class:`ScopeTrips` remembers."""
MAX_TRIPS_PER_SCOPE = 16
"""Calls (tool, argument fingerprint) remembered per conversation, as many as a breaker remembers."""


class ScopeTrips:
    """Which calls (tool, argument fingerprint) of each conversation ran into a breaker: failed calls it
    counted, and calls an open one refused. ``acknowledge(scope)`` closes their breakers, and only theirs:
    a breaker is shared by every conversation (and a fleet), but what reopens a conversation's calls is a
    person's verdict on that conversation. Bounded: :data:`MAX_TRIPPED_SCOPES` conversations (least
    recently noted first out) of :data:`MAX_TRIPS_PER_SCOPE` calls each (the latest kept)."""

    def __init__(self) -> None:
        self._scopes: OrderedDict[str, OrderedDict[tuple[str, str], None]] = OrderedDict()
        self._lock = threading.Lock()
        new_locks_in_child(self, "_lock")

    def note(self, scope: str, tool: str, fp: str) -> None:
        """A call of ``tool`` with fingerprint ``fp`` in ``scope`` failed into, or was refused by, a breaker."""
        with self._lock:
            calls = self._scopes.get(scope)
            if calls is None:
                while len(self._scopes) >= MAX_TRIPPED_SCOPES:
                    self._scopes.popitem(last=False)
                calls = self._scopes[scope] = OrderedDict()
            else:
                self._scopes.move_to_end(scope)
            calls[(tool, fp)] = None
            calls.move_to_end((tool, fp))
            while len(calls) > MAX_TRIPS_PER_SCOPE:
                calls.popitem(last=False)

    def take(self, scope: str) -> list[tuple[str, str]]:
        """The calls noted for ``scope``, forgotten here."""
        with self._lock:
            calls = self._scopes.pop(scope, None)
        return list(calls) if calls else []
