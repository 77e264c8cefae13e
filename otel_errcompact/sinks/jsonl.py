"""JSON Lines: an append-only trajectory file that any tool (``jq``, pandas, a log shipper) can read.

One record per line, as :meth:`TrajectoryRecord.to_storage_json` writes it: the raw error text appears
once, and the stack trace, message and status description, when they are slices of it, appear as
``[start, end]`` offsets under ``"@refs"`` (:func:`read_jsonl` restores them). A file cannot be updated in place,
so the amended version of a record is appended as a new line with the same ``record_id``:

    **a later line with the same record_id supersedes every earlier one.**

:func:`read_jsonl` applies that rule. A reader that ignores it sees the raw version and then the
amended one, which is still correct, only redundant.

Each batch of lines reaches the OS in one ``write()`` to a file opened for appending, without a Python
buffer; ``flush()`` and ``close()`` also ``fsync``, so a record survives a power loss once
``force_flush`` has returned. A process killed mid-line leaves a truncated last line; :func:`read_jsonl`
skips it with a warning.

Unbuffered because of ``fork``: a buffered file's lock and pending bytes are copied into a child process.
A child forked while the parent's writer thread was inside a buffered write waited for that lock for
ever, and bytes pending in the parent's buffer would have been written twice. Without a buffer, parent
and child share only the descriptor, opened with ``O_APPEND``, so each batch lands whole after the
other's.
"""

from __future__ import annotations

import logging
import os
import threading
from collections.abc import Sequence
from pathlib import Path

from pydantic import ValidationError

from otel_errcompact.sinks.spool import write_all
from otel_errcompact.trajectory import TrajectoryRecord

__all__ = ["JSONLSink", "read_jsonl"]

_log = logging.getLogger("otel_errcompact")


class JSONLSink:
    """Appends records to ``path`` (created with its parent folders), one JSON object per line."""

    def __init__(self, path: str | os.PathLike[str]) -> None:
        self.path = Path(path)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self._file = open(self.path, "ab", buffering=0)  # noqa: SIM115 - lives as long as the sink
        self._lock = threading.Lock()
        self._closed = False
        self.quarantined = 0
        """Records left out because they could not be serialised even after repair."""

    def after_fork_in_child(self) -> None:
        """In a process forked from this sink's: a new lock (a thread of the parent may have held it). The
        file stays shared: it is opened for appending, without a buffer, and each batch is one ``write()``,
        so both processes' lines land intact."""
        self._lock = threading.Lock()

    def write(self, records: Sequence[TrajectoryRecord]) -> None:
        """Append one line per record and hand them to the OS (no fsync: see :meth:`flush`)."""
        self.write_encoded([(rec, None) for rec in records])

    def write_encoded(self, items: Sequence[tuple[TrajectoryRecord, str | None]]) -> None:
        """:meth:`write`, given each record's storage JSON when known (the writer's spool made it)."""
        if not items:
            return
        lines: list[bytes] = []
        for rec, encoded in items:
            try:  # one record that cannot be serialised is left out alone, never its batch
                lines.append(encoded.encode("utf-8") + b"\n" if encoded is not None else rec.to_storage_line())
            except Exception:
                self.quarantined += 1
                _log.warning("JSONLSink(%s): record %s could not be serialised; left out", self.path,
                             getattr(rec, "record_id", "?"), exc_info=True)
        data = b"".join(lines)
        with self._lock:
            if self._closed:
                raise RuntimeError(f"JSONLSink({self.path}) is closed")
            write_all(self._file.fileno(), data)

    def flush(self) -> None:
        """fsync the file, so what was written survives a crash of the machine."""
        with self._lock:
            if not self._closed:
                os.fsync(self._file.fileno())

    def close(self) -> None:
        """fsync and close; idempotent."""
        with self._lock:
            if self._closed:
                return
            self._closed = True
            try:
                os.fsync(self._file.fileno())
            finally:
                self._file.close()

    def __repr__(self) -> str:
        return f"JSONLSink({str(self.path)!r})"


def read_jsonl(path: str | os.PathLike[str]) -> list[TrajectoryRecord]:
    """The records in a JSONL trajectory file, each in its latest version, in order of first appearance.

    A version without a digest never replaces one with it: after a crash, the writer replays raw versions
    from its spool that may already be in the file in their amended form.

    Lines that are not valid records (a truncated last line, another tool's output in the same file)
    are skipped and counted in one warning.
    """
    latest: dict[str, TrajectoryRecord] = {}
    bad = 0
    with open(path, "rb") as fh:
        for line in fh:
            if not line.strip():
                continue
            try:
                rec = TrajectoryRecord.from_storage_json(line)
            except (ValidationError, ValueError):
                bad += 1
                continue
            previous = latest.get(rec.record_id)
            if previous is not None and previous.digest is not None and rec.digest is None:
                continue  # a raw version replayed from the spool after a crash never hides the digest
            latest[rec.record_id] = rec
    if bad:
        _log.warning("%s: skipped %d line(s) that are not trajectory records", path, bad)
    return list(latest.values())
