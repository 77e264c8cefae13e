"""OpenAI Agents SDK bridge: digests from the tool's real exception, halts the SDK lets through, one
scope per conversation.

Wiring::

    import otel_errcompact
    from otel_errcompact.openai_agents import AgentsBridge

    ec = otel_errcompact.init(service_name="orders-agent")
    bridge = AgentsBridge(ec)
    agent = Agent(
        name="orders-agent",
        instructions=bridge.instructions("Answer questions about orders."),
        tools=[bridge.function_tool(count_orders)],
    )
    result = await bridge.run(agent, "How many orders does acme have?", session=session)

- :meth:`AgentsBridge.failure_error_function` (``function_tool(fn, failure_error_function=…)``, which
  :meth:`AgentsBridge.function_tool` sets) receives the tool's real exception, so the digest comes from
  its stack trace even when the SDK redacts span data; the model gets ``Error: <digest> (×N)``.
- A breach with the ``halt`` action raises :class:`RunHalted`, an
  :class:`~otel_errcompact.ErrorBudgetExceeded` that is also an ``agents.exceptions.AgentsException``:
  the SDK re-raises its own exception type unchanged instead of turning it into a tool output, so the
  run stops at the failure that breached and the caller catches ``ErrorBudgetExceeded``.
- :meth:`AgentsBridge.instructions` makes the agent's instructions dynamic: the ``[RECENT ERRORS]``
  block of the scope is appended for each model call (so it replaces the previous one, never piles up
  in the conversation), and a standing breach stops the next turn.
- The scope is, like the SDK's own run grouping: the ``conversation_id``, else the session's id, else
  ``RunConfig.group_id``, else the run's trace. :meth:`AgentsBridge.run` / :meth:`AgentsBridge.run_sync`
  take ``Runner.run``'s arguments and set the scope from them; a plain ``Runner.run`` gets the scope
  from ``group_id`` (read from the tool's run config or the SDK's current trace). With the SDK's tracing
  off, a plain run's model calls learn the group only from the run's first failed tool call (the SDK
  hands instructions no run config): before it, no block, and a breached group is stopped at that tool
  call rather than before the model call.
- With OpenInference's openai-agents instrumentation active, the library's ``execute_tool`` span is a
  child of the SDK's function span, and the escalation event lands on the agent's span.
"""

from __future__ import annotations

import asyncio
import inspect
import json
import logging
import threading
import traceback
import weakref
from collections.abc import Awaitable, Callable
from typing import Any, TypeVar

from opentelemetry import trace
from opentelemetry.sdk.trace import Span as SdkSpan

from otel_errcompact import semconv
from otel_errcompact.api import ErrCompact
from otel_errcompact.boundary import ToolErrorText, conversation, current_conversation
from otel_errcompact.exceptions import ErrorBudgetExceeded
from otel_errcompact.history import Escalation
from otel_errcompact.integrations import bridged_handle, framework_missing

try:
    from agents import Agent, FunctionTool, RunConfig, Runner, RunResult, function_tool
    from agents.exceptions import AgentsException
    from agents.run_context import RunContextWrapper
    from agents.tool import default_tool_error_function
    from agents.tool_context import ToolContext
    from agents.tracing import get_current_trace
except ImportError as error:
    raise framework_missing("otel_errcompact.openai_agents", "openai-agents", error) from error

__all__ = ["AgentsBridge", "RunHalted", "run_scope"]

T = TypeVar("T")
_log = logging.getLogger("otel_errcompact")


class RunHalted(ErrorBudgetExceeded, AgentsException):
    """A breach that stops an Agents SDK run: catch it as :class:`~otel_errcompact.ErrorBudgetExceeded`.
    Being an ``AgentsException`` is what makes the SDK re-raise it rather than hand it to the model."""

    def __init__(self, escalation: Escalation) -> None:
        ErrorBudgetExceeded.__init__(self, escalation)
        self.run_data = None


