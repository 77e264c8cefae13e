"""OpenTelemetry glue: a SpanProcessor and a LogRecordProcessor that feed failed tool calls to the pipeline.

Thin by design: recognising spans is :mod:`otel_errcompact.semconv`, the work is
:class:`otel_errcompact.pipeline.ErrorPipeline`. What lives here is what needs a live span:

- the failed tool span is handled in ``_on_ending`` (the SDK's last call before the span becomes
  read-only) so its ``errcompact.digest``, ``errcompact.key`` and ``errcompact.count`` attributes reach every
  exporter; SDKs that do not call ``_on_ending`` get the same handling in ``on_end``, minus the annotation;
- a breach adds an ``errcompact.escalation`` event to the failed tool span's own agent span
  (``invoke_agent``): the innermost live agent span among its anchors (see :func:`_lineage`), else its
  live local root span;
- exceptions recorded as log records (``OTEL_SEMCONV_EXCEPTION_SIGNAL_OPT_IN=logs``) are held by span id
  until that span ends, then used as its raw error.

Every entry point catches everything: a processor must never raise into the host. Spans that are not
tool spans cost a few attribute look-ups.
"""

from __future__ import annotations

import dataclasses
import functools
import logging
import re
import threading
import time
from collections import OrderedDict, deque
from collections.abc import Callable, Iterable, Mapping, Sized
from typing import Any, Literal

from opentelemetry.context import Context
from opentelemetry.sdk._logs import LoggerProvider, LogRecordProcessor, ReadWriteLogRecord
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import Event, ReadableSpan, Span, SpanProcessor, TracerProvider
from opentelemetry.trace import StatusCode, TraceFlags

from otel_errcompact import semconv
from otel_errcompact._forked import new_locks_in_child
from otel_errcompact._sampled import note_span
from otel_errcompact.capture import FailureCapture, jsonable_attributes
from otel_errcompact.capture import first_text as _first_text
from otel_errcompact.claims import current_claim
from otel_errcompact.deferred import DigestThread, ExportGate
from otel_errcompact.exceptions import ErrorBudgetExceeded
from otel_errcompact.fused import fuse, unfused
from otel_errcompact.halted import HaltedTraces
from otel_errcompact.history import SUCCESS_QUEUE_BOUND, ErrorHistory, Escalation, Limits, Thresholds
from otel_errcompact.pipeline import (
    DeferredFailure,
    ErrorPipeline,
    Failure,
    JsonableAttributes,
    Outcome,
    failure_of_values,
)
from otel_errcompact.telemetry import tool_label
from otel_errcompact.trajectory import new_record_id

__all__ = [
    "ErrorCompactionProcessor",
    "ExceptionLogProcessor",
    "SpanPredicate",
    "attach_exception_logs",
    "attach_span_processor",
    "span_annotations",
]

_log = logging.getLogger("otel_errcompact")
_monotonic = time.monotonic

SpanPredicate = Callable[[ReadableSpan], bool]
"""A user rule for spans the conventions do not mark as tool spans: True means "treat as a tool call"."""
_ModelSpanListener = tuple[
    Callable[[ReadableSpan, "Span | None"], None], "Callable[[ReadableSpan, Mapping[str, Any]], bool] | None"
]
"""A model-span listener and its optional filter (see ``add_model_span_listener``)."""

_MAX_PENDING_EXCEPTIONS = 4096
_MAX_FAILED_PARENTS = 4096
_MAX_RETURNED_ERRORS = 256
_OUTPUT_ATTRIBUTES = ("gen_ai.tool.call.result", "output.value", "traceloop.entity.output")
# The part of a returned error text that survives JSON escaping unchanged, for matching it in outputs.
_SAFE_PREFIX = re.compile(r"[A-Za-z0-9 _.,:\[\]()<>/-]+")
MAX_ANCHOR_TRACES = 4096
"""Traces whose live agent/root spans are remembered for escalation events. A span that is started and
never ended (an abandoned agent run) would otherwise stay here forever."""
ANCHOR_IDLE_S = 3600.0
"""A trace's anchors not touched (a new anchor, a failure looking them up) for this long are forgotten."""
_MAX_ANCHORS_PER_TRACE = 64
ANCHOR_SWEEP_EVERY = 256
"""Anchor registrations between two sweeps for idle traces (a failure's anchor lookup sweeps too): the
idle bound is checked in batches so that starting a root or agent span takes no lock."""
STARTED_ANCHORS_BOUND = 64
"""Agent and root spans started and not registered yet (see ``ErrorCompactionProcessor._starts``): past
this many, the span that starts one more registers them (those that ended meanwhile are dropped). Small
enough that ended spans do not linger: at 256, root spans held here after their export kept the garbage
collector busy, +9.2 k instructions per root span against +5.5 k at 16-64 (``bench_instructions.py``)."""
# Attribute names read on every span, bound here (a module attribute look-up per read adds up).
_OPERATION = semconv.GEN_AI_OPERATION_NAME
_OI_KIND = semconv.OPENINFERENCE_KIND
_TL_KIND = semconv.TRACELOOP_KIND
_TOOL_NAME = semconv.GEN_AI_TOOL_NAME
_ERROR_TYPE = semconv.ERROR_TYPE
_CONVERSATION_ATTRIBUTES = semconv.CONVERSATION_ATTRIBUTES
_CONVERSATION_ID = semconv.GEN_AI_CONVERSATION_ID
_CONVERSATION_1, _CONVERSATION_2, _CONVERSATION_3 = _CONVERSATION_ATTRIBUTES
_AGENT_NAME = semconv.GEN_AI_AGENT_NAME
_ARGUMENT_ATTRIBUTES = frozenset(semconv.TOOL_ARGUMENTS_ATTRIBUTES)
_IDENTITY_ATTRIBUTES = frozenset(
    _CONVERSATION_ATTRIBUTES
    + semconv.AGENT_NAME_ATTRIBUTES
    + semconv.TOOL_CALL_ID_ATTRIBUTES
    + semconv.TOOL_ARGUMENTS_ATTRIBUTES
)
"""Every attribute :meth:`ErrorCompactionProcessor._capture` reads a conversation, agent, call id or
arguments from: a tool span that records none of them (most do not) is answered with one set test."""
_STATUS_ERROR = StatusCode.ERROR  # an enum member read through its class costs 50 ns on Python 3.11
_SAMPLED = TraceFlags.SAMPLED
_time_ns = time.time_ns
_AGENT_OPERATIONS = semconv.AGENT_OPERATIONS
_AGENT_KINDS = semconv.AGENT_KINDS
_MODEL_OPERATIONS = frozenset({"chat", "text_completion", "generate_content"})


def _attributes_of(span: ReadableSpan) -> Mapping[str, Any]:
    """A span's attributes as a plain mapping.

    The SDK's ``BoundedAttributes`` (behind a mappingproxy) answers ``get`` through the ``collections.abc``
    mixin, several times slower than a dict; every span pays for these look-ups, so read its underlying
    dict when it has one. Nothing here writes to it.
    """
    attributes = getattr(span, "_attributes", None)  # the public property wraps it in a mappingproxy
    if attributes is None:
        attributes = span.attributes
        if attributes is None:
            return {}
    plain = getattr(attributes, "_dict", None)
    return plain if isinstance(plain, dict) else attributes


def _conversation_in(attrs: Mapping[str, Any]) -> str | None:
    """``semconv.conversation_id(attrs)``, answered without the call when ``attrs`` holds none of
    :data:`semconv.CONVERSATION_ATTRIBUTES`, as most spans don't."""
    for name in _CONVERSATION_ATTRIBUTES:
        if name in attrs:
            return semconv.conversation_id(attrs)
    return None


