"""Digests made in a child process, so the compaction of a failed span's error never holds the agent
process's GIL.

Why. The digest thread compacts each failed tool span's raw error after the span ended, off the agent's
thread (see :mod:`otel_errcompact.deferred`), but in the agent's process: for a distinct traceback that is
tens of microseconds with the GIL held, which the agent's threads wait for while they run (in an agent
whose threads call tools at once, each failure costs all of them). With the default compactor the digest
depends on nothing but the text and the redaction patterns registered with
:func:`otel_errcompact.redact.add_pattern`, both sent along, so a child process
(:mod:`otel_errcompact._compact_child`) makes exactly the digest the agent's process would, and the
digest thread only waits on a pipe for it, without the GIL.

``init()`` uses it when the process may run on :data:`MIN_CORES` cores or more, or when the
``compaction_process`` setting asks for it. The child is started at the digest thread's first batch and
shared by every pipeline of the process; it is a :class:`~otel_errcompact._helper_process.HelperProcess`:
where it cannot run, or stops answering, the digests are made in place, as before. A compactor of the
caller's own (``init(compactor=...)``) always runs in place: it may hold anything.
"""

from __future__ import annotations

import atexit
import json
import marshal
import os
import re
import struct
import sys
import threading
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from otel_errcompact._forked import new_locks_in_child
from otel_errcompact._helper_process import HelperProcess, HelperProcessError, read_sized
from otel_errcompact.digest import Digest, new_digest, new_key, new_location

__all__ = [
    "MIN_CORES", "CompactingProcess", "CompactingProcessError", "close", "digest_fields", "shared", "usable_cores",
]

MIN_CORES = 4
"""Cores this process may run on from which ``init()`` uses the compacting process by default: with
fewer, the child competes with the agent's own threads for them (on 2 cores the failed span's cost and four
threads' throughput measured the same within noise either way, ``bench_processor.py --compact-in-place``)."""
REPLY_TIMEOUT_S = 30.0
"""How long a batch may take (milliseconds, as a rule: compacting is bounded per text)."""
_CHILD = str(Path(__file__).with_name("_compact_child.py"))


class CompactingProcessError(HelperProcessError):
    """The child could not be started or stopped answering; the caller compacts in place."""


def digest_fields(digest: Digest) -> tuple[Any, ...]:
    """A :class:`~otel_errcompact.digest.Digest` as plain values that ``marshal`` carries, its nested
    location and key as tuples of theirs, in field order (see :func:`digest_of_fields`)."""
    d, location, key = digest, digest.location, digest.key_parts
    return (
        d.type, d.cause, None if location is None else (location.file, location.line, location.func), d.format,
        d.retryable, d.status, (key.type, key.where, key.message, key.hash), d.raw_chars, d.line, d.error_class,
        d.retry_after_s,
    )


def digest_of_fields(fields: Sequence[Any]) -> Digest:
    """The :class:`~otel_errcompact.digest.Digest` :func:`digest_fields` made ``fields`` of (the digest
    thread rebuilds each digest of a batch: the frozen classes' fast constructors, no keyword dict)."""
    kind, cause, location, form, retryable, status, key, raw_chars, line, error_class, retry_after_s = fields
    return new_digest(
        type=kind,
        cause=cause,
        location=None if location is None else new_location(file=location[0], line=location[1], func=location[2]),
        format=form,
        retryable=retryable,
        status=status,
        key_parts=new_key(type=key[0], where=key[1], message=key[2], hash=key[3]),
        raw_chars=raw_chars,
        line=line,
        error_class=error_class,
        retry_after_s=retry_after_s,
    )


class CompactingProcess(HelperProcess):
    """One child process compacting texts with the default compactor. :meth:`compact` is thread-safe
    (one batch at a time) and starts the child when needed."""

    what = "compacting"
    error = CompactingProcessError

    def __init__(self) -> None:
        super().__init__([sys.executable, "-I", "-S", _CHILD, json.dumps(sys.path)])

    def compact(self, texts: Sequence[str], rules: Sequence[re.Pattern[str]] = ()) -> list[Digest]:
        """The default compactor's :class:`~otel_errcompact.digest.Digest` of each text, in order, with
        the redaction patterns ``rules`` registered (compiled patterns, as
        :func:`otel_errcompact.redact.patterns` gives them); :class:`CompactingProcessError` if the child
        cannot answer (it is then stopped, and the next call starts another) or :func:`close` has run."""
        self.raise_if_refused()
        payload = [text.encode("utf-8", "surrogatepass") for text in texts]
        blob = marshal.dumps([(rule.pattern, rule.flags) for rule in rules]) if rules else b""
        request = b"".join((
            struct.pack("<II", len(payload), len(blob)), blob, struct.pack(f"<{len(payload)}I", *map(len, payload)),
            *payload,
        ))
        body = self.exchange(request, _read_reply, REPLY_TIMEOUT_S)
        try:
            fields = marshal.loads(body)
            if len(fields) != len(texts):
                raise ValueError(f"{len(fields)} digests for {len(texts)} texts")
            return [digest_of_fields(entry) for entry in fields]
        except (ValueError, TypeError, EOFError) as exc:  # not this version's digests: never trusted
            with self._lock:
                self._stop()
            raise CompactingProcessError(f"the compacting process answered what is not a digest ({exc})") from exc


def _read_reply(fd: int, deadline: float) -> bytes:
    return read_sized(fd, deadline, CompactingProcessError)


def usable_cores() -> int:
    """The cores this process may run on (its CPU affinity where the platform tells it)."""
    try:
        return len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        return os.cpu_count() or 1


_process: CompactingProcess | None = None
_process_lock = threading.Lock()
new_locks_in_child(sys.modules[__name__], "_process_lock")


def shared() -> CompactingProcess:
    """The process-wide compacting process (created, not started)."""
    global _process
    with _process_lock:
        if _process is None:
            _process = CompactingProcess()
        return _process


@atexit.register
def close() -> None:
    """End the compacting process (at exit; the child would also end when this process does)."""
    with _process_lock:
        process = _process
    if process is not None:
        process.close()
