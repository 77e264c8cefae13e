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

From Python 3.12 on, no thread can be started once the interpreter is shutting down, ``atexit`` callbacks
included ("can't create new thread at interpreter shutdown"), and the shutdown at exit is where these
calls matter most: without them a script's last spans, logs and metrics never reach the collector. So
:func:`reserve` starts idle daemon helpers ahead of need (``init()`` reserves one per call its shutdown
makes), and a call that cannot start a thread hands its work to one of them.
"""

from __future__ import annotations

import functools
import logging
import queue
import threading
import time
from collections.abc import Callable

from otel_errcompact import _signalmask
from otel_errcompact._forked import rebuild_in_child

__all__ = ["BoundedCall", "Deadline", "call_within", "reserve"]

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
        rebuild_in_child(self._after_fork_in_child)

    def _after_fork_in_child(self) -> None:
        """In a process forked from this one: a call the parent had running runs on no thread here, and
        each call would wait out its timeout for it; the next call starts afresh (with a new lock: the
        parent's thread may have held it)."""
        self._lock = threading.Lock()
        self._running = None

    def __call__(self, timeout_s: float) -> bool:
        """True when ``fn`` finished successfully within ``timeout_s``."""
        with self._lock:
            done = self._running
            if done is None:
                done = self._running = threading.Event()
                if not _start(functools.partial(self._run, done), self._name):
                    self._running = None
                    return False
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


def reserve(helpers: int) -> None:
    """Have at least ``helpers`` idle helper threads started ahead, for bounded calls made when no thread
    can be started any more (see the module docstring). Each waits on its own queue and costs no CPU."""
    _STANDBY.reserve(helpers)


def _start(job: Callable[[], None], name: str) -> bool:
    """Run ``job`` on a new daemon thread, else on a reserved helper; False (logged) when neither can."""
    try:
        _signalmask.start(threading.Thread(target=job, name=name, daemon=True))
        return True
    except RuntimeError as exc:  # interpreter shutdown on Python 3.12+, or the system's thread limit
        if _STANDBY.run(job):
            return True
        _log.warning("otel-errcompact: %s was not run: no thread could be started for it (%s)", name, exc)
        return False


class _Standby:
    """Idle daemon helpers started ahead of need, each taking one job at a time from its own queue."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._idle: list[tuple[threading.Thread, queue.SimpleQueue[Callable[[], None]]]] = []
        self._started = 0

    def reserve(self, helpers: int) -> None:
        with self._lock:
            missing = helpers - len(self._idle)
            for _ in range(max(0, missing)):
                jobs: queue.SimpleQueue[Callable[[], None]] = queue.SimpleQueue()
                self._started += 1
                thread = threading.Thread(target=self._serve, args=(jobs,), daemon=True,
                                          name=f"otel_errcompact.standby-{self._started}")
                _signalmask.start(thread)
                self._idle.append((thread, jobs))

    def run(self, job: Callable[[], None]) -> bool:
        """Hand ``job`` to an idle helper; False when none is left."""
        with self._lock:
            while self._idle:
                thread, jobs = self._idle.pop()
                if thread.is_alive():  # not a helper of the parent process, after a fork
                    jobs.put(job)
                    return True
        return False

    def _serve(self, jobs: queue.SimpleQueue[Callable[[], None]]) -> None:
        me = threading.current_thread()
        while True:
            job = jobs.get()
            try:
                job()
            except Exception:  # pragma: no cover - the jobs are BoundedCall._run, which catches everything
                _log.exception("otel-errcompact: a helper thread's job failed")
            with self._lock:
                self._idle.append((me, jobs))

    def _forget(self) -> None:
        """In a forked child: the parent's helpers do not exist there."""
        self._lock = threading.Lock()
        self._idle = []


_STANDBY = _Standby()
rebuild_in_child(_STANDBY._forget)
