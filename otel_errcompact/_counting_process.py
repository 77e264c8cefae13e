"""Token counts made in a child process, so the agent's process never loads a vocabulary or counts.

Why a process. Both native tokenizers hold the GIL where it hurts. Building one turns a rank file of
200,000 tokens into a Rust table inside one call: measured on this project's 2-core machine, after an
agent's first failure its thread stood still for 40-50 ms while ``bpe-openai``'s was built and, a few
seconds later, for 90-200 ms at once while ``tiktoken``'s was; and ``bpe-openai`` keeps the GIL while it
counts (a Python loop on another thread ran 2× slower beside it). In a child process neither touches the
agent's threads: a batch of texts costs the metrics thread one write and one read on a pipe, both of which
let go of the GIL while they wait (``benchmarks/bench_tokens.py``).

The child (:mod:`otel_errcompact._count_child`) is started at the first count, on the thread that counts,
and shared by every counter of the process. It runs ``bpe-openai``'s extension in a bare interpreter
(``python -I -S``) and ends when its input closes: when :func:`close` runs at exit, or when the agent's
process dies. After a ``fork`` the new process starts its own. Where no child can be started (no Python
interpreter to run: a frozen application, an embedding host, Windows; a sandbox that forbids it) or one
stops answering, :class:`CountingProcess` raises :class:`CountingProcessError` and the caller counts in
place; after :data:`MAX_STARTS` failed starts in a process it stops trying.
"""

from __future__ import annotations

import atexit
import contextlib
import os
import select
import struct
import subprocess
import sys
import threading
import time
from collections.abc import Sequence
from pathlib import Path

from otel_errcompact._forked import new_locks_in_child

__all__ = ["MAX_STARTS", "CountingProcess", "CountingProcessError", "close", "shared"]

MAX_STARTS = 3
"""Child processes started per process (each after the previous one failed) before counting stays in place."""
START_TIMEOUT_S = 30.0
"""How long the child may take to start and load its vocabulary (about 0.2 s here)."""
REPLY_TIMEOUT_S = 30.0
"""How long a batch may take (a few milliseconds for the bounded texts the metrics thread sends)."""
_CHILD = str(Path(__file__).with_name("_count_child.py"))


class CountingProcessError(Exception):
    """The child could not be started or stopped answering; the caller counts in place."""


class CountingProcess:
    """One child process counting tokens of ``encoding`` with the ``bpe-openai`` extension at ``extension``.

    :meth:`count` is thread-safe (one request at a time) and starts the child when needed.
    """

    def __init__(self, extension: str, encoding: str) -> None:
        self._argv = [sys.executable, "-I", "-S", _CHILD, extension, encoding]
        self._lock = threading.Lock()
        new_locks_in_child(self, "_lock")
        self._process: subprocess.Popen[bytes] | None = None
        self._closed = False
        self.starts = 0

    def count(self, payload: Sequence[bytes]) -> list[int]:
        """The token count of each UTF-8 text, in order; :class:`CountingProcessError` if the child cannot
        answer (it is then stopped, and the next call starts another) or :func:`close` has run."""
        if self._process is None and (refusal := self._refusal()):
            raise CountingProcessError(refusal)  # before the request is built for nothing; for good, so lock-free
        request = struct.pack(f"<I{len(payload)}I", len(payload), *map(len, payload)) + b"".join(payload)
        with self._lock:
            process = self._running()
            try:
                assert process.stdin is not None and process.stdout is not None
                _write_all(process.stdin.fileno(), request, time.monotonic() + REPLY_TIMEOUT_S)
                reply = _read_exactly(process.stdout.fileno(), 4 * len(payload), time.monotonic() + REPLY_TIMEOUT_S)
            except (OSError, CountingProcessError) as exc:
                self._stop()
                raise CountingProcessError(f"the token-counting process stopped answering ({exc})") from exc
        return list(struct.unpack(f"<{len(payload)}I", reply))

    def _running(self) -> subprocess.Popen[bytes]:
        # After a fork the child is the parent's: poll() cannot wait for it and reports it ended, so this
        # process starts its own, and stopping the parent's only closes this process's copies of its pipes.
        if self._process is not None and self._process.poll() is None:
            return self._process
        self._stop()
        refusal = self._refusal()
        if refusal:
            raise CountingProcessError(refusal)
        self.starts += 1
        self._process = self._start()
        return self._process

    def _refusal(self) -> str | None:
        """Why no child may be started any more, for good; None while one may."""
        if self._closed:  # at exit: what is still counted is counted in place
            return "the token-counting process was closed"
        if self.starts >= MAX_STARTS:
            return f"{MAX_STARTS} token-counting processes failed; counting in place"
        return None

    def _start(self) -> subprocess.Popen[bytes]:
        if not _runs_python(self._argv[0]):
            raise CountingProcessError(f"no Python interpreter to start a counting process with ({self._argv[0]!r})")
        try:
            process = subprocess.Popen(
                self._argv,
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                stderr=subprocess.DEVNULL,
                start_new_session=True,  # not in the agent's process group: its terminal's signals stay there
            )
        except OSError as exc:
            raise CountingProcessError(f"cannot start the token-counting process: {exc}") from exc
        assert process.stdin is not None and process.stdout is not None
        os.set_blocking(process.stdin.fileno(), False)  # a write waits through select, with a deadline
        try:
            line = _read_line(process.stdout.fileno(), time.monotonic() + START_TIMEOUT_S)
        except (OSError, CountingProcessError) as exc:
            _end(process)
            raise CountingProcessError(f"the token-counting process did not start ({exc})") from exc
        if line != b"ready":
            _end(process)
            raise CountingProcessError(f"the token-counting process did not start: {line.decode(errors='replace')}")
        return process

    def _stop(self) -> None:
        process, self._process = self._process, None
        if process is not None:
            _end(process)

    def close(self) -> None:
        """End the child for good: its input closes, it exits (killed if it has not within a second), and
        later counts raise :class:`CountingProcessError`."""
        with self._lock:
            self._closed = True
            self._stop()


