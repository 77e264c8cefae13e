"""SQLite: the default trajectory store, one local file, queryable by the CLI with no server.

Layout version 2, built for volume (hundreds of thousands of records, gigabytes):

* one table, ``trajectory``, one row per ``record_id``. Its primary key ``id`` is SQLite's rowid, given
  in insertion order, so rows are appended at the right edge of the B-tree instead of landing on random
  pages, and "newest first" is a walk of the table backwards with no index at all;
* the raw error text is stored once: ``record`` holds the record as JSON with the stack trace, message
  and status description stored as slices of the raw text when that is what they are
  (:meth:`TrajectoryRecord.to_storage_json`, the very line the writer already wrote to its spool on the
  agent's thread, so the writer thread does not serialise the record again; a failed span's row is
  read from the field values the pipeline queued, without building the record: :meth:`SQLiteSink.write_values`).
  ``record`` is the last column, so its overflow pages are only read by ``show``;
* four indexes, the ones the CLI and a trajectory viewer use: ``record_id`` (unique: upsert and
  ``show ID``), conversation (conversation → failures, newest first), dedup key, trace id; and a
  partial one holding only the escalated rows (the viewer's escalations page), nearly free. Every
  index entry is kept small: random keys (record and trace ids) scatter inserts over the whole index,
  and each page an insert touches is written again to the WAL, so on a large store the indexes, not
  the rows, are what a batch costs;
* a batch is one transaction of multi-row upserts (256 rows per statement: sqlite3 releases the GIL
  per statement, so the agent's threads hand the GIL over twice per batch rather than once per row); WAL
  journal, ``synchronous=NORMAL``, a 64 MiB page cache, a checkpoint
  every 64 MiB of WAL, and the WAL file cut back to 64 MiB after it.

``errcompact_schema`` records the layout version. A version-1 file (the layout of earlier releases) is
upgraded in place, in one transaction, the first time a :class:`SQLiteSink` opens it; the read-only
:class:`TrajectoryStore` refuses it with a message saying so, and refuses a layout newer than it knows.

WAL mode lets the CLI read while an agent writes. ``synchronous=NORMAL`` keeps every committed batch
through a crash of the process; after a power loss the last batches may be missing (``FULL`` would fsync
on every commit). What the process had not yet committed is in the writer's spool.

One bad record never takes its batch with it: if the batch fails, it is retried row by row, a row that
still fails (a lone surrogate in the tool name, say) is retried with its indexed columns escaped and its
record as it was, then with the whole record repaired (:meth:`TrajectoryRecord.repaired`), and only a
record that cannot be stored even then is quarantined: left out, logged and counted in
:attr:`SQLiteSink.quarantined`.
"""

from __future__ import annotations

import builtins
import functools
import itertools
import json
import logging
import os
import sqlite3
import threading
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Any

from otel_errcompact._forked import hold_across_fork
from otel_errcompact.exceptions import AmbiguousRecordId
from otel_errcompact.trajectory import (
    SCHEMA_NAME,
    SCHEMA_VERSION,
    TrajectoryRecord,
    escape_surrogates,
    record_of,
)

__all__ = [
    "TABLE_VERSION",
    "AmbiguousRecordId",
    "SQLiteSink",
    "TrajectoryStore",
    "TrajectorySummary",
]

_log = logging.getLogger("otel_errcompact")

TABLE_VERSION = 2
"""Version of the table layout below (independent of the record's ``schema_version``)."""

_COLUMNS = (
    "record_id", "recorded_at", "source", "trace_id", "span_id", "conversation_id", "scope",
    "tool_name", "error_type", "key", "digest_line", "count", "escalated", "record",
)

_DDL = """
CREATE TABLE IF NOT EXISTS trajectory (
    id              INTEGER PRIMARY KEY,
    record_id       TEXT NOT NULL UNIQUE,
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
CREATE INDEX IF NOT EXISTS trajectory_conversation ON trajectory (coalesce(conversation_id, scope), id);
CREATE INDEX IF NOT EXISTS trajectory_key ON trajectory (key, id) WHERE key IS NOT NULL;
CREATE INDEX IF NOT EXISTS trajectory_trace ON trajectory (trace_id) WHERE trace_id IS NOT NULL;
CREATE INDEX IF NOT EXISTS trajectory_escalated ON trajectory (id) WHERE escalated = 1;
"""

