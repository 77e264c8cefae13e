"""The tool boundary: a tool returns its result or a compact error, never a raw traceback.

For agents that are not instrumented yet. Wrapping a tool (sync or async) opens an
``execute_tool {name}`` span with the GenAI attributes, records an exception with its full stack trace,
sets status ERROR and ``error.type`` — also when the tool *returns* an error as data (MCP's ``isError``,
``error.type = tool_error``) — and hands the agent a :class:`ToolErrorText` (a ``str``: the digest line)
instead of the exception. When the scope has breached its thresholds with the ``halt`` action, the next
call raises :class:`~otel_errcompact.exceptions.ErrorBudgetExceeded` instead of running the tool.

What leaves the process is redacted (:func:`otel_errcompact.redact.redact`): the span's status
description and its ``exception`` event, and the tool's arguments, which are put on the span only when
argument capture is on. The trajectory record gets the unredacted text. Hostile values cannot break the
contract: an exception whose ``__str__`` raises, arguments whose ``__repr__`` raises or that are not
JSON-serialisable or are recursive still give the tool's result or a compact error.

Recovery at this boundary (decorator form, :mod:`otel_errcompact.recovery`): transient failures are
retried (``retry=``, one retry by default, tenacity backoff with jitter, retry-after honoured; each retry is
an ``errcompact.retry`` span event); a circuit breaker keyed by (tool, dedup key) refuses calls that keep
failing the same way (the model gets ``circuit open: <digest> (×3); retry after 30s``); async tools run as
tasks that ``abort(scope)`` and a halt can cancel, unless declared ``mutating=True``. A cancelled or
refused call is recorded (trajectory, span event) but is not a tool failure; a refused call's span still
ends with status ERROR and ``error.type`` ``circuit_open``, since the agent got an error for it.
"""

from __future__ import annotations

import asyncio
import contextvars
import functools
import inspect
import json
import logging
import threading
import traceback
import types
from collections import OrderedDict
from collections.abc import Awaitable, Callable, Iterator, Mapping
from contextlib import AbstractContextManager, contextmanager
from typing import Any, Literal, NamedTuple, ParamSpec, Protocol, TypeVar, get_args, overload

import tenacity
from opentelemetry import trace
from opentelemetry.sdk.trace import Span as SdkSpan
from opentelemetry.trace import SpanKind, Status, StatusCode

from otel_errcompact import semconv
from otel_errcompact._contextvars import reset_quietly
from otel_errcompact._forked import new_locks_in_child
from otel_errcompact._sampled import note_span
from otel_errcompact.classify import is_retryable
from otel_errcompact.config_check import wrong_argument
from otel_errcompact.digest import DedupKey, Digest, line_parts
from otel_errcompact.exceptions import ConfigurationError, ErrorBudgetExceeded
from otel_errcompact.history import ErrorHistory
from otel_errcompact.pipeline import ErrorPipeline, Failure, Outcome
from otel_errcompact.processor import ErrorCompactionProcessor, span_annotations
from otel_errcompact.recovery.abort import AbortRegistry, owner_cancelled
from otel_errcompact.recovery.breaker import CircuitBreakers, ScopeTrips, circuit_open_text, fingerprint
from otel_errcompact.recovery.classify import RETRY_AFTER_ATTRIBUTE, classify_exception, classify_text
from otel_errcompact.recovery.retry import NO_RETRY, RetryPolicy
from otel_errcompact.recovery.state import Admission, off_loop, off_loop_later
from otel_errcompact.redact import redact
from otel_errcompact.sinks.otlp import cap_text
from otel_errcompact.statuscode import code_attributes
from otel_errcompact.trajectory import TrajectoryRecord, escape_surrogates

__all__ = ["ToolBoundary", "ToolCall", "ToolErrorText", "check_options", "conversation", "current_conversation"]

_log = logging.getLogger("otel_errcompact")
_MAX_SPAN_TEXT = 65_536
"""Characters of an exception's message and stack trace written on the span (head and tail kept): what
leaves the process is bounded and redacted in bounded time; the trajectory record keeps the whole text."""
_UNDESCRIBED: Mapping[str, str] = {}
"""What a tool call run as a block (``ec.tool_call``) knows of its tool: nothing beyond its name."""

P = ParamSpec("P")
R = TypeVar("R")
OnError = Literal["digest", "raise"]

_conversation: contextvars.ContextVar[str | None] = contextvars.ContextVar(
    "otel_errcompact_conversation", default=None
)
_current_call: contextvars.ContextVar[ToolCall | None] = contextvars.ContextVar(
    "otel_errcompact_current_call", default=None
)
"""The tool call running here, so that a tool call made inside it (a tool that calls another wrapped
tool) can tell it which exception it counted already."""


@contextmanager
def conversation(conversation_id: str) -> Iterator[str]:
    """Run a block as part of one conversation: tool calls inside it share a history scope, and their
    spans carry ``gen_ai.conversation.id``.

    >>> with conversation("conv-1"):
    ...     current_conversation()
    'conv-1'
    """
    token = _conversation.set(conversation_id)
    try:
        yield conversation_id
    finally:
        reset_quietly(_conversation, token)


def current_conversation() -> str | None:
    """The conversation set by :func:`conversation` for the current thread or task, if any."""
    return _conversation.get()


class ToolErrorText(str):
    """What a wrapped tool returns instead of raising: the digest line, as a plain string for the model.

    ``digest``, ``record_id`` (the trajectory record with the full raw error) and ``escalated`` are
    available to code that wants more than the text.
    """

    outcome: Outcome | None
    escalated: bool
    cancelled: bool
    circuit_open: bool

    def __new__(
        cls,
        text: str,
        outcome: Outcome | None = None,
        *,
        cancelled: bool = False,
        circuit_open: bool = False,
        escalated: bool = False,
    ) -> ToolErrorText:
        self = super().__new__(cls, text)
        self.outcome = outcome
        # A refused call has no outcome of its own, but counts in the history and may breach a threshold.
        self.escalated = escalated or bool(outcome is not None and outcome.observation.escalation is not None)
        self.cancelled = cancelled
        self.circuit_open = circuit_open
        return self

    @property
    def record_id(self) -> str | None:
        return self.outcome.record_id if self.outcome is not None else None


ErrorOf = Callable[[Any], "str | None"]
"""``@ec.tool(error_of=...)``: the error text a tool's result reports, or None when the result is a success."""


def _error_text_of(result: Any, error_of: ErrorOf | None = None) -> str | None:
    """The error text of a tool result that reports failure as data (MCP ``isError``, else what the tool's
    ``error_of`` finds in it), else None (also when the result, or ``error_of``, fails to answer)."""
    try:
        text = _data_error_text(result)
        if text is None and error_of is not None:
            found = error_of(result)
            text = None if found is None else (str(found) or "tool reported an error with no text")
        return text
    except Exception:
        _log.debug("otel-errcompact: could not inspect a tool result", exc_info=True)
        return None


def _data_error_text(result: Any) -> str | None:
    is_error = result.get("isError") if isinstance(result, Mapping) else getattr(result, "isError", None)
    if is_error is not True:
        return None
    content = result.get("content") if isinstance(result, Mapping) else getattr(result, "content", None)
    parts: list[str] = []
    for item in content or ():
        text = item.get("text") if isinstance(item, Mapping) else getattr(item, "text", None)
        if text:
            parts.append(str(text))
    return "\n".join(parts) or "tool reported an error (isError) with no text"


class ToolDecorator(Protocol):
    """What ``@ec.tool(name=...)`` returns: a decorator that keeps the tool's signature and adds
    :class:`ToolErrorText` to its return type."""

    def __call__(self, fn: Callable[P, R], /) -> Callable[P, R | ToolErrorText]: ...


RetrySpec = RetryPolicy | int | None
"""``retry=``: a :class:`RetryPolicy`, a number of attempts (``1`` = no retry), or None for the default."""