def _runs_python(executable: str) -> bool:
    """Whether ``executable`` can be started as a plain Python interpreter: not in a frozen application
    (whose executable is the application itself) nor an embedding host (uWSGI, a game engine), whose
    ``sys.executable`` is their own program; POSIX only (the pipes are waited on with ``select``)."""
    return (
        os.name == "posix"
        and not getattr(sys, "frozen", False)
        and bool(executable)
        and os.path.basename(executable).startswith(("python", "pypy"))
    )


def _end(process: subprocess.Popen[bytes]) -> None:
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


def _wait(fd: int, deadline: float, *, write: bool = False) -> None:
    remaining = deadline - time.monotonic()
    if remaining <= 0:
        raise CountingProcessError("timed out")
    ready = select.select([], [fd], [], remaining) if write else select.select([fd], [], [], remaining)
    if not (ready[1] if write else ready[0]):
        raise CountingProcessError("timed out")


def _write_all(fd: int, data: bytes, deadline: float) -> None:
    view = memoryview(data)
    while view:
        _wait(fd, deadline, write=True)
        try:
            view = view[os.write(fd, view) :]
        except BlockingIOError:
            continue


def _read_exactly(fd: int, size: int, deadline: float) -> bytes:
    parts: list[bytes] = []
    got = 0
    while got < size:
        _wait(fd, deadline)
        chunk = os.read(fd, size - got)
        if not chunk:
            raise CountingProcessError("the process ended")
        parts.append(chunk)
        got += len(chunk)
    return b"".join(parts)


def _read_line(fd: int, deadline: float, limit: int = 4096) -> bytes:
    data = b""
    while not data.endswith(b"\n"):
        if len(data) > limit:
            raise CountingProcessError("no answer line")
        _wait(fd, deadline)
        chunk = os.read(fd, 1)
        if not chunk:
            raise CountingProcessError("the process ended")
        data += chunk
    return data[:-1]


_processes: dict[tuple[str, str], CountingProcess] = {}
_processes_lock = threading.Lock()


def shared(extension: str, encoding: str) -> CountingProcess:
    """The process-wide counting process for ``encoding`` (created, not started)."""
    with _processes_lock:
        found = _processes.get((extension, encoding))
        if found is None:
            found = _processes[(extension, encoding)] = CountingProcess(extension, encoding)
        return found


def running_pids() -> list[int]:
    """The process ids of the counting processes running now (for benchmarks that read their CPU time)."""
    with _processes_lock:
        processes = list(_processes.values())
    return [running.pid for process in processes if (running := process._process) is not None]


@atexit.register
def close() -> None:
    """End every counting process (at exit; the children would also end when this process does)."""
    with _processes_lock:
        processes = list(_processes.values())
    for process in processes:
        process.close()