_V1_INDEXES = (
    "trajectory_recorded_at", "trajectory_trace", "trajectory_conversation", "trajectory_scope",
    "trajectory_tool", "trajectory_error_type", "trajectory_key", "trajectory_escalated",
)

# A later version of a record replaces an earlier one, except that a version without a digest (the raw
# one, replayed from the spool after a crash) never replaces one that has it.
_ROW_PLACEHOLDERS = f"({', '.join('?' for _ in _COLUMNS)})"
_ON_CONFLICT = (
    " ON CONFLICT(record_id) DO UPDATE SET "
    + ", ".join(f"{c} = excluded.{c}" for c in _COLUMNS if c != "record_id")
    + " WHERE excluded.key IS NOT NULL OR trajectory.key IS NULL"
)
_UPSERT = f"INSERT INTO trajectory ({', '.join(_COLUMNS)}) VALUES {_ROW_PLACEHOLDERS}{_ON_CONFLICT}"
_INHERITED: list[sqlite3.Connection] = []
"""A forked process's copies of its parent's connections: never used, and never closed (see
:meth:`SQLiteSink.after_fork_in_child`)."""

_MAX_ROWS_PER_STATEMENT = 256


@functools.lru_cache(maxsize=64)
def _upsert_rows(n: int) -> str:
    """The upsert of ``n`` rows in one statement (later rows of one ``record_id`` replace earlier ones)."""
    return f"INSERT INTO trajectory ({', '.join(_COLUMNS)}) VALUES {', '.join([_ROW_PLACEHOLDERS] * n)}{_ON_CONFLICT}"

# Sorts after any real continuation of a prefix, so "id >= p AND id < p || _TOP" is an indexable
# prefix match (LIKE is case-insensitive by default and would not use the index).
_TOP = "\U0010ffff"


def _row(rec: TrajectoryRecord, encoded: str | None = None) -> tuple[object, ...]:
    """The row of ``rec``: :func:`_row_of_values` of its fields (a model keeps them in ``__dict__``)."""
    return _row_of_values(vars(rec), encoded if encoded is not None else rec.to_storage_json())


def _row_of_values(values: Mapping[str, Any], encoded: str) -> tuple[object, ...]:
    """The row of a record given as its field values, as the pipeline submits a failed span's (see
    :func:`~otel_errcompact.trajectory.record_from_values`) or as a record holds them, ``digest`` the
    dict of its fields or its :class:`~otel_errcompact.trajectory.DigestInfo`. Building the model only
    to read these columns back cost the writer thread 3.3 µs of Python per record, with the GIL held;
    this costs 0.95 µs (timeit, a 43-line traceback's record)."""
    d = values["digest"]
    if d is not None and type(d) is not dict:
        d = d.__dict__
    return (
        values["record_id"],
        values["recorded_at"].isoformat(),
        values["source"],
        values["trace_id"],
        values["span_id"],
        values["conversation_id"],
        values["scope"],
        values["tool_name"],
        d["type"] if d is not None else (values["exception_type"] or values["error_type"]),
        d["key"] if d is not None else None,
        d["line"] if d is not None else None,
        values["count"],
        1 if values["escalation"] else 0,
        encoded,
    )


def _escaped_columns(row: tuple[object, ...]) -> tuple[object, ...]:
    """``row`` with the lone surrogates of its indexed text columns escaped (``\\xe9``): SQLite text
    is UTF-8, which cannot hold one. ``record``, the last column, keeps them as JSON escapes
    (:func:`~otel_errcompact.trajectory.lossless_json`), so the record stays whole; the columns are
    for listing and filtering."""
    *columns, record = row
    return (*(escape_surrogates(c) if isinstance(c, str) else c for c in columns), record)


def _create(conn: sqlite3.Connection) -> None:
    # Statement by statement: executescript() would commit the surrounding transaction first.
    for statement in _DDL.split(";"):
        if statement.strip():
            conn.execute(statement)


def _version(conn: sqlite3.Connection) -> int | None:
    try:
        row = conn.execute("SELECT version FROM errcompact_schema WHERE component = 'trajectory'").fetchone()
    except sqlite3.OperationalError:
        return None  # no errcompact_schema table: a new file
    return None if row is None else int(row[0])