def _lineage(anchors: Mapping[int, Span], parent_id: int) -> list[Span] | None:
    """The anchors (a trace's agent and root spans by span id) a span whose parent is ``parent_id``
    belongs to, innermost first; None when its parent is not one of them.

    Why: two agents of one trace can run at the same time (a fan-out under one root span, on tasks or
    threads), so the newest anchor of the trace is as often another agent's as the span's own. The
    ancestry is read from the parents' span ids: the parent, its parent while that is an anchor too, and
    so on up to a local root. When the outermost one found has a parent in this process that is no anchor
    (a span in between), the anchors started before it follow, newest first, as its ancestors are among
    them; those sharing its parent are left out (its siblings, the other agents of a fan-out)."""
    span = anchors.get(parent_id)
    if span is None:
        return None
    own = [span]
    while len(own) < len(anchors):  # bounded: real spans have no parent cycle
        try:
            parent = span._parent  # the SDK's field: the public property is a Python call
        except AttributeError:
            parent = span.parent
        if parent is None or parent.is_remote:
            return own  # a local root: nothing above it is in this process
        above = anchors.get(parent.span_id)
        if above is None:
            break
        own.append(above)
        span = above
    else:
        return own
    # Above the outermost one found is a span in between: its ancestors are among the anchors started
    # before it (a parent starts before its children), save those that are its siblings.
    sibling_of = parent.span_id
    older: list[Span] = []
    for anchor in anchors.values():
        if anchor is span:
            break
        try:
            anchor_parent = anchor._parent
        except AttributeError:
            anchor_parent = anchor.parent
        if anchor_parent is None or anchor_parent.span_id != sibling_of:
            older.append(anchor)
    older.reverse()
    own.extend(older)
    return own


def _end_of(span: ReadableSpan) -> int | None:
    """``span.end_time``, read from the SDK's field when it has one (the property is a call)."""
    try:
        end: int | None = span._end_time
    except AttributeError:
        end = span.end_time
    return end


def _ended(span: ReadableSpan) -> bool:
    return _end_of(span) is not None


def _anchors_before(anchors: dict[int, Span], span: ReadableSpan) -> dict[int, Span]:
    """A copy of a trace's anchors (see ``_anchors``) without those started after ``span`` ended: the
    anchors a success queued earlier ran under, when it is resolved (see
    ``ErrorCompactionProcessor._resolve_success``)."""
    copied = dict(anchors)  # one C-level copy: registrations on other threads may change the original
    ended = _end_of(span)
    if ended is None:
        return copied
    for span_id, anchor in list(copied.items()):
        try:
            started = anchor._start_time
        except AttributeError:
            started = anchor.start_time
        if started is not None and started > ended:
            del copied[span_id]
    return copied


