"""The trajectory writer: a bounded queue, a spool and one worker thread between the agent and the sinks.

A span processor runs on the agent's thread, inside ``span.end()``; a database write or an OTLP export
there would put I/O latency into every failed tool call. So :meth:`TrajectoryWriter.submit` only
serialises the record, appends it to the spool (a copy into a shared file mapping, no system call, no
``fsync``) and to an in-memory queue,
and a daemon worker thread, like the SDK's ``BatchSpanProcessor``, drains the queue in batches into every
sink.

Durability. With a spool (``spool_dir``; ``init()`` puts it beside the store), a record has reached the
operating system before ``submit`` returns, so before the failed tool call returns to the agent: a
``kill -9`` of the process loses nothing the agent saw fail. The next writer opened on the same spool
replays what the dead one had not stored (see :mod:`otel_errcompact.sinks.spool`). Without a spool a
record is in memory until its batch is written. A record that the spool appends with ``write()`` (one
that does not fit the segment's mapping) is written outside the queue's lock (the segment is pinned
open meanwhile): with several agent threads failing at once, none waits for another's system call,
nor for the worker taking its batch.

Batching. The worker wakes when ``max_batch_size`` records are waiting, when ``schedule_delay_s`` has
passed since its last round, on :meth:`~TrajectoryWriter.force_flush` and on
:meth:`~TrajectoryWriter.shutdown`. Within one batch, versions of a record are coalesced by
``record_id``: the last submitted version wins. A later version arriving in a later batch is written
again (SQLite upserts the row, JSONL appends a superseding line, OTLP emits a second log record).

Amendments. A failed span's record is submitted once, raw, before the tool call returns; its digest is
made a few milliseconds later on another thread. That thread hands the version with the digest over
through the :class:`Amendment` the raw record was submitted with, one dict operation and no second
submission: the worker writes that version in the raw one's place when it takes the record. Only when
the worker took the raw record first (a full batch, a flush) is the later version submitted as a record
of its own, and written again. The spool holds the raw line only: a process killed before its worker
wrote the record leaves it to the next start without its digest (its raw error is whole).

Captures. A failed span's raw record is submitted as its :class:`~otel_errcompact.capture.FailureCapture`
(:meth:`TrajectoryWriter.submit_capture`), spooled as the capture's own line: the agent's thread does not
lay the record out. The worker takes the version with the digest from the amendment as above, or lays the
raw record out from the capture when none came, and makes the storage line then, once; the replay of the
spool lays captures out the same way (:func:`~otel_errcompact.capture.record_of_spool_line`).

Overflow. The queue holds at most ``max_queue_size`` records and ``max_queue_chars`` characters of
error text. When it is full, ``submit`` waits up to ``max_block_s`` for the worker to make room
(backpressure: an agent failing faster than the store can write is slowed down rather than losing
evidence); if there is still no room, the *new* record is dropped (not the oldest), counted in
:attr:`~TrajectoryWriter.dropped` (also the ``errcompact.trajectory.dropped`` metric), and logged once
a minute. A record is accepted whatever its size when the queue is empty, so a single huge error is
never refused.

Sink failures. A sink whose ``write`` raises (another process holding the SQLite store's write lock past
its busy timeout, a full disk) gets the records it failed on again with its next batch, merged with it
(the later version of a record wins), on every flush and at shutdown, and every second when no batch
comes: nothing it refused is lost while the process lives, and the other sinks, which stored them, are
not handed them twice. Meanwhile the spool keeps its segments from the first one holding such a record
on (unmapped, their unused blocks given back, rotated by size only), and deletes them once the records
are stored. Records a sink failed on past the queue's own bounds (``max_queue_size``,
``max_queue_chars``) are let go from memory; the spool then keeps those segments for the next start,
which stores them.

Truth. :meth:`~TrajectoryWriter.force_flush` returns ``False`` once any record has been dropped or could
not be stored by a sink, not only when it timed out: "flushed" means every submitted record is stored.
A record a sink stored on a later attempt stays counted in :attr:`~TrajectoryWriter.failed`, which
never goes down.

Shutdown. :meth:`~TrajectoryWriter.shutdown` stops accepting records, lets the worker drain the queue
completely, flushes and closes every sink on the worker thread (sinks are only ever touched by that one
thread), deletes the spool's segments once everything in them is stored, and waits up to ``timeout_s``.
It registers nothing at exit; the owner of the writer calls ``shutdown`` (``otel_errcompact.init`` does
it from ``atexit`` and, when the host has no handler of its own, on ``SIGTERM``).

Fork. The worker thread does not survive ``fork()``; create the writer in the process that uses it.
"""

from __future__ import annotations

import logging
import os
import threading
import time
from collections import deque
from collections.abc import Callable, Iterable, Sequence
from pathlib import Path
from typing import Any

from opentelemetry import context as otel_context

from otel_errcompact import _signalmask
from otel_errcompact._forked import rebuild_in_child
from otel_errcompact.capture import FailureCapture, record_of_spool_line
from otel_errcompact.sinks._base import TrajectorySink
from otel_errcompact.sinks.spool import Leftover, Spool, read_segment
from otel_errcompact.trajectory import (
    TrajectoryRecord,
    amended_line,
    record_from_values,
    record_of,
    storage_line,
)

