"""Thread starts refused from the moment a library's exit shutdown begins, as Python 3.12+ refuses them.

From Python 3.12 on, ``threading.Thread.start`` raises ``RuntimeError("can't create new thread at interpreter
shutdown")`` once the interpreter shuts down, ``atexit`` callbacks included. A child process that runs
:data:`REFUSE_THREADS_AT_EXIT` first and calls ``refuse_threads_at_exit()`` after ``init()`` gets the same
refusal on any version: ``atexit`` runs what is registered last first, so the refusal starts just before
the library's shutdown. On Python 3.12+ it changes nothing. ``refuse_threads_now()`` refuses them at once,
for a test of what runs when no thread can be started.
"""

from __future__ import annotations

import textwrap

__all__ = ["REFUSE_THREADS_AT_EXIT"]

REFUSE_THREADS_AT_EXIT = textwrap.dedent(
    """
    import atexit, threading

    def _refuse(*args, **kwargs):
        raise RuntimeError("can't create new thread at interpreter shutdown")

    def refuse_threads_now():
        for name in ("_start_new_thread", "_start_joinable_thread"):  # Thread.start's primitive, by version
            if hasattr(threading, name):
                setattr(threading, name, _refuse)

    def refuse_threads_at_exit():  # called after init(): atexit runs it first, before the library's shutdown
        atexit.register(refuse_threads_now)
    """
)
