"""A helper process of the library's own, answering requests on its standard streams.

Why processes. Work that holds the GIL on a background thread takes it from the agent's threads: in a
CPU-bound agent (several threads calling tools that fail at once) every microsecond of it is one the
agent waits. Two jobs need no state of the agent's process and move whole: counting tokens
(:mod:`otel_errcompact._counting_process`) and compacting raw errors with the default parsers
(:mod:`otel_errcompact._compacting_process`). The thread that sends them a batch waits on a pipe, which
lets go of the GIL.

A :class:`HelperProcess` is started at its first request, on the thread that makes it, runs in a bare
interpreter (``python -I -S``) and ends when its input closes: when :meth:`HelperProcess.close` runs at
exit, or when the agent's process dies. After a ``fork`` the new process starts its own. Where no child
can be started (no Python interpreter to run: a frozen application, an embedding host, Windows; a
sandbox that forbids it) or one stops answering, a request raises :class:`HelperProcessError` and the
caller does the work in place; after :data:`MAX_STARTS` failed starts in a process it stops trying.
"""

from __future__ import annotations

import contextlib
import os
import select
import struct
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from typing import ClassVar, TypeVar

from otel_errcompact._forked import new_locks_in_child

__all__ = [
    "CLOSE_WAIT_S", "MAX_STARTS", "HelperProcess", "HelperProcessError", "read_exactly", "read_sized", "write_all",
]

MAX_STARTS = 3
"""Child processes of one kind started per process (each after the previous one failed) before the work
stays in place."""

CLOSE_WAIT_S = 1.0
"""How long :meth:`HelperProcess.close` waits for a request in flight before it kills the child."""

_T = TypeVar("_T")


class HelperProcessError(Exception):
    """The child could not be started or stopped answering; the caller does the work in place."""


class HelperProcess:
    """One child process running ``argv``, which writes the line ``ready`` once it can answer (or
    ``error: <why>`` and exits). :meth:`exchange` is thread-safe (one request at a time)."""

    what: ClassVar[str] = "helper"
    """What the process does, for messages: "the {what} process stopped answering"."""
    error: ClassVar[type[HelperProcessError]] = HelperProcessError
    start_timeout_s: ClassVar[float] = 30.0
    max_starts: ClassVar[int] = MAX_STARTS

    def __init__(self, argv: list[str]) -> None:
        self._argv = argv
        self._lock = threading.Lock()
        new_locks_in_child(self, "_lock")
        self._process: subprocess.Popen[bytes] | None = None
        self._closed = False
        self.starts = 0

    @property
    def pid(self) -> int | None:
        """The running child's process id, None when none runs."""
        process = self._process
        return process.pid if process is not None else None

    def exchange(self, request: bytes, read_reply: Callable[[int, float], _T], timeout_s: float) -> _T:
        """Send ``request`` and return ``read_reply(stdout_fd, deadline)``; :attr:`error` if the child
        cannot answer (it is then stopped, and the next call starts another) or :meth:`close` has run."""
        self.raise_if_refused()
        with self._lock:
            process = self._running()
            try:
                assert process.stdin is not None and process.stdout is not None
                write_all(process.stdin.fileno(), request, time.monotonic() + timeout_s, self.error)
                return read_reply(process.stdout.fileno(), time.monotonic() + timeout_s)
            except (OSError, HelperProcessError) as exc:
                self._stop()
                raise self.error(f"the {self.what} process stopped answering ({exc})") from exc

    def raise_if_refused(self) -> None:
        """Raise :attr:`error` when no child runs and none may be started any more: a subclass calls it
        before it builds a request for nothing. For good once true, so lock-free."""
        if self._process is None and (refusal := self._refusal()):
            raise self.error(refusal)

    def _running(self) -> subprocess.Popen[bytes]:
        # After a fork the child is the parent's: poll() cannot wait for it and reports it ended, so this
        # process starts its own, and stopping the parent's only closes this process's copies of its pipes.
        if self._process is not None and self._process.poll() is None:
            return self._process
        self._stop()
        refusal = self._refusal()
        if refusal:
            raise self.error(refusal)
        self.starts += 1
        self._process = self._start()
        return self._process

    def _refusal(self) -> str | None:
        """Why no child may be started any more, for good; None while one may."""
        if self._closed:  # at exit: what is left is done in place
            return f"the {self.what} process was closed"
        if self.starts >= self.max_starts:
            return f"{self.max_starts} {self.what} processes failed; working in place"
        return None

    def _start(self) -> subprocess.Popen[bytes]:
        if not runs_python(self._argv[0]):
            raise self.error(f"no Python interpreter to start a {self.what} process with ({self._argv[0]!r})")
        try:
            process = subprocess.Popen(
                self._argv,
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                stderr=subprocess.DEVNULL,
                start_new_session=True,  # not in the agent's process group: its terminal's signals stay there
            )
        except OSError as exc:
            raise self.error(f"cannot start the {self.what} process: {exc}") from exc
        assert process.stdin is not None and process.stdout is not None
        os.set_blocking(process.stdin.fileno(), False)  # a write waits through select, with a deadline
        try:
            line = read_line(process.stdout.fileno(), time.monotonic() + self.start_timeout_s, self.error)
        except (OSError, HelperProcessError) as exc:
            end(process)
            raise self.error(f"the {self.what} process did not start ({exc})") from exc
        if line != b"ready":
            end(process)
            raise self.error(f"the {self.what} process did not start: {line.decode(errors='replace')}")
        return process

    def _stop(self) -> None:
        process, self._process = self._process, None
        if process is not None:
            end(process)

    def close(self) -> None:
        """End the child for good: its input closes, it exits (killed if it has not within a second), and
        later requests raise :attr:`error`. Never waits long for a request in flight (at exit, a child
        that stopped answering would hold it up to its reply timeout): after :data:`CLOSE_WAIT_S` the
        child is killed under it, and the request fails as when the child dies."""
        self._closed = True
        if not self._lock.acquire(timeout=CLOSE_WAIT_S):
            process = self._process
            if process is not None:
                with contextlib.suppress(OSError):
                    process.kill()
            return
        try:
            self._stop()
        finally:
            self._lock.release()