__all__ = ["Amendment", "TrajectoryWriter"]

_log = logging.getLogger("otel_errcompact")

_REPORT_INTERVAL_S = 60.0
"""Drops and sink failures are logged at most once per this many seconds (per cause)."""

# The SDK's exporters set this key so that instrumented I/O libraries (sqlite3, requests, ...) do not
# produce telemetry about the telemetry pipeline itself; the trajectory sinks are part of it.
try:
    from opentelemetry.context import _SUPPRESS_INSTRUMENTATION_KEY as _SUPPRESS_KEY
except ImportError:  # pragma: no cover - the key has been in the API since 1.0; kept for safety
    _SUPPRESS_KEY = "suppress_instrumentation"

_NO_SEGMENT = -1
_BACKLOG_FACTOR = 8
"""With a backlog of two batches or more, the worker writes up to this many batches in one ``write``."""
_HOLD_S = 60.0
"""How long a held ``submit`` waits for the process to end (see :meth:`TrajectoryWriter.hold`)."""
_RETRY_S = 1.0
"""How often records a sink failed on are handed to it again when no new batch comes to take them."""


_Item = TrajectoryRecord | dict[str, Any] | FailureCapture
"""A queued record: the model, or its field values when the pipeline submitted those."""

_TAKEN: Any = object()
"""An :class:`Amendment`'s slot once the worker has written the record it amends."""


class Amendment:
    """The later version of a record submitted with :meth:`TrajectoryWriter.submit_values`, handed to the
    worker without a second submission (see the module's "Amendments").

    The digest thread and the worker meet in one ``dict.setdefault`` each, atomic under the GIL: the
    first to set the slot decides. No lock, so the digest thread never queues on the agent threads'."""

    __slots__ = ("_slot", "queued")

    def __init__(self) -> None:
        self._slot: dict[int, Any] = {}
        self.queued = False
        """True once the writer queued the record this amends (not when it dropped it or repaired it)."""

    def offer(self, values: dict[str, Any]) -> bool:
        """Hand over ``values``, the record's later version (same ``record_id``); True when the worker
        will write it in place of the raw version, False when it took that already or never queued it
        (submit ``values`` then, with ``amends=True``). Takes ownership of ``values`` when True."""
        return self.queued and self._slot.setdefault(0, values) is values

    def take(self) -> dict[str, Any] | None:
        """The worker's side: the later version when one was offered, else None; either way no later
        offer succeeds."""
        got = self._slot.setdefault(0, _TAKEN)
        return None if got is _TAKEN else got


def _record_id_of(item: object) -> str | None:
    """The ``record_id`` of a queued item; None for anything that is not a record or its values."""
    if type(item) is dict:
        record_id = item.get("record_id")
        return record_id if type(record_id) is str else None
    return item.record_id if isinstance(item, TrajectoryRecord | FailureCapture) else None


def _merged(unstored: dict[str, tuple[_Item, str | None]], items: Sequence[tuple[_Item, str | None]]
            ) -> list[tuple[_Item, str | None]]:
    """A sink's unstored records followed by ``items``; a record in both is written once, as its version
    in ``items`` (the later one)."""
    merged = dict(unstored)
    for item, text in items:
        record_id = _record_id_of(item)
        if record_id is not None:
            merged[record_id] = (item, text)
    return list(merged.values())


def _amend(item: _Item, line: bytes | None, amendment: Amendment | None) -> tuple[_Item, bytes | None]:
    """``item`` and its storage line, or its later version handed over by ``amendment`` and that
    version's line (made from ``line``: the raw error is not encoded again). A capture's record is
    that later version, else laid out from the capture; its storage line is made here, once (the
    capture's own line is not one)."""
    later = amendment.take() if amendment is not None else None
    if type(item) is FailureCapture:
        values = later if later is not None else item.values()
        try:
            return values, storage_line(values)
        except Exception:  # values no line can be made of: the model's path repairs them (TrajectoryWriter._records)
            return values, None
    if later is None:
        return item, line
    if line is None:
        return later, None
    try:
        return later, amended_line(line, later) or storage_line(later)
    except Exception:  # values no line can be made of: the model's path repairs them (see TrajectoryWriter._records)
        return later, None


def _chars(item: _Item, text: str | None) -> int:
    """The characters ``item`` holds in memory, roughly: its storage JSON, else its error text."""
    if text is not None:
        return len(text)
    try:
        return _size(item, None)
    except Exception:
        return 0


def _size(item: _Item, line: bytes | None) -> int:
    # The stack trace is usually the very string passed as raw_error; count shared text once. The
    # storage line made for the spool is held until the sinks have it: it counts too.
    if type(item) is dict:
        raw, stack = item["raw_error"], item["exception_stacktrace"]
    elif type(item) is FailureCapture:
        return item.chars + (len(line) if line is not None else 0)
    else:
        raw, stack = item.raw_error, item.exception_stacktrace  # type: ignore[union-attr]
    size = len(raw) + (len(stack) if stack and stack is not raw else 0)
    return size + (len(line) if line is not None else 0)