class ToolCall:
    """One call through the boundary, as seen inside ``with boundary.call(...) as call``.

    After the block: ``call.error`` is the :class:`ToolErrorText` when the tool failed (the exception is
    suppressed unless ``on_error="raise"``), else ``None``. ``call.fail(text)`` marks a failure that was
    returned as data.
    """

    def __init__(self, span: trace.Span, arguments: str | None = None) -> None:
        self.span = span
        self.error: ToolErrorText | None = None
        self._data_error: str | None = None
        self._scope: str | None = None  # the call's history scope, taken before its span started
        self._raised_inside: list[tuple[BaseException, ToolErrorText]] = []
        """The exceptions a tool call made inside this one counted and raised (``on_error="raise"``),
        with what it made of them: such an exception leaving this call too is the same failure."""
        self.handed_back: ToolErrorText | None = None
        """The failure the latest wrapped tool called inside this call handed back as its result instead of
        raising (``on_error="digest"``), counted already: a framework bridge tells by it that the result
        its framework made of that text is a failure (see :func:`_handing_back`)."""
        self._arguments = arguments  # unredacted, for the trajectory record only
        self.model_text: Callable[[BaseException], str] | None = None
        """Set by a framework bridge: the text its framework would have given the agent for an exception
        (the basis of the token-savings metrics, ``Failure.model_text``)."""

    def fail(self, text: str) -> None:
        """Report that the tool failed without raising (its result carries the error)."""
        self._data_error = text


