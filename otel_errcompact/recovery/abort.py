"""Abort: one call stops a scope's in-flight model calls and read-only tools; mutating tools finish.

``AbortRegistry.abort(scope)`` (``ec.abort(scope)``) marks the scope aborted and cancels, from any thread,
the asyncio tasks registered for it: model calls and tools not declared ``mutating=True``. A mutating tool
(one that may have written files, sent a message, charged a card) is let finish, because killing it
mid-write leaves worse damage than the wasted seconds; the loop then ends with ``aborted_streaming``. A
halt (an escalation with the ``halt`` action) cancels the scope's other in-flight read-only tools the same
way (:meth:`AbortRegistry.cancel_tools`).

Cancellation is not failure: the boundary records a cancelled call in the trajectory and as an
``errcompact.cancelled`` span event, never in the error history. Sync code cannot be cancelled from outside
its thread: the sync loop waits for its model call on a worker thread and stops waiting within 10 ms of an
abort (the request finishes in the background, its answer dropped); sync tools stop at the next step.
"""

from __future__ import annotations

import asyncio
import contextlib
import threading
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Literal, TypeVar

from otel_errcompact._forked import new_locks_in_child

__all__ = ["AbortRegistry", "TaskKind", "owner_cancelled"]

TaskKind = Literal["model", "tool"]

_MAX_ABORTED_SCOPES = 10_000


@dataclass(slots=True)
class _Tracked:
    task: asyncio.Task[object]
    loop: asyncio.AbstractEventLoop
    kind: TaskKind
    mutating: bool


class AbortRegistry:
    """Abort flags per scope and the in-flight tasks an abort or a halt cancels. Thread-safe."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        new_locks_in_child(self, "_lock")
        self._tasks: dict[str, list[_Tracked]] = {}
        self._aborted: dict[str, str] = {}
        self._events: dict[str, list[tuple[asyncio.AbstractEventLoop, asyncio.Event]]] = {}

    def abort(self, scope: str, reason: str = "abort") -> int:
        """Abort ``scope``: cancel its in-flight model calls and read-only tools; returns how many."""
        with self._lock:
            self._aborted[scope] = reason
            while len(self._aborted) > _MAX_ABORTED_SCOPES:
                self._aborted.pop(next(iter(self._aborted)))
            tracked = [t for t in self._tasks.get(scope, ()) if not t.mutating]
            waiters = self._events.get(scope, [])
        for loop, event in waiters:
            _soon(loop, event.set)
        for t in tracked:
            _soon(t.loop, lambda task=t.task: task.cancel(f"errcompact: {reason}"))
        return len(tracked)

    def aborted(self, scope: str) -> str | None:
        """The reason ``scope`` was aborted, or None."""
        with self._lock:
            return self._aborted.get(scope)

    def clear(self, scope: str) -> None:
        """Forget ``scope``'s abort (a new run in the same conversation starts clean)."""
        with self._lock:
            self._aborted.pop(scope, None)

    def cancel_tools(self, scope: str, *, except_task: asyncio.Task[object] | None = None, reason: str = "halt") -> int:
        """Cancel ``scope``'s in-flight read-only tool tasks other than ``except_task`` (a halt)."""
        with self._lock:
            tracked = [
                t for t in self._tasks.get(scope, ())
                if t.kind == "tool" and not t.mutating and t.task is not except_task
            ]  # fmt: skip
        for t in tracked:
            _soon(t.loop, lambda task=t.task: task.cancel(f"errcompact: {reason}"))
        return len(tracked)

    @contextlib.contextmanager
    def track(
        self, scope: str, task: asyncio.Task[object], kind: TaskKind, *, mutating: bool = False
    ) -> Iterator[None]:
        """Register ``task`` as in flight in ``scope`` for the block; an abort already standing cancels it."""
        entry = _Tracked(task, asyncio.get_running_loop(), kind, mutating)
        with self._lock:
            self._tasks.setdefault(scope, []).append(entry)
            already = scope in self._aborted and not mutating
        if already:
            task.cancel("errcompact: aborted")
        try:
            yield
        finally:
            with self._lock:
                _discard(self._tasks, scope, entry)

    @contextlib.contextmanager
    def waiter(self, scope: str) -> Iterator[asyncio.Event]:
        """An event set when ``scope`` is aborted (for waits that must end early, e.g. a rate-limit sleep)."""
        event = asyncio.Event()
        pair = (asyncio.get_running_loop(), event)
        with self._lock:
            self._events.setdefault(scope, []).append(pair)
            if scope in self._aborted:
                event.set()
        try:
            yield event
        finally:
            with self._lock:
                _discard(self._events, scope, pair)

    def in_flight(self, scope: str) -> int:
        with self._lock:
            return len(self._tasks.get(scope, ()))


def owner_cancelled() -> bool:
    """True when the running task itself is being cancelled by its owner (``task.cancel()``, a timeout, a
    task group), not only a task it awaits that an abort or a halt cancelled. The owner's cancellation
    must propagate even while an abort or a halt stands for the scope: turned into a "cancelled" result,
    it would be lost, and the task would run on past its timeout or its caller's cancellation."""
    try:
        task = asyncio.current_task()
    except RuntimeError:  # no running loop
        return False
    return task is not None and task.cancelling() > 0


def _soon(loop: asyncio.AbstractEventLoop, fn: object) -> None:
    """Run ``fn`` on ``loop``: directly when called from that loop's thread, else thread-safely."""
    try:
        running = asyncio.get_running_loop()
    except RuntimeError:
        running = None
    if running is loop:
        fn()  # type: ignore[operator]
    elif not loop.is_closed():
        loop.call_soon_threadsafe(fn)  # type: ignore[arg-type]


_Item = TypeVar("_Item")


def _discard(table: dict[str, list[_Item]], scope: str, item: _Item) -> None:
    """Take ``item`` (by identity) out of ``table[scope]``; a scope with nothing left goes, so that the
    tables do not grow with every scope ever seen. Called under the registry's lock."""
    rest = [x for x in table.get(scope, ()) if x is not item]
    if rest:
        table[scope] = rest
    else:
        table.pop(scope, None)
