"""Per-scope error history: distinct classes with counters, and the escalation decision.

A *scope* is one conversation (``gen_ai.conversation.id``) or one agent run. Within a scope each distinct
dedup key is one *class*: the first occurrence appends a line, a repeat increments its ``(×N)`` counter.
Two thresholds end a loop that is not getting anywhere:

- ``consecutive``: the same class failed N times in a row (a different class or a success resets it;
  rate-limited and transient failures neither count nor reset: they belong to retry and pacing);
- ``budget``: the scope has failed N times in all.

A breach is never silent: :meth:`ErrorHistory.observe` returns it in ``Observation.escalation``, it stays
standing (``escalation(scope)``) until acknowledged or reset, and ``check(scope)`` raises
:class:`~otel_errcompact.exceptions.ErrorBudgetExceeded` while it stands with the ``halt`` action.

Memory is bounded: at most ``Limits.max_classes`` classes per scope (the least recently seen is folded
into an "and N more" line; the keys and counts of as many folded ones are kept, so a folded class that
fails again resumes its count instead of counting as one more distinct class), at most
``Limits.max_scopes`` scopes, and scopes idle for ``Limits.idle_seconds`` are dropped: idle means no failure, no
success, no :meth:`ErrorHistory.check` and no :meth:`ErrorHistory.render` of the scope (the run's own steps; a
look from outside, :meth:`ErrorHistory.escalation` or :meth:`ErrorHistory.scopes`, is not activity). All methods
are thread-safe.

Eviction at the scope cap is never silent: a new scope beyond ``max_scopes`` (default 10,000 live
conversations) drops the least recently active one, which loses its counters and any standing breach.
The first such eviction is logged (a warning, once per history), and every one is counted in
:attr:`ErrorHistory.evicted_at_cap`, which ``init()`` exports as the metric
``errcompact.history.evictions``. Idle scopes dropped after ``idle_seconds`` are the normal end of a
conversation and are not counted.
"""

from __future__ import annotations

import logging
import threading
import time
from collections import OrderedDict, deque
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Literal, Protocol

from otel_errcompact._checks import check_integer, check_seconds
from otel_errcompact._forked import rebuild_in_child
from otel_errcompact._frozen import fast_constructor
from otel_errcompact.digest import Digest
from otel_errcompact.exceptions import ConfigurationError, ErrorBudgetExceeded
from otel_errcompact.normalize import value_signature
from otel_errcompact.render import RenderedClass, render_block

__all__ = [
    "Action", "DeferredObservation", "ErrorHistory", "Escalation", "Limits", "Observation", "Reason", "Thresholds",
]

_log = logging.getLogger("otel_errcompact")

Action = Literal["halt", "human"]
"""What a breach asks for: ``halt`` stops the loop (bounded execution); ``human`` asks for review."""
Reason = Literal["consecutive", "budget"]

_NOT_STUCK = frozenset({"rate_limited", "transient"})
SUCCESS_QUEUE_BOUND = 1024
"""Queued successes at which another thread is asked to apply them (``ErrorHistory.on_backlog``); at
twice this, or without one, the caller applies them itself. Bounds the queue between history operations.
A caller appending to :meth:`ErrorHistory.success_queue` itself calls :meth:`ErrorHistory.backlogged`
when the queue's length reaches it."""
_APPLY_BATCH = 64
"""Successes applied per hold of the lock by :meth:`ErrorHistory.apply_successes`."""


class _Inherited:
    """A success or failure still queued when this process was forked: the parent's, counted here too."""

    __slots__ = ("item",)

    def __init__(self, item: Any) -> None:
        self.item = item


class DeferredObservation(Protocol):
    """A failure counted later (:meth:`ErrorHistory.defer_failure`), in its turn among the others."""

    scope: str

    def digest(self) -> Digest:
        """The failure's digest, computed once (possibly ahead, on another thread)."""

    def observed(self, observation: Observation | None) -> None:
        """Called once it is counted, outside the history's lock (None: counting it failed)."""


