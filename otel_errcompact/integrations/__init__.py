"""Bridges to agent frameworks: :mod:`otel_errcompact.langgraph` and :mod:`otel_errcompact.openai_agents`.

Each bridge hooks into the framework's own extension points (LangGraph's ``ToolNode(wrap_tool_call=…)``
and ``pre_model_hook``; the Agents SDK's ``failure_error_function`` and dynamic ``instructions``) so that
a failed tool call reaches the model as one digest line with its count, a breach stops the run with an
exception the framework does not swallow, the history scope follows the framework's own notion of a
conversation, and the ``[RECENT ERRORS]`` block is rebuilt for each model call instead of piling up.
The framework packages are imported only by the bridge modules, never by the core.
"""
