"""SQLite: the default trajectory store, one local file, queryable by the CLI with no server.

One table, ``trajectory``, holds one row per ``record_id``: the full record as JSON in ``record``, plus
copies of the fields people search by (trace, span, conversation, scope, tool, error type, dedup key,
digest line, count, escalated), each indexed. A second table, ``errcompact_schema``, records the table
layout version so that a later release can migrate, and so that this release refuses a newer layout
instead of misreading it.

The database runs in WAL mode: the CLI can read while an agent writes, and a batch commit costs one
append to the log rather than a rewrite of pages. ``synchronous=NORMAL`` keeps every committed batch
through a crash of the process; after a power loss the last batches may be missing (``FULL`` would fsync
on every commit, roughly halving throughput on this kind of disk).
"""

from __future__ import annotations

import builtins
import os
import sqlite3
import threading
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path

from otel_errcompact.exceptions import AmbiguousRecordId
from otel_errcompact.trajectory import TrajectoryRecord

__all__ = [
    "TABLE_VERSION",
    "AmbiguousRecordId",
    "SQLiteSink",
    "TrajectoryStore",
    "TrajectorySummary",
]

TABLE_VERSION = 1
"""Version of the table layout below (independent of the record's ``schema_version``)."""

_COLUMNS = (
    "record_id", "recorded_at", "source", "trace_id", "span_id", "conversation_id", "scope",
    "tool_name", "error_type", "key", "digest_line", "count", "escalated", "record",
)

_DDL = """
CREATE TABLE IF NOT EXISTS errcompact_schema (
    component TEXT PRIMARY KEY,
    version   INTEGER NOT NULL
);
CREATE TABLE IF NOT EXISTS trajectory (
    record_id       TEXT PRIMARY KEY,
    recorded_at     TEXT NOT NULL,
    source          TEXT NOT NULL,
    trace_id        TEXT,
    span_id         TEXT,
    conversation_id TEXT,
    scope           TEXT,
    tool_name       TEXT,
    error_type      TEXT,
    key             TEXT,
    digest_line     TEXT,
    count           INTEGER,
    escalated       INTEGER NOT NULL DEFAULT 0,
    record          TEXT NOT NULL
);
CREATE INDEX IF NOT EXISTS trajectory_recorded_at ON trajectory (recorded_at);
CREATE INDEX IF NOT EXISTS trajectory_trace ON trajectory (trace_id, span_id);
CREATE INDEX IF NOT EXISTS trajectory_conversation ON trajectory (conversation_id, recorded_at);
CREATE INDEX IF NOT EXISTS trajectory_scope ON trajectory (scope, recorded_at);
CREATE INDEX IF NOT EXISTS trajectory_tool ON trajectory (tool_name);
CREATE INDEX IF NOT EXISTS trajectory_error_type ON trajectory (error_type);
CREATE INDEX IF NOT EXISTS trajectory_key ON trajectory (key, recorded_at);
CREATE INDEX IF NOT EXISTS trajectory_escalated ON trajectory (escalated) WHERE escalated = 1;
"""

_UPSERT = (
    f"INSERT INTO trajectory ({', '.join(_COLUMNS)}) VALUES ({', '.join('?' for _ in _COLUMNS)}) "
    "ON CONFLICT(record_id) DO UPDATE SET "
    + ", ".join(f"{c} = excluded.{c}" for c in _COLUMNS if c != "record_id")
)

# Sorts after any real continuation of a prefix, so "id >= p AND id < p || _TOP" is an indexable
# prefix match (LIKE is case-insensitive by default and would not use the index).
_TOP = "\U0010ffff"


def _row(rec: TrajectoryRecord) -> tuple[object, ...]:
    d = rec.digest
    error_type = d.type if d is not None else (rec.exception_type or rec.error_type)
    return (
        rec.record_id,
        rec.recorded_at.isoformat(),
        rec.source,
        rec.trace_id,
        rec.span_id,
        rec.conversation_id,
        rec.scope,
        rec.tool_name,
        error_type,
        d.key if d is not None else None,
        d.line if d is not None else None,
        rec.count,
        1 if rec.escalation else 0,
        rec.to_json(),
    )


def _check_version(conn: sqlite3.Connection, path: Path) -> None:
    row = conn.execute("SELECT version FROM errcompact_schema WHERE component = 'trajectory'").fetchone()
    if row is not None and int(row[0]) > TABLE_VERSION:
        raise RuntimeError(
            f"{path}: trajectory table version {row[0]} is newer than this release understands "
            f"({TABLE_VERSION}); use a newer otel-errcompact or another file"
        )


