"""A failed tool span's digest, made off the agent's thread, and the span export that waits for it.

Why. Compacting a traceback costs tens of microseconds, and the span processor used to do it inside
``span.end()``, on the agent's thread, because the SDK hands a span to the exporting processors right
after: the digest had to be on the span by then. When every exporting processor on the provider is the
SDK's ``BatchSpanProcessor``, a span is only queued there, and exported later by that processor's own
thread. Its exporter is then wrapped (:class:`DigestingExporter`): before it exports a batch, each
failed tool span in it whose digest is not made yet is finished first. So ``span.end()`` only captures
what the failure's trajectory record is made of and spools the capture (durable before the call returns,
see :mod:`otel_errcompact.capture`), and the rest (the record laid out, the digest, counting, the
record's digest, metrics, the span's ``errcompact.*`` attributes) is done
by :class:`DigestThread` a moment later, or by whoever needs it first: anything that reads the history
(the ``[RECENT ERRORS]`` block, the halt check at the tool boundary, the next failure) counts the
queued failures first, in order with the successes between them (see
:meth:`ErrorHistory.defer_failure <otel_errcompact.history.ErrorHistory.defer_failure>`). What the agent
is shown and when it is halted do not change.

When it is not done. Any other span processor on the provider (a ``SimpleSpanProcessor`` exports on the
agent's thread, inside ``span.end()``; an unknown one may read the span at once), a provider that is not
the SDK's, or SDK internals other than those this module knows: the digest is then made inside
``span.end()``, as before. A processor added to the provider after ``init()`` is noticed at the next
failure, and the same test decides again.

The work is the same, only moved: the digest thread takes the GIL for it, as the agent's thread did.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Iterable, Sequence
from typing import Any

from opentelemetry.sdk.trace import ReadableSpan, SpanProcessor, SynchronousMultiSpanProcessor, TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor, SpanExporter, SpanExportResult

from otel_errcompact import _signalmask
from otel_errcompact._forked import rebuild_in_child
from otel_errcompact.fused import unfused
from otel_errcompact.pipeline import DeferredFailure, ErrorPipeline

__all__ = ["DigestThread", "DigestingExporter", "ExportGate"]

_log = logging.getLogger("otel_errcompact")

_EXPORT_WAIT_S = 2.0
"""How long an export waits for the digests still to be made before sending its batch without them."""
_POLL_S = 0.0005
_GATHER_S = 0.01
"""How long the digest thread lets failures gather after the first one wakes it (see DigestThread).

