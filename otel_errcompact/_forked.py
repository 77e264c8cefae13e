"""Rebuilding the library's threads, locks and files in a child process made by ``fork()``.

``fork()`` copies the whole memory but one thread, the one that called it. A worker forked from a
process that called ``init()`` (multiprocessing's default start method on Linux before Python 3.14,
prefork servers and task queues) would find the trajectory writer's queue with no thread to
store it, the parent's spool segment mapped into it (its copies would land among the parent's), a
SQLite connection SQLite forbids it to use, and any lock a background thread held at that moment held
for good. Its failures would be digested but never stored, and its ``flush()`` would fail at once.

Each object holding such state registers its rebuild here; in the child, the rebuilds run in the order
the objects registered (a writer before the pipeline that submits to it, a history before the thread
that reads it). A rebuild makes new locks, empties its queue (what was queued is the parent's to
finish), opens files of its own, and starts its threads again, unless the object was shut down. A lock
that guards what must not be copied half done (the SQLite sink's transaction) is also taken just before
the fork and let go after it.
"""

from __future__ import annotations

import logging
import os
import threading
import weakref
from collections.abc import Callable
from typing import Any

__all__ = ["hold_across_fork", "new_locks_in_child", "rebuild_in_child"]

_log = logging.getLogger("otel_errcompact")

# (the object, weakly; what to call with it in the child), in the order they registered
_rebuilds: list[tuple[weakref.ref[Any], Callable[[Any], None]]] = []
_lock = threading.Lock()


def rebuild_in_child(method: Callable[[], None]) -> None:
    """Call ``method`` (a bound method; its object is not kept alive by this) in each child process this
    one forks, after the fork and before the child goes on."""
    _register(method.__self__, method.__func__)  # type: ignore[attr-defined]


def new_locks_in_child(owner: object, *names: str) -> None:
    """Give ``owner`` new locks for its attributes ``names`` in each child process this one forks: a
    lock a background thread held at the fork would be held in the child for good."""

    def renew(target: Any) -> None:
        for name in names:
            setattr(target, name, threading.Lock())

    _register(owner, renew)


_prune_at = 256


def _register(owner: object, function: Callable[[Any], None]) -> None:
    global _prune_at
    with _lock:
        if len(_rebuilds) >= _prune_at:  # objects come and go (histories, a second init()): forget the dead
            _rebuilds[:] = [entry for entry in _rebuilds if entry[0]() is not None]
            _prune_at = max(256, 2 * len(_rebuilds))  # amortised: many live objects do not prune every time
        _rebuilds.append((weakref.ref(owner), function))


_held: list[tuple[weakref.ref[Any], str]] = []
_acquired: list[threading.Lock] = []
_HOLD_S = 5.0
"""How long a fork waits for one held lock; past it, the fork goes ahead (the lock is not held)."""


def hold_across_fork(owner: object, name: str) -> None:
    """Take ``owner``'s lock ``name`` before this process forks, and let it go after (in the parent; the
    child gets a new one from its rebuild): what the lock guards (a SQLite transaction) is then never
    half done in the copy the child inherits. Waits at most a few seconds for it.

    The locks are taken in the reverse order they registered in, so one registered at import (a lock
    taken inside others, such as the serialisation lock of :mod:`otel_errcompact.trajectory`) is taken
    after the locks of the objects made later, which may hold theirs while they wait for it."""
    with _lock:
        _held[:] = [entry for entry in _held if entry[0]() is not None]
        _held.append((weakref.ref(owner), name))


def _before_fork() -> None:
    for ref, name in reversed(list(_held)):
        owner = ref()
        lock = getattr(owner, name, None) if owner is not None else None
        if lock is not None and lock.acquire(timeout=_HOLD_S):
            _acquired.append(lock)


def _after_fork_in_parent() -> None:
    while _acquired:
        _acquired.pop().release()


def _after_fork_in_child() -> None:
    global _lock
    _acquired.clear()  # the child's copies: its rebuilds replace the locks
    _lock = threading.Lock()  # a thread of the parent may have held it
    for ref, function in list(_rebuilds):
        owner = ref()
        if owner is None:
            continue
        try:
            function(owner)
        except Exception:  # the child goes on; what could not be rebuilt says so
            _log.exception("otel-errcompact: could not rebuild %r in a forked process", owner)


if hasattr(os, "register_at_fork"):  # POSIX only
    os.register_at_fork(before=_before_fork, after_in_parent=_after_fork_in_parent, after_in_child=_after_fork_in_child)