def run_scope(
    *, conversation_id: str | None = None, session: Any = None, run_config: RunConfig | None = None
) -> str | None:
    """The scope of a run, in the SDK's own grouping order: conversation id, session id, group id."""
    if conversation_id and conversation_id.strip():
        return conversation_id.strip()
    session_id = _session_id(session)
    if session_id is not None:
        return session_id
    group_id = run_config.group_id if run_config is not None else None
    if group_id and group_id.strip():
        return group_id.strip()
    return None


def _session_id(session: Any) -> str | None:
    """The session's id, or None while it has none: the SDK's ``OpenAIConversationsSession`` raises
    (ValueError) until its first API call creates the conversation, so its first run is scoped by the
    group or the trace, and the following runs by the conversation."""
    if session is None:
        return None
    try:
        session_id = session.session_id
    except Exception:
        return None
    return session_id.strip() if isinstance(session_id, str) and session_id.strip() else None


class AgentsBridge:
    """The pieces that wire one :class:`~otel_errcompact.ErrCompact` handle into the Agents SDK."""

    def __init__(self, ec: ErrCompact) -> None:
        self.ec = bridged_handle("AgentsBridge", ec)
        self._runs = _RunScopes()
        self._warned_unscoped = False

    # -- tools -----------------------------------------------------------------------------------------

    def function_tool(self, fn: Callable[..., Any], **kwargs: Any) -> FunctionTool:
        """``agents.function_tool(fn, failure_error_function=self.failure_error_function, **kwargs)``."""
        return function_tool(fn, failure_error_function=self.failure_error_function, **kwargs)

    def failure_error_function(self, ctx: RunContextWrapper[Any], error: Exception) -> str:
        """The tool output for a failed call: the digest of ``error`` with its count. Raises
        :class:`RunHalted` on the failure that breaches a ``halt`` threshold (and on a standing breach).
        With the library switched off, the SDK's own text, as without the bridge. A call whose own task was
        cancelled is no failure: the model is told it was cancelled, and nothing is counted."""
        if not self.ec.settings.enabled:
            return default_tool_error_function(ctx, error)
        framework_span = trace.get_current_span()
        if isinstance(error, ErrorBudgetExceeded):  # an @ec.tool inside refused to run: stop the run
            raise _halted(framework_span, error.escalation) from None
        scope = self._scope(ctx)
        self._check(scope, framework_span)  # a parallel call of a turn that already breached
        tool_ctx = ctx if isinstance(ctx, ToolContext) else None
        name = tool_ctx.tool_name if tool_ctx is not None else "tool"
        if _cancellation(error):  # neither a failure nor a success, as a cancelled call at the tool boundary
            return f"Cancelled: {name} (cancelled)"
        counted = self.ec.boundary.raised_by_tool(error)
        if counted is not None:  # an @ec.tool(on_error="raise") inside counted it already
            return _answer(framework_span, counted)
        with (
            conversation(scope),
            self.ec.tool_call(
                name,
                call_id=tool_ctx.tool_call_id if tool_ctx is not None else None,
                arguments=_arguments_of(tool_ctx.tool_arguments) if tool_ctx is not None else None,
                on_error="digest",  # whatever on_tool_error says: the tool output is the digest, or the halt
            ) as call,
        ):
            call.model_text = lambda _exc: default_tool_error_function(ctx, error)  # the savings basis
            agent = getattr(ctx, "agent", None)
            if agent is not None and getattr(agent, "name", None):
                call.span.set_attribute(semconv.GEN_AI_AGENT_NAME, str(agent.name))
            raise error.with_traceback(error.__traceback__)
        text = call.error
        if text is None:  # the boundary could not describe it; never leave the model without an answer
            return "Error: " + "".join(traceback.format_exception_only(type(error), error)).strip()
        return _answer(framework_span, text)

    # -- the model's input -------------------------------------------------------------------------------

    def instructions(
        self, base: str | Callable[[RunContextWrapper[Any], Agent[Any]], str | Awaitable[str]]
    ) -> Callable[[RunContextWrapper[Any], Agent[Any]], Awaitable[str]]:
        """Dynamic instructions: ``base`` followed by the scope's ``[RECENT ERRORS]`` block, rebuilt for
        each model call. A standing breach raises :class:`RunHalted` before the model is called.

        ``base`` is a string or, as the SDK's own dynamic instructions, a function of the run context and
        the agent, sync or async. What this returns is async (the SDK awaits it), so that an async
        ``base`` is awaited here rather than its coroutine sent as the text."""

        async def build(ctx: RunContextWrapper[Any], agent: Agent[Any]) -> str:
            scope = self._scope(ctx)
            if scope == semconv.DEFAULT_SCOPE:
                self._unscoped_model_call_noted()
            self._check(scope)
            made = base(ctx, agent) if callable(base) else base
            text = await made if inspect.isawaitable(made) else made
            block = self.ec.context(scope)
            return f"{text}\n\n{block}" if block else text

        return build

    # -- runs --------------------------------------------------------------------------------------------

    async def run(self, starting_agent: Agent[Any], input: Any, **kwargs: Any) -> RunResult:
        """``Runner.run`` with the scope set from its ``conversation_id``, ``session`` or ``run_config``."""
        scope = run_scope(
            conversation_id=kwargs.get("conversation_id"),
            session=kwargs.get("session"),
            run_config=kwargs.get("run_config"),
        )
        if scope is None:
            return await Runner.run(starting_agent, input, **kwargs)
        with conversation(scope):
            return await Runner.run(starting_agent, input, **kwargs)

    def run_sync(self, starting_agent: Agent[Any], input: Any, **kwargs: Any) -> RunResult:
        """``Runner.run_sync`` with the scope set as :meth:`run` does."""
        scope = run_scope(
            conversation_id=kwargs.get("conversation_id"),
            session=kwargs.get("session"),
            run_config=kwargs.get("run_config"),
        )
        if scope is None:
            return Runner.run_sync(starting_agent, input, **kwargs)
        with conversation(scope):
            return Runner.run_sync(starting_agent, input, **kwargs)

    # -- internals ---------------------------------------------------------------------------------------

    def _scope(self, ctx: RunContextWrapper[Any]) -> str:
        explicit = current_conversation()
        if explicit:
            return explicit
        run_config = getattr(ctx, "run_config", None)  # a ToolContext's; the wrapper instructions get has none
        found = run_scope(run_config=run_config if isinstance(run_config, RunConfig) else None)
        if found:
            self._runs.remember(ctx, found)
            return found
        found = self._runs.recall(ctx)
        if found:
            return found
        current = get_current_trace()
        group_id = getattr(current, "group_id", None) if current is not None else None
        if isinstance(group_id, str) and group_id.strip():
            return group_id.strip()
        trace_id = getattr(current, "trace_id", None) if current is not None else None
        if isinstance(trace_id, str) and trace_id and trace_id != "no-op":
            return f"agents:{trace_id}"
        return self.ec.boundary.current_scope()

    def _unscoped_model_call_noted(self) -> None:
        """Log, once per bridge, that a model call's scope could not be told (see :class:`_RunScopes`)."""
        if self._warned_unscoped or not self.ec.settings.enabled:
            return
        self._warned_unscoped = True
        _log.warning(
            "otel-errcompact: an Agents SDK model call with no trace and no scope set by AgentsBridge.run: "
            "it is in the scope %r until a tool call of the run fails and shows the run's group_id, so a "
            "breached group is stopped only at its first tool call; start runs with AgentsBridge.run / "
            "run_sync (logged once)",
            semconv.DEFAULT_SCOPE,
        )

    def _check(self, scope: str, tool_span: trace.Span | None = None) -> None:
        """Raise :class:`RunHalted` on a standing breach of ``scope``; ``tool_span`` is the SDK's span of
        the tool call the halt stops, if any (see :func:`_halted`)."""
        try:
            self.ec.check(scope)
        except ErrorBudgetExceeded as exc:
            raise _halted(tool_span, exc.escalation) from None