def _check_version(conn: sqlite3.Connection, path: Path) -> None:
    version = _version(conn)
    if version is not None and version > TABLE_VERSION:
        raise RuntimeError(
            f"{path}: trajectory table version {version} is newer than this release understands "
            f"({TABLE_VERSION}); use a newer otel-errcompact or another file"
        )
    if version is not None and version < TABLE_VERSION:
        raise RuntimeError(
            f"{path}: trajectory table version {version} was written by an older otel-errcompact; it is "
            f"upgraded to version {TABLE_VERSION} the next time an agent opens it for writing "
            "(or run: python -c \"from otel_errcompact.sinks import SQLiteSink; "
            f"SQLiteSink({str(path)!r}).close()\")"
        )


def _migrate_v1(conn: sqlite3.Connection, path: Path) -> None:
    """Rewrite a version-1 table into the version-2 layout, oldest record first, in one transaction."""
    conn.execute("BEGIN IMMEDIATE")
    try:
        if _version(conn) != 1:  # another process upgraded it meanwhile
            conn.execute("ROLLBACK")
            return
        for name in _V1_INDEXES:
            conn.execute(f"DROP INDEX IF EXISTS {name}")
        conn.execute("ALTER TABLE trajectory RENAME TO trajectory_v1")
        _create(conn)
        cursor = conn.execute("SELECT record FROM trajectory_v1 ORDER BY recorded_at, rowid")
        moved = 0
        while rows := cursor.fetchmany(512):
            conn.executemany(_UPSERT, [_row(TrajectoryRecord.from_json(r[0])) for r in rows])
            moved += len(rows)
        conn.execute("DROP TABLE trajectory_v1")
        conn.execute("UPDATE errcompact_schema SET version = ? WHERE component = 'trajectory'",
                     (TABLE_VERSION,))
    except BaseException:
        conn.execute("ROLLBACK")
        raise
    conn.execute("COMMIT")
    _log.warning("%s: upgraded the trajectory table from layout 1 to %d (%d records)", path,
                 TABLE_VERSION, moved)


# Why a read-only open fails when SQLite cannot create the -wal and -shm files of a WAL store beside it: the
# folder is not writable (no -wal either), it cannot make a -shm for an existing -wal, or the -shm it found
# is read-only and was never set up.
_NO_WAL_INDEX = frozenset({"SQLITE_READONLY_DIRECTORY", "SQLITE_CANTOPEN", "SQLITE_READONLY_CANTINIT"})


def _open_read_only(path: Path) -> sqlite3.Connection:
    """A read-only connection to the store at ``path``, which already exists.

    ``mode=ro`` still needs the store's ``-wal`` and ``-shm`` files, and creates them when they are
    missing (the WAL is read through the ``-shm`` index): in a folder this user cannot write to (a store
    copied off a production box into a read-only folder, or owned by another user) the first read fails.
    The store is then opened ``immutable``: SQLite reads the main file alone, without locks or WAL, which
    is the whole store when its ``-wal`` is missing or empty, as a store no agent has open leaves it.
    A ``-wal`` that still holds records cannot be read that way, and leaving them out would list a
    store without its newest failures, or half a checkpoint: that is an error saying so.
    """
    uri = path.resolve().as_uri()
    conn = sqlite3.connect(f"{uri}?mode=ro", uri=True, check_same_thread=False)
    try:
        conn.execute("SELECT count(*) FROM sqlite_master").fetchone()  # the first read opens the -shm, or fails
        return conn
    except sqlite3.OperationalError as exc:
        conn.close()
        if exc.sqlite_errorname not in _NO_WAL_INDEX:
            raise
    wal = path.with_name(f"{path.name}-wal")
    if _size(wal):
        raise RuntimeError(
            f"{wal} holds records not yet copied into {path.name}, and SQLite can read them only by "
            f"creating {path.name}-shm beside them, which it cannot do in {path.parent}; copy {path.name} "
            f"with {wal.name} into a folder you can write to, and read that copy"
        )
    return sqlite3.connect(f"{uri}?mode=ro&immutable=1", uri=True, check_same_thread=False)