def runs_python(executable: str) -> bool:
    """Whether ``executable`` can be started as a plain Python interpreter: not in a frozen application
    (whose executable is the application itself) nor an embedding host (uWSGI, a game engine), whose
    ``sys.executable`` is their own program; POSIX only (the pipes are waited on with ``select``)."""
    return (
        os.name == "posix"
        and not getattr(sys, "frozen", False)
        and bool(executable)
        and os.path.basename(executable).startswith(("python", "pypy"))
    )


def end(process: subprocess.Popen[bytes]) -> None:
    """Close ``process``'s pipes and reap it (killed when it has not exited within a second)."""
    for stream in (process.stdin, process.stdout):
        if stream is not None:
            with contextlib.suppress(OSError):
                stream.close()
    try:
        process.wait(timeout=1.0)
    except subprocess.TimeoutExpired:
        process.kill()
        with contextlib.suppress(subprocess.TimeoutExpired):
            process.wait(timeout=1.0)


def _wait(fd: int, deadline: float, error: type[HelperProcessError], *, write: bool = False) -> None:
    remaining = deadline - time.monotonic()
    if remaining <= 0:
        raise error("timed out")
    ready = select.select([], [fd], [], remaining) if write else select.select([fd], [], [], remaining)
    if not (ready[1] if write else ready[0]):
        raise error("timed out")


def write_all(fd: int, data: bytes, deadline: float, error: type[HelperProcessError] = HelperProcessError) -> None:
    """Write all of ``data`` to the non-blocking ``fd`` by ``deadline``."""
    view = memoryview(data)
    while view:
        try:  # at once, as a rule: the pipe has room; select only when it has not
            view = view[os.write(fd, view) :]
        except BlockingIOError:
            _wait(fd, deadline, error, write=True)


def read_exactly(fd: int, size: int, deadline: float, error: type[HelperProcessError] = HelperProcessError) -> bytes:
    """``size`` bytes read from ``fd`` by ``deadline``."""
    parts: list[bytes] = []
    got = 0
    while got < size:
        _wait(fd, deadline, error)
        chunk = os.read(fd, size - got)
        if not chunk:
            raise error("the process ended")
        parts.append(chunk)
        got += len(chunk)
    return b"".join(parts)


def read_sized(fd: int, deadline: float, error: type[HelperProcessError] = HelperProcessError) -> bytes:
    """A reply that starts with its length (a little-endian unsigned 32-bit integer), read from ``fd`` by
    ``deadline``: what is there is read at once, so a short reply costs one wait and one read."""
    _wait(fd, deadline, error)
    data = os.read(fd, 1 << 16)
    if not data:
        raise error("the process ended")
    if len(data) < 4:
        data += read_exactly(fd, 4 - len(data), deadline, error)
    (size,) = struct.unpack_from("<I", data)
    body = data[4:]
    if len(body) < size:
        body += read_exactly(fd, size - len(body), deadline, error)
    return body


def read_line(fd: int, deadline: float, error: type[HelperProcessError] = HelperProcessError,
              limit: int = 4096) -> bytes:
    """One line read from ``fd`` by ``deadline``, without its newline."""
    data = b""
    while not data.endswith(b"\n"):
        if len(data) > limit:
            raise error("no answer line")
        _wait(fd, deadline, error)
        chunk = os.read(fd, 1)
        if not chunk:
            raise error("the process ended")
        data += chunk
    return data[:-1]