class ToolBoundary:
    """Wraps tools so they return results or compact errors; one per :func:`otel_errcompact.init` handle."""

    def __init__(
        self,
        pipeline: ErrorPipeline,
        tracer: trace.Tracer,
        processor: ErrorCompactionProcessor | None,
        *,
        on_error: OnError = "digest",
        capture_arguments: bool = False,
        breakers: CircuitBreakers | None = None,
        aborts: AbortRegistry | None = None,
        retry: RetryPolicy | None = None,
    ) -> None:
        self._pipeline = pipeline
        self._tracer = tracer
        self._span_processor = processor
        self._on_error = on_error
        self._capture_arguments = capture_arguments
        self.breakers = breakers
        self._trips = ScopeTrips()  # the calls of each conversation that ran into a breaker
        self._digests: dict[str, Digest] = {}  # dedup key -> latest digest, for refused calls' history
        self._raised: OrderedDict[str, ToolErrorText] = OrderedDict()  # record id -> a raised failure's text
        self._digests_lock = threading.Lock()  # also guards _raised
        new_locks_in_child(self, "_digests_lock")
        self.aborts = aborts or AbortRegistry()
        self.retry = retry or RetryPolicy()

    @property
    def history(self) -> ErrorHistory:
        return self._pipeline.history

    @property
    def _processor(self) -> ErrorCompactionProcessor | None:
        """The span processor, while it serves this boundary's pipeline. A shut-down processor lets go
        of it (and a later ``init()`` on the provider takes the processor over): the calls of a shut-down
        handle's tools then go to their own pipeline directly, never to another handle's."""
        processor = self._span_processor
        return processor if processor is not None and processor.pipeline is self._pipeline else None

    # -- scope ---------------------------------------------------------------------------------------

    def current_scope(self) -> str:
        """The history scope a tool call made here and now would be counted in."""
        conversation_id = current_conversation()
        span_context = trace.get_current_span().get_span_context()
        in_trace = span_context.is_valid
        if conversation_id is None and in_trace:
            current = trace.get_current_span()
            attrs = getattr(current, "attributes", None) or {}
            conversation_id = semconv.conversation_id(attrs)
            if conversation_id is None and self._processor is not None:
                # the current span is the parent of a tool span started here: its own agent's conversation
                conversation_id = self._processor.anchor_conversation(span_context.trace_id, span_context.span_id)
        return semconv.scope_for(conversation_id, span_context.trace_id, in_trace)

    def check(self, scope: str | None = None) -> None:
        """Raise ErrorBudgetExceeded when the scope has a standing breach with the halt action."""
        self.history.check(scope if scope is not None else self.current_scope())

    # -- the context-manager form ----------------------------------------------------------------------

    def call(
        self,
        name: str,
        *,
        call_id: str | None = None,
        arguments: Any = None,
        on_error: OnError | None = None,
    ) -> AbstractContextManager[ToolCall]:
        """Run a block as one tool call (see :class:`ToolCall`)."""
        check_options(name=name, on_error=on_error)
        arguments_json = _as_json(arguments) if arguments is not None and self._capture_arguments else None
        return self._call(name, call_id, arguments_json, on_error)

    @contextmanager
    def _call(
        self,
        name: str,
        call_id: str | None,
        arguments_json: str | None,
        on_error: OnError | None,
        described: Mapping[str, str] = _UNDESCRIBED,
    ) -> Iterator[ToolCall]:
        """:meth:`call`, with the arguments already JSON (cut for the span and the record), or None, and
        what the decorator knows of the tool (:func:`_described`).

        The call's scope is taken before its span starts: inside it, the call's own span would be the
        current one, and every call of a trace the sampler left out (whose span the boundary counts
        itself) would count in a scope of its own, its trace's, instead of its conversation's."""
        scope = self.current_scope()
        self.check(scope)
        with self._tool_span(name, call_id, arguments_json, described) as span:
            call = ToolCall(span, arguments_json)
            call._scope = scope
            enclosing, token = _current_call.get(), _current_call.set(call)
            try:
                yield call
            except BaseException as exc:
                if self._ended(call, name, call_id, on_error, enclosing, token, exc):
                    return
                raise
            self._ended(call, name, call_id, on_error, enclosing, token, None)

    def _ended(
        self,
        call: ToolCall,
        name: str,
        call_id: str | None,
        on_error: OnError | None,
        enclosing: ToolCall | None,
        token: contextvars.Token[ToolCall | None],
        exc: BaseException | None,
    ) -> bool:
        """How a call ended, for :meth:`_call` and :class:`_AsyncCall` alike; the call stops being the
        current one. A return is settled (:meth:`_returned`); a tool's exception is recorded and counted
        (:meth:`_raised_in`) and swallowed, the agent getting the digest, unless ``on_error="raise"``; a
        cancellation or an interrupt (``CancelledError``, ``KeyboardInterrupt``, ``GeneratorExit``) is
        marked; a halt passes. True when the exception is swallowed."""
        scope = call._scope or self.current_scope()
        if exc is None:
            reset_quietly(_current_call, token)
            self._returned(call, name, call_id, scope)
            return False
        try:
            if isinstance(exc, ErrorBudgetExceeded):
                return False
            if not isinstance(exc, Exception):
                _mark_interrupted(call.span, name)
                return False
            call.error = error = self._raised_in(call, name, call_id, scope, exc)
            if (on_error or self._on_error) == "raise":
                self._raising_on(enclosing, exc, error)
                return False
            return True
        finally:
            reset_quietly(_current_call, token)

    def _call_async(
        self,
        name: str,
        arguments_json: str | None,
        on_error: OnError | None,
        pending: _Pending,
        described: Mapping[str, str] = _UNDESCRIBED,
    ) -> _AsyncCall:
        """:meth:`_call` for an async tool (``async with``): the breaker's verdict on the call
        (``pending.owed``) is given to the store off the event loop, while the tool span is still live
        (its state changes are events on it)."""
        return _AsyncCall(self, name, arguments_json, on_error, pending, described)

    def _tool_span(
        self, name: str, call_id: str | None, arguments_json: str | None, described: Mapping[str, str]
    ) -> AbstractContextManager[trace.Span]:
        """The ``execute_tool`` span of a call, current while the call runs."""
        attributes = self._attrs(name, described)
        if call_id:
            attributes[semconv.GEN_AI_TOOL_CALL_ID] = call_id
        if arguments_json is not None:
            attributes[semconv.GEN_AI_TOOL_CALL_ARGUMENTS] = _span_text(arguments_json)
        return self._tracer.start_as_current_span(
            f"execute_tool {name}",
            kind=SpanKind.INTERNAL,
            attributes=attributes,
            record_exception=False,
            set_status_on_exception=False,
        )

    def _raised_in(
        self, call: ToolCall, name: str, call_id: str | None, scope: str, exc: Exception
    ) -> ToolErrorText:
        """The tool raised ``exc``: record it on its span and in the pipeline (unless a wrapped tool this
        one called counted it already); the compact error."""
        span = call.span
        counted = _counted_inside(call, exc)
        if counted is not None:  # raised by a wrapped tool this one called: that call counted it
            return self._failed_again(span, exc, counted)
        try:
            if (wait := classify_exception(exc).retry_after_s) is not None:  # the response headers
                span.set_attribute(RETRY_AFTER_ATTRIBUTE, wait)
        except Exception:
            _log.debug("otel-errcompact: could not read a retry-after from the exception", exc_info=True)
        return self._failed_with(span, name, call_id, exc, call._arguments, scope, model_text=_model_text(call, exc))

    def _raising_on(self, enclosing: ToolCall | None, exc: BaseException, text: ToolErrorText) -> None:
        """A counted failure raised on (``on_error="raise"``): the wrapped call around this one, or a
        framework's failure handler (:meth:`raised_by_tool`), learns that it was counted."""
        if enclosing is not None:
            enclosing._raised_inside.append((exc, text))
        else:
            self._raised_on(exc, text)

    def _returned(self, call: ToolCall, name: str, call_id: str | None, scope: str) -> None:
        """The tool returned: a failure it reported as data is recorded, else an unread success counted."""
        span = call.span
        if call._data_error is not None:
            text = _safe_str(call._data_error)
            try:
                # Bounded like an exception's: the whole text is in the trajectory record.
                span.set_status(Status(StatusCode.ERROR, _span_text(text, 1024)))
                span.set_attribute(semconv.ERROR_TYPE, "tool_error")
            except Exception:
                _log.debug("otel-errcompact: could not mark the tool span failed", exc_info=True)
            call.error = self._failed(
                span, name, call_id, text, exc_type="tool_error",
                unredacted={"raw_error": text, "status_description": text}, arguments=call._arguments,
                scope=scope,
            )
        elif self._reader_of(span) is None:
            self._succeeded_unread(scope, name)

    def raised_by_tool(self, exc: BaseException) -> ToolErrorText | None:
        """What a wrapped tool made of ``exc`` when it counted it and raised it on (``on_error="raise"``),
        taken once; else None. For a framework's failure handler that is given the exception after the
        tool's call has ended (the Agents SDK's ``failure_error_function``): the failure is counted once."""
        try:
            record_id = vars(exc).pop(_RAISED, None)
        except Exception:  # an exception without a __dict__ of its own to read
            return None
        if type(record_id) is not str:
            return None
        with self._digests_lock:
            return self._raised.pop(record_id, None)

    def _raised_on(self, exc: BaseException, text: ToolErrorText | None) -> None:
        """Mark an exception a call counted and raises on, for :meth:`raised_by_tool`. The exception
        carries the failure's record id only (a string: it stays picklable); the text stays here, the
        last :data:`_MAX_RAISED` of them."""
        record_id = text.record_id if text is not None else None
        if record_id is None:
            return
        try:
            vars(exc)[_RAISED] = record_id
        except Exception:
            return
        with self._digests_lock:
            self._raised[record_id] = text  # type: ignore[assignment]  # not None: it has a record id
            while len(self._raised) > _MAX_RAISED:
                self._raised.popitem(last=False)

    # -- the decorator form ------------------------------------------------------------------------------

    @overload
    def tool(self, func: Callable[P, R], /) -> Callable[P, R | ToolErrorText]: ...

    @overload
    def tool(
        self,
        /,
        *,
        name: str | None = None,
        on_error: OnError | None = None,
        retry: RetrySpec = None,
        mutating: bool = False,
        error_of: ErrorOf | None = None,
        description: str | None = None,
    ) -> ToolDecorator: ...

    def tool(
        self,
        func: Callable[..., Any] | None = None,
        /,
        *,
        name: str | None = None,
        on_error: OnError | None = None,
        retry: RetrySpec = None,
        mutating: bool = False,
        error_of: ErrorOf | None = None,
        description: str | None = None,
    ) -> Any:
        """Decorate a sync or async tool function. ``@ec.tool`` or ``@ec.tool(name="search")``.

        A generator function (sync or async) is run to its end inside the boundary, and the call returns
        its items as a list: were the generator handed back, it would fail while its caller iterates it,
        past the boundary, and the raw exception would reach the agent uncounted.

        ``retry``: a :class:`~otel_errcompact.recovery.retry.RetryPolicy` or a number of attempts (default:
        the boundary's policy, one retry of transient failures). ``mutating=True``: the tool changes the
        world (writes, sends, pays): an abort lets it finish instead of cancelling it.

        A framework's tool decorator goes over this one (``@tool`` over ``@ec.tool``,
        ``function_tool(ec.tool(fn))``): the framework's tool object is not callable, and wrapping it raises
        ``TypeError``.

        ``error_of(result)``: for a tool that reports its failures in what it returns instead of raising (a
        code runner that returns the traceback it caught, a shell tool's non-zero exit with its stderr), the
        error text the result carries, or None for a success. Such a result fails the call as a raised
        exception does: it is recorded, counted, and the agent gets the digest instead of the raw text. MCP's
        ``isError`` results are recognised without it. An ``error_of`` that raises is taken as a success.

        The tool's span carries ``gen_ai.tool.type`` ``function`` and ``gen_ai.tool.description``:
        ``description``, else the first line of the function's docstring (none without either).
        """
        check_options(name=name, on_error=on_error, retry=retry, error_of=error_of, description=description)
        policy = self.retry if retry is None else (retry if isinstance(retry, RetryPolicy) else _attempts(retry))

        def decorate(fn: Callable[P, Any]) -> Callable[P, Any]:
            _check_callable(fn)
            original, tool_name = fn, name or _name_of(fn)
            described = _described(fn, description)
            method = _defined_in_class(fn)
            fn = _collected(fn)
            if _is_a(inspect.iscoroutinefunction, fn):  # an async function, or an object whose __call__ is one

                @functools.wraps(fn)
                async def async_wrapper(*args: P.args, **kwargs: P.kwargs) -> Any:
                    enclosing = _current_call.get()
                    read_from, given = _unbound(fn, args, async_wrapper) if method else (fn, args)
                    started = await self._start_async(self._begin(tool_name, read_from, given, kwargs, described))
                    if isinstance(started, ToolErrorText):
                        return _handing_back(enclosing, started)
                    arguments, arguments_json, scope, pending = started
                    token = _pending.set(pending)
                    try:
                        async with self._call_async(tool_name, arguments_json, on_error, pending, described) as call:
                            self._admitted(pending)
                            inner = asyncio.ensure_future(_retried_async(policy, call.span, fn, args, kwargs))
                            try:
                                with self.aborts.track(scope, inner, "tool", mutating=mutating):
                                    result = await inner
                            except asyncio.CancelledError:
                                reason = self._cancel_reason(scope)
                                if reason is None or not inner.cancelled() or owner_cancelled():
                                    raise  # the host cancelled this task: not ours to swallow
                                cancelled = self._cancelled(call.span, tool_name, scope, arguments, reason)
                                return _handing_back(enclosing, cancelled)
                            self._settle(call, pending, result, error_of)
                    finally:
                        reset_quietly(_pending, token)
                        await self._release_async(pending)
                    return _handing_back(enclosing, call.error) if call.error is not None else result

                async_wrapper.__errcompact_mutating__ = mutating  # type: ignore[attr-defined]
                _describe(async_wrapper, original)
                return async_wrapper

            @functools.wraps(fn)
            def wrapper(*args: P.args, **kwargs: P.kwargs) -> Any:
                enclosing = _current_call.get()
                read_from, given = _unbound(fn, args, wrapper) if method else (fn, args)
                started = self._start(self._begin(tool_name, read_from, given, kwargs, described))
                if isinstance(started, ToolErrorText):
                    return _handing_back(enclosing, started)
                _, arguments_json, _, pending = started
                token = _pending.set(pending)
                try:
                    with self._call(tool_name, None, arguments_json, on_error, described) as call:
                        self._admitted(pending)
                        result = policy.retrying(before_sleep=_note_retry(call.span))(fn, *args, **kwargs)
                        self._settle(call, pending, result, error_of)
                finally:
                    self._finish(pending, token)
                return _handing_back(enclosing, call.error) if call.error is not None else result

            wrapper.__errcompact_mutating__ = mutating  # type: ignore[attr-defined]
            _describe(wrapper, original)
            return wrapper

        return decorate(func) if func is not None else decorate

    # -- the parts the sync and async wrappers share ----------------------------------------------------
    # The wrappers differ only in how they run the tool (an awaited, cancellable task or a plain call);
    # what comes before and after is here. The ``with self._call(...)`` (``async with self._call_async``)
    # stays in each wrapper, not in a shared context manager: a generator between the tool and ``call``
    # would add its frame to the traceback recorded for every failure.

    def _start(self, begun: _Begun | ToolErrorText) -> tuple[dict[str, Any], str | None, str, _Pending] | ToolErrorText:
        """Before a decorated call (see :meth:`_begin`): its arguments, as JSON for the span and the record
        (cut; None when arguments are not captured), its scope and the breaker verdict still owed, or the
        text of a refused call (an abort standing or the breaker open)."""
        if isinstance(begun, ToolErrorText):
            return begun
        return self._admit(begun, self._admission(begun.tool, begun.fp))

    async def _start_async(
        self, begun: _Begun | ToolErrorText
    ) -> tuple[dict[str, Any], str | None, str, _Pending] | ToolErrorText:
        """:meth:`_start` for an async tool: the breaker's admission is asked off the event loop, and
        what the call owes the breaker afterwards is paid there too (see :meth:`_call_async`)."""
        if isinstance(begun, ToolErrorText):
            return begun
        started = self._admit(begun, await self._admission_async(begun.tool, begun.fp))
        if not isinstance(started, ToolErrorText):
            started[3].owed = []
        return started

    def _begin(
        self,
        tool_name: str,
        fn: Callable[..., Any],
        args: tuple[Any, ...],
        kwargs: dict[str, Any],
        described: Mapping[str, str],
    ) -> _Begun | ToolErrorText:
        """A call's arguments (as given, and whole as JSON), fingerprint and scope; or the text of a call
        refused before the breaker is asked (an abort standing). Raises ErrorBudgetExceeded on a halt.
        The arguments are encoded once: whole for the breaker's fingerprint, cut later for the span."""
        arguments = _arguments(fn, args, kwargs)
        whole = _as_json(arguments, None)
        fp, scope = fingerprint(whole), self.current_scope()
        self.check(scope)
        reason = self.aborts.aborted(scope)
        if reason is not None:
            attributes = self._attrs(tool_name, described)
            with self._tracer.start_as_current_span(f"execute_tool {tool_name}", attributes=attributes) as span:
                return self._cancelled(span, tool_name, scope, arguments, reason)
        return _Begun(tool_name, arguments, whole, fp, scope, described)

    def _admit(
        self, begun: _Begun, admission: Admission | None
    ) -> tuple[dict[str, Any], str | None, str, _Pending] | ToolErrorText:
        """The call as the breaker admitted it, or the text of its refusal by an open breaker."""
        if admission is not None and not admission.allowed:
            return self._refuse(begun, admission)
        arguments_json = begun.whole[:_MAX_ARGUMENT_CHARS] if self._capture_arguments else None
        return begun.arguments, arguments_json, begun.scope, _Pending(begun.tool, begun.fp, admission)

    def _settle(self, call: ToolCall, pending: _Pending, result: Any, error_of: ErrorOf | None = None) -> None:
        """After the tool returned: an error reported as data fails the call, anything else is a success."""
        if (text := _error_text_of(result, error_of)) is not None:
            call.fail(text)
        else:
            self._succeeded(pending)

    def _finish(self, pending: _Pending, token: contextvars.Token[_Pending | None]) -> None:
        """However the call ended: the pending verdict leaves the context, and an unsettled probe goes back."""
        reset_quietly(_pending, token)
        self._release(pending)

    # -- recovery: breaker, abort, cancellation ----------------------------------------------------------

    def _admission(self, name: str, fp: str) -> Admission | None:
        """The breaker's admission of a call (None without breakers): a round trip to a shared store."""
        return self.breakers.admit(name, fp, notify=False) if self.breakers is not None else None

    async def _admission_async(self, name: str, fp: str) -> Admission | None:
        """:meth:`_admission` off the event loop. When the host cancels the waiting task, a probe the store
        handed out meanwhile is given back (else it stood until its lease ran out, refusing the others)."""
        if self.breakers is None or not self.breakers.blocking:
            return self._admission(name, fp)
        asked = asyncio.ensure_future(off_loop(self._admission, name, fp))
        try:
            return await asyncio.shield(asked)
        except asyncio.CancelledError:
            asked.add_done_callback(self._give_back)
            raise

    def _give_back(self, asked: asyncio.Future[Admission | None]) -> None:
        """A probe handed to a call that was cancelled while it waited for it goes back, off the loop."""
        try:
            admission = None if asked.cancelled() or asked.exception() is not None else asked.result()
            if self.breakers is not None and admission is not None and admission.probe:
                off_loop_later(self.breakers.release, admission)
        except Exception:
            _log.debug("otel-errcompact: could not give back a probe", exc_info=True)

    async def _off_loop(self, operation: Callable[[_Pending], None], pending: _Pending) -> None:
        """Run a breaker operation of an async tool's call on one of the library's threads when the store
        waits on I/O (a shared store: a round trip, or up to its timeout while it is down), so the host's
        event loop runs its other tasks meanwhile; in line for the in-process store. The thread runs in a
        copy of the context: the tool span is the current span there, and gets the breaker's events."""
        if self.breakers is None or not self.breakers.blocking:
            operation(pending)
        else:
            await off_loop(operation, pending)

    def _refuse(self, begun: _Begun, admission: Admission) -> ToolErrorText:
        """A call the open breaker refused: its span, its refusal in the history, the text for the model."""
        assert self.breakers is not None
        name, scope, fp = begun.tool, begun.scope, begun.fp
        attributes = self._attrs(name, begun.described)
        text = circuit_open_text(admission, self.breakers.clock())
        self._trips.note(scope, name, fp)
        with self._tracer.start_as_current_span(f"execute_tool {name}", attributes=attributes) as span:
            span.set_attribute("errcompact.circuit_open", True)
            _mark_refused(span, text)
            b = admission.breaker
            span.add_event(
                "errcompact.breaker",
                {"errcompact.breaker.state": "open", "errcompact.breaker.refused": True,
                 "errcompact.key": b.key if b else "", "errcompact.count": b.failures if b else 0},
            )  # fmt: skip
            refusal = self._refusal(span, name, scope, text)
            # The agent asked again for a call known to fail: that is the same class once more for the
            # history (a loop against an open breaker still escalates), though the tool did not run.
            # Counted while the refusal's span is live: the escalation event of a breach it causes goes
            # on the call's agent span, or on this span when no agent or root span is open around it.
            digest = self._refused_digest(b.key, b.digest) if b is not None else None
            escalated = False
            if digest is not None:
                outcome = self._pipeline.handle_repeat(refusal, digest)
                escalated = outcome.observation.escalation is not None
                if escalated:
                    text += " — error threshold breached: stop retrying this step."
        if self._processor is not None:
            self._processor.note_returned_error(text)
        return ToolErrorText(text, None, circuit_open=True, escalated=escalated)

    def _refused_digest(self, key: str, line: str) -> Digest:
        """The digest of the class an open breaker refuses a call for: this process's own when one of its
        calls failed that way, else the breaker's (another worker of a fleet opened it, or this process
        has forgotten it), so that a loop against the breaker escalates in every worker."""
        with self._digests_lock:
            digest = self._digests.get(key)
        return digest if digest is not None else _digest_of_line(key, line)

    @staticmethod
    def _refusal(span: trace.Span, name: str, scope: str, text: str) -> Failure:
        """The :class:`Failure` of a call the breaker refused, on its span: its record holds the refusal."""
        trace_id, span_id = _span_ids(span.get_span_context())
        return Failure(
            scope=scope,
            raw_error=text,
            source="tool",
            tool_name=name,
            conversation_id=current_conversation(),
            trace_id=trace_id,
            span_id=span_id,
            span_name=f"execute_tool {name}",
            error_type=CIRCUIT_OPEN,
            attributes={"errcompact.circuit_open": True},
        )

    # The breaker hears how a call went while its tool span is still live, so its state changes are
    # events on that span: the admission's change at the start, the success or failure at the end.

    def _admitted(self, pending: _Pending) -> None:
        if self.breakers is not None and isinstance(pending.admission, Admission):
            self.breakers.notify(pending.admission.changes)

    def _succeeded(self, pending: _Pending) -> None:
        if self.breakers is not None and not pending.settled:
            pending.settled = True
            _owe(pending, self.breakers.success, pending.tool, pending.fp)

    def _failed_call(self, outcome: Outcome) -> None:
        """A call failed (called from ``_failed`` inside the tool span): count it for its breaker."""
        pending = _pending.get()
        if self.breakers is None or pending is None or pending.settled:
            return
        digest = outcome.digest
        if digest.error_class == "aborted":
            return
        pending.settled = True
        with self._digests_lock:
            self._digests[digest.key] = digest
            while len(self._digests) > 1024:
                self._digests.pop(next(iter(self._digests)))
        _owe(pending, self.breakers.failure, pending.tool, digest.key, pending.fp, digest.line)
        self._trips.note(outcome.observation.scope, pending.tool, pending.fp)
        admission = pending.admission
        probed = admission.breaker if isinstance(admission, Admission) and admission.probe else None
        if probed is not None and probed.key != digest.key:
            # The half-open probe failed another way: still a failure for the breaker it probed, which
            # opens again (else it stayed half-open with its probe out, refusing every call for good).
            _owe(pending, self.breakers.failure, pending.tool, probed.key, pending.fp, probed.digest)

    def close_breakers(self, scope: str) -> None:
        """Close the breakers that ``scope``'s calls ran into (see :class:`ScopeTrips`): a person let the
        conversation go on. Other conversations' calls with the same tool and arguments run again too: a
        breaker is the call's, not the conversation's."""
        calls = self._trips.take(scope)
        if self.breakers is not None and calls:
            self.breakers.close(calls)

    def forget_breakers(self, scope: str) -> None:
        """Forget which breakers ``scope``'s calls ran into, leaving them as they are (``reset``)."""
        self._trips.take(scope)

    def _release(self, pending: _Pending) -> None:
        """A call ended without a verdict (cancelled, halted): a half-open probe is given back."""
        if self.breakers is not None and not pending.settled and isinstance(pending.admission, Admission):
            pending.settled = True
            self.breakers.release(pending.admission)

    def _cancel_reason(self, scope: str) -> str | None:
        aborted = self.aborts.aborted(scope)
        if aborted is not None:
            return aborted
        breach = self.history.escalation(scope)
        return "halt" if breach is not None and breach.action == "halt" else None

    async def _release_async(self, pending: _Pending) -> None:
        """:meth:`_release` for an async tool: off the event loop when there is a probe to give back."""
        if pending.probing:
            await self._off_loop(self._release, pending)
        else:
            self._release(pending)

    @staticmethod
    def _pay(pending: _Pending) -> None:
        """Give the breaker what an async tool's call owes it (see :func:`_owe`), in order."""
        owed, pending.owed = pending.owed or [], []
        for operation in owed:
            operation()

    def _cancelled(self, span: trace.Span, name: str, scope: str, arguments: Any, reason: str) -> ToolErrorText:
        """Record a cancelled call: span event and trajectory record, never a failure in the history."""
        span.set_attribute("errcompact.cancelled", True)
        span.add_event("errcompact.cancelled", {"errcompact.reason": reason, semconv.GEN_AI_TOOL_NAME: name})
        writer = self._pipeline.writer
        if writer is not None:
            trace_id, span_id = _span_ids(span.get_span_context())
            try:
                writer.submit(
                    TrajectoryRecord(
                        source="tool",
                        scope=scope,
                        trace_id=trace_id,
                        span_id=span_id,
                        conversation_id=current_conversation(),
                        tool_name=name,
                        tool_arguments=_as_json(arguments) if self._capture_arguments else None,
                        exception_type="CancelledError",
                        raw_error=f"cancelled: {reason}",
                        attributes={"errcompact.cancelled": True, "errcompact.reason": reason},
                    )
                )
            except Exception:
                _log.exception("otel-errcompact: could not record a cancelled tool call")
        return ToolErrorText(f"Cancelled: {name} ({reason})", None, cancelled=True)

    def _attrs(self, name: str, described: Mapping[str, str] = _UNDESCRIBED) -> dict[str, Any]:
        """A tool span's attributes at its start: the operation, the tool and what is known of it, the
        conversation."""
        attributes: dict[str, Any] = {
            semconv.GEN_AI_OPERATION_NAME: "execute_tool",
            semconv.GEN_AI_TOOL_NAME: name,
            **described,
        }
        conversation_id = current_conversation()
        if conversation_id:
            attributes[semconv.GEN_AI_CONVERSATION_ID] = conversation_id
        return attributes

    # -- internals ---------------------------------------------------------------------------------------

    def _reader_of(self, span: trace.Span) -> ErrorCompactionProcessor | None:
        """The span processor that reads this tool span as it ends, or None: no SDK pipeline serves this
        boundary, or the span records nothing (its trace was sampled out), and the boundary then tells
        the pipeline how the call went itself."""
        processor = self._processor
        if processor is not None and isinstance(span, SdkSpan) and span.is_recording():
            return processor
        return None

    def _succeeded_unread(self, scope: str, name: str) -> None:
        """A successful call whose span no processor reads: its conversation's consecutive count starts
        again and it is counted in ``errcompact.tool.calls``, as the processor does for a recorded span
        (without this, in a trace the sampler left out, only the failures counted: a success between
        two failures did not end their streak, and the error ratio read 100 %)."""
        try:
            self._pipeline.succeeded(scope, name)
        except Exception:
            _log.exception("otel-errcompact: could not count a successful tool call")

    def _failed_with(
        self,
        span: trace.Span,
        name: str,
        call_id: str | None,
        exc: Exception,
        arguments: str | None,
        scope: str | None = None,
        *,
        model_text: str | None = None,
    ) -> ToolErrorText:
        """Record a tool's exception on its span (redacted) and in the pipeline (unredacted)."""
        raw, message, exc_type, codes = _record_exception(span, exc)
        return self._failed(
            span, name, call_id, raw, exc_type=exc_type, codes=codes,
            unredacted={"raw_error": raw, "exception_message": message, "exception_stacktrace": raw,
                        "status_description": f"{exc_type}: {message}"},
            arguments=arguments,
            model_text=model_text,
            scope=scope,
        )

    def _failed_again(self, span: trace.Span, exc: Exception, counted: ToolErrorText) -> ToolErrorText:
        """A tool's exception that a wrapped tool it called has counted and raised already: this call's
        span records it and fails, but it is one failure, counted once. The span carries the inner call's
        annotations (so no span processor counts it again) and the agent gets the inner call's text."""
        _record_exception(span, exc)
        outcome = counted.outcome
        if outcome is not None:
            try:
                span.set_attributes(span_annotations(outcome))
            except Exception:
                _log.debug("otel-errcompact: could not annotate a tool span", exc_info=True)
            self._failed_call(outcome)
        text = ToolErrorText(str.__str__(counted), outcome, escalated=counted.escalated)
        if self._processor is not None:
            self._processor.note_returned_error(text)
        return text

    def _failed(
        self,
        span: trace.Span,
        name: str,
        call_id: str | None,
        raw_error: str,
        *,
        exc_type: str,
        unredacted: dict[str, str] | None = None,
        arguments: str | None = None,
        model_text: str | None = None,
        codes: Mapping[str, int] | None = None,
        scope: str | None = None,
    ) -> ToolErrorText:
        """The compact error for a failed call; never raises (a last-resort text if the pipeline does).
        ``unredacted`` holds the failure's texts as the tool produced them, for the trajectory record;
        ``codes`` the HTTP status / exit code the exception carried (they join the digest's type);
        ``scope`` the call's, taken before its span started (default: the current one)."""
        try:
            return self._handle_failure(span, name, call_id, raw_error, exc_type=exc_type, unredacted=unredacted,
                                        arguments=arguments, model_text=model_text, codes=codes, scope=scope)
        except Exception:
            _log.exception("otel-errcompact: handling a tool failure failed")
            return ToolErrorText(f"Error: [{_clip(exc_type)}]: tool {_clip(name)!r} failed")

    def _handle_failure(
        self,
        span: trace.Span,
        name: str,
        call_id: str | None,
        raw_error: str,
        *,
        exc_type: str,
        unredacted: dict[str, str] | None,
        arguments: str | None,
        model_text: str | None = None,
        codes: Mapping[str, int] | None = None,
        scope: str | None = None,
    ) -> ToolErrorText:
        outcome: Outcome | None = None
        # The span carries redacted text; the trajectory record gets the unredacted originals.
        originals: dict[str, str] = dict(unredacted or {})
        if arguments is not None:
            originals["tool_arguments"] = arguments
        processor = self._reader_of(span)
        if processor is not None and isinstance(span, SdkSpan):  # the test narrows the span's type
            outcome = processor.handle_live(span, originals, model_text=model_text)
        if outcome is None:  # no SDK pipeline to read the span from: describe the failure directly
            trace_id, span_id = _span_ids(span.get_span_context())
            outcome = self._pipeline.handle(
                Failure(
                    scope=scope if scope is not None else self.current_scope(),
                    raw_error=raw_error,
                    source="tool",
                    tool_name=name,
                    tool_call_id=call_id,
                    tool_arguments=arguments,
                    conversation_id=current_conversation(),
                    trace_id=trace_id,
                    span_id=span_id,
                    exception_type=exc_type,
                    attributes=dict(codes or {}),
                    model_text=model_text,
                )
            )
            if self._span_processor is not None:
                # Marked as counted, so that no processor counts it again as the span ends: the provider's
                # processor no longer serves this pipeline (a shut-down handle's tool, whose failure must
                # not count in another handle's history), or it took the span for one wrapping a failure
                # already counted (a wrapped tool called inside this one failed), which this call's own
                # exception is not.
                span.set_attributes(span_annotations(outcome))
        self._failed_call(outcome)
        text = ToolErrorText(_agent_text(outcome), outcome)
        if self._processor is not None:
            self._processor.note_returned_error(text)
        return text