def _stored_record(text: str | bytes, record_id: str, path: Path) -> TrajectoryRecord:
    """The record stored as ``text``, or a one-line ``ValueError`` naming the record and the store when it
    cannot be read (written by a newer release, or damaged), instead of a JSON error or pydantic's report of
    every field, which say neither."""
    try:
        return TrajectoryRecord.from_storage_json(text)
    except ValueError as exc:
        raise ValueError(f"record {record_id} in {path}: {_unreadable(text, exc)}") from None


def _unreadable(text: str | bytes, exc: ValueError) -> str:
    """Why a stored record cannot be read, in a line."""
    try:
        data = json.loads(text)
    except ValueError:
        data = None
    version = data.get("schema_version") if isinstance(data, dict) else None
    if isinstance(data, dict) and isinstance(version, int) and version > SCHEMA_VERSION:
        return (f"written by a newer otel-errcompact ({data.get('schema_name') or SCHEMA_NAME} v{version}; "
                f"this release reads v{SCHEMA_VERSION}): read it with a newer otel-errcompact")
    errors = getattr(exc, "errors", None)  # pydantic's ValidationError: the first field at fault
    if callable(errors) and errors():
        first = errors()[0]
        why = f"{'.'.join(map(str, first.get('loc', ()))) or 'record'}: {first.get('msg', '')}"
    else:
        why = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
    return f"not a readable trajectory record ({why})"


def _size(path: Path) -> int:
    """The size of the file at ``path``; 0 when there is none."""
    try:
        return path.stat().st_size
    except FileNotFoundError:
        return 0