class ErrorCompactionProcessor(SpanProcessor):
    """Feeds failed tool spans to an :class:`ErrorPipeline`; successes reset the consecutive counter."""

    def __init__(
        self,
        pipeline: ErrorPipeline,
        *,
        predicate: SpanPredicate | None = None,
        capture_arguments: bool = True,
        max_anchor_traces: int = MAX_ANCHOR_TRACES,
        anchor_idle_s: float = ANCHOR_IDLE_S,
    ) -> None:
        self._lock = threading.Lock()
        new_locks_in_child(self, "_lock")
        self._max_anchor_traces = max(1, max_anchor_traces)
        self._anchor_idle_s = anchor_idle_s
        self._closed = False
        self._serve(pipeline, predicate, capture_arguments)
        pipeline.add_escalation_listener(functools.partial(self._escalated_in, pipeline))

    def reopen(self, pipeline: ErrorPipeline, *, predicate: SpanPredicate | None = None,
               capture_arguments: bool = True) -> None:
        """Handle spans again, for ``pipeline`` (a new handle's), after :meth:`shutdown`. The SDK cannot
        remove a span processor: a later ``init()`` on the same provider takes over the one an earlier
        handle left there, rather than adding one more that every span would pass through."""
        self._serve(pipeline, predicate, capture_arguments)
        pipeline.add_escalation_listener(functools.partial(self._escalated_in, pipeline))
        self._closed = False  # last: until now every span passes the processor by

    def _serve(self, pipeline: ErrorPipeline, predicate: SpanPredicate | None, capture_arguments: bool) -> None:
        """Everything that belongs to one pipeline, fresh (while the processor is closed or being made)."""
        self.pipeline = pipeline
        self._predicate = predicate
        self._capture_arguments = capture_arguments
        # Trace id -> its live agent/root spans by span id, oldest first (by span id: a span finds the
        # anchor that is its parent with one look-up, see _lineage). Written without the lock (single dict
        # and list operations are atomic under the GIL); the lock serialises sweeps (see _register_anchor,
        # _evict_anchors).
        self._anchors: dict[int, dict[int, Span]] = {}
        # Trace id -> when its anchors were last touched, least recently touched first (re-inserted on
        # each touch), so a sweep reads the eviction candidates from the front.
        self._anchor_touched: dict[int, float] = {}
        # Agent and root spans as they start, not registered yet: on_start only appends (one C call), and
        # they are registered (see _take_starts) when anchors are looked up, or past
        # STARTED_ANCHORS_BOUND. Most traces never look theirs up (nothing fails in them, or their tool
        # spans are not the SDK's): their anchors end unregistered and are dropped unread, and they cost
        # neither a registration nor a removal.
        self._starts: deque[Span] = deque()
        self._until_sweep = ANCHOR_SWEEP_EVERY  # registrations left before the next sweep
        # Bound once: one success is handed over per successful tool call (see _defer_success).
        self._resolve = self._resolve_success
        self._successes = pipeline.history.success_queue()
        self._successes_backlogged = pipeline.history.backlogged
        self._notify_success = pipeline.notify_success
        self._trace_scope: tuple[int, str] = (0, semconv.DEFAULT_SCOPE)  # the last trace scope named
        self.evicted_anchors = 0
        """Anchor spans forgotten by the bound (never ended, or idle too long); logged when it bites."""
        # The spans in _anchors -> their trace id. Spans hash by identity (no attribute read): an ending
        # span that is no anchor, most of them, passes with one look-up, and one that is finds its trace
        # without reading its ids.
        self._anchor_spans: dict[Span, int] = {}
        self._pending: OrderedDict[int, tuple[str | None, str | None, str | None]] = OrderedDict()
        # A framework's tool span that wraps a failed call can still end OK (the tool boundary returned
        # the digest as the tool's result): such a span is not a success and must not reset the
        # consecutive counter. Known two ways: a failure was handled inside it (its span id is here), or
        # its recorded output carries an error text the boundary returned (a prefix of it is here).
        self._failed_parents: OrderedDict[int, None] = OrderedDict()
        self._tool_parents: OrderedDict[int, None] = OrderedDict()  # parents of tool spans seen ending
        self._returned_errors: deque[str] = deque(maxlen=_MAX_RETURNED_ERRORS)
        self._saw_on_ending = False
        self._halted = HaltedTraces()
        # False while _on_ending has nothing but the common work to do: not closed, no predicate, no
        # exception held from a log record, no halted trace waiting for its root, and _saw_on_ending
        # set. Anything that makes one of these true sets it; _ending_slow clears it again.
        self._slow = True
        self._resource_cache: tuple[Any, dict[str, Any]] | None = None
        # Recovery listeners for model (chat) spans: ``listener(span, live agent span or None)``.
        self._model_listeners: list[_ModelSpanListener] = []
        # The operations _on_ending hands to them: none until a listener is added.
        self._model_operations: frozenset[str] = frozenset()
        # The signals and waiting collection of the one listener when it gave them: a model span
        # carrying none of these attributes while ``waiting`` is empty passes without calling anything.
        # None: ask the listeners.
        self._model_signals: frozenset[str] | None = None
        self._model_waiting: Sized = ()
        # Set by defer_digests when failed spans' digests are made after the span ended.
        self._gate: ExportGate | None = None
        self._digests: DigestThread | None = None
        # The gate's, once there is one. Each failure's subject is (its span, the span an escalation it
        # causes goes on), both read on the agent's thread when the failure is deferred (see _process).
        self._pending_digests: dict[int, DeferredFailure] = {}

    @property
    def closed(self) -> bool:
        """True after :meth:`shutdown`: the processor stays registered (the SDK cannot remove it) but
        ignores spans until a later ``init()`` on the same provider reopens it (see :meth:`reopen`)."""
        return self._closed

    # -- SpanProcessor ------------------------------------------------------------------------------

    def on_start(self, span: Span, parent_context: Context | None = None) -> None:
        if self._closed:
            return
        try:
            try:  # the SDK's fields behind the properties: every span pays for these reads
                attrs: Mapping[str, Any] = span._attributes._dict  # type: ignore[union-attr]
                parent = span._parent
            except AttributeError:
                attrs, parent = _attributes_of(span), span.parent
            # "A local root" (no parent, or a remote one: SpanContext.is_remote without its property
            # call), else semconv.is_agent_span, inlined: every span pays for these tests, and a root
            # span, registered whatever it records, passes with the first.
            if (parent is not None and not parent[2]) and not (
                attrs.get(_OPERATION) in _AGENT_OPERATIONS
                or (_OI_KIND in attrs and attrs[_OI_KIND] == "AGENT")
                or (_TL_KIND in attrs and attrs[_TL_KIND] in _AGENT_KINDS)
            ):
                return
            starts = self._starts
            starts.append(span)
            if len(starts) >= STARTED_ANCHORS_BOUND:
                self._take_starts()
        except Exception:
            _log.exception("otel-errcompact: on_start failed")

    def _on_ending(self, span: Span) -> None:
        """All of a span's handling, in one place: the SDK calls this with the live span, then
        :meth:`on_end` with a read-only copy, which has nothing left to do. A span that is neither a
        tool span, a model span nor an anchor costs one attribute read and four dict or set look-ups."""
        if self._slow and self._ending_slow(span):
            return
        try:
            try:
                attrs: Mapping[str, Any] = span._attributes._dict  # type: ignore[union-attr]
            except AttributeError:
                attrs = _attributes_of(span)
            operation = attrs.get(_OPERATION)
            # semconv.is_tool_span, inlined (a membership test is cheaper than a get that misses)
            if (
                operation == "execute_tool"
                or (_OI_KIND in attrs and attrs[_OI_KIND] == "TOOL")
                or (_TL_KIND in attrs and attrs[_TL_KIND] == "tool")
            ):
                self._tool_ended(span, attrs)
            if operation in self._model_operations:
                signals = self._model_signals
                if signals is None or self._model_waiting or not signals.isdisjoint(attrs):
                    self._model_span_ended(span, attrs)
            if span in self._anchor_spans:
                self._forget_anchor(span)
        except Exception:
            _log.exception("otel-errcompact: processing an ending span failed")

    def _ending_slow(self, span: Span) -> bool:
        """The uncommon states of :meth:`_on_ending` (see ``_slow``); True when the span is done with.

        ``_slow`` is cleared before the states are read and set again if one holds, so a state that a
        concurrent :meth:`hold_exception` or halt sets meanwhile (setting ``_slow`` after it) is never
        lost."""
        self._slow = False
        if self._closed:
            self._slow = True
            writer = self.pipeline.writer
            if writer is not None and writer.holding and self._is_candidate(span):
                # Shutting down on SIGTERM: a tool that fails now must not return to the agent with
                # its record unstored. Its record is spooled, and the call waits for the process to
                # end (see TrajectoryWriter.hold).
                self._process(span, writable=None)
            return True
        self._saw_on_ending = True
        halted = self._halted.pending
        generic = self._predicate is not None or bool(self._pending)
        if halted or generic:
            self._slow = True
        if not generic:
            if halted:
                self._halt_fix_up(span)
            return False
        try:
            if halted:
                self._mark_halted_root(span)
            self._process(span, writable=span)
            if self._model_listeners:
                attrs = _attributes_of(span)
                if attrs.get(_OPERATION) in _MODEL_OPERATIONS:
                    self._model_span_ended(span, attrs)
            if span in self._anchor_spans:
                self._forget_anchor(span)
        except Exception:
            _log.exception("otel-errcompact: processing an ending span failed")
        return True

    def _halt_fix_up(self, span: Span) -> None:
        """The halted-root status fix-up alone (see :mod:`otel_errcompact.halted`), before the common
        handling of the same span."""
        try:
            self._mark_halted_root(span)
        except Exception:
            _log.exception("otel-errcompact: processing an ending span failed")

    def _mark_halted_root(self, span: Span) -> None:
        """Mark the root of a halted trace ERROR, with the halt as its ``error.type`` when it names none:
        the span's error is the library's halt, which a root that is a tool span (a framework's tool span
        around an ``@ec.tool`` call, with no agent span above it) must not count as one more failure."""
        if self._halted.on_ending(span) and _ERROR_TYPE not in _attributes_of(span):
            _annotate(span, {_ERROR_TYPE: _HALT_TYPE})

    def on_end(self, span: ReadableSpan) -> None:
        if self._saw_on_ending or self._closed:
            return  # done in _on_ending
        try:
            if self._is_candidate(span):
                self._process(span, writable=None)
            context = span.context
            if context is None:
                return
            if self._model_listeners:
                attrs = _attributes_of(span)
                if attrs.get(_OPERATION) in _MODEL_OPERATIONS:
                    self._model_span_ended(span, attrs)
            anchors = self._anchors.get(context.trace_id)
            live = anchors.get(context.span_id) if anchors else None  # the copy is not the span registered
            if live is not None:
                self._forget_anchor(live)
        except Exception:
            _log.exception("otel-errcompact: on_end failed")

    def add_model_span_listener(
        self,
        listener: Callable[[ReadableSpan, Span | None], None],
        matters: Callable[[ReadableSpan, Mapping[str, Any]], bool] | None = None,
        *,
        signals: Iterable[str] | None = None,
        waiting: Sized | None = None,
    ) -> None:
        """Call ``listener(span, live agent span or None)`` for each model (chat) span that ends.

        ``matters(span, attributes)``, when given, says cheaply whether the span can mean anything to the
        listener: most model spans are plain successes, and finding the trace's live agent span for
        them would be work on every model call for nothing. ``signals`` and ``waiting``, given with it,
        say when ``matters`` can answer True at all: only for a span carrying one of the ``signals``
        attributes, or while ``waiting`` (the listener's own collection) is not empty. With them, the
        processor tests this itself, with no call, on every model span."""
        listeners = self._model_listeners
        listeners.append((listener, matters))
        if len(listeners) == 1 and matters is not None and signals is not None and waiting is not None:
            self._model_signals, self._model_waiting = frozenset(signals), waiting
        else:  # several listeners: each one's filter decides
            self._model_signals, self._model_waiting = None, ()
        self._model_operations = _MODEL_OPERATIONS

    def _model_span_ended(self, span: ReadableSpan, attrs: Mapping[str, Any]) -> None:
        anchor: Span | None = None
        looked_up = False
        for listener, matters in self._model_listeners:
            if matters is not None and not matters(span, attrs):
                continue
            if not looked_up:
                context, parent = span.context, span.parent
                anchor = (
                    self._live_anchor(context.trace_id, parent.span_id if parent is not None else 0)
                    if context is not None
                    else None
                )
                looked_up = True
            listener(span, anchor)

    def shutdown(self) -> None:
        """Ignore spans from now on, and let go of the pipeline: the provider keeps this processor as
        long as it lives (see :meth:`reopen`), and must not keep the handle's history, writer and
        listeners alive with it. While the process ends on SIGTERM the pipeline is kept: a tool that
        fails meanwhile still has its record spooled through it (see :meth:`_ending_slow`)."""
        self._closed = True
        self._slow = True
        if self._digests is not None:
            self._digests.stop()
        if self._gate is not None:
            self._gate.release()
        with self._lock:
            self._anchors.clear()
            self._anchor_touched.clear()
            self._anchor_spans.clear()
            self._starts.clear()
            self._pending.clear()
            self._failed_parents.clear()
            self._tool_parents.clear()
            self._returned_errors.clear()
        writer = self.pipeline.writer
        if writer is None or not writer.holding:
            self._serve(_released_pipeline(), None, False)

    def force_flush(self, timeout_millis: int = 30000) -> bool:
        self.settle()
        writer = self.pipeline.writer
        return writer.force_flush(timeout_millis / 1000) if writer is not None else True

    # -- exceptions that arrive as log records -------------------------------------------------------

    def hold_exception(self, span_id: int, exception: tuple[str | None, str | None, str | None]) -> None:
        """Keep an exception logged inside span ``span_id`` until that span ends (bounded)."""
        with self._lock:
            self._pending[span_id] = exception
            _bound(self._pending, _MAX_PENDING_EXCEPTIONS)
        self._slow = True  # after the write: see _ending_slow

    # -- internals ----------------------------------------------------------------------------------

    def _is_candidate(self, span: ReadableSpan) -> bool:
        """The fast path every span takes: only tool spans (and spans the user's predicate may claim, or
        that hold a logged exception) go further."""
        if self._predicate is not None or self._pending:
            return True
        return semconv.is_tool_span(_attributes_of(span))

    def _process(
        self,
        span: ReadableSpan,
        writable: Span | None,
        attrs: Mapping[str, Any] | None = None,
        *,
        is_tool: bool = False,
        context: Any = None,
    ) -> None:
        """Handle an ending candidate span. ``attrs``, ``is_tool`` and ``context`` are what the caller
        already knows: its attributes, that it is a tool span which failed (:meth:`_tool_ended` queues
        the successes), and its span context; without ``is_tool`` the span is tested by
        :meth:`failure_of`."""
        if attrs is None:
            attrs = _attributes_of(span)
        if "errcompact.key" in attrs or "errcompact.cancelled" in attrs or "errcompact.circuit_open" in attrs:
            return  # handled at the tool boundary while live, or a cancelled / refused call: not a result
        claim = current_claim()
        if claim is not None and claim.covers(span.parent):  # a framework bridge handles this call's failure
            claim.note(span.status.status_code is StatusCode.ERROR, span.events)
            return
        if is_tool and context is None:
            context = span.context
        gate = self._gate
        if gate is not None and is_tool and writable is not None and context is not None and gate.open():
            # Finished later (see otel_errcompact.deferred): only the record's capture is made now (see
            # otel_errcompact.capture; the record is laid out from it off this thread), and the span
            # an escalation goes on is found now, among the anchors that are live now (when the failure is
            # counted, its agent span may have ended: an escalation still goes on it, see
            # _add_escalation_event).
            found = self._capture(span, context, attrs, target=True)
            if found is None:
                return
            capture, target = found
            deferred = self.pipeline.defer(capture, self._digested, (writable, target))
            span_id = context[1]
            gate.pending[span_id] = deferred
            if deferred.finished:  # already, by another thread
                gate.pending.pop(span_id, None)
            self._digests.wake()  # type: ignore[union-attr]
            if self._closed:  # shut down meanwhile: the digest thread may have finished already
                self.pipeline.settle()
            return
        if is_tool:
            # The record laid out from the capture is the one stored: the pipeline does not lay it out again.
            found = self._capture(span, context, attrs) if context is not None else None
            if found is None:
                return
            values = found[0].values()
            outcome = self.pipeline.handle(failure_of_values(values), values=values)
        else:
            failure = self.failure_of(span)
            if failure is None:
                return
            outcome = self.pipeline.handle(failure)
        if writable is not None:
            _annotate(writable, span_annotations(outcome))

    def _digested(self, deferred: DeferredFailure, outcome: Outcome | None) -> None:
        """A deferred failure is counted: its digest goes on the span, which the export may now send."""
        span: Span = deferred.subject[0]
        try:
            if outcome is not None:
                _annotate(span, span_annotations(outcome))
        finally:
            self._pending_digests.pop(span.context.span_id, None)

    def defer_digests(self, provider: TracerProvider) -> bool:
        """Make failed spans' digests after the span ended, off the agent's thread, when ``provider``
        allows it (see :mod:`otel_errcompact.deferred`); True when it does."""
        gate = ExportGate(self.pipeline, provider, self)
        if not gate.refresh():
            return False
        gate.on_export = self._halted.on_export
        self._digests = DigestThread(self.pipeline)
        self._pending_digests = gate.pending
        self._gate = gate
        return True

    def settle(self) -> None:
        """Finish every failure whose digest is still to be made (see :meth:`defer_digests`)."""
        if self._digests is not None:
            self.pipeline.settle()

    def _tool_ended(self, span: Span, attrs: Mapping[str, Any]) -> None:
        """A tool span ending (the common states, see ``_slow``): a success is queued here with one
        append, a failure goes to :meth:`_process`. The tests are :meth:`_process`'s, in an order that
        lets a success pass with the fewest reads."""
        try:  # the SDK's fields: the public properties cost up to five times more
            code = span._status._status_code
            context: Any = span._context
        except AttributeError:
            code, context = span.status.status_code, span.context
        if (
            _ERROR_TYPE in attrs
            or code is _STATUS_ERROR
            or context is None
            or "errcompact.key" in attrs
            or "errcompact.cancelled" in attrs
            or "errcompact.circuit_open" in attrs
            or ((claim := current_claim()) is not None and claim.covers(span.parent))
        ):
            self._process(span, span, attrs, is_tool=True, context=context)
            return
        if self._starts:  # _defer_success, inlined
            self._take_starts()
        successes = self._successes
        successes.append((self._resolve, span))
        if len(successes) >= SUCCESS_QUEUE_BOUND:
            self._successes_backlogged()

    def handle_live(
        self, span: Span, unredacted: Mapping[str, Any] | None = None, *, model_text: str | None = None
    ) -> Outcome | None:
        """Handle a failed tool span that is still open (the tool boundary's path): the digest is set
        on it with the public API, and ``_on_ending`` will skip it. ``model_text``: what the agent's
        framework would have fed back instead (see ``Failure.model_text``).

        ``unredacted`` holds :class:`Failure` fields (``raw_error``, ``exception_message``,
        ``tool_arguments`` …) in the form the tool produced them: the span carries them redacted, the
        trajectory record must not."""
        failure = self.failure_of(span)
        if failure is None:
            return None
        if unredacted:
            if not self._capture_arguments:
                unredacted = {k: v for k, v in unredacted.items() if k != "tool_arguments"}
            failure = dataclasses.replace(failure, **unredacted)
        if model_text is not None:
            failure = dataclasses.replace(failure, model_text=model_text)
        outcome = self.pipeline.handle(failure)
        span.set_attributes(span_annotations(outcome))
        return outcome

    def note_returned_error(self, text: str) -> None:
        """Remember an error text the tool boundary handed to the agent as a tool's result, so a
        framework span whose output carries it is not taken for a success."""
        match = _SAFE_PREFIX.match(text)
        if match is not None and len(match.group(0)) >= 24:
            with self._lock:
                self._returned_errors.append(match.group(0))

    def failure_of(self, span: ReadableSpan) -> Failure | None:
        """The :class:`Failure` a failed tool span describes; ``None`` for other spans (a successful tool
        span resets its scope's consecutive counter on the way). A failed span's parent is noted as
        wrapping a failure (see ``_failed_parents``)."""
        attrs = _attributes_of(span)
        context = span.context
        if context is None:
            return None
        if not (semconv.is_tool_span(attrs) or (self._predicate is not None and self._predicate(span))):
            if self._pending:
                with self._lock:
                    self._pending.pop(context.span_id, None)
            return None
        if span.status.status_code is not StatusCode.ERROR and _ERROR_TYPE not in attrs:
            self._defer_success(span, context)
            return None
        return self._failure(span, context, attrs)

    def _failure(self, span: ReadableSpan, context: Any, attrs: Mapping[str, Any]) -> Failure | None:
        """The :class:`Failure` of a tool span known to have failed (see :meth:`_capture`)."""
        found = self._capture(span, context, attrs)
        if found is None:
            return None
        values = dict(found[0].values())
        # JsonableAttributes: the pipeline takes them as they are, without converting them again
        values["attributes"] = JsonableAttributes(values["attributes"])
        return failure_of_values(values)

    def _capture(
        self, span: ReadableSpan, context: Any, attrs: Mapping[str, Any], *, target: bool = False
    ) -> tuple[FailureCapture, Span | None] | None:
        """What the trajectory record of a tool span known to have failed is made of (see
        :mod:`otel_errcompact.capture`), read on the agent's thread: the span's fields, a shallow copy of
        its attributes, the record's id and scope, and the conversation and agent it ran for; None when
        the span is not a tool failure. The record is laid out from it later, off this thread.

        With it, the span an escalation it causes goes on (see :meth:`_anchor_facts`): found in the same
        pass over the anchors as the conversation and agent when the span records neither, else looked
        up only when ``target`` asks for it (None otherwise, and when the trace has no anchor)."""
        span_id = context[1]  # SpanContext is a tuple: [0] trace_id, [1] span_id, [3] trace_flags, no property call
        try:  # the SDK's fields: each public property is a Python call
            parent = span._parent
            start, end, name, resource = span._start_time, span._end_time, span._name, span._resource
            status = span._status
        except AttributeError:
            parent = span.parent
            start, end, name, resource = span.start_time, span.end_time, span.name, span.resource
            status = span.status
        exception = self._exception_of(span, span_id, parent, attrs)
        if exception is False:
            return None
        trace_id = context[0]
        trace_hex = f"{trace_id:032x}" if trace_id else None
        span_hex = f"{span_id:016x}" if span_id else None
        if not context[3] & _SAMPLED:  # a recorded span of a trace not sampled (RECORD_ONLY)
            note_span(trace_hex, span_hex, context[3])
        if _IDENTITY_ATTRIBUTES.isdisjoint(attrs):  # none recorded on the span, as usual: no look-ups
            conversation = agent = None
            copied = dict(attrs)
        else:
            conversation = _first_text(attrs, _CONVERSATION_ID, semconv.conversation_id)
            agent = _first_text(attrs, _AGENT_NAME, semconv.agent_name)
            if self._capture_arguments or _ARGUMENT_ATTRIBUTES.isdisjoint(attrs):
                copied = dict(attrs)
            else:  # the arguments are recorded only when the user opts in: the spool never holds them
                copied = {k: v for k, v in attrs.items() if k not in _ARGUMENT_ATTRIBUTES}
        anchor: Span | None = None
        parent_id = parent[1] if parent is not None else 0
        if conversation is None or agent is None:
            anchor_conversation, anchor_agent, anchor = self._anchor_facts(trace_id, parent_id)
            conversation = conversation or anchor_conversation
            agent = agent or anchor_agent
        elif target:
            anchor = self._live_anchor(trace_id, parent_id)
        # semconv.scope_for, with the trace id already in hex
        scope = conversation or (f"trace:{trace_hex}" if parent is not None and trace_hex else semconv.DEFAULT_SCOPE)
        now = _time_ns()
        capture = FailureCapture(
            new_record_id(),
            now,
            scope,
            trace_hex,
            span_hex,
            f"{parent_id:016x}" if parent_id else None,
            conversation,
            agent,
            name if type(name) is str else str(name),
            status.description,
            exception,
            start,
            end if end is not None else now,
            copied,
            self._capture_arguments,
            self._resource_of(resource),
        )
        return capture, anchor

    def _exception_of(
        self, span: ReadableSpan, span_id: int, parent: Any, attrs: Mapping[str, Any]
    ) -> tuple[str | None, str | None, str | None] | Literal[False] | None:
        """The exception a failed tool span recorded (an event, else one held from a log record), or
        False when it is not a tool failure of its own (see :func:`_not_a_tool_failure`), or when it
        wraps a tool failure already counted: a framework's tool span around an ``@ec.tool`` call that
        re-raises, or two instrumentations' spans of one call, fail with the same exception, which is one
        failure. Does the span's bookkeeping: the held exception taken, the span noted as
        its parent's tool call and, when it failed or wraps a failure, its parent as wrapping a failure.

        Without the lock, as :meth:`_resolve_success` keeps the same maps: each decision is one dict
        operation, atomic under the GIL (the held exception and the wrapper mark are taken by one
        ``pop``, so two threads never both take one), and a lock here was one more that four agent
        threads failing at once queued on, while the one holding it waited for the GIL."""
        events = getattr(span, "_events", None)
        exception = semconv.exception_from_events(span.events if events is None else events)
        pending = self._pending
        held = pending.pop(span_id, None) if pending else None
        if exception is None:
            exception = held
        tool_parents = self._tool_parents
        tool_parents.pop(span_id, None)
        not_a_failure = _not_a_tool_failure(exception, attrs) or _cancelled_by_framework(span)
        failed_parents = self._failed_parents
        wrapper = not not_a_failure and bool(failed_parents) and failed_parents.pop(span_id, 0) is None
        if parent is not None:
            parent_id = parent[1]
            tool_parents[parent_id] = None
            _bound(tool_parents)
            if not not_a_failure:
                failed_parents[parent_id] = None
                _bound(failed_parents)
        return False if not_a_failure or wrapper else exception

    def _defer_success(self, span: ReadableSpan, context: Any) -> None:
        """A successful tool span: queued as it is, resolved later (:meth:`_resolve_success`), in order
        with the other successes and before the next failure is counted, by the history (see
        ``ErrorHistory.defer_success``).

        Nothing else is captured: the span's ids, parent, attributes and name stay readable, and the
        trace's anchors it resolves against are still registered then, as an anchor that ends while
        successes wait is forgotten in its turn after them (see :meth:`_forget_anchor`). The agent
        spans started since are registered first, so that none the success ran under is missed; one
        allocation per success, which its thread pays in young collections as long as it waits."""
        if self._pending:
            with self._lock:
                self._pending.pop(context.span_id, None)
        if self._starts:
            self._take_starts()
        self.pipeline.history.defer_success(self._resolve, span)

    def _resolve_success(self, span: ReadableSpan, notify: bool = True) -> str | None:
        """The scope whose consecutive counter a successful tool span resets, and its count in the
        call metric (unless ``notify`` is False: in a forked process the history resolves the
        successes the parent had queued, which the parent counts); None for a span that only wraps a
        failure (see ``_failed_parents``). Runs for
        every successful tool call (off the agent's thread when the metrics thread takes it, else in
        a batch on it), so the common case is kept to single dict operations and reads of the SDK's
        fields."""
        try:
            attrs: Mapping[str, Any] = span._attributes._dict  # type: ignore[union-attr]
            parent = span._parent
            context: Any = span._context
        except AttributeError:
            attrs, parent, context = _attributes_of(span), span.parent, span.context
        span_id = context.span_id
        tool_parents = self._tool_parents
        # A tool span around a tool span (a framework's span around an @ec.tool span) is one call.
        wraps_a_call = span_id in tool_parents and tool_parents.pop(span_id, 0) is None
        parent_id = 0
        if parent is not None:
            parent_id = parent.span_id
            if parent_id not in tool_parents:  # a parent's later tool calls find it there already
                tool_parents[parent_id] = None
                _bound(tool_parents)
        if (span_id in self._failed_parents or self._returned_errors) and self._wraps_a_failure(span_id, attrs):
            return None
        # _conversation_in, then the first of the span's own anchors recording one (live or not: those
        # that ended after it are still registered, see _forget_anchor), inlined and unrolled. Its own:
        # the parent and its anchor ancestors when the parent is an anchor (see _lineage), else the
        # newest first.
        if _CONVERSATION_1 in attrs or _CONVERSATION_2 in attrs or _CONVERSATION_3 in attrs:
            conversation = semconv.conversation_id(attrs)
        else:
            conversation = None
        anchors = self._anchors.get(context.trace_id) if conversation is None else None
        if anchors:
            anchors = _anchors_before(anchors, span)
        if conversation is None and anchors:
            # one anchor (an agent run alone in its trace): it is the span's own, no walk
            own = _lineage(anchors, parent_id) if parent_id and len(anchors) > 1 else None
            for anchor in own if own is not None else reversed(anchors.values()):
                try:
                    anchor_attrs: Mapping[str, Any] = anchor._attributes._dict  # type: ignore[union-attr]
                except AttributeError:
                    anchor_attrs = _attributes_of(anchor)
                if (
                    _CONVERSATION_1 in anchor_attrs
                    or _CONVERSATION_2 in anchor_attrs
                    or _CONVERSATION_3 in anchor_attrs
                ):
                    conversation = semconv.conversation_id(anchor_attrs)
                    if conversation:
                        break
        if conversation or parent is None:
            scope = semconv.scope_for(conversation, context.trace_id, in_trace=parent is not None)
        else:  # the trace's scope, named once per trace rather than per call
            trace_id = context.trace_id
            cached = self._trace_scope
            if cached[0] != trace_id:
                cached = self._trace_scope = (trace_id, semconv.scope_for(None, trace_id, in_trace=True))
            scope = cached[1]
        if not wraps_a_call and notify:
            tool = attrs.get(_TOOL_NAME)
            if type(tool) is not str or not tool:  # the common case is a plain name in gen_ai.tool.name
                tool = semconv.tool_name(attrs, span.name)
            self._notify_success(tool)
        return scope

    def _resource_of(self, resource: Resource | None) -> dict[str, Any]:
        """A span's resource attributes, JSON-able; converted once per resource (a provider has one),
        and shared by the records of its spans, which only read it."""
        if resource is None:
            return {}
        cached = self._resource_cache
        if cached is not None and cached[0] is resource:
            return cached[1]
        converted = jsonable_attributes(resource.attributes)
        self._resource_cache = (resource, converted)
        return converted

    def _wraps_a_failure(self, span_id: int, attrs: Mapping[str, Any]) -> bool:
        if span_id in self._failed_parents:  # a racy read is fine: the pop under the lock decides
            with self._lock:
                if self._failed_parents.pop(span_id, 0) is None:
                    return True
        if not self._returned_errors:
            return False
        with self._lock:
            returned = list(self._returned_errors)
        for name in _OUTPUT_ATTRIBUTES:
            output = attrs.get(name)
            if output is not None:
                text = str(output)
                if any(prefix in text for prefix in returned):
                    return True
        return False

    def _take_starts(self) -> None:
        """Register the agent and root spans started since the last call, oldest first, but those that
        ended meanwhile (see ``_starts``). Any thread may call it, several at once: each span is taken
        from the deque once, by one of them."""
        starts = self._starts
        while True:
            try:
                span = starts.popleft()
            except IndexError:
                return
            try:
                if span._end_time is not None:  # the SDK's field: the public property is a Python call
                    continue
            except AttributeError:
                if span.end_time is not None:
                    continue
            self._register_anchor(span)
            if span.end_time is not None:  # ended while registered: its _on_ending may not have seen it
                self._forget_anchor(span)

    def _register_anchor(self, span: Span) -> None:
        """Remember a started agent or root span (see :meth:`_take_starts`), without the lock.

        Each step is one dict or set operation (atomic under the GIL). A trace dropped at the same
        moment by its last anchor ending (:meth:`_forget_anchor`) or by a sweep is detected after the
        insertion (the trace no longer maps to the dict written to) and the span registered again. Bounds:
        past ``_MAX_ANCHORS_PER_TRACE`` a trace's oldest anchor is dropped here; past
        ``max_anchor_traces`` traces, and every :data:`ANCHOR_SWEEP_EVERY` registrations for idleness,
        a sweep runs under the lock."""
        try:
            context: Any = span._context  # a started span has one
        except AttributeError:
            context = span.context
        trace_id, span_id = context.trace_id, context.span_id
        anchors_by_trace = self._anchors
        fresh = {span_id: span}
        anchors = anchors_by_trace.setdefault(trace_id, fresh)
        self._anchor_spans[span] = trace_id
        if anchors is fresh:  # a new trace (a root span): created with its anchor in it, nothing to re-check
            self._anchor_touched[trace_id] = _monotonic()
            over = len(anchors_by_trace) > self._max_anchor_traces  # only a new trace adds to the count
        else:
            self._add_to_trace(trace_id, span_id, span, anchors)
            over = False
        until_sweep = self._until_sweep - 1
        self._until_sweep = until_sweep
        if until_sweep <= 0 or over:
            self._until_sweep = ANCHOR_SWEEP_EVERY
            with self._lock:
                self._evict_anchors()

    def _add_to_trace(self, trace_id: int, span_id: int, span: Span, anchors: dict[int, Span]) -> None:
        """Register an agent span in a trace that already has anchors (see :meth:`_register_anchor`)."""
        anchors[span_id] = span
        anchors_by_trace = self._anchors
        if anchors_by_trace.get(trace_id) is not anchors:
            with self._lock:  # dropped meanwhile: register again
                anchors_by_trace.setdefault(trace_id, {})[span_id] = span
        touched = self._anchor_touched
        touched.pop(trace_id, None)  # re-inserted: the least recently touched stay in front
        touched[trace_id] = _monotonic()
        if len(anchors) > _MAX_ANCHORS_PER_TRACE:
            self._drop_oldest_anchor(anchors)

    def _drop_oldest_anchor(self, anchors: dict[int, Span]) -> None:
        """Drop one anchor of a trace past ``_MAX_ANCHORS_PER_TRACE``: the oldest that has ended (one
        whose forgetting waits behind queued successes, see :meth:`_forget_anchor`), else the oldest.
        An agent run of many sub-agents in turn keeps its root that way, however many of them ended
        while successes waited."""
        victim = None
        for span_id, anchor in list(anchors.items()):  # one C-level copy: other threads may change it
            if _ended(anchor):
                victim = span_id
                break
        if victim is None:
            try:
                victim = next(iter(anchors))
            except (StopIteration, RuntimeError):
                return
        span = anchors.pop(victim, None)
        if span is not None:
            self._anchor_spans.pop(span, None)
            if not _ended(span):
                self._note_evicted(1)

    def _live_anchor(self, trace_id: int, parent_id: int = 0) -> Span | None:
        """The innermost live agent span among the anchors of a span whose parent is ``parent_id`` (see
        :meth:`_anchors_of`), else the first of them, a live root span."""
        anchors = self._anchors_of(trace_id, parent_id)
        agents = (s for s in anchors if semconv.is_agent_span(_attributes_of(s)))
        return next(agents, anchors[0] if anchors else None)

    def _anchors_of(self, trace_id: int, parent_id: int = 0) -> list[Span]:
        """The live agent and root spans of a span in ``trace_id`` whose parent is ``parent_id``, innermost
        first (a copy): its own (see :func:`_lineage`) when its parent is one of them, else all of the
        trace's, newest first. Touches the trace (a failure's look-up)."""
        if self._starts:
            self._take_starts()
        anchors = self._anchors.get(trace_id)
        if not anchors:
            return []
        copied = dict(anchors)  # one C-level copy: registrations on other threads may change the original
        own = _lineage(copied, parent_id) if parent_id and len(copied) > 1 else None
        if own is not None:
            snapshot = own
        else:
            snapshot = list(copied.values())
            snapshot.reverse()
        for span in snapshot:  # an anchor is forgotten when it ends: an ended one here is rare
            try:
                ended = span._end_time  # the SDK's field: the public property is a Python call
            except AttributeError:
                ended = span.end_time
            if ended is not None:
                snapshot = [s for s in snapshot if s.end_time is None]
                break
        self._touch(trace_id)
        return snapshot

    def _touch(self, trace_id: int) -> None:
        """Mark the trace as used now (the least recently touched stay in front) and sweep when the
        front is due: over the bound, or idle too long. The due test reads without the lock; the sweep
        takes it."""
        touched = self._anchor_touched
        now = _monotonic()
        touched.pop(trace_id, None)
        touched[trace_id] = now
        if len(self._anchors) > self._max_anchor_traces or len(self._anchors) > len(touched):
            due = True
        else:
            try:
                due = now - touched[next(iter(touched))] > self._anchor_idle_s
            except (StopIteration, RuntimeError, KeyError):  # emptied or changed meanwhile: sweep to be sure
                due = True
        if due:
            with self._lock:
                self._evict_anchors()

    def _evict_anchors(self) -> None:
        """Forget the least recently touched traces beyond the bound, and those idle too long (call with
        the lock held). Amortised O(1): each trace is evicted once."""
        now = _monotonic()
        touched = self._anchor_touched
        anchors_by_trace = self._anchors
        if len(anchors_by_trace) > len(touched):  # a stamp lost to a race: never leave a trace unswept
            for trace_id in list(anchors_by_trace):
                touched.setdefault(trace_id, now)
        evicted = 0
        while touched:
            try:
                trace_id = next(iter(touched))
            except (StopIteration, RuntimeError):
                break
            idle = now - touched.get(trace_id, now)
            if len(anchors_by_trace) <= self._max_anchor_traces and idle <= self._anchor_idle_s:
                break
            touched.pop(trace_id, None)
            popped = anchors_by_trace.pop(trace_id, None)
            for span in list(popped.values()) if popped else ():
                self._anchor_spans.pop(span, None)
                if not _ended(span):  # an ended one was only waiting to be forgotten (see _forget_anchor)
                    evicted += 1
        if evicted:
            self._note_evicted(evicted)

    def _note_evicted(self, count: int) -> None:
        if self.evicted_anchors == 0:
            _log.warning(
                "otel-errcompact: forgetting agent/root spans that were never ended (bound: %d traces, "
                "%.0f s idle); escalation events for them go to the log only",
                self._max_anchor_traces,
                self._anchor_idle_s,
            )
        self.evicted_anchors += count

    def anchor_conversation(self, trace_id: int, parent_id: int = 0) -> str | None:
        """The conversation id recorded on the live agent or root spans of a span in ``trace_id`` whose
        parent is ``parent_id`` (its own, see :func:`_lineage`, when its parent is one of them; else the
        trace's), if any. Lock-free: every call through the tool boundary asks this."""
        if self._starts:
            self._take_starts()
        anchors = self._anchors.get(trace_id)
        if not anchors:
            return None
        copied = dict(anchors)  # one C-level copy: registrations on other threads may change the original
        own = _lineage(copied, parent_id) if parent_id and len(copied) > 1 else None
        return self._conversation_of(own if own is not None else reversed(copied.values()))

    @staticmethod
    def _conversation_of(anchors: Iterable[Span]) -> str | None:
        """The conversation id on the first live one of ``anchors`` (innermost first) that records one."""
        for span in anchors:
            if span.end_time is not None:
                continue
            try:
                attrs: Mapping[str, Any] = span._attributes._dict  # type: ignore[union-attr]
            except AttributeError:
                attrs = _attributes_of(span)
            found = _conversation_in(attrs)
            if found:
                return found
        return None

    def _anchor_facts(self, trace_id: int, parent_id: int) -> tuple[str | None, str | None, Span | None]:
        """The conversation id and the agent name a failed tool span whose parent is ``parent_id`` takes
        from its live anchors (see :meth:`_anchors_of`) when it records neither: the innermost anchor that
        records a conversation, and the innermost agent span's name; and the span an escalation goes on,
        that agent span, else the innermost anchor (as :meth:`_live_anchor` finds it). One pass, innermost
        first, over one copy of the anchors for all three; the look-up touches the trace (see
        :meth:`_touch`)."""
        conversation: str | None = None
        agent: str | None = None
        target: Span | None = None
        agent_seen = conversation_seen = False
        anchors = self._anchors_of(trace_id, parent_id)
        for span in anchors:
            try:
                attrs: Mapping[str, Any] = span._attributes._dict  # type: ignore[union-attr]
            except AttributeError:
                attrs = _attributes_of(span)
            # semconv.is_agent_span, agent_name and conversation_id (as _conversation_of reads it),
            # each answered without a call when the GenAI attribute holds it, as it usually does
            if not agent_seen and (attrs.get(_OPERATION) in _AGENT_OPERATIONS or semconv.is_agent_span(attrs)):
                agent, agent_seen, target = _first_text(attrs, _AGENT_NAME, semconv.agent_name), True, span
            if not conversation_seen:
                conversation = _first_text(attrs, _CONVERSATION_ID, semconv.conversation_id)
                conversation_seen = conversation is not None
            if agent_seen and conversation_seen:
                break
        return conversation, agent, target if agent_seen else (anchors[0] if anchors else None)

    def _forget_anchor(self, span: Span) -> None:
        """Drop an ending anchor span, without the lock; the trace goes with its last anchor. While
        successes wait in the history's queue, it is dropped in its turn after them (one append, see
        ``ErrorHistory.after_queued``): they are resolved against the anchors they ran under (see
        :meth:`_defer_success`). Until then the anchor stays registered, ended, and the look-ups for
        failures pass it by as they pass by any ended anchor (see :meth:`_anchors_of`)."""
        self.pipeline.history.after_queued(self._forget_now, span)

    def _forget_now(self, span: Span, notify: bool = True) -> None:
        """:meth:`_forget_anchor`, now (``notify``: the history's queue item signature, unused).

        The trace is popped first and its anchors checked after: a span registered into it meanwhile
        puts it back (see :meth:`_register_anchor`), so no live anchor is lost."""
        trace_id = self._anchor_spans.pop(span, None)
        if trace_id is None:  # evicted meanwhile
            return
        anchors_by_trace = self._anchors
        anchors = anchors_by_trace.get(trace_id)
        if anchors is None:
            return
        try:
            context: Any = span._context  # the SDK's field: the public property is a Python call
        except AttributeError:
            context = span.context
        anchors.pop(context.span_id, None)
        if anchors:
            return
        popped = anchors_by_trace.pop(trace_id, None)
        if popped:  # an anchor arrived meanwhile: put the trace back
            current = anchors_by_trace.setdefault(trace_id, popped)
            if current is not popped:
                current.update(popped)
        else:  # a stamp a concurrent registration just wrote may go too: the next sweep re-stamps it
            self._anchor_touched.pop(trace_id, None)

    def _escalated_in(self, pipeline: ErrorPipeline, escalation: Escalation, failure: Failure) -> None:
        """Escalation listener of ``pipeline``: its breaches become span events while this processor
        serves it, never once a later handle took the processor over (a shut-down handle's tool)."""
        if pipeline is self.pipeline:
            self._add_escalation_event(escalation, failure)

    def _add_escalation_event(self, escalation: Escalation, failure: Failure) -> None:
        if failure.trace_id is None:
            return
        trace_id = int(failure.trace_id, 16)
        self._halted.note(trace_id, escalation)
        self._slow = True  # after the note: see _ending_slow
        attributes: dict[str, str | int] = dict(escalation.to_attributes())
        if failure.tool_name:
            attributes[semconv.GEN_AI_TOOL_NAME] = tool_label(failure.tool_name)
        event = Event("errcompact.escalation", attributes)
        target = self._deferred_target(failure)
        if target is None:  # counted as the span ended (or its target was not found then): live anchors
            parent_id = int(failure.parent_span_id, 16) if failure.parent_span_id else 0
            anchor = self._live_anchor(trace_id, parent_id)
            if anchor is not None:
                _add_unless_ended(anchor, event)
            return
        if _add_unless_ended(target, event):
            return
        # Counted after its agent span ended (the agent's thread ended it before the digest thread came
        # to the failure): the SDK refuses a new event on an ended span, but this one is not exported yet,
        # as an export waits for the digests still to be made, this failure's among them (see
        # ExportGate), and its events are the list the exported copy reads.
        try:
            target._events.append(event)  # type: ignore[attr-defined]
        except Exception:
            _log.debug("otel-errcompact: could not add the escalation event", exc_info=True)

    def _deferred_target(self, failure: Failure) -> Span | None:
        """The span a deferred failure's escalation goes on, found when it was deferred (see
        :meth:`_process`); None for a failure counted as its span ended, or not found then."""
        pending = self._pending_digests
        if not pending or not failure.span_id:
            return None
        deferred = pending.get(int(failure.span_id, 16))
        if deferred is None:  # counted by another thread before the agent's thread noted it as pending
            return None
        target: Span | None = deferred.subject[1]
        return target