class _AsyncCall:
    """The ``async with`` form of :meth:`ToolBoundary._call`, for an async tool (see
    :meth:`ToolBoundary._call_async`). A class, not an ``asynccontextmanager``: closing a coroutine that
    waits inside one (the garbage collector, an event loop stopped by Ctrl-C) raises ``RuntimeError:
    generator didn't stop after athrow()`` into the code closing it."""

    def __init__(
        self,
        boundary: ToolBoundary,
        name: str,
        arguments_json: str | None,
        on_error: OnError | None,
        pending: _Pending,
        described: Mapping[str, str],
    ) -> None:
        self._boundary, self._name, self._arguments_json = boundary, name, arguments_json
        self._on_error, self._pending, self._described = on_error, pending, described

    async def __aenter__(self) -> ToolCall:
        boundary = self._boundary
        scope = boundary.current_scope()  # before the span starts: see ToolBoundary._call
        boundary.check(scope)
        self._span = boundary._tool_span(self._name, None, self._arguments_json, self._described)
        call = self._call = ToolCall(self._span.__enter__(), self._arguments_json)
        call._scope = scope
        self._enclosing, self._token = _current_call.get(), _current_call.set(call)
        return call

    async def __aexit__(
        self, typ: type[BaseException] | None, exc: BaseException | None, tb: types.TracebackType | None
    ) -> bool:
        boundary, pending = self._boundary, self._pending
        swallowed = False
        try:
            swallowed = boundary._ended(self._call, self._name, None, self._on_error, self._enclosing, self._token, exc)
            if pending.owed:  # a verdict the call gave the breaker: paid while the span is live
                await boundary._off_loop(boundary._pay, pending)
        finally:
            if swallowed:
                self._span.__exit__(None, None, None)
            else:
                self._span.__exit__(typ, exc, tb)
        return swallowed


