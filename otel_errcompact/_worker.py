"""A bounded queue drained by one daemon thread: for work that must not run on the agent's thread.

Used for token counting (a BPE pass over a large raw error costs milliseconds) and for calling the
user's human-review hook (which may block for as long as a human takes). Items beyond ``max_size`` are
dropped and counted: these are side effects, never audit records (those go through the trajectory
writer, which has its own guarantees).
"""

from __future__ import annotations

import logging
import threading
from collections import deque
from collections.abc import Callable
from typing import Generic, TypeVar

__all__ = ["BackgroundQueue"]

_log = logging.getLogger("otel_errcompact")
T = TypeVar("T")


class BackgroundQueue(Generic[T]):
    """Run ``handler(item)`` for each submitted item on a daemon thread, in order."""

    def __init__(self, name: str, handler: Callable[[T], None], *, max_size: int = 10_000) -> None:
        self._handler = handler
        self._items: deque[T] = deque()
        self._max_size = max_size
        self._cond = threading.Condition()
        self._busy = False
        self._closed = False
        self.dropped = 0
        self._thread = threading.Thread(target=self._run, name=name, daemon=True)
        self._thread.start()

    def submit(self, item: T) -> bool:
        """Queue ``item``; False (and counted in ``dropped``) when full or closed. Never blocks."""
        with self._cond:
            if self._closed or len(self._items) >= self._max_size:
                self.dropped += 1
                return False
            self._items.append(item)
            self._cond.notify()
            return True

    def flush(self, timeout_s: float = 10.0) -> bool:
        """Wait until every queued item has been handled; False on timeout."""
        with self._cond:
            return self._cond.wait_for(lambda: not self._items and not self._busy, timeout=timeout_s)

    def shutdown(self, timeout_s: float = 10.0) -> None:
        """Handle what is queued, then stop the thread."""
        with self._cond:
            self._closed = True
            self._cond.notify_all()
        self._thread.join(timeout_s)

    def _run(self) -> None:
        while True:
            with self._cond:
                self._cond.wait_for(lambda: self._items or self._closed)
                if not self._items:
                    return
                item = self._items.popleft()
                self._busy = True
            try:
                self._handler(item)
            except Exception:
                _log.exception("otel-errcompact: background handler failed")
            finally:
                with self._cond:
                    self._busy = False
                    self._cond.notify_all()
