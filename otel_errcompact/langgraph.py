"""LangGraph bridge (public face); see :mod:`otel_errcompact.integrations.langgraph`."""

from otel_errcompact.integrations.langgraph import BLOCK_NAME, LangGraphBridge, thread_scope, with_block

__all__ = ["BLOCK_NAME", "LangGraphBridge", "thread_scope", "with_block"]