class _Begun(NamedTuple):
    """A decorated call before the breaker's admission: its arguments (as given, and whole as JSON),
    their fingerprint and the call's scope."""

    tool: str
    arguments: dict[str, Any]
    whole: str
    fp: str
    scope: str
    described: Mapping[str, str]


class _Pending:
    """The breaker verdict a decorated call still owes (tool, argument fingerprint, admission).

    ``owed`` is None for a sync tool, whose verdict goes to the breaker at once; an async tool's is
    collected there, and paid off the event loop while its span is live (see ``_call_async``)."""

    __slots__ = ("admission", "fp", "owed", "settled", "tool")

    def __init__(self, tool: str, fp: str, admission: Admission | None) -> None:
        self.tool, self.fp, self.admission, self.settled = tool, fp, admission, False
        self.owed: list[Callable[[], object]] | None = None

    @property
    def probing(self) -> bool:
        """Whether the call holds a half-open probe it has not settled (one to give back)."""
        return not self.settled and isinstance(self.admission, Admission) and self.admission.probe


def _owe(pending: _Pending, operation: Callable[..., object], *args: Any) -> None:
    """Give the breaker a call's verdict: at once for a sync tool, or as owed by an async one."""
    if pending.owed is None:
        operation(*args)
    else:
        pending.owed.append(functools.partial(operation, *args))