@dataclass(frozen=True, slots=True)
class Thresholds:
    """When to escalate. Plain, immutable, printable.

    ``consecutive`` (default 3): the same error class this many times in a row.
    ``budget`` (default 20, ``None`` for no budget): this many failures in the scope in all.
    ``action`` (default ``"halt"``): what a breach asks for.

    >>> Thresholds(consecutive=5)
    Thresholds(consecutive=5, budget=20, action='halt')
    """

    consecutive: int = 3
    budget: int | None = 20
    action: Action = "halt"

    def __post_init__(self) -> None:
        check_integer("Thresholds", "consecutive", self.consecutive, 1)
        if self.budget is not None:
            check_integer("Thresholds", "budget", self.budget, 1, "an integer ≥ 1, or None for no budget")
        if self.action not in ("halt", "human"):
            raise ConfigurationError(f"Thresholds.action must be 'halt' or 'human', got {self.action!r}")


@dataclass(frozen=True, slots=True)
class Limits:
    """How much the history may hold and render.

    ``max_classes`` distinct classes per scope (default 32; past it the least recently seen is folded
    into an "and N more" line, and the keys and counts of as many folded ones are remembered, so one
    that fails again resumes its count); ``max_scopes`` scopes (default 10,000);
    ``idle_seconds`` without a failure, success, check or render before a scope is dropped (default 3,600);
    ``max_lines`` class lines in a
    rendered block (default 8) and ``max_chars`` characters in it (default 2,000); ``max_values``
    distinct data values remembered per class (default 16), for the ``(×N, M different values)`` note.
    """

    max_classes: int = 32
    max_scopes: int = 10_000
    idle_seconds: float = 3600.0
    max_lines: int = 8
    max_chars: int = 2000
    max_values: int = 16

    def __post_init__(self) -> None:
        for name in ("max_classes", "max_scopes", "max_lines", "max_values"):
            check_integer("Limits", name, getattr(self, name), 1)
        check_integer("Limits", "max_chars", self.max_chars, 200)
        # NaN compares false with everything: `idle_seconds <= 0` let it through, and then every scope
        # counted as idle (dropped, standing breaches with it) whenever a new one started.
        check_seconds("Limits", "idle_seconds", self.idle_seconds, zero=False)


@dataclass(frozen=True, slots=True)
class Escalation:
    """A threshold breach: why, on which class, with which counts, and what it asks for."""

    scope: str
    reason: Reason
    key: str
    digest: str
    error_type: str
    count: int
    threshold: int
    total: int
    action: Action

    def describe(self) -> str:
        """One prompt-safe sentence, e.g. for an exception message or a log line."""
        if self.reason == "consecutive":
            what = f"the same error {self.count} times in a row (threshold {self.threshold})"
        else:
            what = f"{self.count} failures in this run (budget {self.threshold})"
        asks = "halt requested" if self.action == "halt" else "human review requested"
        return f"error threshold breached: {what}: {self.digest}; {asks}"

    def brief(self) -> str:
        """Why, without the digest: marks the listed line that escalated (``3 times in a row
        (threshold 3)``), so the block does not quote that digest twice."""
        if self.reason == "consecutive":
            return f"{self.count} times in a row (threshold {self.threshold})"
        return f"{self.count} failures in this run (budget {self.threshold})"

    def to_dict(self) -> dict[str, str | int]:
        """The escalation as a flat JSON-ready mapping (trajectory records, log bodies)."""
        return {
            "scope": self.scope,
            "reason": self.reason,
            "key": self.key,
            "digest": self.digest,
            "error_type": self.error_type,
            "count": self.count,
            "threshold": self.threshold,
            "total": self.total,
            "action": self.action,
        }

    def to_attributes(self) -> dict[str, str | int]:
        """Flat ``errcompact.*`` attributes for a span event or log record (the scope is left out: it
        may be a conversation id, and the event already sits in that conversation's trace)."""
        return {f"errcompact.{k}": v for k, v in self.to_dict().items() if k != "scope"}


