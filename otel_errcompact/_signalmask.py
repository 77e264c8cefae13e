"""Start the library's own threads with SIGTERM and SIGINT blocked in them.

Why. The kernel hands a signal sent to the process to any one of its threads that does not block it.
Python runs its handler (the library's flush on SIGTERM, see :mod:`otel_errcompact._sigterm`; the
host's; the ``KeyboardInterrupt`` of SIGINT) only when the main thread next runs Python code. If the
signal lands on one of the library's threads while the main thread waits in a system call (a pool
worker waiting for its next task on a queue's lock, a read from a pipe or socket), nothing wakes the main
thread: the process neither handles the signal nor dies of it, and ``Pool.terminate()``, ``docker stop``
or a Ctrl-C hangs. Blocked in the library's threads, the signal goes to a thread that can take it, the
main thread by preference.

What. :func:`start` starts a thread whose signal mask blocks :data:`BLOCKED`: the mask is set on the
starting thread for the instant of ``Thread.start()`` (a new thread inherits its creator's mask) and
restored at once, so the new thread never runs with them unblocked. A signal that arrives in that instant
goes to another thread that takes it, or waits, pending, until the mask is restored.

Only threads that run the library's own work use it: the digest thread, the trajectory writer, the
token-count queue (``BackgroundQueue(library_work=True)``), bounded flushes and their standby helpers
(``_bounded``), and the SIGTERM flush. A process started from such a thread inherits the mask; the
library's own helper processes clear their mask first thing (``_compact_child``, ``_count_child``).
Threads that run the user's code (the human-review hook, model calls of the recovery loop) keep the mask
of their creator.
"""

from __future__ import annotations

import signal
import threading

__all__ = ["BLOCKED", "start"]

BLOCKED: frozenset[signal.Signals] = frozenset(
    s for s in (getattr(signal, "SIGTERM", None), getattr(signal, "SIGINT", None)) if s is not None
)
"""The signals the library's threads never take: those that end a process or interrupt its main thread."""

_CAN_MASK = hasattr(signal, "pthread_sigmask")


def start(thread: threading.Thread) -> None:
    """``thread.start()``, with :data:`BLOCKED` blocked in the new thread (see the module docstring);
    a plain start where the platform has no per-thread signal mask (Windows)."""
    if not _CAN_MASK or not BLOCKED:
        thread.start()
        return
    previous = signal.pthread_sigmask(signal.SIG_BLOCK, BLOCKED)
    try:
        thread.start()
    finally:
        signal.pthread_sigmask(signal.SIG_SETMASK, previous)