_pending: contextvars.ContextVar[_Pending | None] = contextvars.ContextVar("otel_errcompact_pending", default=None)


def _span_ids(context: trace.SpanContext) -> tuple[str | None, str | None]:
    """The trace and span ids (hex) a record of the span with ``context`` carries; the flags of a trace that
    was not sampled are remembered for the record's log records (see :mod:`otel_errcompact._sampled`)."""
    if not context.is_valid:
        return None, None
    trace_id, span_id = f"{context.trace_id:032x}", f"{context.span_id:016x}"
    note_span(trace_id, span_id, context.trace_flags)
    return trace_id, span_id


def _digest_of_line(key: str, line: str) -> Digest:
    """The digest a shared breaker names by its dedup key and line alone: its type and cause read back from
    the line and classed as the compactor classes them (an HTTP code in the type included), so that a
    refusal for a transient failure waits as the failure's own digest would, and a permanent one counts
    toward a stuck loop."""
    parts = line_parts(line)
    type_, cause = (parts[0], parts[2]) if parts is not None else ("Error", line)
    code = type_.rsplit(None, 1)[-1] if "HTTP" in type_.upper() else ""
    status = int(code) if code.isdigit() and 100 <= int(code) <= 599 else None
    fmt = "http" if status is not None else "breaker"
    klass = classify_text(type_, cause, status, fmt, is_retryable(type_, cause, status, fmt))
    return Digest(
        type=type_,
        cause=cause,
        location=None,
        format=fmt,
        retryable=klass.retryable,
        status=status,
        key_parts=DedupKey(type_, "", cause, key),
        raw_chars=len(line),
        line=line,
        error_class=klass.error_class,
        retry_after_s=klass.retry_after_s,
    )


CIRCUIT_OPEN = "circuit_open"
"""The ``error.type`` of a call an open circuit breaker refused (and of its trajectory record)."""


def _record_exception(span: trace.Span, exc: BaseException) -> tuple[str, str, str, dict[str, int]]:
    """Record a tool's exception on its span, redacted and bounded: the ``exception`` event, status ERROR,
    ``error.type`` and the HTTP status / exit code it carries (part of the digest's type). Returns the
    unredacted traceback, message and type name, and those codes. Never raises."""
    try:
        raw = "".join(traceback.format_exception(type(exc), exc, exc.__traceback__))
    except Exception:  # a hostile exception can break even the traceback module
        raw = f"{_safe_name(type(exc))}: {_safe_str(exc)}"
    message = _safe_str(exc)
    exc_type = _safe_name(type(exc))
    try:
        qualified = _qualified_name(type(exc))
        # Our own exception event, not span.record_exception(): that calls str(exc) unguarded and
        # writes the raw message and stack, which leave the process with the span.
        span.add_event(
            "exception",
            {
                "exception.type": qualified,
                # Bounded like the OTLP log events: the full text is in the trajectory record.
                "exception.message": _span_text(message, _MAX_SPAN_TEXT),
                "exception.stacktrace": _span_text(raw, _MAX_SPAN_TEXT),
                # No ``exception.escaped``: deprecated by the exception conventions.
            },
        )
        span.set_status(Status(StatusCode.ERROR, _span_text(f"{exc_type}: {message}", 1024)))
        span.set_attribute(semconv.ERROR_TYPE, qualified)
    except Exception:
        _log.debug("otel-errcompact: could not record the exception on the tool span", exc_info=True)
    codes: dict[str, int] = {}
    try:
        codes = code_attributes(exc)  # HTTP status / exit code: part of the digest's type
        if codes:
            span.set_attributes(codes)
    except Exception:
        _log.debug("otel-errcompact: could not read the exception's status code", exc_info=True)
    return raw, message, exc_type, codes


def _counted_inside(call: ToolCall, exc: BaseException) -> ToolErrorText | None:
    """What a tool call made inside ``call`` returned for ``exc`` when it counted and raised that very
    exception object, else None. Identity, not equality: another exception of the same kind is a failure
    of its own, and only calls made inside this one are asked (a shared future that raises one exception
    object to several calls fails each of them)."""
    return next((text for raised, text in call._raised_inside if raised is exc), None)


