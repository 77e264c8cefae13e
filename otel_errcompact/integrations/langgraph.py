"""LangGraph bridge: digests in ToolMessages, halts that stop the graph, one scope per thread.

Wiring (``create_react_agent``; a hand-built graph uses the same two pieces)::

    import otel_errcompact
    from otel_errcompact.langgraph import LangGraphBridge

    ec = otel_errcompact.init(service_name="orders-agent")
    bridge = LangGraphBridge(ec)
    agent = create_react_agent(model, bridge.tool_node([count_orders]), pre_model_hook=bridge.pre_model_hook)
    agent.invoke({"messages": [...]}, config={"configurable": {"thread_id": "chat-42"}})

- :meth:`LangGraphBridge.wrap_tool_call` is ToolNode's ``wrap_tool_call`` interceptor: a failed tool
  call comes back as ``ToolMessage(status="error")`` holding only the digest line and its count (also
  the one ToolNode makes of a digest a digest-mode ``@ec.tool`` returns, counted by that tool); the
  failure that breaches a ``halt`` threshold raises :class:`~otel_errcompact.ErrorBudgetExceeded`.
  ToolNode hands an interceptor's exception to ``handle_tool_errors``; LangGraph's default handler
  re-raises everything but argument-validation errors, so the halt reaches ``invoke``'s caller. Keep
  that default: ``handle_tool_errors=True`` would turn the halt into one more ToolMessage (the
  pre-model hook below still stops the run at the next model step).
- :meth:`LangGraphBridge.pre_model_hook` (``create_react_agent(pre_model_hook=…)``, or a node before
  the model node) raises the standing breach of the thread, and passes the model the thread's
  ``[RECENT ERRORS]`` block through ``llm_input_messages``: the block is rebuilt for every model call
  and never stored in the graph state, so it replaces the previous one instead of accumulating.
- The scope is the config's ``thread_id`` (``configurable.thread_id``), so threads never share a
  history; without one, the library's default scope rules apply (trace, else ``default``), read under the
  instrumentation's span of the run when there is one: each run is then its own scope. A run with neither a
  thread nor a trace shares ``default`` with every other such run, and a halt there stops them all (the
  bridge logs that once).
- With OpenInference's LangChain instrumentation active, the library's ``execute_tool`` span is a
  child of the instrumentation's ``tools`` node span, so it and the escalation event sit in the
  graph's trace; a halt propagates as an exception, so the graph's spans end with status ERROR.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable, Sequence
from typing import Any

from opentelemetry import context as otel_context
from opentelemetry import trace

from otel_errcompact import semconv
from otel_errcompact.api import ErrCompact
from otel_errcompact.boundary import ToolErrorText
from otel_errcompact.exceptions import ErrorBudgetExceeded
from otel_errcompact.history import Escalation
from otel_errcompact.integrations import bridged_handle, framework_missing
from otel_errcompact.integrations._calls import BridgedCall, run_async, run_sync

try:
    from langchain_core.messages import AnyMessage, SystemMessage, ToolMessage
    from langchain_core.runnables import RunnableConfig
    from langgraph.config import get_config
    from langgraph.prebuilt import ToolNode
    from langgraph.prebuilt.tool_node import TOOL_CALL_ERROR_TEMPLATE, ToolCallRequest
    from langgraph.types import Command
except ImportError as error:  # not installed, or older than ToolNode(wrap_tool_call=...)
    raise framework_missing("otel_errcompact.langgraph", "langgraph", error) from error

__all__ = ["BLOCK_NAME", "LangGraphBridge", "thread_scope", "with_block"]

ToolResult = ToolMessage | Command[Any]

_log = logging.getLogger("otel_errcompact")

BLOCK_NAME = "errcompact_recent_errors"
"""The ``name`` of the SystemMessage that carries the block, so it can be recognised and replaced."""


def thread_scope(config: RunnableConfig | None) -> str | None:
    """The history scope of a LangGraph run: its ``thread_id``, if the config has one."""
    configurable = (config or {}).get("configurable") or {}
    thread_id = configurable.get("thread_id")
    return str(thread_id) if thread_id not in (None, "") else None


def _framework_span() -> trace.Span | None:
    """The OpenInference span of the LangChain run in progress (the graph's ``tools`` node), if that
    instrumentation is active: it does not put its spans in the OpenTelemetry context."""
    try:
        from openinference.instrumentation.langchain import LangChainInstrumentor, get_current_span
    except ImportError:
        return None
    try:
        if not LangChainInstrumentor().is_instrumented_by_opentelemetry:
            return None  # asking an uninstrumented instrumentor for a span logs a warning per call
        span = get_current_span()
    except Exception:
        return None
    return span if span is not None and span.is_recording() else None


def _halt(escalation: Escalation) -> BaseException:
    return ErrorBudgetExceeded(escalation)


class LangGraphBridge:
    """The pieces that wire one :class:`~otel_errcompact.ErrCompact` handle into LangGraph.

    ``agent_name`` names the agent in trajectory records and on the library's spans: LangGraph 1.2 does
    not hand the graph's name to its nodes (an ``lc_agent_name`` in the run's metadata is used first).
    """

    def __init__(self, ec: ErrCompact, *, agent_name: str | None = None) -> None:
        self.ec = bridged_handle("LangGraphBridge", ec)
        self.agent_name = agent_name
        self._warned_shared_scope = False

    # -- tools ---------------------------------------------------------------------------------------

    def tool_node(self, tools: Sequence[Any], **kwargs: Any) -> ToolNode:
        """A ``ToolNode`` with this bridge's interceptors (LangGraph's default ``handle_tool_errors``)."""
        return ToolNode(tools, wrap_tool_call=self.wrap_tool_call, awrap_tool_call=self.awrap_tool_call, **kwargs)

    def wrap_tool_call(self, request: ToolCallRequest, execute: Callable[[ToolCallRequest], ToolResult]) -> ToolResult:
        """ToolNode's ``wrap_tool_call``: run the call; a failure becomes an error ToolMessage."""
        result = run_sync(self.ec, lambda: execute(request), self._bridged(request))
        return _as_message(result, request)

    async def awrap_tool_call(
        self, request: ToolCallRequest, execute: Callable[[ToolCallRequest], Awaitable[ToolResult]]
    ) -> ToolResult:
        """ToolNode's ``awrap_tool_call``: the ``async`` form of :meth:`wrap_tool_call`."""
        result = await run_async(self.ec, lambda: execute(request), self._bridged(request))
        return _as_message(result, request)

    def _bridged(self, request: ToolCallRequest) -> BridgedCall[ToolResult]:
        """The call as both interceptors hand it to the bridge: ToolNode's own error messages are failures."""
        call = request.tool_call
        parent = _framework_span()
        return BridgedCall(
            name=str(call["name"]),
            call_id=call.get("id"),
            arguments=call.get("args"),
            scope=self._scope_of(_config_of(request), parent),
            agent_name=self._agent_name(request),
            parent=parent,
            halt=_halt,
            data_error=_error_text,
            model_text=_langgraph_text,
            handed_back=_failed_message,
        )

    # -- the model's input -----------------------------------------------------------------------------

    def pre_model_hook(self, state: Any) -> dict[str, list[AnyMessage]]:
        """``create_react_agent(pre_model_hook=…)``: stop a breached thread, and give the model the
        thread's messages with the current ``[RECENT ERRORS]`` block (not stored in the state)."""
        scope = self._current_scope()
        self.ec.check(scope)
        messages = list(_messages_of(state))
        return {"llm_input_messages": with_block(messages, self.ec.context(scope))}

    def middleware(self) -> Any:
        """The same bridge as middleware for langchain's ``create_agent`` (langchain 1.x):
        ``create_agent(model, tools, middleware=[bridge.middleware()])``."""
        try:
            from otel_errcompact.integrations._langchain_middleware import ErrCompactMiddleware
        except (ImportError, TypeError) as error:  # TypeError: AgentMiddleware before its third type parameter
            raise framework_missing("LangGraphBridge.middleware()", "langgraph", error) from error
        return ErrCompactMiddleware(self)

    def current_scope(self) -> str:
        """The scope of the graph run in progress: its ``thread_id``, else the library's default rules."""
        return self._current_scope()

    # -- internals ----------------------------------------------------------------------------------

    def _current_scope(self) -> str:
        try:
            config: RunnableConfig | None = get_config()
        except RuntimeError:
            config = None
        return self._scope_of(config, _framework_span())

    def _scope_of(self, config: RunnableConfig | None, span: trace.Span | None) -> str:
        """The run's ``thread_id``; else the library's default rules, applied under ``span`` (the
        instrumentation's span of the run, which is not in the OpenTelemetry context): the run's trace,
        so that a run without a thread is not counted with every other one in ``default``."""
        scope = thread_scope(config)
        if scope is not None:
            return scope
        token = None
        if span is not None and span.get_span_context().is_valid:
            token = otel_context.attach(trace.set_span_in_context(span))
        try:
            scope = self.ec.boundary.current_scope()
        finally:
            if token is not None:
                otel_context.detach(token)
        if scope == semconv.DEFAULT_SCOPE:
            self._shared_scope_noted()
        return scope

    def _shared_scope_noted(self) -> None:
        """Log, once per bridge, that runs with neither a thread nor a trace share one scope."""
        if self._warned_shared_scope or not self.ec.settings.enabled:
            return
        self._warned_shared_scope = True
        _log.warning(
            "otel-errcompact: a LangGraph run with no configurable.thread_id, outside any trace, counts its "
            "tool failures in the scope %r shared by every such run: a halt there stops them all; pass a "
            "thread_id, or trace the runs (logged once)",
            semconv.DEFAULT_SCOPE,
        )

    def _agent_name(self, request: ToolCallRequest) -> str | None:
        config = _config_of(request)
        metadata = (config or {}).get("metadata") or {}
        name = metadata.get("lc_agent_name")
        return str(name) if name else self.agent_name


