"""The sink contract: where trajectory records go, and the one rule every sink follows (upsert by id).

A sink only ships; the :class:`~otel_errcompact.sinks.writer.TrajectoryWriter` owns the queue, the
batching and the worker thread (the split the OTel SDK makes between ``BatchSpanProcessor`` and
``SpanExporter``). That keeps a sink small enough to write in a few lines and to test without threads.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol, runtime_checkable

from otel_errcompact.trajectory import TrajectoryRecord

__all__ = ["FlushableSink", "TrajectorySink"]


@runtime_checkable
class TrajectorySink(Protocol):
    """Stores trajectory records.

    ``write`` is called only on the writer's worker thread, one batch at a time, so a sink needs no
    locking of its own. The same ``record_id`` arrives more than once (raw first, then amended with its
    digest); a sink must treat a later write of an id as replacing the earlier one (upsert), or, for an
    append-only medium, document that the later entry supersedes. ``write`` may raise: the writer logs
    the failure and carries on with the other sinks. ``close`` is called once, after the last ``write``.

    A sink that buffers may also define ``flush() -> None`` (see :class:`FlushableSink`); the writer
    calls it on ``force_flush`` and before ``close``. A sink that stores
    :meth:`TrajectoryRecord.to_storage_json` lines may define
    ``write_encoded(items: Sequence[tuple[TrajectoryRecord, str | None]])``: the writer then calls it
    instead of ``write``, with each record's line when its spool already made it (``None`` otherwise),
    so the record is not serialised a second time on the writer thread. A sink that can store a record
    from its field values (as :func:`~otel_errcompact.trajectory.record_from_values` takes them) and
    its storage line may define ``write_values(items: Sequence[tuple[dict[str, Any], str]])``: when
    every record of a batch was queued that way (a failed span's), the writer calls it instead, and
    builds no :class:`TrajectoryRecord` for that sink. It must only read the values. A sink holding what
    a process forked from its own must not share (a database connection, a lock) may define
    ``after_fork_in_child() -> None``: the writer calls it in the child before its worker starts there.
    """

    def write(self, records: Sequence[TrajectoryRecord]) -> None:
        """Store ``records`` (already de-duplicated by ``record_id`` within the batch)."""
        ...

    def close(self) -> None:
        """Release files and connections; no ``write`` follows."""
        ...


@runtime_checkable
class FlushableSink(TrajectorySink, Protocol):
    """A sink that can make what it has written durable on request."""

    def flush(self) -> None:
        """Make every record written so far durable (fsync, commit, hand to the exporter)."""
        ...