class TrajectoryWriter:
    """Batches trajectory records to sinks on a background thread; ``submit`` never raises.

    :param sinks: where records go; each gets every batch, a failing one does not stop the others.
    :param max_queue_size: records waiting at most (default 65,536).
    :param max_batch_size: records handed to a sink per ``write`` call (default 512), up to 8 times
        that when the worker has fallen behind by two batches or more; also the queue length that
        wakes the worker before ``schedule_delay_s`` has passed.
    :param schedule_delay_s: the longest a record waits before the worker picks it up (default 0.2 s).
    :param max_queue_chars: characters of error text waiting at most (default 128 Mi).
    :param spool_dir: folder of the spool that makes records durable before ``submit`` returns, and
        from which records a killed process left behind are recovered (default: no spool).
    :param max_block_s: how long ``submit`` waits for room in a full queue before dropping (0.5 s).

    >>> writer = TrajectoryWriter([SQLiteSink("errors.db")], spool_dir="errors.db-spool")  # doctest: +SKIP
    >>> writer.submit(TrajectoryRecord(source="tool", raw_error=tb))   # doctest: +SKIP
    >>> writer.shutdown()                                        # doctest: +SKIP
    """

    def __init__(
        self,
        sinks: Iterable[TrajectorySink],
        *,
        max_queue_size: int = 65_536,
        max_batch_size: int = 512,
        schedule_delay_s: float = 0.2,
        max_queue_chars: int = 128 * 1024 * 1024,
        spool_dir: str | os.PathLike[str] | None = None,
        max_block_s: float = 0.5,
    ) -> None:
        if max_queue_size < 1 or max_batch_size < 1:
            raise ValueError("max_queue_size and max_batch_size must be at least 1")
        if schedule_delay_s <= 0:
            raise ValueError("schedule_delay_s must be positive")
        if max_block_s < 0:
            raise ValueError("max_block_s must not be negative")
        self._sinks: tuple[TrajectorySink, ...] = tuple(sinks)
        self._max_queue = max_queue_size
        self._max_batch = min(max_batch_size, max_queue_size)
        self._delay = schedule_delay_s
        self._max_chars = max_queue_chars
        self._max_block = max_block_s
        self._spool: Spool | None = None
        if spool_dir is not None:
            try:
                self._spool = Spool(Path(spool_dir))
            except OSError as exc:
                # The sinks may still work: run without the spool's guarantee rather than not at all.
                _log.warning("trajectory writer: no spool at %s (%s); records queued in memory only survive "
                             "until the process dies", spool_dir, exc)
        self._leftovers: list[Leftover] = self._spool.claim_leftovers() if self._spool else []
        self._stopping = False
        self._fresh_state()
        self._worker = self._start_worker()
        rebuild_in_child(self._after_fork_in_child)

    def _fresh_state(self) -> None:
        """The locks, the queue and the counters of a writer that has stored nothing yet."""
        self._lock = threading.Lock()
        # The condition's own lock: _enqueue takes it directly (a Condition's __enter__ and __exit__
        # are Python calls; the lock's are not), every waiter through the condition.
        self._cond = threading.Condition(self._lock)
        # (record, spool segment, the record's storage line when the spool made it, else None)
        self._queue: deque[tuple[_Item, int, bytes | None]] = deque()
        # record_id -> the Amendment of a queued record (see Amendment), taken when the worker writes it
        self._amendments: dict[str, Amendment] = {}
        self._queued_chars = 0
        self._in_flight = 0  # submits past the checks whose record is not yet queued (spool write)
        self._blocked = 0
        self._dropped = 0
        self._dropped_reported = 0
        self._flush_requested = 0
        self._flush_done = 0
        self._held = False
        self._stopped = threading.Event()
        # First spool segment holding a record some sink has not stored: it and the later ones are kept.
        self._keep_from: int | None = None
        # Per sink (in self._sinks' order), the records its write raised on, by record_id (latest version):
        # handed to it again before each later batch of its own (see _write).
        self._unstored: list[dict[str, tuple[_Item, str | None]]] = [{} for _ in self._sinks]
        self._retry_at = 0.0  # monotonic time of the next retry when no batch comes
        # True once a sink's unstored records outgrew the queue's bounds: they were let go from memory,
        # and the spool keeps every segment from _keep_from on, for the next start to store.
        self._retry_given_up = False

        self._written = 0
        self._failed = 0
        self._recovered = 0
        self._spool_failures = 0
        self._sink_failures = 0
        self._last_report: dict[str, float] = {}

    def _start_worker(self) -> threading.Thread:
        worker = threading.Thread(target=self._run, name="otel_errcompact.TrajectoryWriter", daemon=True)
        _signalmask.start(worker)
        return worker

    def _after_fork_in_child(self) -> None:
        """This process was forked from the one that made the writer (see :mod:`otel_errcompact._forked`):
        the records queued there are the parent's to store, and so are its spool segments and the
        leftovers it claimed. This process gets new locks, an empty queue, segments of its own, its own
        connections to the sinks, and a worker thread, unless the writer was shut down."""
        leftovers, self._leftovers = self._leftovers, []
        for leftover in leftovers:
            leftover.release()  # this process's copy of the descriptor: the parent keeps its lock
        stopping = self._stopping
        self._fresh_state()
        if stopping:
            self._stopped.set()
            return
        if self._spool is not None:
            try:
                self._spool.after_fork_in_child()
            except OSError as exc:
                self._spool = None
                _log.warning("trajectory writer: no spool of its own in the forked process %d (%s); records "
                             "queued in memory only survive until it dies", os.getpid(), exc)
        for sink in self._sinks:
            rebuild = getattr(sink, "after_fork_in_child", None)
            if rebuild is not None:
                try:  # one sink that cannot be rebuilt must not keep the worker from the others
                    rebuild()
                except Exception:
                    _log.exception("trajectory writer: could not rebuild %r in the forked process %d", sink,
                                   os.getpid())
        self._worker = self._start_worker()

    # -- the caller's side -------------------------------------------------------------------------

    def submit(self, record: TrajectoryRecord, *, amends: bool = False) -> None:
        """Spool and queue ``record`` for every sink; never raises.

        Returns once the record is in the spool (when there is one), so it survives the death of the
        process. Waits up to ``max_block_s`` when the queue is full, then drops the record (counted in
        :attr:`dropped`); records submitted after :meth:`shutdown` are dropped too. ``amends``: see
        :meth:`submit_values`.
        """
        try:
            self._enqueue(record, record.to_storage_line() if self._spool is not None else None, amends=amends)
        except Exception:
            # A non-record passed by mistake must not break the agent; the worker's log says why.
            self._count_drop()

    def submit_values(self, values: dict[str, Any], *, amends: bool = False,
                      line: bytes | None = None, amendment: Amendment | None = None) -> bytes | None:
        """:meth:`submit` for a record given as its field values (see
        :func:`~otel_errcompact.trajectory.record_from_values`), as the pipeline makes them for a
        failed span: the spool line is written from the values, and the :class:`TrajectoryRecord`
        is built on the worker thread, not the agent's. Takes ownership of ``values``; never raises.
        Returns the spool line written (``None`` without a spool, or when the record had to be
        repaired first).

        ``amends``: a later version of a record already submitted (its digest added, same ``record_id``),
        which the shutdown itself may submit: it is not held by :meth:`hold`. ``line``: the values'
        storage line, when the caller has it already (see
        :func:`~otel_errcompact.trajectory.amended_line`). ``amendment``: how a later version of this
        record may be handed over without a submission of its own (see :class:`Amendment`).
        """
        try:
            if self._spool is None:
                line = None
            elif line is None:
                line = storage_line(values)
                if line is None:
                    self.submit(record_from_values(values), amends=amends)  # one to repair first: the model's path
                    return None
            self._enqueue(values, line, amends=amends, amendment=amendment)
            return line
        except Exception:
            self._count_drop()
            return None

    def submit_capture(self, capture: FailureCapture, line: bytes | None, *, amendment: Amendment) -> None:
        """:meth:`submit_values` for a failed span's record given as its capture (see
        :mod:`otel_errcompact.capture`): ``line`` (``capture.line()``; None without a spool) is spooled,
        and the worker lays the record out, unless ``amendment`` hands it the version with the digest
        first. Takes ownership of ``capture``; never raises."""
        try:
            self._enqueue(capture, line if self._spool is not None else None, amendment=amendment)
        except Exception:
            self._count_drop()

    @property
    def spooled(self) -> bool:
        """Whether records are spooled before :meth:`submit` returns (a spool is configured and opened)."""
        return self._spool is not None

    def _count_drop(self) -> None:
        try:
            with self._cond:
                self._dropped += 1
        except Exception:
            pass

    def _enqueue(self, record: _Item, line: bytes | None, *, amends: bool = False,
                 amendment: Amendment | None = None) -> None:
        """Spool ``line`` (when there is a spool) and queue ``record`` with it; may raise."""
        size = _size(record, line)
        spool = self._spool if line is not None else None
        with self._lock:  # the condition's lock
            held = self._held
            if not held and (self._stopping or (self._full(size) and not self._wait_for_room(size))):
                self._dropped += 1
                return
            # The common case: the line fits the segment's mapping and is copied into it at once.
            seq = self._copy_in(spool, line) if spool is not None and line is not None else None
            if seq is not None:
                self._queued(record, None, None, seq, line, size, amendment)
                slot = None
            else:
                slot = spool.pin(len(line)) if spool is not None and line is not None else None
                if slot is None or slot[1] >= 0:
                    # No spool, or a mapping the copy could not use: no system call, and the GIL is
                    # held throughout anyway, so it is done here in the one critical section.
                    self._queued(record, spool, slot, self._spool_write(spool, slot, line), line, size, amendment)
                    slot = None
                else:
                    self._in_flight += 1
        if slot is not None:
            # A write() past the mapping: outside the lock, so that the other agent threads and
            # the worker do not wait for the system call.
            seq = self._spool_write(spool, slot, line)
            with self._cond:
                self._in_flight -= 1
                self._queued(record, spool, slot, seq, line, size, amendment)
        if held and not amends:
            self._wait_for_the_end()

    def _queued(self, record: _Item, spool: Spool | None, slot: tuple[int, int] | None, seq: int,
                line: bytes | None, size: int, amendment: Amendment | None = None) -> None:
        """Queue ``record`` once its line is in the spool (or failed to get there), with the
        ``amendment`` it was submitted with; under the lock."""
        if spool is not None and slot is not None:
            spool.unpin(slot)
            if seq == _NO_SEGMENT:
                self._spool_failures += 1  # still queued: stored unless the process dies
        self._queue.append((record, seq, line))
        if amendment is not None:  # registered only once the record is queued
            if type(record) is FailureCapture:
                self._amendments[record.record_id] = amendment
                amendment.queued = True
            elif type(record) is dict:
                self._amendments[record["record_id"]] = amendment
                amendment.queued = True
        self._queued_chars += size
        if len(self._queue) == self._max_batch or (self._stopping and not self._in_flight):
            self._cond.notify_all()

    def _copy_in(self, spool: Spool, line: bytes) -> int | None:
        """:meth:`Spool.copy_in <otel_errcompact.sinks.spool.Spool.copy_in>` under the lock: the
        segment, ``None`` when the line does not fit the mapping, ``_NO_SEGMENT`` (counted) when the
        copy failed, as :meth:`_spool_write` does."""
        try:
            return spool.copy_in(line)
        except Exception:
            self._spool_failures += 1  # still queued: stored unless the process dies
            return _NO_SEGMENT

    @staticmethod
    def _spool_write(spool: Spool | None, slot: tuple[int, int] | None, line: bytes | None) -> int:
        """Put ``line`` in the pinned spool ``slot`` (a copy into the segment's mapping, or a ``write()``
        past it); the segment, or ``_NO_SEGMENT`` when there is no spool or the write failed."""
        if spool is None or line is None or slot is None:
            return _NO_SEGMENT
        try:
            spool.write(slot, line)
        except Exception:  # OSError (disk full...), or anything unexpected: the record is still queued
            return _NO_SEGMENT
        return slot[0]

    def _full(self, size: int) -> bool:
        return bool(self._queue) and (
            len(self._queue) >= self._max_queue or self._queued_chars + size > self._max_chars
        )

    def _wait_for_room(self, size: int) -> bool:
        """Backpressure: wait (lock released) until the worker makes room, at most ``max_block_s``."""
        if self._max_block <= 0 or threading.current_thread() is self._worker:
            return False
        deadline = time.monotonic() + self._max_block
        self._blocked += 1
        try:
            while self._full(size) and not self._stopping:
                remaining = deadline - time.monotonic()
                if remaining <= 0 or not self._worker.is_alive():
                    return False
                self._cond.notify_all()  # the worker may be sleeping out its schedule delay
                self._cond.wait(remaining)
        finally:
            self._blocked -= 1
        return not self._stopping

    def hold(self) -> None:
        """The process is ending (SIGTERM): from now on ``submit`` does not return.

        It spools and queues the record as usual (the drain may still store it), then waits for the
        process to end, so a tool that fails during the shutdown never reports a failure whose record
        is not stored. The wait is bounded (60 s) in case the process does not end after all.

        Called from a signal handler, so on the main thread, which the signal may have interrupted
        inside ``with self._cond``: taking that lock here would wait for ever. The flag is set without
        it (one attribute store is atomic); a ``submit`` that read the flag just before goes on as
        usual, and its record is queued for the drain like any other.
        """
        self._held = True

    @property
    def holding(self) -> bool:
        """True once :meth:`hold` was called: the process is ending."""
        return self._held

    def _wait_for_the_end(self) -> None:
        if threading.current_thread() is not self._worker:
            time.sleep(_HOLD_S)

    def force_flush(self, timeout_s: float = 5.0) -> bool:
        """Write everything submitted so far and flush the sinks.

        ``True`` only if that finished within ``timeout_s`` *and* no record has been lost so far
        (dropped at a full queue or after shutdown, or refused by a sink): see :attr:`lost`.
        """
        if threading.current_thread() is self._worker:
            return False  # called from inside a sink: waiting for ourselves would only time out
        deadline = time.monotonic() + timeout_s
        with self._cond:
            if self._stopping and not self._worker.is_alive():
                return not self._queue and self.lost == 0
            self._flush_requested += 1
            ticket = self._flush_requested
            self._cond.notify_all()
            while self._flush_done < ticket:
                remaining = deadline - time.monotonic()
                if remaining <= 0 or not self._worker.is_alive():
                    return False
                self._cond.wait(remaining)
        return self.lost == 0

    def shutdown(self, timeout_s: float = 10.0) -> None:
        """Stop accepting records, write every queued one, flush and close the sinks. Idempotent.

        Returns after ``timeout_s`` even if a sink hangs; the records still queued are then logged as
        not written (with a spool they are recovered by the next writer on it).
        """
        with self._cond:
            first = not self._stopping
            self._stopping = True
            self._cond.notify_all()
        if not first:
            self._stopped.wait(timeout_s)
            return
        if threading.current_thread() is self._worker:
            return
        self._worker.join(timeout_s)
        if self._worker.is_alive():
            with self._cond:
                left = len(self._queue)
            _log.warning("trajectory writer: shutdown timed out after %.1fs; %d record(s) not written%s",
                         timeout_s, left, " (kept in the spool)" if self._spool is not None else "")

    @property
    def dropped(self) -> int:
        """Records refused because the queue stayed full, or submitted after shutdown."""
        return self._dropped

    @property
    def failed(self) -> int:
        """Records a sink could not store when first handed them (its ``write`` raised, or it quarantined
        them); a record stored on a later attempt stays counted."""
        return self._failed + sum(int(getattr(s, "quarantined", 0) or 0) for s in self._sinks)

    @property
    def lost(self) -> int:
        """:attr:`dropped` + :attr:`failed`: what makes :meth:`force_flush` return ``False``."""
        return self._dropped + self.failed

    @property
    def written(self) -> int:
        """Record versions handed to the sinks (after coalescing), recovered ones included."""
        return self._written

    @property
    def recovered(self) -> int:
        """Records replayed from spool segments a dead process left behind."""
        return self._recovered

    @property
    def spool_failures(self) -> int:
        """Appends to the spool that failed (disk full...): those records were only queued in memory."""
        return self._spool_failures

    @property
    def sink_failures(self) -> int:
        """``write``/``flush``/``close`` calls that raised."""
        return self._sink_failures

    @property
    def queue_size(self) -> int:
        """Records waiting for the worker."""
        return len(self._queue)

    @property
    def spool_dir(self) -> Path | None:
        """The spool's folder, when there is one."""
        return self._spool.directory if self._spool is not None else None

    @property
    def sinks(self) -> tuple[TrajectorySink, ...]:
        """The sinks, in the order they are written."""
        return self._sinks

    def register_metrics(self, meter: Any) -> None:
        """Expose the writer's counters as observable OTel instruments on ``meter``.

        ``errcompact.trajectory.dropped`` (records lost at a full queue or after shutdown),
        ``errcompact.trajectory.failed`` (refused by a sink), ``errcompact.trajectory.written`` and
        ``errcompact.trajectory.queued`` (waiting now). Read when the meter's reader collects, so the
        agent's thread pays nothing. A later writer registering on the same meter (the next ``init()``)
        takes them over (see :mod:`otel_errcompact._observed`).
        """
        from opentelemetry.metrics import CallbackOptions, Observation

        from otel_errcompact._observed import observe

        def counter(value: Callable[[TrajectoryWriter], int]) -> Callable[[TrajectoryWriter, CallbackOptions],
                                                                          Iterable[Observation]]:
            return lambda writer, _options: [Observation(value(writer))]

        observe(
            meter, "errcompact.trajectory.dropped", self, counter(lambda w: w.dropped), unit="{record}",
            description="Trajectory records dropped: queue full past the backpressure wait, or after shutdown",
        )
        observe(
            meter, "errcompact.trajectory.failed", self, counter(lambda w: w.failed), unit="{record}",
            description="Trajectory records a sink could not store",
        )
        observe(
            meter, "errcompact.trajectory.written", self, counter(lambda w: w.written), unit="{record}",
            description="Trajectory record versions written to the sinks",
        )
        observe(
            meter, "errcompact.trajectory.queued", self, counter(lambda w: w.queue_size), kind="gauge",
            unit="{record}", description="Trajectory records waiting for the writer thread",
        )

    # -- the worker's side -------------------------------------------------------------------------

    def _take(self) -> list[tuple[_Item, int, bytes | None]]:
        # Behind by several batches: take them in one go. A SQLite transaction costs about the same
        # for 512 records as for 4,096 once the store is large (each touches most index pages), so
        # the store writes faster the further it falls behind, and catches up.
        backlog = len(self._queue)
        n = min(self._max_batch * _BACKLOG_FACTOR if backlog >= 2 * self._max_batch else self._max_batch,
                backlog)
        if n == backlog:  # the usual case: the whole queue, one copy in C under the agents' lock
            batch = list(self._queue)
            self._queue.clear()
            self._queued_chars = 0
        else:
            popleft = self._queue.popleft
            batch = [popleft() for _ in range(n)]
            self._queued_chars -= sum(_size(r, e) for r, _, e in batch)
        if self._spool is not None and self._spool.due(by_age=self._keep_from is None):
            try:
                self._spool.rotate()
            except OSError:
                self._report("rotate", "trajectory writer: could not rotate the spool", exc=True)
        if self._blocked and batch:
            self._cond.notify_all()  # room for submitters waiting on a full queue
        return batch

    def _run(self) -> None:
        token = otel_context.attach(otel_context.set_value(_SUPPRESS_KEY, True))
        try:
            self._prefault()
            self._recover()
            self._loop()
        except BaseException:  # pragma: no cover - the loop itself catches sink errors
            _log.exception("trajectory writer: worker thread died")
            raise
        finally:
            otel_context.detach(token)
            self._stopped.set()
            with self._cond:
                self._cond.notify_all()

    def _recover(self) -> None:
        """Replay the segments a dead writer left in the spool, then delete them."""
        leftovers, self._leftovers = self._leftovers, []
        for leftover in leftovers:
            ok = True
            count = bad = 0
            try:
                for lines in read_segment(leftover.path, chunk_lines=self._max_batch):
                    latest: dict[str, tuple[TrajectoryRecord, str | None]] = {}
                    for line in lines:
                        try:
                            rec, text = record_of_spool_line(line)
                        except Exception:
                            bad += 1
                            continue
                        latest[rec.record_id] = (rec, text)
                    batch = list(latest.values())
                    ok = self._write(batch) and ok
                    count += len(batch)
            except OSError:
                ok = False
                _log.warning("trajectory writer: could not read spool segment %s", leftover.path,
                             exc_info=True)
            self._recovered += count
            if ok:
                leftover.done()
            else:
                leftover.release()
            _log.info("trajectory writer: recovered %d record(s) from %s%s", count, leftover.path.name,
                      f" ({bad} unreadable line(s) skipped)" if bad else "")

    def _loop(self) -> None:
        while True:
            with self._cond:
                if (
                    not self._stopping
                    and self._flush_requested == self._flush_done
                    and len(self._queue) < self._max_batch
                ):
                    self._cond.wait(self._delay)
                flush_ticket = self._flush_requested
                stopping = self._stopping
                batch = self._take()
            self._write_batch(batch)
            self._prefault()
            self._report_drops()
            # A flush or shutdown drains everything, then makes the sinks durable.
            if flush_ticket != self._flush_done or stopping:
                while True:
                    with self._cond:
                        batch = self._take()
                    if not batch:
                        break
                    self._write_batch(batch)
                self._write_batch([], retry=True)  # what a sink failed on before: stored if it can be now
                self._flush_sinks()
                with self._cond:
                    self._flush_done = flush_ticket
                    self._cond.notify_all()
            if stopping:
                with self._cond:
                    # A submit past its checks is writing to the spool: its record comes next.
                    self._cond.wait_for(lambda: not self._in_flight, timeout=1.0)
                    if self._queue or self._in_flight:  # submitted in the instant before _stopping was seen
                        continue
                self._report_drops(force=True)
                self._close_sinks()
                if self._spool is not None:
                    # Segments holding a record some sink has not stored stay for the next start to store.
                    self._spool.close(delete=self._keep_from is None)
                return

    def _prefault(self) -> None:
        """Let the spool map in its open segment's pages, outside the lock (see :meth:`Spool.prefault`)."""
        if self._spool is not None:
            try:
                self._spool.prefault()
            except Exception:
                self._report("prefault", "trajectory writer: could not prepare the spool segment", exc=True)

    def _write_batch(self, batch: list[tuple[_Item, int, bytes | None]], *, retry: bool = False) -> None:
        """Write ``batch`` (with the records each sink failed on before), then let the spool go of what
        is stored. An empty batch hands a sink its unstored records when ``retry`` is set (a flush, the
        shutdown) or :data:`_RETRY_S` has passed since the last retry."""
        if not batch and not (any(self._unstored) and (retry or self._retry_due())):
            return
        latest: dict[str, tuple[_Item, bytes | None]] = {}
        amendments = self._amendments
        for item, _, line in batch:
            record_id = _record_id_of(item)
            if record_id is not None:
                amendment = amendments.pop(record_id, None) if amendments else None
                if amendment is not None or type(item) is FailureCapture:
                    item, line = _amend(item, line, amendment)
                latest[record_id] = (item, line)
            else:
                self._report("bad-record", "trajectory writer: dropped a non-record %r", type(item).__name__)
        # The sinks take the storage JSON as text: decoded here, on the worker, not on the agent's thread.
        ok = self._write([(item, line[:-1].decode("utf-8") if line is not None else None)
                          for item, line in latest.values()])
        if self._spool is None:
            return
        if not ok:
            first = min((seq for _, seq, _ in batch if seq != _NO_SEGMENT), default=None)
            if first is not None and (self._keep_from is None or first < self._keep_from):
                self._keep_from = first
        if self._keep_from is not None and not self._retry_given_up and not any(self._unstored):
            self._keep_from = None  # every record a sink failed on is stored now
        self._release()

    def _retry_due(self) -> bool:
        now = time.monotonic()
        if now < self._retry_at:
            return False
        self._retry_at = now + _RETRY_S
        return True

    def _release(self) -> None:
        """Delete the spool segments whose records are all stored; unmap the ones kept meanwhile.

        Every record before the queue's head has been handed to the sinks. When one refused some,
        the segments from the first holding such a record on are kept, every one of them, not only
        those holding it: the next start replays the kept segments in order, and a later version
        of a record (its digest added) must be replayed after the earlier one, not overwritten by it.
        Kept segments give back their mapping and unused blocks (:meth:`Spool.park
        <otel_errcompact.sinks.spool.Spool.park>`) and are deleted once the refused records are stored.
        """
        spool = self._spool
        if spool is None:
            return
        with self._cond:
            limit = next((seq for _, seq, _ in self._queue if seq != _NO_SEGMENT), spool.seq)
            keep = self._keep_from
            released = spool.release_before(limit if keep is None else min(limit, keep))
            parked = spool.park_before(limit) if keep is not None else []
        # File deletions and unmappings: not under the agents' lock.
        spool.discard(released)
        spool.park(parked)

    def _write(self, items: Sequence[tuple[_Item, str | None]]) -> bool:
        """Hand the records to every sink; ``True`` when none raised.

        A sink gets the records its write raised on before (``_unstored``) with these, the
        later version of a record replacing the earlier, so nothing it refused is lost while the
        process lives, and none of its records goes back to an older version. Past the queue's bounds
        (``max_queue_size`` records, ``max_queue_chars`` characters) they are let go from memory and
        left to the spool, for the next start.

        A sink with ``write_encoded`` also gets each record's storage JSON when the spool already made
        it on the agent's thread, so the record is serialised once, not once per sink. When every
        record of the batch is queued as its values with its line (a failed span's), a sink with
        ``write_values`` (SQLite) gets those, and no :class:`TrajectoryRecord` is built for it: the
        model is built only for a sink that needs it, once for all of them.
        """
        values_only = all(type(item) is dict and text is not None for item, text in items)
        models: tuple[list[TrajectoryRecord], Sequence[tuple[_Item, str | None]]] | None = None
        ok = True
        for index, sink in enumerate(self._sinks):
            unstored = self._unstored[index]
            todo = _merged(unstored, items) if unstored else items
            if not todo:
                continue
            try:
                if todo is items:
                    models = self._write_to(sink, items, values_only, models)
                else:
                    self._write_to(sink, todo, all(type(i) is dict and t is not None for i, t in todo), None)
            except Exception:
                ok = False
                self._sink_failures += 1
                self._failed += len(items)
                self._hold(index, todo)
                self._report(f"write:{id(sink)}", "trajectory writer: %r failed to write %d record(s)",
                             sink, len(todo), exc=True)
            else:
                if unstored:
                    self._unstored[index] = {}
        self._written += len(items)
        return ok

    def _write_to(self, sink: TrajectorySink, items: Sequence[tuple[_Item, str | None]], values_only: bool,
                  models: tuple[list[TrajectoryRecord], Sequence[tuple[_Item, str | None]]] | None,
                  ) -> tuple[list[TrajectoryRecord], Sequence[tuple[_Item, str | None]]] | None:
        """Write ``items`` to ``sink`` in the form it takes best; returns the records built for it (and
        the items that made one), or ``models`` as given, for the next sink; raises what the sink raises."""
        write_values = getattr(sink, "write_values", None) if values_only else None
        if callable(write_values):
            write_values(items)
            return models
        if models is None:
            models = self._records(items)
        records, kept = models
        write_encoded = getattr(sink, "write_encoded", None)
        if callable(write_encoded):
            write_encoded([(rec, text) for rec, (_, text) in zip(records, kept, strict=True)])
        else:
            sink.write(records)
        return models

    def _hold(self, index: int, todo: Sequence[tuple[_Item, str | None]]) -> None:
        """Keep the records sink ``index`` failed on for its next write, within the queue's bounds."""
        held: dict[str, tuple[_Item, str | None]] = {}
        chars = 0
        for item, text in todo:
            record_id = _record_id_of(item)
            if record_id is not None:
                held[record_id] = (item, text)
                chars += _chars(item, text)
        if len(held) <= self._max_queue and chars <= self._max_chars:
            self._unstored[index] = held
            return
        self._unstored[index] = {}
        if not self._retry_given_up:
            self._retry_given_up = True
            _log.warning("trajectory writer: %r has failed on %d record(s) (%d chars), past what is held in "
                         "memory for it; they stay in the spool for the next start to store", self._sinks[index],
                         len(held), chars)

    def _records(self, items: Sequence[tuple[_Item, str | None]]
                 ) -> tuple[list[TrajectoryRecord], Sequence[tuple[_Item, str | None]]]:
        """The records of ``items``, and the items that make one (a value that makes none is reported
        and left out: it cannot reach any sink that takes records)."""
        records: list[TrajectoryRecord] = []
        kept: list[tuple[_Item, str | None]] = []
        for item, text in items:
            try:
                records.append(record_of(item.values() if isinstance(item, FailureCapture) else item))
            except Exception:
                self._report("bad-record", "trajectory writer: dropped a non-record %r", type(item).__name__)
                continue
            kept.append((item, text))
        return records, kept if len(kept) != len(items) else items

    def _flush_sinks(self) -> None:
        for sink in self._sinks:
            flush = getattr(sink, "flush", None)
            if not callable(flush):
                continue
            try:
                flush()
            except Exception:
                self._sink_failures += 1
                self._report(f"flush:{id(sink)}", "trajectory writer: %r failed to flush", sink, exc=True)

    def _close_sinks(self) -> None:
        for sink in self._sinks:
            try:
                sink.close()
            except Exception:
                self._sink_failures += 1
                _log.exception("trajectory writer: %r failed to close", sink)

    def _report_drops(self, *, force: bool = False) -> None:
        new = self._dropped - self._dropped_reported
        if new <= 0:
            return
        if force or self._due("drops"):
            self._dropped_reported += new
            _log.warning(
                "trajectory writer: dropped %d record(s) (queue full at %d records / %d chars for %.2fs, "
                "or shut down)", new, self._max_queue, self._max_chars, self._max_block,
            )

    def _due(self, what: str) -> bool:
        now = time.monotonic()
        last = self._last_report.get(what)
        if last is not None and now - last < _REPORT_INTERVAL_S:
            return False
        self._last_report[what] = now
        return True

    def _report(self, what: str, msg: str, *args: object, exc: bool = False) -> None:
        if self._due(what):
            _log.warning(msg, *args, exc_info=exc)
