"""Flush on SIGTERM, for hosts that have no SIGTERM handler of their own.

``kill``, ``docker stop``, Kubernetes and systemd stop a process with SIGTERM. Python's default action
for it ends the process at once: no ``atexit``, so the trajectory writer's queue is not written to the
store (the records are still in the spool and recovered on the next start, but the store the operator
opens now lacks them). So ``init()`` installs a handler, only if the host has none (the disposition is
still ``SIG_DFL``), only from the main thread (the only one allowed to), and only once:

1. it shuts the handle down (the writer drains its queue into the store) on a helper thread, waiting at
   most ``timeout_s``; a helper thread because the signal may have interrupted the main thread inside
   the writer's own lock;
2. it then restores the default disposition and sends SIGTERM to the process again, so the process ends
   exactly as it would have without the library (killed by SIGTERM, exit status 143 in a shell).

A host that installs its own SIGTERM handler later replaces this one; it should call
``otel_errcompact.instance().shutdown()`` itself (or ``ec.shutdown()``). A host that ignores SIGTERM keeps
ignoring it.
"""

from __future__ import annotations

import logging
import os
import signal
import threading
from collections.abc import Callable
from types import FrameType

__all__ = ["install_sigterm_flush", "uninstall_sigterm_flush"]

_log = logging.getLogger("otel_errcompact")
_installed: list[Callable[[int, FrameType | None], None]] = []


def install_sigterm_flush(shutdown: Callable[[], None], timeout_s: float) -> bool:
    """Run ``shutdown`` (bounded by ``timeout_s``) on SIGTERM, then terminate as the default would.

    Returns ``True`` if the handler was installed; ``False`` when the host already handles or
    ignores SIGTERM, when called off the main thread, or on a platform without SIGTERM.
    """
    if not hasattr(signal, "SIGTERM") or threading.current_thread() is not threading.main_thread():
        return False
    try:
        if signal.getsignal(signal.SIGTERM) is not signal.SIG_DFL:
            return False  # the host's own handler (or SIG_IGN, or ours from an earlier init) stays

        def on_sigterm(signum: int, _frame: FrameType | None) -> None:
            helper = threading.Thread(target=_quietly, args=(shutdown,), name="otel_errcompact.sigterm",
                                      daemon=True)
            helper.start()
            helper.join(timeout_s)
            # Chain to the previous disposition (the default: terminate) so the exit status is SIGTERM's.
            signal.signal(signum, signal.SIG_DFL)
            os.kill(os.getpid(), signum)

        signal.signal(signal.SIGTERM, on_sigterm)
    except (ValueError, OSError):  # pragma: no cover - e.g. an embedded interpreter without signals
        return False
    _installed.append(on_sigterm)
    return True


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
