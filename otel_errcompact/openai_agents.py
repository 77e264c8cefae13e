"""OpenAI Agents SDK bridge (public face); see :mod:`otel_errcompact.integrations.openai_agents`."""

from otel_errcompact.integrations.openai_agents import AgentsBridge, RunHalted, run_scope

__all__ = ["AgentsBridge", "RunHalted", "run_scope"]