def with_block(messages: Sequence[AnyMessage], block: str) -> list[AnyMessage]:
    """``messages`` with the block as a SystemMessage after the leading system messages; an earlier
    block is dropped, so there is never more than one."""
    kept = [m for m in messages if not (isinstance(m, SystemMessage) and m.name == BLOCK_NAME)]
    if not block:
        return kept
    at = 0
    while at < len(kept) and isinstance(kept[at], SystemMessage):
        at += 1
    return [*kept[:at], SystemMessage(content=block, name=BLOCK_NAME), *kept[at:]]


def _config_of(request: ToolCallRequest) -> RunnableConfig | None:
    """The config of the graph run a tool call belongs to (from the call's runtime)."""
    runtime = request.runtime
    config: RunnableConfig | None = getattr(runtime, "config", None) if runtime is not None else None
    return config


def _messages_of(state: Any) -> Sequence[AnyMessage]:
    if isinstance(state, dict):
        return state.get("messages") or ()
    return getattr(state, "messages", None) or ()


def _langgraph_text(error: BaseException) -> str:
    """What ``ToolNode(handle_tool_errors=True)`` would have fed back: the savings metrics' basis."""
    return TOOL_CALL_ERROR_TEMPLATE.format(error=repr(error))


def _error_text(result: ToolResult) -> str | None:
    """The text of an error ToolMessage ToolNode made itself (``handle_tool_errors``), else None."""
    if isinstance(result, ToolMessage) and result.status == "error":
        return str(result.content)
    return None


def _failed_message(result: ToolResult, text: ToolErrorText) -> ToolResult:
    """The ToolMessage ToolNode made of a digest a tool handed back as its result (an ``@ec.tool`` in
    digest mode), with ``status="error"``, as LangGraph marks a failed call and as the bridge's own
    messages for a failure are (it read "success" with the digest as its content)."""
    if isinstance(result, ToolMessage) and result.status != "error" and result.content == str(text):
        return result.model_copy(update={"status": "error"})
    return result


def _as_message(result: ToolResult | ToolErrorText, request: ToolCallRequest) -> ToolResult:
    if isinstance(result, ToolErrorText):
        return ToolMessage(
            content=str(result),
            name=request.tool_call["name"],
            tool_call_id=request.tool_call.get("id") or "",
            status="error",
        )
    return result
