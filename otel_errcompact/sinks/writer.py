"""The trajectory writer: a bounded queue and one worker thread between the agent and the sinks.

A span processor runs on the agent's thread, inside ``span.end()``; a disk write or an OTLP export
there would put I/O latency into every failed tool call. So :meth:`TrajectoryWriter.submit` only
appends to an in-memory queue (a ``deque`` under a lock: O(1), a microsecond or so, never raises) and a
daemon worker thread, like the SDK's ``BatchSpanProcessor``, drains it in batches into every sink.

Batching. The worker wakes when ``max_batch_size`` records are waiting, when ``schedule_delay_s`` has
passed since its last round, on :meth:`~TrajectoryWriter.force_flush` and on
:meth:`~TrajectoryWriter.shutdown`. Within one batch, versions of a record are coalesced by
``record_id``: the last submitted version wins, so a raw record and its amendment that arrive together
cost one write. If the raw version was already written in an earlier batch, the amendment is written
again: SQLite upserts the row, JSONL appends a superseding line, OTLP emits a second log record.

Overflow. The queue holds at most ``max_queue_size`` records and ``max_queue_chars`` characters of
error text. When either is full, the *new* record is dropped (not the oldest), counted in
:attr:`~TrajectoryWriter.dropped`, and the worker logs one warning per minute with the number dropped.
A full queue means the sinks are down or far too slow; the first failures of an incident are the ones
that explain it, and the failures that follow are mostly its echoes, so the earliest evidence is what
to keep. (The OTel SDK's batch processors make the same choice.)

Sizes. 65,536 records is several minutes of a pathological agent failing in a tight loop; with 2 KB
tracebacks that is the same order as the character cap (128 Mi characters of ``raw_error`` plus a
distinct stack trace, about 128 MB of ASCII), which is what actually bounds memory when records carry
megabyte-sized raw errors. The cap counts each queued version, so it over-estimates when the raw and
amended versions of a failure share their strings (as ``model_copy`` does). A record is accepted
whatever its size when the queue is empty, so a single huge error is never refused.

Shutdown. :meth:`~TrajectoryWriter.shutdown` stops accepting records, lets the worker drain the queue
completely, flushes and closes every sink on the worker thread (sinks are only ever touched by that one
thread), and waits up to ``timeout_s`` for it. It registers nothing at exit; the owner of the writer
calls ``shutdown`` (``otel_errcompact.init`` does it from ``atexit``).

Fork. The worker thread does not survive ``fork()``; create the writer in the process that uses it.
"""

from __future__ import annotations

import logging
import threading
import time
from collections import deque
from collections.abc import Iterable, Sequence

from opentelemetry import context as otel_context

from otel_errcompact.sinks._base import TrajectorySink
from otel_errcompact.trajectory import TrajectoryRecord

__all__ = ["TrajectoryWriter"]

_log = logging.getLogger("otel_errcompact")

_REPORT_INTERVAL_S = 60.0
"""Drops and sink failures are logged at most once per this many seconds (per cause)."""

# The SDK's exporters set this key so that instrumented I/O libraries (sqlite3, requests, ...) do not
# produce telemetry about the telemetry pipeline itself; the trajectory sinks are part of it.
try:
    from opentelemetry.context import _SUPPRESS_INSTRUMENTATION_KEY as _SUPPRESS_KEY
except ImportError:  # pragma: no cover - the key has been in the API since 1.0; kept for safety
    _SUPPRESS_KEY = "suppress_instrumentation"


def _size(rec: TrajectoryRecord) -> int:
    # The stack trace is usually the very string passed as raw_error; count shared text once.
    stack = rec.exception_stacktrace
    return len(rec.raw_error) + (len(stack) if stack and stack is not rec.raw_error else 0)