def _cancellation(error: Exception) -> bool:
    """Whether ``error`` is how the SDK hands ``failure_error_function`` a call whose own task was
    cancelled (the work the tool awaited was cancelled under it): its wrapper of the ``CancelledError``,
    which it keeps as ``cancelled_error``. Recorded as the tool's failure, it broke the streak of the
    failures around it; the SDK ends the call's span with ``Tool execution cancelled``, which the span
    processor counts as neither a failure nor a success."""
    try:
        return isinstance(getattr(error, "cancelled_error", None), asyncio.CancelledError)
    except Exception:  # an exception whose __getattr__ raises
        return False


def _arguments_of(text: str | None) -> Any:
    """A tool call's arguments, decoded from the JSON text the model sent (``ToolContext.tool_arguments``):
    the boundary encodes what it is given, and the span and the record must hold the arguments, not a
    JSON string of their JSON. Text that is not JSON is passed on as it is."""
    if not text:
        return None
    try:
        return json.loads(text)
    except Exception:  # not JSON, or nested too deep to decode
        return text


class _RunScopes:
    """The scope the tool calls of each run resolved from its ``RunConfig``, for its model calls.

    The SDK hands dynamic instructions a ``RunContextWrapper`` without the run's config, and with its
    tracing off there is no trace to read the ``group_id`` from: a plain ``Runner.run`` would put its
    model calls in another scope than its tool calls. Every wrapper of one run (its tool calls'
    ``ToolContext`` too) shares the run's ``usage`` object, so the scope is remembered by that object, for
    as long as it lives."""

    def __init__(self) -> None:
        self._scopes: dict[int, str] = {}
        self._lock = threading.Lock()

    def remember(self, ctx: RunContextWrapper[Any], scope: str) -> None:
        usage = getattr(ctx, "usage", None)
        if usage is None:
            return
        key = id(usage)
        with self._lock:
            known = self._scopes.get(key)
            self._scopes[key] = scope
        if known is None:
            try:
                weakref.finalize(usage, self._forget, key)  # before its id can be reused
            except TypeError:  # not weakly referable: not remembered, rather than kept for ever
                self._forget(key)

    def recall(self, ctx: RunContextWrapper[Any]) -> str | None:
        usage = getattr(ctx, "usage", None)
        if usage is None:
            return None
        with self._lock:
            return self._scopes.get(id(usage))

    def _forget(self, key: int) -> None:
        with self._lock:
            self._scopes.pop(key, None)


