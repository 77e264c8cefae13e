"""Run a call that may hang on a dead endpoint, and stop waiting for it at a deadline.

The OpenTelemetry SDK's own timeouts do not bound the caller. ``force_flush`` of a batch processor
exports on the calling thread and ignores its ``timeout_millis``; ``shutdown`` of a tracer or logger
provider takes no timeout at all and waits for the worker's last export; and every OTLP exporter retries
with backoff for up to ``OTEL_EXPORTER_OTLP_TIMEOUT`` (10 s) per export. Against a closed port or a
port that accepts TCP and never answers, that is tens of seconds per provider.

So the library runs such calls on a daemon helper thread and waits at most the time left. When the
deadline passes, the caller goes on; the helper finishes (or keeps retrying) in the background, and,
being a daemon thread, never holds up interpreter exit. :class:`BoundedCall` keeps at most one helper per
target in flight: a later call waits on the same helper instead of piling up threads behind a hung one.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable

__all__ = ["BoundedCall", "Deadline", "call_within"]

_log = logging.getLogger("otel_errcompact")


class Deadline:
    """A point in time shared by several steps, e.g. every provider and sink of one ``shutdown()``."""

    def __init__(self, timeout_s: float) -> None:
        self._end = time.monotonic() + max(0.0, timeout_s)

    def remaining(self) -> float:
        """Seconds left, never negative."""
        return max(0.0, self._end - time.monotonic())


class BoundedCall:
    """Calls ``fn`` on a daemon thread and waits at most a given time for it.

    ``fn`` returns a bool (``False`` means it reported failure) or ``None`` (success). An exception in
    ``fn`` is logged and counts as failure; it never reaches the caller.
    """

    def __init__(self, fn: Callable[[], object], name: str) -> None:
        self._fn = fn
        self._name = name
        self._lock = threading.Lock()
        self._running: threading.Event | None = None
        self._ok = False

    def __call__(self, timeout_s: float) -> bool:
        """True when ``fn`` finished successfully within ``timeout_s``."""
        with self._lock:
            done = self._running
            if done is None:
                done = self._running = threading.Event()
                threading.Thread(target=self._run, args=(done,), name=self._name, daemon=True).start()
        if not done.wait(max(0.0, timeout_s)):
            return False
        return self._ok

    def _run(self, done: threading.Event) -> None:
        ok = False
        try:
            ok = self._fn() is not False
        except Exception as exc:
            # Expected against a dead endpoint (the SDK raises on a timed-out metrics flush): one line.
            _log.warning("otel-errcompact: %s failed: %s", self._name, str(exc).splitlines()[0] if str(exc)
                         else type(exc).__name__)
            _log.debug("otel-errcompact: %s failed", self._name, exc_info=True)
        finally:
            with self._lock:
                self._ok = ok
                self._running = None
            done.set()


def call_within(fn: Callable[[], object], timeout_s: float, name: str) -> bool:
    """Run ``fn`` once on a daemon thread; True when it finished successfully within ``timeout_s``."""
    return BoundedCall(fn, name)(timeout_s)