class SQLiteSink:
    """Writes records to a SQLite file, one transaction per batch, upserting by ``record_id``.

    The file and its parent folders are created on construction, so a bad path fails at
    configuration time, in the caller's thread, rather than silently in the worker.

    >>> sink = SQLiteSink("errors.db")          # doctest: +SKIP
    """

    def __init__(self, path: str | os.PathLike[str], *, busy_timeout_ms: int = 5000) -> None:
        self.path = Path(path)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        # Built in the caller's thread, used on the writer's: the lock makes that hand-over safe.
        self._conn = sqlite3.connect(self.path, check_same_thread=False, isolation_level=None)
        self._lock = threading.Lock()
        self._closed = False
        self._conn.execute(f"PRAGMA busy_timeout = {int(busy_timeout_ms)}")
        # Only takes effect on a new file. A row carries the traceback twice (raw_error and the stack
        # trace inside the JSON); with 16 KiB pages a few-KB traceback stays on one page instead of
        # spilling to overflow pages, which halves insert time for typical records.
        self._conn.execute("PRAGMA page_size = 16384")
        self._conn.execute("PRAGMA journal_mode = WAL")
        self._conn.execute("PRAGMA synchronous = NORMAL")
        self._conn.executescript(_DDL)
        _check_version(self._conn, self.path)
        self._conn.execute(
            "INSERT OR IGNORE INTO errcompact_schema (component, version) VALUES ('trajectory', ?)",
            (TABLE_VERSION,),
        )

    def write(self, records: Sequence[TrajectoryRecord]) -> None:
        """Upsert ``records`` in one transaction (all or none of the batch is stored)."""
        if not records:
            return
        rows = [_row(r) for r in records]
        with self._lock:
            if self._closed:
                raise RuntimeError(f"SQLiteSink({self.path}) is closed")
            self._conn.execute("BEGIN IMMEDIATE")
            try:
                self._conn.executemany(_UPSERT, rows)
            except BaseException:
                self._conn.execute("ROLLBACK")
                raise
            self._conn.execute("COMMIT")

    def flush(self) -> None:
        """Nothing to do: every batch is committed by :meth:`write`."""

    def close(self) -> None:
        """Checkpoint the WAL into the main file and close; idempotent."""
        with self._lock:
            if self._closed:
                return
            self._closed = True
            try:
                self._conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
            finally:
                self._conn.close()

    def __repr__(self) -> str:
        return f"SQLiteSink({str(self.path)!r})"


@dataclass(frozen=True, slots=True)
class TrajectorySummary:
    """One row of :meth:`TrajectoryStore.list`: the indexed columns, without the full record."""

    record_id: str
    recorded_at: datetime
    source: str
    trace_id: str | None
    span_id: str | None
    conversation_id: str | None
    scope: str | None
    tool_name: str | None
    error_type: str | None
    key: str | None
    digest_line: str | None
    count: int | None
    escalated: bool


class TrajectoryStore:
    """Reads a database written by :class:`SQLiteSink` (for the CLI and for tests).

    Opened read-only, so pointing the CLI at a live agent's database can never change or lock it for
    longer than a read. A missing file raises ``FileNotFoundError`` rather than creating an empty one.
    """

    def __init__(self, path: str | os.PathLike[str]) -> None:
        self.path = Path(path)
        if not self.path.is_file():
            raise FileNotFoundError(f"no trajectory database at {self.path}")
        self._conn = sqlite3.connect(f"{self.path.resolve().as_uri()}?mode=ro", uri=True,
                                     check_same_thread=False)
        self._lock = threading.Lock()
        _check_version(self._conn, self.path)

    def count(self) -> int:
        """Number of records (raw and amended versions of one failure count once)."""
        with self._lock:
            row = self._conn.execute("SELECT count(*) FROM trajectory").fetchone()
        return int(row[0])

    def list(
        self, limit: int = 20, conversation: str | None = None, key: str | None = None
    ) -> builtins.list[TrajectorySummary]:
        """The newest ``limit`` records, optionally for one conversation (or scope) and one dedup key.

        ``conversation`` matches ``conversation_id`` or ``scope``; ``key`` may be a prefix of the key.
        """
        where: list[str] = []
        args: list[object] = []
        if conversation is not None:
            where.append("(conversation_id = ? OR scope = ?)")
            args += [conversation, conversation]
        if key:
            where.append("(key >= ? AND key < ?)")
            args += [key, key + _TOP]
        sql = (
            "SELECT record_id, recorded_at, source, trace_id, span_id, conversation_id, scope, tool_name,"
            " error_type, key, digest_line, count, escalated FROM trajectory"
            + (" WHERE " + " AND ".join(where) if where else "")
            + " ORDER BY recorded_at DESC, rowid DESC LIMIT ?"
        )
        args.append(max(0, int(limit)))
        with self._lock:
            rows = self._conn.execute(sql, args).fetchall()
        return [
            TrajectorySummary(
                record_id=r[0], recorded_at=datetime.fromisoformat(r[1]), source=r[2], trace_id=r[3],
                span_id=r[4], conversation_id=r[5], scope=r[6], tool_name=r[7], error_type=r[8],
                key=r[9], digest_line=r[10], count=r[11], escalated=bool(r[12]),
            )
            for r in rows
        ]

    def get(self, record_id: str) -> TrajectoryRecord | None:
        """The record with this id or unique id prefix; ``None`` if nothing matches.

        Raises :class:`AmbiguousRecordId` when the prefix matches several records, so a short prefix
        never silently shows the wrong failure.
        """
        record_id = record_id.strip().lower()
        if not record_id:
            return None
        with self._lock:
            row = self._conn.execute(
                "SELECT record FROM trajectory WHERE record_id = ?", (record_id,)
            ).fetchone()
            if row is None:
                rows = self._conn.execute(
                    "SELECT record_id, record FROM trajectory WHERE record_id >= ? AND record_id < ?"
                    " ORDER BY record_id LIMIT 6",
                    (record_id, record_id + _TOP),
                ).fetchall()
                if len(rows) > 1:
                    raise AmbiguousRecordId(record_id, [r[0] for r in rows[:5]])
                row = (rows[0][1],) if rows else None
        return None if row is None else TrajectoryRecord.from_json(row[0])

    def close(self) -> None:
        """Close the read connection."""
        with self._lock:
            self._conn.close()

    def __enter__(self) -> TrajectoryStore:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