Longer gathers hand the GIL over less often but made the agent's spans slower, not faster: in a steady
stream of failed spans (``bench_processor.py``'s timer, 12,000 spans with no flush between them, on the
agent thread's own clock), 100 ms gathers gave a median of 300 µs per span against 286-293 µs with 10 ms."""

_BATCHES = 4
"""Batches of digests the digest thread makes per wake-up at most, before it counts what is queued (the
failures queued after the last batch are then made in place)."""


def _copy(shared: Iterable[Any]) -> list[Any]:
    """A copy of a deque or dict view other threads append to, made in one C call that runs no Python code
    while it iterates: ``list()``, not ``tuple()``. ``tuple()`` allocates its result after it has started
    iterating; that allocation can set off a garbage collection, whose finalizers and callbacks are Python
    code, during which another thread may append, and the copy then raises ``RuntimeError`` ("mutated
    during iteration"). ``list()`` grows its result with plain memory allocations, which collect nothing."""
    return list(shared)


class ExportGate:
    """The failed tool spans whose digest is not made yet, by span id, and the provider's processors
    when the wrapping was decided (a different tuple means one was added: decide again)."""

    def __init__(self, pipeline: ErrorPipeline, provider: TracerProvider, own: SpanProcessor) -> None:
        self._pipeline: ErrorPipeline | None = pipeline
        self._provider = provider
        self._own = own
        self.pending: dict[int, DeferredFailure] = {}
        self.processors: tuple[SpanProcessor, ...] | None = None
        """The provider's processors when :meth:`refresh` last found every other one wrapped; None
        while deferring is not possible."""
        rebuild_in_child(self._after_fork_in_child)

    def _after_fork_in_child(self) -> None:
        """In a process forked from this one: the failures waiting for their digest are the parent's (the
        child's history drops them, and its batch processors their spans). Left here, every export of the
        child would wait for digests no thread makes. Cleared in place: the processor shares the dict."""
        self.pending.clear()

    def _current(self) -> tuple[SpanProcessor, ...] | None:
        active = getattr(self._provider, "_active_span_processor", None)
        if type(active) is not SynchronousMultiSpanProcessor:
            return None
        processors = getattr(active, "_span_processors", None)
        return processors if type(processors) is tuple else None

    def open(self) -> bool:
        """True when a failed span's digest may be made after the span ended (the common case: one
        attribute read and an identity test)."""
        processors = self.processors
        if processors is not None:
            try:  # _current(), inlined for the common case: the very tuple refresh() found
                if self._provider._active_span_processor._span_processors is processors:
                    return True
            except AttributeError:
                pass
        return self.refresh()

    def refresh(self) -> bool:
        """Wrap the exporter of every other processor on the provider, when each is the SDK's
        ``BatchSpanProcessor``; True when all are (deferring is then possible)."""
        processors = self._current()
        self.processors = None
        if processors is None:
            return False
        # Besides this one: batch processors, and this kind's processors that an earlier init() on the
        # provider left behind shut down (they ignore every span; the SDK cannot remove them). A fused
        # entry stands for its batch processor and its error processor (see otel_errcompact.fused).
        own = self._own
        others = [
            p
            for entry in processors
            for p in unfused(entry)
            if p is not own and not (type(p) is type(own) and getattr(p, "closed", False))
        ]
        batches = [p for p in others if type(p) is BatchSpanProcessor]
        if len(batches) != len(others):
            return False
        try:
            for batch in batches:
                inner: Any = batch._batch_processor
                exporter = inner._exporter
                if isinstance(exporter, DigestingExporter):
                    exporter._gate = self  # wrapped by an earlier init() on this provider: ours now
                else:
                    inner._exporter = DigestingExporter(exporter, self)
        except AttributeError:  # SDK internals this module does not know
            _log.debug("otel-errcompact: cannot wrap a BatchSpanProcessor's exporter", exc_info=True)
            return False
        self.processors = processors
        return True

    def release(self) -> None:
        """The processor shut down, every digest made: let go of its pipeline. The exporters wrapped for
        this gate keep it (an exporter cannot be unwrapped while its processor runs) until a later
        ``init()`` on the provider takes them over; meanwhile it holds nothing of the handle's."""
        self._pipeline = None
        self.pending = {}

    def wait_for(self, spans: Sequence[ReadableSpan]) -> None:
        """Finish every failure whose digest is not made yet (bounded), then let the processor add
        what they change on ``spans`` (see :attr:`on_export`).

        Every one, not only the failed spans in ``spans``: counting one may add an escalation event to
        an agent span that ended meanwhile, or mark a halted root span, and either may be in this batch.
        """
        pending, pipeline = self.pending, self._pipeline
        if pending and pipeline is not None:
            waiting = [deferred for deferred in _copy(pending.values()) if not deferred.finished]
            if waiting:
                pipeline.settle()  # counts them here, unless another thread is at it
                deadline = time.monotonic() + _EXPORT_WAIT_S
                for deferred in waiting:
                    while not deferred.finished and time.monotonic() < deadline:
                        time.sleep(_POLL_S)
                        pipeline.settle()
                    if not deferred.finished:
                        _log.warning("otel-errcompact: exporting spans before a failure's digest was made")
        on_export = self.on_export
        if on_export is not None:
            on_export(spans)

    on_export: Callable[[Sequence[ReadableSpan]], None] | None = None
    """Called with each batch before it is exported, once the digests are made: the processor marks
    the root spans of halted traces that ended before the breach was counted."""


class DigestingExporter(SpanExporter):
    """A ``BatchSpanProcessor``'s exporter, wrapped: a batch goes out once the digests of the failed
    tool spans in it are on them (see :class:`ExportGate`). Anything else is the wrapped exporter's."""

    def __init__(self, exporter: SpanExporter, gate: ExportGate) -> None:
        self.exporter = exporter
        self._gate = gate

    def export(self, spans: Sequence[ReadableSpan]) -> SpanExportResult:
        try:
            self._gate.wait_for(spans)
        except Exception:
            _log.exception("otel-errcompact: could not finish the digests of an export batch")
        return self.exporter.export(spans)

    def shutdown(self) -> None:
        self.exporter.shutdown()

    def force_flush(self, timeout_millis: int = 30000) -> bool:
        return self.exporter.force_flush(timeout_millis)

    def __getattr__(self, name: str) -> Any:
        return getattr(self.exporter, name)


class DigestThread:
    """Makes the deferred failures' digests soon after they are queued, off the agent's thread, and
    counts them (through the history, in order with everything else it holds)."""

    def __init__(self, pipeline: ErrorPipeline) -> None:
        self._pipeline = pipeline
        self._queue = pipeline.history.success_queue()
        # The wake-up is a bare lock, locked while there is nothing to do: the thread waits to acquire
        # it, and the first failure releases it, one C call and one system call on the agent's thread
        # (a plain lock may be released by any thread). An Event's set() runs
        # its Condition's Python code as well, which an agent that waited for its model runs cold: a
        # median of 28-39 µs against 13-20 µs per wake-up, 20 ms apart (``benchmarks/bench_wake.py``).
        self._stopping = False
        self._start()
        rebuild_in_child(self._after_fork_in_child)

    def _start(self) -> None:
        self._signal = threading.Lock()
        self._signal.acquire()
        self._awake = False  # True from a wake-up until the thread takes the queue: wake() is one read
        self._stop = threading.Event()  # ends a gather at once
        thread = threading.Thread(target=self._run, name="otel-errcompact-digests", daemon=True)
        _signalmask.start(thread)
        # Set once started: a SIGTERM shutdown that runs while a forked child rebuilds this (its handler
        # runs between two statements here) joins the previous thread, never one not started yet.
        self._thread = thread

    def _after_fork_in_child(self) -> None:
        """In a process forked from this one (see :mod:`otel_errcompact._forked`): the thread again, with
        a new wake-up lock; the failures queued before the fork are the parent's to finish (the history
        here only counts them)."""
        if not self._stopping:
            self._start()

    def wake(self) -> None:
        """There is a failure to finish (called on the agent's thread: one flag read when awake)."""
        if not self._awake:
            self._awake = True
            self._release()

    def _release(self) -> None:
        try:  # noqa: SIM105 (contextlib.suppress runs a context manager's Python code on the agent's thread)
            self._signal.release()
        except RuntimeError:  # released already, by another thread's wake() at the same moment
            pass

    def _run(self) -> None:
        signal = self._signal
        while True:
            signal.acquire()
            if not self._stopping:
                # Gather: the failures of the next few milliseconds are made in one go. The flag stays
                # set meanwhile, so their wake() calls cost one read, and the agent's threads hand this
                # one the GIL once for all of them rather than once each.
                self._stop.wait(_GATHER_S)
            # A failure queued from here on wakes the thread again (the lock is held: its release
            # makes the next acquire() return at once); one queued before is in the tuple below.
            self._awake = False
            try:
                # The digests first, outside the history's lock, so that an agent thread reading the
                # history meanwhile waits for no compaction; then the counting, in order. Failures queued
                # while a batch was being made (in the compacting process, the GIL let go) are made in
                # a batch of their own, a few times at most, rather than in place by the counting.
                for _ in range(_BATCHES):
                    failures = [item for item in _copy(self._queue) if type(item) is DeferredFailure]
                    if not self._pipeline.digest_all(failures):
                        break
                self._pipeline.settle()
            except Exception:
                _log.exception("otel-errcompact: could not finish deferred failures")
            if self._stopping:
                return

    def stop(self, timeout_s: float = 5.0) -> None:
        """Finish what is queued and stop the thread (waits ``timeout_s`` at most for it)."""
        self._stopping = True
        self._stop.set()
        self._awake = True
        self._release()
        if threading.current_thread() is not self._thread:
            self._thread.join(timeout_s)
        try:
            self._pipeline.settle()
        except Exception:
            _log.exception("otel-errcompact: could not finish deferred failures")