@dataclass(frozen=True, slots=True)
class Observation:
    """What observing one failure did.

    ``escalation`` is set only on the observation that caused a breach; the standing breach is
    :meth:`ErrorHistory.escalation`.
    """

    scope: str
    digest: Digest
    is_new: bool
    count: int
    consecutive: int
    total: int
    escalation: Escalation | None = None


_new_observation = fast_constructor(Observation)


@dataclass(slots=True)
class _Class:
    digest: Digest
    count: int
    last_seen: int
    # Short hashes of the data values this class was seen with, bounded by Limits.max_values; None
    # until the first is signed. Most classes are one cause repeated, and an empty set is a 216-byte
    # object the garbage collector walks at every full collection, for every class of every live
    # conversation: the sets are made only when a class needs them.
    values: set[int] | None = None
    values_capped: bool = False
    # Causes not yet reduced to a value signature (see ErrorHistory._note_value): none, the one cause
    # seen so far as it is (a string, which the collector does not track), or a set of them.
    unsigned: str | set[str] | None = None


@dataclass(slots=True)
class _Scope:
    classes: OrderedDict[str, _Class] = field(default_factory=OrderedDict)
    total: int = 0
    consecutive: int = 0
    last_key: str | None = None
    folded_classes: int = 0
    folded_failures: int = 0
    # Keys of folded classes -> their counts, the most recently folded last (at most Limits.max_classes;
    # None until the first fold): a class that fails again after its fold resumes its count, rather
    # than counting as one more distinct class from 1.
    folded: dict[str, int] | None = None
    budget_base: int = 0
    breach: Escalation | None = None
    # What has been reported since the last acknowledgement: the class of the last stuck loop reported
    # (its further repeats are the same breach), and whether the budget breach was. Kept apart from the
    # standing breach, which is only the latest: a budget breach while a stuck loop stands is a breach of
    # its own, and the loop going on after it is still the one already reported.
    streak_reported: str | None = None
    budget_reported: bool = False
    touched: float = 0.0


