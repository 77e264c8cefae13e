"""A bounded queue drained by one daemon thread: for work that must not run on the agent's thread.

Used for token counting (a BPE pass over a large raw error costs milliseconds) and for calling the
user's human-review hook (which may block for as long as a human takes). Items beyond ``max_size`` (or,
when a ``cost`` function is given, beyond ``max_cost`` in total, e.g. characters of text) are dropped and
counted: these are side effects, never audit records (those go through the trajectory writer, which has
its own guarantees).
"""

from __future__ import annotations

import logging
import threading
from collections import deque
from collections.abc import Callable
from typing import Generic, TypeVar

from otel_errcompact import _signalmask
from otel_errcompact._forked import rebuild_in_child

__all__ = ["BackgroundQueue"]

_log = logging.getLogger("otel_errcompact")
T = TypeVar("T")


class BackgroundQueue(Generic[T]):
    """Run ``handler(item)`` for each submitted item on a daemon thread, in order.

    With ``batch_handler`` the thread calls ``batch_handler(items)`` once per wake-up instead, with every
    item waiting: a handler that can merge items (metrics with equal attributes) then pays once per
    batch, not per item. Give one of the two.
    """

    def __init__(
        self,
        name: str,
        handler: Callable[[T], None] | None = None,
        *,
        batch_handler: Callable[[list[T]], None] | None = None,
        max_size: int = 10_000,
        cost: Callable[[T], int] | None = None,
        max_cost: int = 0,
        wake_every: int = 1,
        max_delay_s: float | None = None,
        library_work: bool = False,
    ) -> None:
        if handler is None and batch_handler is None:
            raise TypeError("BackgroundQueue needs a handler or a batch_handler")
        self._handler = handler
        self._batch_handler = batch_handler
        self._items: deque[T] = deque()
        self._max_size = max_size
        # Bounding by item count alone lets a few huge items hold gigabytes; ``cost`` bounds the total.
        self._cost = cost
        self._max_cost = max_cost
        self._queued_cost = 0
        # Waking the worker for every item hands it the GIL in the middle of the submitter's work. With
        # ``wake_every`` > 1 the worker wakes when that many items wait, or after ``max_delay_s``.
        self._wake_every = max(1, wake_every)
        self._max_delay = max_delay_s
        self._flush_wanted = 0
        # Set by ``submit(wake=True)``, cleared when the worker wakes: a notify alone does not wake it, as
        # it waits for ``_due`` and goes back to sleep while that is False.
        self._wake_wanted = False
        self._cond = threading.Condition()
        self._busy = False
        self._closed = False
        self.dropped = 0
        self._name = name
        # Only the library's own code runs on the thread: it then never takes SIGTERM or SIGINT (see
        # _signalmask). A thread running the user's code (a review hook) keeps its creator's mask.
        self._library_work = library_work
        self._thread = self._start_thread()
        rebuild_in_child(self._after_fork_in_child)

    def _after_fork_in_child(self) -> None:
        """In a process forked from this one (see :mod:`otel_errcompact._forked`): what was queued is the
        parent's to handle; a new condition (a thread of the parent may have held its lock), and the
        thread again unless the queue was shut down."""
        self._items.clear()
        self._queued_cost = 0
        self._flush_wanted = 0
        self._wake_wanted = False
        self._busy = False
        self._cond = threading.Condition()
        if not self._closed:
            # set once started: a shutdown meanwhile never joins an unstarted thread
            self._thread = self._start_thread()

    def _start_thread(self) -> threading.Thread:
        thread = threading.Thread(target=self._run, name=self._name, daemon=True)
        if self._library_work:
            _signalmask.start(thread)
        else:
            thread.start()
        return thread

    def submit(self, item: T, *, wake: bool = False) -> bool:
        """Queue ``item``; False (and counted in ``dropped``) when full or closed. Never blocks.
        ``wake``: wake the worker now, for an item that should not wait for the batch."""
        size = self._cost(item) if self._cost is not None else 0
        with self._cond:
            if (
                self._closed
                or len(self._items) >= self._max_size
                or (size and self._items and self._queued_cost + size > self._max_cost)
            ):
                self.dropped += 1
                return False
            self._items.append(item)
            self._queued_cost += size
            if wake:
                self._wake_wanted = True
                self._cond.notify()
            elif len(self._items) == self._wake_every:
                self._cond.notify()
            return True

    def flush(self, timeout_s: float = 10.0) -> bool:
        """Wait until every queued item has been handled; False on timeout. Called from the handler itself
        (a review hook that flushes the library), it does not wait for its own item, which cannot end
        while it waits: True when no other item is queued."""
        if threading.current_thread() is self._thread:
            with self._cond:
                return not self._items
        with self._cond:
            self._flush_wanted += 1
            self._cond.notify_all()
            try:
                return self._cond.wait_for(lambda: not self._items and not self._busy, timeout=timeout_s)
            finally:
                self._flush_wanted -= 1

    def shutdown(self, timeout_s: float = 10.0) -> None:
        """Handle what is queued, then stop the thread. Called from the handler itself (a review hook
        that shuts the library down), it does not wait: the thread ends once the handler returns."""
        with self._cond:
            self._closed = True
            self._cond.notify_all()
        if threading.current_thread() is not self._thread:
            self._thread.join(timeout_s)

    def _due(self) -> bool:
        """Whether the worker has something to do now. A flush or a wake-up with nothing queued is not:
        the worker would go round its loop without waiting, holding the GIL, until the flushing thread
        got it back to see that its flush was done."""
        if self._closed:
            return True
        queued = len(self._items)
        return queued > 0 and (self._wake_wanted or self._flush_wanted > 0 or queued >= self._wake_every)

    def _run(self) -> None:
        while True:
            with self._cond:
                self._cond.wait_for(self._due, timeout=self._max_delay)
                self._wake_wanted = False
                if not self._items:
                    if self._closed:
                        return
                    continue
                batch = list(self._items)
                self._items.clear()
                self._queued_cost = 0
                self._busy = True
            try:
                if self._batch_handler is not None:
                    # A batch handler that raised may have handled part of the batch: its items are not
                    # handled again (that could count them twice).
                    try:
                        self._batch_handler(batch)
                    except Exception:
                        _log.exception("otel-errcompact: background batch handler failed")
                elif self._handler is not None:
                    for item in batch:
                        try:
                            self._handler(item)
                        except Exception:
                            _log.exception("otel-errcompact: background handler failed")
            finally:
                with self._cond:
                    self._busy = False
                    self._cond.notify_all()