class SQLiteSink:
    """Writes records to a SQLite file, one transaction per batch, upserting by ``record_id``.

    The file and its parent folders are created on construction, so a bad path fails at
    configuration time, in the caller's thread, rather than silently in the worker. A version-1 file
    is upgraded here (see the module docstring).

    >>> sink = SQLiteSink("errors.db")          # doctest: +SKIP
    """

    def __init__(self, path: str | os.PathLike[str], *, busy_timeout_ms: int = 5000,
                 cache_mib: int = 64) -> None:
        self.path = Path(path)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self.quarantined = 0
        """Records left out because even their repaired form could not be stored."""
        self._busy_timeout_ms = int(busy_timeout_ms)
        self._cache_mib = int(cache_mib)
        # Built in the caller's thread, used on the writer's: the lock makes that hand-over safe.
        self._conn = conn = self._connect()
        self._lock = threading.Lock()
        hold_across_fork(self, "_lock")  # a fork never copies the connection inside a transaction
        self._closed = False
        # Rows per statement within SQLite's limit on bound parameters (999 before SQLite 3.32).
        variable_number = getattr(sqlite3, "SQLITE_LIMIT_VARIABLE_NUMBER", None)
        getlimit = getattr(conn, "getlimit", None)  # Python 3.11+
        limit = int(getlimit(variable_number)) if getlimit is not None and variable_number is not None else 999
        self._rows_per_statement = max(1, min(_MAX_ROWS_PER_STATEMENT, limit // len(_COLUMNS)))
        conn.execute(
            "CREATE TABLE IF NOT EXISTS errcompact_schema (component TEXT PRIMARY KEY, version INTEGER NOT NULL)"
        )
        version = _version(conn)
        if version == 1:
            _migrate_v1(conn, self.path)
        else:
            _check_version(conn, self.path)
            _create(conn)
            conn.execute(
                "INSERT OR IGNORE INTO errcompact_schema (component, version) VALUES ('trajectory', ?)",
                (TABLE_VERSION,),
            )

    def _connect(self) -> sqlite3.Connection:
        """A connection to the store with this sink's settings (the file's own are set once, on a new file)."""
        conn = sqlite3.connect(self.path, check_same_thread=False, isolation_level=None)
        conn.execute(f"PRAGMA busy_timeout = {self._busy_timeout_ms}")
        # Only takes effect on a new file: a typical record (a few KB) fits on one 16 KiB page.
        conn.execute("PRAGMA page_size = 16384")
        # Also new files only: lets close() give the pages of replaced versions back to the file system
        # (the amended version of a 10 MB error would otherwise leave 10 MB of free pages behind).
        conn.execute("PRAGMA auto_vacuum = INCREMENTAL")
        conn.execute("PRAGMA journal_mode = WAL")
        conn.execute("PRAGMA synchronous = NORMAL")
        # The unique record_id index takes random inserts; a cache that holds it keeps a store of
        # millions of rows writing at the speed of a fresh one.
        conn.execute(f"PRAGMA cache_size = {-1024 * self._cache_mib}")
        # Checkpoint every 64 MiB of WAL rather than SQLite's 16 MiB: an index page that several batches
        # touched is copied into the file once, and the checkpoint's fsyncs come four times less often.
        conn.execute("PRAGMA wal_autocheckpoint = 4096")
        conn.execute(f"PRAGMA journal_size_limit = {64 * 1024 * 1024}")
        return conn

    def after_fork_in_child(self) -> None:
        """In a process forked from this sink's (the writer calls it: see :mod:`otel_errcompact._forked`).
        SQLite forbids using a connection across ``fork()``, and closing it here could touch the parent's
        locks and WAL: the inherited connection (idle: the fork waited for its transaction to end) is kept,
        unused and unclosed, and this process opens its own."""
        self._lock = threading.Lock()
        if self._closed:
            return
        _INHERITED.append(self._conn)
        self._conn = self._connect()

    def write(self, records: Sequence[TrajectoryRecord]) -> None:
        """Upsert ``records`` in one transaction; a batch that fails is retried row by row."""
        self.write_encoded([(rec, None) for rec in records])

    def write_encoded(self, items: Sequence[tuple[TrajectoryRecord, str | None]]) -> None:
        """:meth:`write`, given each record's :meth:`~TrajectoryRecord.to_storage_json` line when known."""
        if not items:
            return
        pairs: list[tuple[TrajectoryRecord | dict[str, Any], tuple[object, ...]]] = []
        for rec, encoded in items:
            row = self._safe_row(rec, encoded)
            if row is not None:
                pairs.append((rec, row))
        self._store(pairs)

    def write_values(self, items: Sequence[tuple[dict[str, Any], str]]) -> None:
        """:meth:`write_encoded` for records given as their field values with their storage line, as
        the writer holds a failed span's record (see
        :func:`~otel_errcompact.trajectory.record_from_values`): the row is read from the values and
        no :class:`TrajectoryRecord` is built, unless a row has to be repaired. Reads the values only."""
        if not items:
            return
        pairs: list[tuple[TrajectoryRecord | dict[str, Any], tuple[object, ...]]] = []
        for values, encoded in items:
            try:
                pairs.append((values, _row_of_values(values, encoded)))
            except Exception:  # not values as the pipeline makes them: the record's own path
                try:
                    rec = record_of(values)
                except Exception:  # the log shows why these values make no record
                    self._quarantine(values.get("record_id", "?"))
                    continue
                row = self._safe_row(rec, encoded)
                if row is not None:
                    pairs.append((values, row))
        self._store(pairs)

    def _store(self, pairs: Sequence[tuple[TrajectoryRecord | dict[str, Any], tuple[object, ...]]]) -> None:
        """Upsert the rows in one transaction; a batch that fails is retried row by row."""
        with self._lock:
            if self._closed:
                raise RuntimeError(f"SQLiteSink({self.path}) is closed")
            try:
                self._transaction([row for _, row in pairs])
            except sqlite3.OperationalError:
                raise  # the database itself is unusable (locked, missing table, disk full): not a row's fault
            except (sqlite3.Error, ValueError):
                for rec, row in pairs:  # isolate the bad row: the others of the batch are stored
                    self._one(rec, row)

    def _transaction(self, rows: Sequence[tuple[object, ...]]) -> None:
        """Upsert ``rows`` in one transaction, up to 256 rows per statement.

        One statement per 256 rows rather than one ``executemany`` step per row: sqlite3 lets go of
        the GIL around each statement it runs, and taking the GIL back from the agent's threads costs
        them a thread switch each time; a batch of 512 records now costs two hand-overs, not 512.
        """
        conn = self._conn
        conn.execute("BEGIN IMMEDIATE")
        try:
            for start in range(0, len(rows), self._rows_per_statement):
                part = rows[start:start + self._rows_per_statement]
                conn.execute(_upsert_rows(len(part)), list(itertools.chain.from_iterable(part)))
        except BaseException:
            conn.execute("ROLLBACK")
            raise
        conn.execute("COMMIT")

    def _one(self, rec: TrajectoryRecord | dict[str, Any], row: tuple[object, ...]) -> None:
        try:
            self._transaction([row])
            return
        except (sqlite3.Error, ValueError):
            pass
        try:  # e.g. a lone surrogate in an indexed column such as the tool name
            self._transaction([_escaped_columns(row)])
            return
        except (sqlite3.Error, ValueError):
            pass
        try:
            record = record_of(rec)
            self._transaction([_row(record.repaired())])
        except Exception:
            self.quarantined += 1
            _log.warning("SQLiteSink(%s): record %s could not be stored; left out", self.path, row[0],
                         exc_info=True)

    def _quarantine(self, record_id: object) -> None:
        self.quarantined += 1
        _log.warning("SQLiteSink(%s): record %s could not be serialised; left out", self.path, record_id,
                     exc_info=True)

    def _safe_row(self, rec: TrajectoryRecord, encoded: str | None) -> tuple[object, ...] | None:
        try:
            return _row(rec, encoded)
        except Exception:
            try:
                return _row(rec.repaired())
            except Exception:
                self._quarantine(getattr(rec, "record_id", "?"))
                return None

    def flush(self) -> None:
        """Nothing to do: every batch is committed by :meth:`write`."""

    def close(self) -> None:
        """Free the pages of replaced versions, checkpoint the WAL into the main file, close; idempotent."""
        with self._lock:
            if self._closed:
                return
            self._closed = True
            try:
                self._conn.executescript("PRAGMA incremental_vacuum;")  # runs it to the end (execute: 1 page)
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
    A store in a folder this user cannot write to is read too (see :func:`_open_read_only`).
    """

    def __init__(self, path: str | os.PathLike[str]) -> None:
        self.path = Path(path)
        if not self.path.is_file():
            raise FileNotFoundError(f"no trajectory database at {self.path}")
        self._conn = _open_read_only(self.path)
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
            where.append("coalesce(conversation_id, scope) = ?")
            args.append(conversation)
        if key:
            where.append("(key >= ? AND key < ?)")
            args += [key, key + _TOP]
        sql = (
            "SELECT record_id, recorded_at, source, trace_id, span_id, conversation_id, scope, tool_name,"
            " error_type, key, digest_line, count, escalated FROM trajectory"
            + (" WHERE " + " AND ".join(where) if where else "")
            + " ORDER BY id DESC LIMIT ?"
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
                "SELECT record_id, record FROM trajectory WHERE record_id = ?", (record_id,)
            ).fetchone()
            if row is None:
                ids = self._conn.execute(
                    "SELECT record_id FROM trajectory WHERE record_id >= ? AND record_id < ?"
                    " ORDER BY record_id LIMIT 6",
                    (record_id, record_id + _TOP),
                ).fetchall()
                if len(ids) > 1:  # six asked for: a sixth says the five listed are not all
                    raise AmbiguousRecordId(record_id, [r[0] for r in ids[:5]], more=len(ids) > 5)
                if ids:
                    row = self._conn.execute(
                        "SELECT record_id, record FROM trajectory WHERE record_id = ?", (ids[0][0],)
                    ).fetchone()
        return None if row is None else _stored_record(row[1], row[0], self.path)

    def records(self, conversation: str | None = None) -> Iterator[TrajectoryRecord]:
        """Every record (of one conversation or scope), oldest first, read in pages to bound memory."""
        where, args = ("WHERE coalesce(conversation_id, scope) = ?", [conversation]) if conversation else ("", [])
        last = 0
        while True:
            with self._lock:
                page = self._conn.execute(
                    f"SELECT id, record_id, record FROM trajectory {where}"
                    f"{' AND' if where else ' WHERE'} id > ? ORDER BY id LIMIT 256",
                    [*args, last],
                ).fetchall()
            if not page:
                return
            for row_id, record_id, text in page:
                last = row_id
                yield _stored_record(text, record_id, self.path)

    def close(self) -> None:
        """Close the read connection."""
        with self._lock:
            self._conn.close()

    def __enter__(self) -> TrajectoryStore:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
