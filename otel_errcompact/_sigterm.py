"""Flush on SIGTERM, for hosts that have no SIGTERM handler of their own.

``kill``, ``docker stop``, Kubernetes and systemd stop a process with SIGTERM. Python's default action
for it ends the process at once: no ``atexit``, so the trajectory writer's queue is not written to the
store (the records are still in the spool and recovered on the next start, but the store the operator
opens now lacks them). So ``init()`` installs a handler, only if the host has none (the disposition is
still ``SIG_DFL``), only from the main thread (the only one allowed to), and only once. On SIGTERM:

1. the default disposition is restored at once, so a second SIGTERM ends the process immediately;
2. the trajectory writer holds new submissions: a tool that fails from now on does not return to the
   agent (its record could no longer be stored) until the process ends;
3. a helper thread shuts the handle down (the writer drains its queue into the store), waiting at most
   ``timeout_s``, then sends SIGTERM to the process again, so the process ends exactly as it would have
   without the library (killed by SIGTERM, exit status 143 in a shell).

The handler itself returns at once: the signal may have interrupted the main thread inside a lock the
shutdown needs (the writer's queue, an import), and that thread must be let go to release it.

A host that installs its own SIGTERM handler later replaces this one; it should call
``otel_errcompact.instance().shutdown()`` itself (or ``ec.shutdown()``). A host that ignores SIGTERM keeps
ignoring it.
"""

from __future__ import annotations

import contextlib
import logging
import os
import signal
import threading
from collections.abc import Callable
from types import FrameType

from otel_errcompact import _signalmask

__all__ = ["install_sigterm_flush", "uninstall_sigterm_flush"]

_log = logging.getLogger("otel_errcompact")
_installed: list[Callable[[int, FrameType | None], None]] = []


def install_sigterm_flush(
    shutdown: Callable[[], None], timeout_s: float, hold: Callable[[], None] | None = None
) -> bool:
    """On SIGTERM, ``hold()`` new work, run ``shutdown`` (bounded by ``timeout_s``), then terminate.

    Returns ``True`` if the handler was installed; ``False`` when the host already handles or
    ignores SIGTERM, when called off the main thread, or on a platform without SIGTERM.
    """
    if not hasattr(signal, "SIGTERM") or threading.current_thread() is not threading.main_thread():
        return False
    try:
        if signal.getsignal(signal.SIGTERM) is not signal.SIG_DFL:
            return False  # the host's own handler (or SIG_IGN, or ours from an earlier init) stays

        def on_sigterm(signum: int, _frame: FrameType | None) -> None:
            # Chain to the previous disposition (the default: terminate) for what follows.
            signal.signal(signum, signal.SIG_DFL)
            if hold is not None:
                _quietly(hold)
            # Python 3.12+ starts no thread once the interpreter is exiting (RuntimeError): the exit runs
            # the shutdown (atexit, or a multiprocessing worker's finalizer), maybe in the very call this
            # signal interrupted. It finishes, bounded, and the process ends.
            with contextlib.suppress(RuntimeError):
                _signalmask.start(threading.Thread(target=_finish, args=(shutdown, timeout_s, signum),
                                                   name="otel_errcompact.sigterm", daemon=True))

        signal.signal(signal.SIGTERM, on_sigterm)
    except (ValueError, OSError):  # pragma: no cover - e.g. an embedded interpreter without signals
        return False
    _installed.append(on_sigterm)
    return True


def _finish(shutdown: Callable[[], None], timeout_s: float, signum: int) -> None:
    worker = threading.Thread(target=_quietly, args=(shutdown,), name="otel_errcompact.shutdown",
                              daemon=True)
    _signalmask.start(worker)
    worker.join(timeout_s)
    os.kill(os.getpid(), signum)


def uninstall_sigterm_flush() -> None:
    """Give SIGTERM back its default action, if our handler is still the installed one."""
    if threading.current_thread() is not threading.main_thread():
        return
    while _installed:
        handler = _installed.pop()
        try:
            if signal.getsignal(signal.SIGTERM) is handler:
                signal.signal(signal.SIGTERM, signal.SIG_DFL)
        except (ValueError, OSError):  # pragma: no cover
            pass


def _quietly(shutdown: Callable[[], None]) -> None:
    try:
        shutdown()
    except Exception:
        _log.exception("otel-errcompact: shutdown on SIGTERM failed")