class TrajectoryWriter:
    """Batches trajectory records to sinks on a background thread; ``submit`` never blocks or raises.

    :param sinks: where records go; each gets every batch, a failing one does not stop the others.
    :param max_queue_size: records waiting at most (default 65,536); beyond it new records are dropped.
    :param max_batch_size: records handed to a sink per ``write`` call (default 512); also the queue
        length that wakes the worker before ``schedule_delay_s`` has passed.
    :param schedule_delay_s: the longest a record waits before the worker picks it up (default 0.2 s).
    :param max_queue_chars: characters of error text waiting at most (default 128 Mi).

    >>> writer = TrajectoryWriter([SQLiteSink("errors.db")])     # doctest: +SKIP
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
    ) -> None:
        if max_queue_size < 1 or max_batch_size < 1:
            raise ValueError("max_queue_size and max_batch_size must be at least 1")
        if schedule_delay_s <= 0:
            raise ValueError("schedule_delay_s must be positive")
        self._sinks: tuple[TrajectorySink, ...] = tuple(sinks)
        self._max_queue = max_queue_size
        self._max_batch = min(max_batch_size, max_queue_size)
        self._delay = schedule_delay_s
        self._max_chars = max_queue_chars

        self._cond = threading.Condition(threading.Lock())
        self._queue: deque[TrajectoryRecord] = deque()
        self._queued_chars = 0
        self._dropped = 0
        self._dropped_reported = 0
        self._flush_requested = 0
        self._flush_done = 0
        self._stopping = False
        self._stopped = threading.Event()

        self._written = 0
        self._sink_failures = 0
        self._last_report: dict[str, float] = {}

        self._worker = threading.Thread(target=self._run, name="otel_errcompact.TrajectoryWriter",
                                        daemon=True)
        self._worker.start()

    # -- the caller's side -------------------------------------------------------------------------

    def submit(self, record: TrajectoryRecord) -> None:
        """Queue ``record`` for every sink. O(1); never blocks on I/O, never raises.

        Dropped (and counted in :attr:`dropped`) when the queue is full or after :meth:`shutdown`.
        """
        try:
            size = _size(record)
            with self._cond:
                if self._stopping or (
                    self._queue
                    and (len(self._queue) >= self._max_queue or self._queued_chars + size > self._max_chars)
                ):
                    self._dropped += 1
                    return
                self._queue.append(record)
                self._queued_chars += size
                if len(self._queue) == self._max_batch:
                    self._cond.notify_all()
        except Exception:
            # A non-record passed by mistake must not break the agent; the worker's log says why.
            try:
                with self._cond:
                    self._dropped += 1
            except Exception:
                pass

    def force_flush(self, timeout_s: float = 5.0) -> bool:
        """Write everything submitted so far and flush the sinks; ``True`` if done within ``timeout_s``."""
        if threading.current_thread() is self._worker:
            return False  # called from inside a sink: waiting for ourselves would only time out
        deadline = time.monotonic() + timeout_s
        with self._cond:
            if self._stopping and not self._worker.is_alive():
                return not self._queue
            self._flush_requested += 1
            ticket = self._flush_requested
            self._cond.notify_all()
            while self._flush_done < ticket:
                remaining = deadline - time.monotonic()
                if remaining <= 0 or not self._worker.is_alive():
                    return False
                self._cond.wait(remaining)
        return True

    def shutdown(self, timeout_s: float = 10.0) -> None:
        """Stop accepting records, write every queued one, flush and close the sinks. Idempotent.

        Returns after ``timeout_s`` even if a sink hangs; the records still queued are then logged as
        lost.
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
            _log.warning("trajectory writer: shutdown timed out after %.1fs; %d record(s) not written",
                         timeout_s, left)

    @property
    def dropped(self) -> int:
        """Records refused because the queue was full, or submitted after shutdown."""
        return self._dropped

    @property
    def written(self) -> int:
        """Record versions handed to the sinks (after coalescing); failures included."""
        return self._written

    @property
    def sink_failures(self) -> int:
        """``write``/``flush``/``close`` calls that raised."""
        return self._sink_failures

    @property
    def queue_size(self) -> int:
        """Records waiting for the worker."""
        return len(self._queue)

    @property
    def sinks(self) -> tuple[TrajectorySink, ...]:
        """The sinks, in the order they are written."""
        return self._sinks

    # -- the worker's side -------------------------------------------------------------------------

    def _take(self) -> list[TrajectoryRecord]:
        n = min(self._max_batch, len(self._queue))
        popleft = self._queue.popleft
        batch = [popleft() for _ in range(n)]
        self._queued_chars -= sum(_size(r) for r in batch)
        if not self._queue:
            self._queued_chars = 0
        return batch

    def _run(self) -> None:
        token = otel_context.attach(otel_context.set_value(_SUPPRESS_KEY, True))
        try:
            self._loop()
        except BaseException:  # pragma: no cover - the loop itself catches sink errors
            _log.exception("trajectory writer: worker thread died")
            raise
        finally:
            otel_context.detach(token)
            self._stopped.set()
            with self._cond:
                self._cond.notify_all()

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
            self._write(batch)
            self._report_drops()
            # A flush or shutdown drains everything, then makes the sinks durable.
            if flush_ticket != self._flush_done or stopping:
                while True:
                    with self._cond:
                        batch = self._take()
                    if not batch:
                        break
                    self._write(batch)
                self._flush_sinks()
                with self._cond:
                    self._flush_done = flush_ticket
                    self._cond.notify_all()
            if stopping:
                with self._cond:
                    if self._queue:  # submitted in the instant before _stopping was seen
                        continue
                self._report_drops(force=True)
                self._close_sinks()
                return

    def _write(self, batch: list[TrajectoryRecord]) -> None:
        if not batch:
            return
        latest: dict[str, TrajectoryRecord] = {}
        for rec in batch:
            try:
                latest[rec.record_id] = rec
            except Exception:
                self._report("bad-record", "trajectory writer: dropped a non-record %r", type(rec).__name__)
        records: Sequence[TrajectoryRecord] = list(latest.values())
        for sink in self._sinks:
            try:
                sink.write(records)
            except Exception:
                self._sink_failures += 1
                self._report(f"write:{id(sink)}", "trajectory writer: %r failed to write %d record(s)",
                             sink, len(records), exc=True)
        self._written += len(records)

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
                "trajectory writer: dropped %d record(s) (queue full at %d records / %d chars, or shut down)",
                new, self._max_queue, self._max_chars,
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