def _handing_back(enclosing: ToolCall | None, text: ToolErrorText) -> ToolErrorText:
    """``text``, which a decorated tool hands back as its result instead of raising, noted on the tool
    call it was called in, if any (:attr:`ToolCall.handed_back`). A framework turns the text into its own
    result of a call (LangGraph: a ToolMessage with status "success" holding it, as a plain string), and
    a bridge around that call must still see a failure, without counting it a second time."""
    if enclosing is not None:
        enclosing.handed_back = text
    return text


def _mark_refused(span: trace.Span, text: str) -> None:
    """Mark the span of a call the breaker refused as failed, as the conventions ask of an operation that
    returns an error without raising: the agent gets an error for it. Status ERROR with the refusal as its
    description (bounded and redacted like a tool's error) and ``error.type`` ``circuit_open``; its
    ``errcompact.circuit_open`` attribute keeps the span processor from counting it as one more failure of
    the tool."""
    try:
        span.set_status(Status(StatusCode.ERROR, _span_text(text, 1024)))
        span.set_attribute(semconv.ERROR_TYPE, CIRCUIT_OPEN)
    except Exception:
        _log.debug("otel-errcompact: could not mark a refused tool span", exc_info=True)


def _mark_interrupted(span: trace.Span, name: str) -> None:
    """Mark a tool span that a cancellation (or an interrupt) ended as neither a failure nor a success.

    OpenTelemetry records no exception and no status for a ``BaseException`` that is not an
    ``Exception``, so the span would end as a plain success: the span processor would count it as one,
    and a timed-out call would reset its conversation's consecutive-failure counter. The mark makes the
    processor leave it alone, as it leaves calls cancelled by an abort or a halt."""
    try:
        span.set_attribute("errcompact.cancelled", True)
        span.add_event("errcompact.cancelled", {"errcompact.reason": "cancelled", semconv.GEN_AI_TOOL_NAME: name})
    except Exception:
        _log.debug("otel-errcompact: could not mark an interrupted tool span", exc_info=True)


def _model_text(call: ToolCall, exc: BaseException) -> str | None:
    if call.model_text is None:
        return None
    try:
        return call.model_text(exc)
    except Exception:
        return None


def _agent_text(outcome: Outcome) -> str:
    observation = outcome.observation
    text = f"Error: {outcome.digest.line}"
    if observation.count > 1:
        text += f" (×{observation.count})"
    if observation.escalation is not None:
        text += " — error threshold breached: stop retrying this step."
    return text


async def _await(value: Awaitable[Any]) -> Any:
    return await value


_MAX_DESCRIPTION_CHARS = 1024


def _described(fn: Callable[..., Any], description: str | None) -> dict[str, str]:
    """The GenAI attributes a decorated tool's spans carry beyond its name: ``gen_ai.tool.type`` is
    ``function`` (the application runs it on the arguments the model chose), and ``gen_ai.tool.description``
    is ``description`` or the first line of the function's docstring, the line frameworks hand the model
    as the tool's description. Read once, when the tool is decorated; a docstring that cannot be read
    leaves the description out."""
    described = {semconv.GEN_AI_TOOL_TYPE: "function"}
    text = description
    if text is None:
        try:
            doc = inspect.getdoc(fn.func if isinstance(fn, functools.partial) else fn)
        except Exception:  # an object whose __doc__ is a property that raises
            doc = None
        text = next((line.strip() for line in (doc or "").splitlines() if line.strip()), None)
    if text:
        described[semconv.GEN_AI_TOOL_DESCRIPTION] = text[:_MAX_DESCRIPTION_CHARS]
    return described


def _check_callable(fn: object) -> None:
    """Refuse, where the tool is defined, what cannot be called: a framework's tool object (LangChain's
    ``@tool``, the Agents SDK's ``function_tool``) or a ``classmethod`` wrapped in the wrong order. The
    wrapper would fail every call with a ``TypeError`` of its own, handed to the model as the tool's
    error, and the framework would no longer see its tool."""
    if not callable(fn):
        kind = type(fn).__name__
        raise TypeError(
            f"@ec.tool wraps a function or a callable, not a {kind}: apply it first and the decorator that "
            f"made the {kind} over it (@tool over @ec.tool, function_tool(ec.tool(fn)), @classmethod over @ec.tool)"
        )


def _name_of(fn: Callable[..., Any]) -> str:
    """A tool's default name: its function's (a ``functools.partial``'s function's), else its class's (a
    callable object)."""
    target = fn.func if isinstance(fn, functools.partial) else fn
    return str(getattr(target, "__name__", None) or type(target).__name__)


def _describe(wrapper: Callable[..., Any], fn: Callable[..., Any]) -> None:
    """Give the wrapper of a tool that is not a function (a ``functools.partial``, a callable object) the
    name, docstring and annotations frameworks read to describe a tool. ``functools.wraps`` copies none
    of them from such a callable, and left the wrapper's own ``*args: P.args`` annotations, which a
    framework resolving the tool's type hints (the Agents SDK's ``function_tool``, LangChain's ``tool``)
    cannot resolve. The annotations are the callable's signature's (its bound arguments left out)."""
    if inspect.isfunction(fn) or inspect.ismethod(fn):
        return
    target = fn.func if isinstance(fn, functools.partial) else fn
    try:
        try:
            signature = inspect.signature(fn, eval_str=True)
        except Exception:  # an annotation that names what its module does not define
            signature = inspect.signature(fn)
        annotations = {k: p.annotation for k, p in signature.parameters.items() if p.annotation is not p.empty}
        if signature.return_annotation is not signature.empty:
            annotations["return"] = signature.return_annotation
        wrapper.__annotations__ = annotations
        wrapper.__name__ = _name_of(fn)
        wrapper.__qualname__ = str(getattr(target, "__qualname__", None) or wrapper.__name__)
        if isinstance(fn, functools.partial):
            wrapper.__doc__ = getattr(target, "__doc__", None)
    except Exception:  # no signature to read (a builtin's): the wrapper stays as functools.wraps left it
        _log.debug("otel-errcompact: could not describe a tool", exc_info=True)


def _defined_in_class(fn: Callable[..., Any]) -> bool:
    """Whether ``fn`` is a function defined in a class body (its qualified name is ``Class.name``): a
    method tool, whose calls may carry the instance or class Python bound it to (see :func:`_unbound`).
    Read once, when the tool is decorated, so that the calls of other tools ask nothing more."""
    if not inspect.isfunction(fn):
        return False
    owner, dot, _ = str(getattr(fn, "__qualname__", "")).rpartition(".")
    return bool(dot) and not owner.endswith("<locals>")


def _unbound(
    fn: Callable[..., Any], args: tuple[Any, ...], wrapper: Callable[..., Any]
) -> tuple[Callable[..., Any], tuple[Any, ...]]:
    """What a method tool's call arguments are read from: ``fn`` bound to the first of ``args`` as
    inspect binds a method, and the arguments after it, when that first argument is the instance (or,
    for a ``classmethod``, the class) Python bound ``wrapper`` to; else ``fn`` and ``args``.

    ``self`` / ``cls`` is not an argument the agent chose: its repr (an instance's usually holds its
    memory address) made every instance's calls a breaker fingerprint of their own, so that the breaker
    of a tool on a new instance per request never opened, and put the object's repr in the record."""
    if args and _bound_to(wrapper, args[0]):
        return types.MethodType(fn, args[0]), args[1:]
    return fn, args


def _bound_to(wrapper: Callable[..., Any], first: object) -> bool:
    """Whether ``first`` is what Python bound a method tool's ``wrapper`` to: an instance whose class
    holds the wrapper (or a decorator over it), or a class holding a ``classmethod`` of it. Looked up
    statically: no descriptor or ``__getattr__`` of the host's runs. A ``staticmethod`` binds nothing."""
    try:
        name = wrapper.__name__
        if isinstance(first, type):
            found = inspect.getattr_static(first, name, None)
            return isinstance(found, classmethod) and _wraps(found.__func__, wrapper)
        return _wraps(inspect.getattr_static(type(first), name, None), wrapper)
    except Exception:  # a hostile class, a __wrapped__ chain that loops
        return False


def _wraps(found: object, wrapper: Callable[..., Any]) -> bool:
    """Whether ``found`` is ``wrapper``, or a decorator over it (``functools.wraps`` chain)."""
    if found is wrapper:
        return True
    return callable(found) and inspect.unwrap(found, stop=lambda f: f is wrapper) is wrapper