class ErrorHistory:
    """Error classes and counters per scope, with the escalation decision.

    >>> from otel_errcompact.compactor import compact_text
    >>> h = ErrorHistory(Thresholds(consecutive=2))
    >>> d = compact_text("KeyError: 'user_id'")
    >>> h.observe("c1", d).count, h.observe("c1", d).escalation.reason
    (1, 'consecutive')
    """

    def __init__(
        self,
        thresholds: Thresholds | None = None,
        limits: Limits | None = None,
        *,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.thresholds = thresholds or Thresholds()
        self.limits = limits or Limits()
        self._clock = clock
        self._scopes: OrderedDict[str, _Scope] = OrderedDict()
        self._lock = threading.Lock()
        # Successes not applied yet, oldest first: a scope (observe_success) or (resolve, item) (defer_success).
        # Failures whose counting was deferred (defer_failure) share this queue, so that successes and
        # failures are counted in the order they happened.
        self._successes: deque[Any] = deque()
        # True from asking on_backlog to take the queue until the queue is emptied: asked once per backlog.
        self._backlog_asked = False
        # True while a thread applies the queue: the item it took is out of the queue but not applied
        # yet, so after_queued queues then too. Read without the lock.
        self._applying = False
        # Deferred failures counted under the lock, waiting for their own steps after it is released.
        self._observed: deque[tuple[DeferredObservation, Observation | None]] = deque()
        self._seq = 0
        self._evicted_at_cap = 0
        self._cap_warned = False
        rebuild_in_child(self._after_fork_in_child)

    def _after_fork_in_child(self) -> None:
        """In a process forked from this one (see :mod:`otel_errcompact._forked`): the history is a copy
        of the parent's, the successes and failures still queued included, since the parent counts
        them too (a failure waits for the digest thread a few milliseconds): left out, a breach the
        parent halts on would be missing here. They stay queued, in their turn before this process's
        own, marked as inherited: counted into the counters only, as their steps (the record, the
        listeners, the metrics) are the parent's (see :meth:`_count_inherited`). They are counted at
        the first operation here, not now: counting may take locks of other objects (the span
        processor's, when a success is resolved) that are only made new after this. The lock is new
        (a thread of the parent may have held it); the queue is refilled in place, as the span
        processor and the digest thread hold it. Failures counted but not finished are the parent's
        to finish."""
        self._lock = threading.Lock()
        self._applying = False  # a thread of the parent's may have been applying: it is not here
        successes = self._successes
        inherited = [item if isinstance(item, str) else _Inherited(item) for item in successes]
        successes.clear()
        successes.extend(inherited)
        self._backlog_asked = False
        self._observed.clear()

    def observe(self, scope: str, digest: Digest) -> Observation:
        """Record one failure in ``scope``: append a new class or count a repeat; decide on escalation."""
        with self._lock:
            if self._successes:  # most failures find none queued: no call then
                self._apply_successes()
            observation = self._observe_locked(scope, digest)
            warn = self._evicted_at_cap > 0 and not self._cap_warned
            self._cap_warned = self._cap_warned or warn
        if self._observed:
            self._finish_observed()
        if warn:  # logged outside the lock: a log handler may do I/O
            _log.warning(
                "otel-errcompact: %d live conversations reached Limits.max_scopes; the least recently "
                "active ones are evicted with their counters (counted in errcompact.history.evictions; "
                "logged once)",
                self.limits.max_scopes,
            )
        return observation

    def _observe_locked(self, scope: str, digest: Digest) -> Observation:
        """:meth:`observe`'s counting and decision (call with the lock held)."""
        state = self._touch(scope)
        self._seq += 1
        key = digest.key
        entry = state.classes.get(key)
        is_new = entry is None
        if entry is None:
            count = self._unfold(state, key) if state.folded else 0  # before a fold can forget it
            is_new = count == 0
            if len(state.classes) >= self.limits.max_classes:
                self._fold_least_recent(state, self.limits.max_classes)
            entry = _Class(digest, count, self._seq)
            state.classes[key] = entry
        entry.count += 1
        self._note_value(entry, digest)
        entry.digest = digest  # the latest line: its line number follows the agent's edits
        entry.last_seen = self._seq
        state.total += 1
        # Rate limits and transient failures go to retry and pacing: they are not the agent being
        # stuck, so they leave the consecutive-same streak alone (the budget still counts them).
        waiting = digest.error_class in _NOT_STUCK
        if not waiting:
            state.consecutive = state.consecutive + 1 if state.last_key == key else 1
            state.last_key = key
        escalation = self._decide(scope, state, entry, budget_only=waiting)
        if escalation is not None:
            state.breach = escalation
            if escalation.reason == "consecutive":
                state.streak_reported = key
            else:
                state.budget_reported = True
        return _new_observation(  # Observation(...), at half the cost of its frozen __init__
            scope=scope, digest=digest, is_new=is_new, count=entry.count, consecutive=state.consecutive,
            total=state.total, escalation=escalation,
        )

    @property
    def evicted_at_cap(self) -> int:
        """Scopes dropped because ``Limits.max_scopes`` was reached (not idle ones), since creation."""
        return self._evicted_at_cap

    def observe_success(self, scope: str) -> None:
        """A tool call in ``scope`` succeeded: the consecutive-same counter starts again.

        Without the lock, for the agent's thread: a scope the history does not hold has no counter to
        reset (a racy membership test is fine: a failure creating the scope at the same moment is
        ordered after this success), and for one it holds the success is queued and applied, in order,
        under the lock at the start of the next operation that reads or writes counters. Every reader
        sees what an immediate reset would have shown."""
        if scope not in self._scopes:
            return
        self._successes.append(scope)
        if len(self._successes) >= SUCCESS_QUEUE_BOUND:
            self.backlogged()

    def success_queue(self) -> deque[Any]:
        """The queue :meth:`defer_success` appends to, for a caller whose every call counts (the span
        processor, once per successful tool call): it appends ``(resolve, item)`` itself and calls
        :meth:`backlogged` when the queue's length reaches :data:`SUCCESS_QUEUE_BOUND`, which is what
        :meth:`defer_success` does, minus a method call. Appending to a deque is atomic under the GIL."""
        return self._successes

    def defer_success(self, resolve: Callable[[Any], str | None], item: Any) -> None:
        """A success whose scope is found later: ``resolve(item)`` is called, in order with the other
        successes, before the next operation that reads or writes counters (or by
        :meth:`apply_successes`), and returns the scope to reset, or None when it was not a success
        after all. Lets the span processor leave a successful tool call's bookkeeping off the agent's
        thread. ``resolve`` runs under the history's lock: it must not call back into the history.

        In a process forked while the success is queued, it is resolved there too, as
        ``resolve(item, notify=False)``: the scope only, without telling anyone of the call (the parent
        does). A ``resolve`` that takes no ``notify`` keyword is not called there."""
        self._successes.append((resolve, item))
        if len(self._successes) >= SUCCESS_QUEUE_BOUND:
            self.backlogged()

    def after_queued(self, run: Callable[..., None], item: Any) -> None:
        """Call ``run(item)`` once everything queued so far is applied: at once when nothing is queued
        or being applied, else in its turn in the queue, as a success that counts in no scope (in a
        process forked meanwhile, as ``run(item, notify=False)``, see :meth:`defer_success`). Lets
        the span processor forget an agent span that ends while successes that ran under it wait.

        Without the lock, as :meth:`defer_success`: "being applied" covers the moment another thread
        has taken the last item out of the queue but not applied it yet, which may still need what
        ``run`` would undo."""
        successes = self._successes
        if successes or self._applying:
            successes.append((run, item))
            if len(successes) >= SUCCESS_QUEUE_BOUND:
                self.backlogged()
            return
        run(item)

    def defer_failure(self, deferred: DeferredObservation) -> None:
        """Count a failure later, in order with the successes and failures around it: before the next
        operation that reads or writes counters, or when :meth:`apply_successes` runs (the digest
        thread calls it soon after). Its digest is asked for then (``deferred.digest()``, which may run
        on any thread, once), and ``deferred.observed(observation)`` is called after the history's
        lock is released, on the thread that counted it."""
        self._successes.append(deferred)
        if len(self._successes) >= SUCCESS_QUEUE_BOUND:
            self.backlogged()

    on_backlog: Callable[[], bool] | None = None
    """Asked, once the queue reaches its bound, to have another thread :meth:`apply_successes` (the
    metrics thread); False when it cannot. Past twice the bound, or without it, the caller applies
    them."""

    def backlogged(self) -> None:
        """The queue reached :data:`SUCCESS_QUEUE_BOUND`: hand it to :attr:`on_backlog`, or apply it."""
        backlog = self.on_backlog
        if backlog is not None and len(self._successes) < 2 * SUCCESS_QUEUE_BOUND:
            # Asked once per backlog. Not "when the length equals the bound": two threads that append
            # before either one reads the length both read past it, and nobody would ask.
            if self._backlog_asked:
                return
            self._backlog_asked = True
            try:
                if backlog():
                    return
            except Exception:
                _log.exception("otel-errcompact: could not hand queued successes over")
        self.apply_successes()

    def apply_successes(self) -> None:
        """Apply the queued successes now (the metrics thread, a collection, a flush), a batch at a
        time: an agent thread counting a failure waits for one batch at most, not the whole queue."""
        while self._successes:
            with self._lock:
                self._apply_successes(_APPLY_BATCH)
            if self._observed:
                self._finish_observed()

    def _apply_successes(self, limit: int = -1) -> None:
        """Apply the queued successes, oldest first, ``limit`` of them at most (call with the lock
        held), with ``_applying`` set meanwhile (see :meth:`after_queued`)."""
        self._applying = True
        try:
            self._apply_queued(limit)
        finally:
            self._applying = False

    def _apply_queued(self, limit: int) -> None:
        """:meth:`_apply_successes`' loop."""
        successes = self._successes
        while successes and limit != 0:
            limit -= 1
            try:
                success = successes.popleft()
            except IndexError:
                break
            if isinstance(success, str):
                scope: str | None = success
            elif type(success) is not tuple:  # a deferred failure: counted here, in its turn
                if type(success) is _Inherited:  # queued in the parent, before a fork
                    self._count_inherited(success.item)
                    continue
                observation: Observation | None = None
                try:
                    observation = self._observe_locked(success.scope, success.digest())
                except Exception:
                    _log.exception("otel-errcompact: could not count a deferred failure")
                self._observed.append((success, observation))
                continue
            else:
                resolve, item = success
                try:
                    scope = resolve(item)
                except Exception:
                    _log.exception("otel-errcompact: could not resolve a successful tool call")
                    continue
            self._reset_streak(scope)
        if not successes:
            self._backlog_asked = False  # the next backlog is asked for again

    def _count_inherited(self, item: Any) -> None:
        """Count a success or failure the parent process had queued when it forked this one (see
        :meth:`_after_fork_in_child`), into the counters only (call with the lock held): the parent
        stores the failure's record, calls the listeners and counts the metrics, so this process does
        none of it. A deferred success is resolved with ``notify=False`` (the parent tells the success
        listeners); a resolve that takes no such keyword is not called, and the success is left out."""
        try:
            if type(item) is tuple:
                resolve, captured = item
                try:
                    scope = resolve(captured, notify=False)
                except TypeError:
                    return
            else:
                self._observe_locked(item.scope, item.digest())
                return
        except Exception:
            _log.exception("otel-errcompact: could not count a call queued before the fork")
            return
        self._reset_streak(scope)

    def _reset_streak(self, scope: str | None) -> None:
        """A successful tool call in ``scope`` (None: one that counts in no scope) ends its run of
        consecutive failures (call with the lock held)."""
        state = self._active(scope) if scope is not None else None
        if state is not None:
            state.consecutive = 0
            state.last_key = None

    def _finish_observed(self) -> None:
        """Hand each deferred failure counted under the lock its observation, now that the lock is
        released (its steps write the trajectory record and call listeners, which may use the history)."""
        observed = self._observed
        while observed:
            try:
                deferred, observation = observed.popleft()
            except IndexError:
                return
            try:
                deferred.observed(observation)
            except Exception:
                _log.exception("otel-errcompact: could not finish a deferred failure")

    def escalation(self, scope: str) -> Escalation | None:
        """The standing breach of ``scope``, if any (a look from outside the run: not activity of it)."""
        return self._standing(scope, active=False)

    def _standing(self, scope: str, *, active: bool) -> Escalation | None:
        """The standing breach of ``scope``; ``active``: asked by the run itself, which keeps it alive."""
        with self._lock:
            self._apply_successes()
            state = self._active(scope) if active else self._held(scope)
            breach = state.breach if state is not None else None
        if self._observed:
            self._finish_observed()
        return breach

    def check(self, scope: str) -> None:
        """Raise :class:`ErrorBudgetExceeded` when ``scope`` has a standing breach whose action is halt.

        The run's own step (the agent loop, a bridge, the tool boundary before each call): activity of the
        scope, which keeps it from being dropped as idle, standing breach included."""
        breach = self._standing(scope, active=True)
        if breach is not None and breach.action == "halt":
            raise ErrorBudgetExceeded(breach)

    def acknowledge(self, scope: str) -> None:
        """Clear the standing breach (after human review) while keeping the history shown to the agent.

        The consecutive counter restarts and the budget counts afresh from here.
        """
        with self._lock:
            self._apply_successes()
            state = self._held(scope)
            if state is not None:
                state.breach = None
                state.streak_reported = None
                state.budget_reported = False
                state.consecutive = 0
                state.last_key = None
                state.budget_base = state.total
        if self._observed:
            self._finish_observed()

    def reset(self, scope: str) -> None:
        """Forget ``scope`` entirely (e.g. when a conversation ends)."""
        with self._lock:
            self._apply_successes()
            self._scopes.pop(scope, None)
        if self._observed:
            self._finish_observed()

    def scopes(self) -> list[str]:
        """The scopes currently held, least recently active first."""
        with self._lock:
            self._apply_successes()
            self._evict_idle()
            scopes = list(self._scopes)
        if self._observed:
            self._finish_observed()
        return scopes

    def render(self, scope: str) -> str:
        """The ``[RECENT ERRORS]`` block for ``scope``'s next prompt; ``""`` when nothing failed."""
        try:
            return self._render_locked(scope)
        finally:
            if self._observed:
                self._finish_observed()

    def _render_locked(self, scope: str) -> str:
        with self._lock:
            self._apply_successes()
            state = self._active(scope)  # the block for the run's next prompt: the run is active
            if state is None or state.total == 0:
                return ""
            # Show the most recently seen classes, in the order they first appeared.
            classes = list(state.classes.values())
            if len(classes) > self.limits.max_lines:
                cutoff = sorted(c.last_seen for c in classes)[-self.limits.max_lines]
                classes = [c for c in classes if c.last_seen >= cutoff]
            shown = classes
            hidden_classes = len(state.classes) - len(shown) + state.folded_classes
            hidden_failures = state.total - sum(c.count for c in shown)
            breach = state.breach
            # The class that breached is marked on its own line; the sentence (which quotes the digest)
            # is only for a breach whose class is not listed.
            marked = breach is not None and any(c.digest.key == breach.key for c in shown)
            for c in shown:
                self._sign_values(c)
            return render_block(
                [
                    RenderedClass(
                        c.digest.line,
                        c.count,
                        len(c.values) if c.values else 0,
                        c.values_capped,
                        breach.brief() if breach is not None and marked and c.digest.key == breach.key else None,
                    )
                    for c in shown
                ],
                total=state.total,
                distinct=len(state.classes) + state.folded_classes,
                hidden_classes=hidden_classes,
                hidden_failures=hidden_failures,
                escalation=breach.describe() if breach is not None and not marked else None,
                max_chars=self.limits.max_chars,
            )

    def __len__(self) -> int:
        with self._lock:
            self._apply_successes()
            size = len(self._scopes)
        if self._observed:
            self._finish_observed()
        return size

    def _touch(self, scope: str) -> _Scope:
        now = self._clock()
        state = self._held(scope, now)
        if state is None:
            self._evict_idle(now)
            while len(self._scopes) >= self.limits.max_scopes:
                self._scopes.popitem(last=False)
                self._evicted_at_cap += 1
            state = self._scopes[scope] = _Scope()
        else:
            self._scopes.move_to_end(scope)
        state.touched = now
        return state

    def _active(self, scope: str) -> _Scope | None:
        """The state of ``scope`` (see :meth:`_held`), marked active now: a success, a check or a render of
        the run keeps it from being dropped as idle, as a failure does; a run that stopped failing but goes
        on, or is halted and keeps checking, is not let go mid-run (call with the lock held)."""
        now = self._clock()
        state = self._held(scope, now)
        if state is not None:
            state.touched = now
            self._scopes.move_to_end(scope)
        return state

    def _held(self, scope: str, now: float | None = None) -> _Scope | None:
        """The state of ``scope``, unless it has been idle for ``Limits.idle_seconds``: it is dropped then,
        with its counters and any standing breach, as the sweep of idle scopes would drop it (call with
        the lock held). The sweep runs when a new scope arrives; without this, whether a conversation
        that came back after its idle time was still halted, or went on with its old streak, depended on
        whether another conversation had started meanwhile."""
        state = self._scopes.get(scope)
        if state is not None and state.touched <= (self._clock() if now is None else now) - self.limits.idle_seconds:
            del self._scopes[scope]
            return None
        return state

    def _evict_idle(self, now: float | None = None) -> None:
        cutoff = (self._clock() if now is None else now) - self.limits.idle_seconds
        while self._scopes:
            oldest = next(iter(self._scopes.values()))
            if oldest.touched > cutoff:
                break
            self._scopes.popitem(last=False)

    def _note_value(self, entry: _Class, digest: Digest) -> None:
        """Remember which data values the class was seen with (the cause with only noise masked), up to
        ``Limits.max_values``; past the bound the count stops and renders as ``N+``.

        Masking the noise costs 5-25 µs of regular expressions per cause, on the agent's thread, and
        its only reader is :meth:`render`. So a cause is kept as it is (exact repeats cost a set
        look-up) and reduced to its signature when the block is rendered, or when
        ``4 × max_values`` distinct causes are waiting: the work and the memory stay bounded, and a
        class that is never rendered with many values never pays for it.
        """
        if entry.values_capped:
            return
        cause = digest.cause
        waiting = entry.unsigned
        if waiting is None:
            entry.unsigned = cause
            return
        if isinstance(waiting, str):  # one cause waiting: a second distinct one makes the set
            if waiting != cause:
                entry.unsigned = {waiting, cause}
            return
        if cause in waiting:
            return
        if len(waiting) >= 4 * self.limits.max_values:
            self._sign_values(entry)
            if entry.values_capped:
                return
            entry.unsigned = cause
            return
        waiting.add(cause)

    def _sign_values(self, entry: _Class) -> None:
        """Reduce the waiting causes of ``entry`` to value signatures (call with the lock held)."""
        waiting = entry.unsigned
        entry.unsigned = None
        if waiting is None:
            return
        values = entry.values
        if values is None:
            values = entry.values = set()
        for cause in (waiting,) if isinstance(waiting, str) else waiting:
            signature = hash(value_signature(cause))
            if signature in values:
                continue
            if len(values) >= self.limits.max_values:
                entry.values_capped = True
                break
            values.add(signature)

    @staticmethod
    def _fold_least_recent(state: _Scope, remembered: int) -> None:
        """Fold the least recently seen class into the "and N more" line, remembering its key and count
        (the ``remembered`` most recently folded ones; an older one that fails again is counted anew)."""
        victim_key = min(state.classes, key=lambda k: state.classes[k].last_seen)
        victim = state.classes.pop(victim_key)
        state.folded_classes += 1
        state.folded_failures += victim.count
        folded = state.folded
        if folded is None:
            folded = state.folded = {}
        folded[victim_key] = victim.count
        if len(folded) > remembered:
            del folded[next(iter(folded))]
        if state.last_key == victim_key:
            state.last_key = None

    @staticmethod
    def _unfold(state: _Scope, key: str) -> int:
        """The count of ``key``'s class if it was folded and is remembered (taken off the folded ones:
        it is listed again), else 0."""
        folded = state.folded
        count = folded.pop(key, 0) if folded else 0
        if count:
            state.folded_classes -= 1
            state.folded_failures -= count
        return count

    def _decide(self, scope: str, state: _Scope, entry: _Class, *, budget_only: bool = False) -> Escalation | None:
        """The breach this failure causes, if it is not one reported already: a stuck loop on a class
        other than the last one reported, else the budget once per acknowledgement. A failure that
        reaches both at once reports the loop; the budget is reported at the scope's next failure."""
        t = self.thresholds
        digest = entry.digest
        if not budget_only and state.consecutive >= t.consecutive and state.streak_reported != digest.key:
            reason: Reason = "consecutive"
            count, threshold = state.consecutive, t.consecutive
        elif (
            t.budget is not None and not state.budget_reported and state.total - state.budget_base >= t.budget
        ):
            reason = "budget"
            count, threshold = state.total - state.budget_base, t.budget
        else:
            return None
        return Escalation(
            scope=scope,
            reason=reason,
            key=digest.key,
            digest=digest.line,
            error_type=digest.type,
            count=count,
            threshold=threshold,
            total=state.total,
            action=t.action,
        )