def _bound(marks: OrderedDict[int, Any], limit: int = _MAX_FAILED_PARENTS) -> None:
    """Drop the oldest of ``marks`` past ``limit``; safe without a lock: another thread dropping at the
    same time only makes the map a little shorter."""
    while len(marks) > limit:
        try:
            marks.popitem(last=False)
        except KeyError:
            return


def _add_unless_ended(span: Span, event: Event) -> bool:
    """Add ``event`` to ``span`` unless it has ended; True when added.

    The test and the append are one step under the span's own lock, as the SDK's ``add_event`` takes
    them, because the agent's thread may end the span while another thread (the digest thread) adds an
    escalation: tested first and added after, the event would meet an ended span, be dropped, and the
    SDK would log a warning into the host's logs."""
    try:
        lock, events = span._lock, span._events  # its BoundedList, which the SDK appends to
    except AttributeError:  # not the SDK's span: its public API, with the race it has
        if not span.is_recording():
            return False
        span.add_event(event.name, event.attributes)
        return True
    with lock:
        if span._end_time is not None:
            return False
        events.append(event)  # type: ignore[attr-defined]
    return True


_NOT_FAILURES = frozenset(
    # RunHalted: the Agents SDK bridge's ErrorBudgetExceeded (otel_errcompact.integrations.openai_agents)
    {"ErrorBudgetExceeded", "RunHalted", "CancelledError", "KeyboardInterrupt", "GeneratorExit"}
)
_HALT_TYPE = f"{ErrorBudgetExceeded.__module__}.{ErrorBudgetExceeded.__qualname__}"


