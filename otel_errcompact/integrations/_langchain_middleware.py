"""The LangGraph bridge as middleware for langchain's ``create_agent`` (langchain 1.x).

``create_agent`` builds its ToolNode itself (with LangGraph's default ``handle_tool_errors``) and chains
each middleware's ``wrap_tool_call`` into it, so the bridge's interceptor slots in unchanged. The block
goes into ``wrap_model_call``: appended to the request's system message for this model call only, which
is how it replaces the previous one. Imported only by :meth:`LangGraphBridge.middleware`, so the bridge
works without langchain installed.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any

from langchain.agents.middleware import AgentMiddleware, ModelRequest, ModelResponse
from langchain_core.messages import SystemMessage
from langgraph.prebuilt.tool_node import ToolCallRequest

if TYPE_CHECKING:
    from otel_errcompact.integrations.langgraph import LangGraphBridge, ToolResult

__all__ = ["ErrCompactMiddleware"]

ModelResult = Any  # ModelResponse | AIMessage | ExtendedModelResponse: passed through untouched


class ErrCompactMiddleware(AgentMiddleware[Any, Any, Any]):
    """``create_agent(model, tools, middleware=[bridge.middleware()])``."""

    name = "otel_errcompact"

    def __init__(self, bridge: LangGraphBridge) -> None:
        super().__init__()
        self._bridge = bridge

    def wrap_tool_call(self, request: ToolCallRequest, handler: Callable[[ToolCallRequest], ToolResult]) -> ToolResult:
        return self._bridge.wrap_tool_call(request, handler)

    async def awrap_tool_call(
        self, request: ToolCallRequest, handler: Callable[[ToolCallRequest], Awaitable[ToolResult]]
    ) -> ToolResult:
        return await self._bridge.awrap_tool_call(request, handler)

    def wrap_model_call(
        self, request: ModelRequest[Any], handler: Callable[[ModelRequest[Any]], ModelResponse[Any]]
    ) -> ModelResult:
        return handler(self._with_block(request))

    async def awrap_model_call(
        self, request: ModelRequest[Any], handler: Callable[[ModelRequest[Any]], Awaitable[ModelResponse[Any]]]
    ) -> ModelResult:
        return await handler(self._with_block(request))

    def _with_block(self, request: ModelRequest[Any]) -> ModelRequest[Any]:
        """Stop a breached thread; else the request with the block after its system prompt."""
        scope = self._bridge.current_scope()
        self._bridge.ec.check(scope)
        block = self._bridge.ec.context(scope)
        if not block:
            return request
        system = request.system_prompt
        text = f"{system}\n\n{block}" if system else block
        return request.override(system_message=SystemMessage(content=text))
