"""Open the trajectory files ``init()`` was given, or say clearly why they cannot be used.

Left to themselves, the standard library's errors say too little: a path inside a read-only system
directory gives ``sqlite3.OperationalError: unable to open database file`` (no path), a parent that is a
file gives ``FileExistsError``, a file that is not SQLite gives ``DatabaseError: file is not a database``.
Each becomes a :class:`~otel_errcompact.exceptions.ConfigurationError` that names the setting as the
user set it (``OTEL_ERRCOMPACT_SQLITE_PATH`` or ``sqlite_path=``), the path and the reason.

The checks run before anything is created, so a refused path leaves no folders or empty files behind.
"""

from __future__ import annotations

import os
import sqlite3
from pathlib import Path

from otel_errcompact.exceptions import ConfigurationError
from otel_errcompact.sinks import JSONLSink, SQLiteSink

__all__ = ["SQLITE_HEADER", "check_file_path", "open_jsonl_sink", "open_sqlite_sink"]

SQLITE_HEADER = b"SQLite format 3\x00"
"""The first 16 bytes of every SQLite database file."""


def _problem(origin: str, path: Path, reason: str) -> ConfigurationError:
    return ConfigurationError(f"{origin}{'' if origin.endswith('=') else '='}{str(path)!r}: {reason}")


def check_file_path(path: Path, origin: str, *, sqlite: bool) -> None:
    """Raise ConfigurationError when ``path`` cannot be a trajectory file: a directory, a parent that is
    a file, a file that is not SQLite (``sqlite=True``), or a location that cannot be written."""
    if path.is_dir():
        raise _problem(origin, path, "is a directory; give the path of a file inside it")
    ancestor = path.parent
    while not ancestor.exists():
        if ancestor.parent == ancestor:
            break
        ancestor = ancestor.parent
    if ancestor.exists() and not ancestor.is_dir():
        raise _problem(origin, path, f"its parent {str(ancestor)!r} is a file, not a directory")
    if path.exists():
        if not os.access(path, os.R_OK | os.W_OK):
            raise _problem(origin, path, "the file is not readable and writable by this process")
        if sqlite and path.stat().st_size > 0:
            with open(path, "rb") as fh:
                head = fh.read(len(SQLITE_HEADER))
            if head != SQLITE_HEADER:
                raise _problem(origin, path, "the file exists and is not a SQLite database")
    elif not os.access(ancestor, os.W_OK | os.X_OK):
        raise _problem(origin, path, f"cannot create it: the directory {str(ancestor)!r} is not writable")


def open_sqlite_sink(path: Path, origin: str) -> SQLiteSink:
    """A :class:`SQLiteSink` on ``path``, or ConfigurationError naming ``origin`` and the path."""
    check_file_path(path, origin, sqlite=True)
    _make_parent(path, origin)
    try:
        return SQLiteSink(path)
    except sqlite3.OperationalError as exc:
        raise _problem(origin, path, f"cannot create or open a SQLite database there ({_reason(exc)}; "
                                     "is the directory writable?)") from None
    except (OSError, sqlite3.Error, RuntimeError) as exc:
        raise _problem(origin, path, f"cannot open the trajectory store ({_reason(exc)})") from None


def open_jsonl_sink(path: Path, origin: str) -> JSONLSink:
    """A :class:`JSONLSink` on ``path``, or ConfigurationError naming ``origin`` and the path."""
    check_file_path(path, origin, sqlite=False)
    _make_parent(path, origin)
    try:
        return JSONLSink(path)
    except OSError as exc:
        raise _problem(origin, path, f"cannot open the trajectory file ({_reason(exc)})") from None


def _make_parent(path: Path, origin: str) -> None:
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise _problem(origin, path, f"cannot create its directory {str(path.parent)!r} ({_reason(exc)})") from None


def _reason(exc: BaseException) -> str:
    if isinstance(exc, OSError) and exc.strerror:
        return exc.strerror
    return str(exc) or type(exc).__name__