def _not_a_tool_failure(exception: tuple[str | None, str | None, str | None] | None, attrs: Mapping[str, Any]) -> bool:
    """The library's own halt, and cancellations, end a tool span with an exception but are not tool
    failures: counting them would record the halt as the failure it reports (pointing at history.py)."""
    return _names_no_failure(attrs.get(_ERROR_TYPE)) or _names_no_failure(exception[0] if exception else None)


_FRAMEWORK_CANCELLED = "Tool execution cancelled"
"""How the OpenAI Agents SDK ends the span of a function tool whose own task was cancelled: the span's error
message, which OpenInference's instrumentation makes the status description (``Tool execution cancelled:
{…}``), with no exception event. A call its run cancelled (a sibling's fatal error, the host cancelling the
run) ends OK with no output, as a tool that returns ``None`` does: nothing tells that one apart, and it
counts as a success. LangChain's tools report neither end nor error on a cancellation, so OpenInference
never ends their spans; spans made with OpenTelemetry's context managers record the ``CancelledError``."""


def _cancelled_by_framework(span: ReadableSpan) -> bool:
    """True for a failed tool span that a framework ended for a cancellation (see
    :data:`_FRAMEWORK_CANCELLED`): neither a failure nor a success, as the tool boundary's cancelled calls."""
    description = span.status.description
    return description is not None and description.startswith(_FRAMEWORK_CANCELLED)


