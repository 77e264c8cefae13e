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
import struct
import sys
import threading
from collections.abc import Sequence
from pathlib import Path

from otel_errcompact._forked import new_locks_in_child
from otel_errcompact._helper_process import MAX_STARTS, HelperProcess, HelperProcessError, read_exactly

__all__ = ["MAX_STARTS", "CountingProcess", "CountingProcessError", "close", "shared"]

REPLY_TIMEOUT_S = 30.0
"""How long a batch may take (a few milliseconds for the bounded texts the metrics thread sends)."""
_CHILD = str(Path(__file__).with_name("_count_child.py"))


class CountingProcessError(HelperProcessError):
    """The child could not be started or stopped answering; the caller counts in place."""


class CountingProcess(HelperProcess):
    """One child process counting tokens of ``encoding`` with the ``bpe-openai`` extension at ``extension``.

    :meth:`count` is thread-safe (one request at a time) and starts the child when needed.
    """

    what = "token-counting"
    error = CountingProcessError

    def __init__(self, extension: str, encoding: str) -> None:
        super().__init__([sys.executable, "-I", "-S", _CHILD, extension, encoding])

    def count(self, payload: Sequence[bytes]) -> list[int]:
        """The token count of each UTF-8 text, in order; :class:`CountingProcessError` if the child cannot
        answer (it is then stopped, and the next call starts another) or :func:`close` has run."""
        self.raise_if_refused()
        request = struct.pack(f"<I{len(payload)}I", len(payload), *map(len, payload)) + b"".join(payload)
        size = 4 * len(payload)
        reply = self.exchange(
            request, lambda fd, deadline: read_exactly(fd, size, deadline, CountingProcessError), REPLY_TIMEOUT_S
        )
        return list(struct.unpack(f"<{len(payload)}I", reply))


_processes: dict[tuple[str, str], CountingProcess] = {}
_processes_lock = threading.Lock()
new_locks_in_child(sys.modules[__name__], "_processes_lock")


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
    return [pid for process in processes if (pid := process.pid) is not None]


@atexit.register
def close() -> None:
    """End every counting process (at exit; the children would also end when this process does)."""
    with _processes_lock:
        processes = list(_processes.values())
    for process in processes:
        process.close()
