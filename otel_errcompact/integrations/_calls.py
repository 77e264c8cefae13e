"""One tool call run by a framework bridge: scope, parent span, claim, digest, halt.

Both bridges reduce to the same steps around the framework's own execution of the tool:

1. a standing breach in the scope stops the call before the tool runs;
2. the call runs inside an ``execute_tool`` span of the library, opened as a child of the framework's
   span when the framework's instrumentation has one (so it sits in the framework's trace), carrying the
   scope as ``gen_ai.conversation.id``, the tool-call id and the agent's name;
3. while the tool runs, the call is *claimed* (:mod:`otel_errcompact.claims`): a failed tool span the
   instrumentation ends inside it is not counted a second time;
4. a failure becomes the :class:`~otel_errcompact.boundary.ToolErrorText` (digest line and count); the
   failure that breaches a ``halt`` threshold raises at once, so the run stops at the threshold.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Generic, TypeVar

from opentelemetry import context as otel_context
from opentelemetry import trace

from otel_errcompact import semconv
from otel_errcompact.api import ErrCompact
from otel_errcompact.boundary import ToolCall, ToolErrorText, conversation
from otel_errcompact.claims import Claim, claimed
from otel_errcompact.exceptions import ErrorBudgetExceeded
from otel_errcompact.history import Escalation

__all__ = ["BridgedCall", "HaltFactory", "run_async", "run_sync"]

T = TypeVar("T")
HaltFactory = Callable[[Escalation], BaseException]
"""Builds the exception that stops the framework's run (a subclass the framework lets through)."""


@dataclass(frozen=True)
class BridgedCall(Generic[T]):
    """What a bridge knows of one tool call before the framework runs it.

    ``halt`` builds the exception that stops the framework's run; ``data_error(result)`` returns the
    error text of a result that reports a failure the framework caught itself (else None; the stack trace
    its instrumentation recorded is used when there is one); ``model_text(exc)`` is what the framework
    would have fed back for ``exc`` (``Failure.model_text``); ``handed_back(result, text)`` is the result
    marked failed the framework's way when it holds ``text``, the failure a wrapped tool called in the call
    handed back as its result (an ``@ec.tool`` in digest mode, which counted it), else the result as it is.
    """

    name: str
    call_id: str | None
    arguments: object
    scope: str
    agent_name: str | None
    parent: trace.Span | None
    halt: HaltFactory
    data_error: Callable[[T], str | None] | None = None
    model_text: Callable[[BaseException], str] | None = None
    handed_back: Callable[[T, ToolErrorText], T] | None = None


@contextmanager
def _bridged(ec: ErrCompact, spec: BridgedCall[T]) -> Iterator[ToolCall]:
    token = None
    if spec.parent is not None and spec.parent.get_span_context().is_valid:
        token = otel_context.attach(trace.set_span_in_context(spec.parent))
    try:
        with conversation(spec.scope):
            try:
                ec.check(spec.scope)
            except ErrorBudgetExceeded as exc:
                raise spec.halt(exc.escalation) from None
            # "digest" whatever on_tool_error says: the bridge is the framework's error handling, and
            # the framework must get the digest or the halt, never the tool's raw exception
            with ec.tool_call(spec.name, call_id=spec.call_id, arguments=spec.arguments, on_error="digest") as call:
                if spec.agent_name:
                    call.span.set_attribute(semconv.GEN_AI_AGENT_NAME, spec.agent_name)
                call.model_text = spec.model_text
                yield call
    finally:
        if token is not None:
            otel_context.detach(token)


def _outcome(call: ToolCall, halt: HaltFactory) -> ToolErrorText | None:
    error = call.error
    if error is None:
        return None
    escalation = error.outcome.observation.escalation if error.outcome is not None else None
    if escalation is not None and escalation.action == "halt":
        raise halt(escalation)
    return error


def _fail_on_data_error(call: ToolCall, claim: Claim, result: T, data_error: Callable[[T], str | None] | None) -> None:
    text = data_error(result) if data_error is not None else None
    if text is not None:
        call.fail(claim.stacktraces[-1] if claim.stacktraces else text)


def _as_handed_back(call: ToolCall, result: T, handed_back: Callable[[T, ToolErrorText], T] | None) -> T:
    """The framework's result of a call inside which a wrapped tool handed back its failure as its result
    (see :attr:`ToolCall.handed_back`): marked failed by the bridge, not counted again."""
    text = call.handed_back
    return result if text is None or handed_back is None else handed_back(result, text)


def _own_parents(call: ToolCall, spec: BridgedCall[T]) -> set[int]:
    """The spans the call's own tool spans are children of: the library's span of the call (an
    instrumentation that follows the OpenTelemetry context), and the framework's span it was opened under
    (one that keeps its own, as OpenInference does). Tool spans deeper down belong to work nested in the
    tool (an agent used as a tool), which the claim must not hide from the span processor."""
    spans = (call.span, spec.parent)
    return {c.span_id for c in (s.get_span_context() for s in spans if s is not None) if c.is_valid}


def run_sync(ec: ErrCompact, run: Callable[[], T], spec: BridgedCall[T]) -> T | ToolErrorText:
    """Run ``run()`` as one bridged tool call: its result, or the digest text of its failure."""
    result: T | None = None
    with _bridged(ec, spec) as call:
        with claimed(_own_parents(call, spec)) as claim:
            result = run()
        _fail_on_data_error(call, claim, result, spec.data_error)
        result = _as_handed_back(call, result, spec.handed_back)
    error = _outcome(call, spec.halt)
    return error if error is not None else result


async def run_async(ec: ErrCompact, run: Callable[[], Awaitable[T]], spec: BridgedCall[T]) -> T | ToolErrorText:
    """The ``async`` form of :func:`run_sync`."""
    result: T | None = None
    with _bridged(ec, spec) as call:
        with claimed(_own_parents(call, spec)) as claim:
            result = await run()
        _fail_on_data_error(call, claim, result, spec.data_error)
        result = _as_handed_back(call, result, spec.handed_back)
    error = _outcome(call, spec.halt)
    return error if error is not None else result