def _names_no_failure(type_name: object) -> bool:
    """True when ``type_name``'s last dotted part is one of ``_NOT_FAILURES``. A name without a dot (most
    are) is looked up as it is, without splitting it (a tuple and two strings, under the processor's lock,
    for every failed span)."""
    if not type_name:
        return False
    name = str(type_name)
    return (name.rpartition(".")[2] if "." in name else name) in _NOT_FAILURES


def span_annotations(outcome: Outcome) -> dict[str, str | int]:
    """The ``errcompact.*`` attributes a handled failed span carries; ``errcompact.key`` also tells every
    processor that the failure was counted already."""
    return {
        "errcompact.digest": outcome.digest.line,
        "errcompact.key": outcome.digest.key,
        "errcompact.count": outcome.observation.count,
    }


def _annotate(span: Span, values: Mapping[str, str | int]) -> None:
    """Set attributes on a span inside ``_on_ending``.

    The SDK (1.45) freezes a span's attributes just before calling ``_on_ending``, so the public
    ``set_attribute`` refuses. When the span's limits leave nothing to truncate or drop, the values go
    into the attributes' dict under their own lock (one update, not three validated writes); otherwise
    the frozen flag is lifted for these few keys under the span's lock and the SDK's writes apply the
    limits. If the SDK's internals differ, the annotation is skipped: the digest is still in the
    trajectory record and the history.
    """
    try:
        attributes: Any = span._attributes
        plain = attributes._dict
        maxlen = attributes.maxlen
        if attributes.max_value_len is None and (maxlen is None or len(plain) + len(values) <= maxlen):
            # Nothing to clean or drop (the values are short strings and ints under new keys, see
            # _process): written under the attributes' own lock, as BoundedAttributes writes them.
            with attributes._lock:
                plain.update(values)
            return
        lock: Any = span._lock
        with lock:
            frozen = attributes._immutable
            attributes._immutable = False
            try:
                for key, value in values.items():
                    attributes[key] = value
            finally:
                attributes._immutable = frozen
    except Exception:
        _log.debug("otel-errcompact: could not annotate span", exc_info=True)


