"""A sink wrapper that redacts trajectory records before another sink sees them.

The policy (README, "Security"): whatever leaves the process is redacted; the local store keeps full
fidelity unless ``redact_at_rest`` is on. ``init()`` wraps the OTLP log sink always, and the SQLite and
JSONL sinks when ``redact_at_rest`` is set. Wrap a sink of your own that ships records elsewhere the same
way: ``RedactingSink(MySink())``.

Every free-text field is passed through :func:`otel_errcompact.redact.redact`: the raw error, the
exception message and stack, the status description, the span name, the tool arguments (each string
inside them when they are structured), and the attribute and resource values. A structured value is
redacted by its key as well as by its text, as ``password=…`` is in text: under a key that names a
secret (``db.password``, ``http.request.header.x-api-key``, ``{"api_key": …}``) the whole value is masked,
however plain it looks, since nothing but its name says that ``hunter2`` is a secret. Ids,
timestamps and the digest (already redacted by the compactor) are left as they are.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from otel_errcompact.redact import REDACTED, names_secret, redact, redact_named
from otel_errcompact.sinks._base import TrajectorySink
from otel_errcompact.trajectory import TrajectoryRecord

__all__ = ["RedactingSink", "redact_record"]

_TEXT_FIELDS = ("raw_error", "exception_message", "exception_stacktrace", "status_description", "span_name")
_MAX_DEPTH = 32


def _redact_value(value: Any, depth: int = 0, named: str | None = None) -> Any:
    """Strings redacted, containers walked (bounded depth: a deeper value is dropped, not shipped raw).

    ``named`` is the nearest key above ``value`` that names a secret: everything under it is masked, the
    items of a list (an HTTP header attribute is a sequence) and of a mapping (``credentials: {…}``) too,
    and a number (a PIN); ``None`` and booleans say whether it is set, and stay."""
    if isinstance(value, str):
        return redact(value) if named is None else redact_named(named, value)
    if depth >= _MAX_DEPTH:
        return "[REDACTED: nested too deep]"
    if isinstance(value, dict):
        return {
            key: _redact_value(item, depth + 1, named or _naming(key)) for key, item in value.items()
        }
    if isinstance(value, (list, tuple)):
        return [_redact_value(item, depth + 1, named) for item in value]
    if named is not None and isinstance(value, (int, float)) and not isinstance(value, bool):
        return REDACTED
    return value


def _naming(key: object) -> str | None:
    """``key`` when it names a secret (:func:`otel_errcompact.redact.names_secret`), else ``None``."""
    return key if isinstance(key, str) and names_secret(key) else None


def redact_record(record: TrajectoryRecord) -> TrajectoryRecord:
    """A copy of ``record`` with every free-text field redacted (the record id stays, so upserts work).

    >>> redact_record(TrajectoryRecord(source="api", raw_error="api_key=abc123")).raw_error
    'api_key=[REDACTED]'
    >>> redact_record(TrajectoryRecord(source="api", attributes={"db.password": "hunter2 prod"})).attributes
    {'db.password': '[REDACTED]'}
    """
    update: dict[str, Any] = {}
    for name in _TEXT_FIELDS:
        value = getattr(record, name)
        if value:
            update[name] = redact(value)
    if record.tool_arguments is not None:
        update["tool_arguments"] = _redact_value(record.tool_arguments)
    if record.attributes:
        update["attributes"] = _redact_value(record.attributes)
    if record.resource:
        update["resource"] = _redact_value(record.resource)
    return record.model_copy(update=update)


class RedactingSink:
    """Hands ``inner`` redacted copies of the records; closes and flushes it with itself."""

    def __init__(self, inner: TrajectorySink) -> None:
        self.inner = inner

    def write(self, records: Sequence[TrajectoryRecord]) -> None:
        """Redact, then write to the wrapped sink."""
        self.inner.write([redact_record(record) for record in records])

    def flush(self) -> None:
        """Flush the wrapped sink, when it can be flushed."""
        flush = getattr(self.inner, "flush", None)
        if callable(flush):
            flush()

    def close(self) -> None:
        """Close the wrapped sink."""
        self.inner.close()

    def after_fork_in_child(self) -> None:
        """In a forked process: the wrapped sink's own rebuild (its connection, its locks), when it has one;
        without it a forked worker wrote through the parent's connection and stored nothing."""
        rebuild = getattr(self.inner, "after_fork_in_child", None)
        if callable(rebuild):
            rebuild()

    @property
    def quarantined(self) -> int:
        """The wrapped sink's quarantined records (0 when it keeps no such count)."""
        count = getattr(self.inner, "quarantined", 0)
        return count if isinstance(count, int) else 0

    def __repr__(self) -> str:
        return f"RedactingSink({self.inner!r})"