def _collected(fn: Callable[..., Any]) -> Callable[..., Any]:
    """``fn``, or for a generator function (sync or async), or an object whose ``__call__`` is one, a
    function that returns its items as a list."""
    if _is_a(inspect.isgeneratorfunction, fn):

        @functools.wraps(fn)
        def collect(*args: Any, **kwargs: Any) -> list[Any]:
            return list(fn(*args, **kwargs))

        return collect
    if _is_a(inspect.isasyncgenfunction, fn):

        @functools.wraps(fn)
        async def collect_async(*args: Any, **kwargs: Any) -> list[Any]:
            return [item async for item in fn(*args, **kwargs)]

        return collect_async
    return fn


def _is_a(kind: Callable[[Any], bool], fn: Callable[..., Any]) -> bool:
    """Whether ``fn`` is a function of a ``kind`` (``inspect.iscoroutinefunction`` …), or an object whose
    ``__call__`` is one."""
    return kind(fn) or (not inspect.isfunction(fn) and kind(type(fn).__call__))


def check_options(*, name: object = None, on_error: object = None, retry: object = None,
                  error_of: object = None, description: object = None) -> None:
    """Refuse a tool option of the wrong kind where the tool is declared, with a ConfigurationError naming
    it: each is read only inside a call, where an unknown ``on_error`` was taken for the default and a
    ``retry`` that is no number failed in the agent's call."""
    problems = []
    if name is not None and not isinstance(name, str):
        problems.append(wrong_argument("name", name, "a string"))
    if on_error is not None and on_error not in get_args(OnError):
        problems.append(wrong_argument("on_error", on_error, "one of 'digest', 'raise'"))
    if retry is not None and (isinstance(retry, bool) or not isinstance(retry, RetryPolicy | int)
                              or (isinstance(retry, int) and retry < 1)):
        problems.append(wrong_argument("retry", retry, "a RetryPolicy or a number of attempts ≥ 1"))
    if error_of is not None and not callable(error_of):
        problems.append(wrong_argument("error_of", error_of, "a function of the tool's result"))
    if description is not None and not isinstance(description, str):
        problems.append(wrong_argument("description", description, "a string"))
    if problems:
        raise ConfigurationError(f"invalid tool options: {'; '.join(problems)}")


def _attempts(n: int) -> RetryPolicy:
    return NO_RETRY if n <= 1 else RetryPolicy(attempts=n)


def _note_retry(span: trace.Span) -> Callable[[tenacity.RetryCallState], None]:
    """tenacity ``before_sleep``: each retry is a span event on the tool span (the failure is not lost).

    Its ``exception.message`` is the message's first 512 characters, redacted before the cut: cut first, a
    key crossing the bound would keep a head too short to read as a key."""

    def note(state: tenacity.RetryCallState) -> None:
        try:
            outcome = state.outcome
            exc = outcome.exception() if outcome is not None and outcome.failed else None
            c = classify_exception(exc) if exc is not None else None
            wait = state.next_action.sleep if state.next_action is not None else 0.0
            span.add_event(
                "errcompact.retry",
                {
                    "errcompact.attempt": state.attempt_number,
                    "errcompact.error_class": c.error_class if c else "unknown",
                    "errcompact.wait_s": round(float(wait), 3),
                    "exception.type": type(exc).__name__ if exc is not None else "",
                    "exception.message": escape_surrogates(redact(_safe_str(exc))[:512]) if exc is not None else "",
                },
            )
        except Exception:
            _log.debug("otel-errcompact: could not note a retry", exc_info=True)

    return note


async def _retried_async(
    policy: RetryPolicy, span: trace.Span, fn: Callable[..., Any], args: tuple[Any, ...], kwargs: dict[str, Any]
) -> Any:
    async for attempt in policy.async_retrying(before_sleep=_note_retry(span)):
        with attempt:
            return await _await(fn(*args, **kwargs))
    raise AssertionError("unreachable: tenacity re-raises the last error")  # pragma: no cover


def _qualified_name(exc_type: type[BaseException]) -> str:
    module = exc_type.__module__
    return exc_type.__qualname__ if module in ("builtins", "__main__") else f"{module}.{exc_type.__qualname__}"


_MAX_ARGUMENT_CHARS = 65_536
_RAISED = "_errcompact_record_id"
"""The attribute of an exception a call counted and raised on (see ``ToolBoundary.raised_by_tool``)."""
_MAX_RAISED = 256


def _safe_name(cls: type) -> str:
    try:
        return str(cls.__name__)[:200]
    except Exception:
        return "Exception"


def _clip(text: str) -> str:
    return text[:80].replace("\n", " ")


def _span_text(text: str, limit: int = _MAX_SPAN_TEXT) -> str:
    """Text written on the tool span, which leaves the process: bounded (head and tail), redacted, and
    valid UTF-8. A lone surrogate (the byte of a file name that is not UTF-8) is written as its escape, as
    the prompt gets it: an OTLP exporter cannot encode one, and fails the whole batch of spans
    over a status description holding it."""
    return escape_surrogates(_redacted_cap(text, limit))


_REDACT_MARGIN = 4096
"""Characters redacted beyond each end of what a cut text keeps, and then dropped (see :func:`_redacted_cap`)."""


def _redacted_cap(text: str, limit: int) -> str:
    """``redact(text)`` cut to its head and tail as :func:`cap_text` cuts, without redacting all of a
    long text on the agent's thread (a 10 MB error takes most of a second).

    Cut first and redacted after, a key that crosses a cut would lose its prefix (``sk-proj-``) or be left
    too short to read as a key, and the rest of it would stay on the span. So each kept end is redacted with
    a margin of text beyond it, and the margin is dropped afterwards: what is kept lies at least
    :data:`_REDACT_MARGIN` characters from where the redacted window was cut, so only a secret longer than
    that could cross it."""
    window = limit + 2 * _REDACT_MARGIN
    if len(text) <= window:
        return cap_text(redact(text), limit)
    head_n = limit // 4
    tail_n = limit - head_n
    head = redact(text[: head_n + _REDACT_MARGIN])
    tail = redact(text[-(tail_n + _REDACT_MARGIN):])
    head = head[: max(0, min(head_n, len(head) - _REDACT_MARGIN))]
    tail = tail[len(tail) - max(0, min(tail_n, len(tail) - _REDACT_MARGIN)):]
    return f"{head}\n[… {len(text) - len(head) - len(tail)} characters omitted …]\n{tail}"


def _safe_str(value: Any) -> str:
    """``str(value)``, or a placeholder naming its type when ``__str__`` raises or returns a non-string.

    A ``__str__`` may return an instance of a ``str`` subclass: it is copied into a plain ``str``, since
    formatting or converting the subclass again (an f-string does) runs its own ``__str__``, which may raise."""
    try:
        text = str(value)
        if isinstance(text, str):
            return str.__str__(text)
    except Exception:
        pass
    return f"<{_safe_name(type(value))} object: str() failed>"


def _safe_repr(value: Any) -> str:
    """``repr(value)`` bounded, or a placeholder naming its type when ``__repr__`` raises."""
    try:
        text = repr(value)
        if isinstance(text, str):
            return text[:_MAX_ARGUMENT_CHARS]
    except Exception:
        pass
    return f"<{_safe_name(type(value))} object: repr() failed>"


def _as_json(value: Any, limit: int | None = _MAX_ARGUMENT_CHARS) -> str:
    """Arguments as JSON for the span and the record, cut to ``limit`` characters (``None``: whole, for
    the breaker's fingerprint: calls that differ only past the cut are other calls). Values JSON cannot
    encode fall back to their ``repr``; a recursive structure, or one too deep to encode, is shown by its
    ``repr`` (which marks the recursion) or a placeholder. Never raises."""
    try:
        text = json.dumps(value, default=_safe_repr, ensure_ascii=False)
        return text if limit is None else text[:limit]
    except Exception:  # circular reference, RecursionError, a hostile __iter__ / keys
        return _safe_repr(value)


def _arguments(fn: Callable[..., Any], args: tuple[Any, ...], kwargs: dict[str, Any]) -> dict[str, Any]:
    try:
        bound = inspect.signature(fn).bind_partial(*args, **kwargs)
        return dict(bound.arguments)
    except Exception:
        return {"args": list(args), "kwargs": dict(kwargs)}