_RELEASED: list[ErrorPipeline] = []


def _released_pipeline() -> ErrorPipeline:
    """An empty pipeline that shut-down processors hold instead of their handle's (never fed: they
    ignore every span)."""
    if not _RELEASED:
        _RELEASED.append(ErrorPipeline(ErrorHistory(Thresholds(), Limits()), None))
    return _RELEASED[0]


def attach_span_processor(
    provider: TracerProvider,
    pipeline: ErrorPipeline,
    *,
    predicate: SpanPredicate | None = None,
    capture_arguments: bool = True,
) -> ErrorCompactionProcessor:
    """The span processor for ``pipeline`` on ``provider``: the one an earlier ``init()`` left there shut
    down, reopened (see :meth:`ErrorCompactionProcessor.reopen`), else a new one, fused with the
    provider's ``BatchSpanProcessor`` where it has one (see :mod:`otel_errcompact.fused`), else added."""
    active = getattr(provider, "_active_span_processor", None)
    for entry in getattr(active, "_span_processors", ()):
        for processor in unfused(entry):
            if type(processor) is ErrorCompactionProcessor and processor.closed:
                processor.reopen(pipeline, predicate=predicate, capture_arguments=capture_arguments)
                return processor
    processor = ErrorCompactionProcessor(pipeline, predicate=predicate, capture_arguments=capture_arguments)
    if not fuse(provider, processor):
        provider.add_span_processor(processor)
    return processor