_RUN_HALTED_TYPE = f"{RunHalted.__module__}.{RunHalted.__qualname__}"


def _halted(tool_span: trace.Span | None, escalation: Escalation) -> RunHalted:
    """The halt that stops a run inside a tool call. The SDK ends that call's span with an error whose
    message is the halt's: naming the halt as the span's ``error.type`` tells the span processor that it
    is not one more tool failure (as it is for the other calls of a turn of parallel calls, which reach
    :meth:`AgentsBridge.failure_error_function` after the one that breached)."""
    if isinstance(tool_span, SdkSpan) and tool_span.is_recording():
        tool_span.set_attribute(semconv.ERROR_TYPE, _RUN_HALTED_TYPE)
    return RunHalted(escalation)


def _answer(framework_span: trace.Span, text: ToolErrorText) -> str:
    """The tool output for a failure the boundary counted: its text, with the SDK's span marked as handled;
    raises :class:`RunHalted` when the failure breached a ``halt`` threshold."""
    _mark_handled(framework_span, text.outcome)
    escalation = text.outcome.observation.escalation if text.outcome is not None else None
    if escalation is not None and escalation.action == "halt":
        raise RunHalted(escalation)
    return str(text)


def _mark_handled(span: trace.Span, outcome: Any) -> None:
    """Put the digest on the SDK's own tool span (when it is an SDK span still open), which also tells
    the span processor that this failure is already counted."""
    if outcome is None or not isinstance(span, SdkSpan) or not span.is_recording():
        return
    span.set_attributes(
        {
            "errcompact.digest": outcome.digest.line,
            "errcompact.key": outcome.digest.key,
            "errcompact.count": outcome.observation.count,
        }
    )