def attach_exception_logs(provider: LoggerProvider, span_processor: ErrorCompactionProcessor) -> None:
    """Hand the exceptions ``provider`` records as log records to ``span_processor``: through the
    :class:`ExceptionLogProcessor` an earlier ``init()`` left on it (a log record processor cannot be
    removed either), else a new one."""
    multi = getattr(provider, "_multi_log_record_processor", None)
    for processor in getattr(multi, "_log_record_processors", ()):
        if type(processor) is ExceptionLogProcessor and (
            processor.span_processor is span_processor or processor.span_processor.closed
        ):
            processor.span_processor = span_processor
            return
    provider.add_log_record_processor(ExceptionLogProcessor(span_processor))


class ExceptionLogProcessor(LogRecordProcessor):
    """Picks up exceptions recorded as log records and hands them to the span processor by span id."""

    def __init__(self, span_processor: ErrorCompactionProcessor) -> None:
        self.span_processor = span_processor

    def on_emit(self, log_record: ReadWriteLogRecord) -> None:
        spans = self.span_processor
        if spans.closed:
            return
        try:
            record = log_record.log_record
            event_name = getattr(record, "event_name", None)
            if event_name and event_name.startswith("errcompact."):
                return  # our own trajectory and escalation events
            exception = semconv.exception_from_attributes(record.attributes or {})
            if exception is not None and record.span_id:
                spans.hold_exception(record.span_id, exception)
        except Exception:
            _log.exception("otel-errcompact: on_emit failed")

    def shutdown(self) -> None:
        return None

    def force_flush(self, timeout_millis: int = 30000) -> bool:
        return True
