"""Read tool and agent spans the way the three common conventions write them.

- OpenTelemetry GenAI: ``gen_ai.operation.name`` = ``execute_tool`` / ``invoke_agent`` (or
  ``invoke_workflow``), ``gen_ai.tool.name``,
  ``gen_ai.tool.call.id``, ``gen_ai.tool.call.arguments``, ``gen_ai.conversation.id``, ``error.type``;
- OpenInference (Arize): ``openinference.span.kind`` = ``TOOL`` / ``AGENT``, ``tool.name``, ``tool.id``,
  ``input.value``, ``session.id``;
- OpenLLMetry (Traceloop): ``traceloop.span.kind`` = ``tool`` / ``agent``, ``traceloop.entity.name``,
  ``traceloop.entity.input``.

The GenAI conventions record a tool call's arguments and result as an object where the SDK takes
structured attribute values (the Python SDK does), else as a JSON string: both are read as
JSON text (:func:`attribute_text`).

Exceptions arrive as ``exception`` span events (the SDK's ``record_exception``) or, with
``OTEL_SEMCONV_EXCEPTION_SIGNAL_OPT_IN=logs``, as log records carrying the same ``exception.*``
attributes. Functions here take plain attribute mappings so they can be tested without a span.
"""

from __future__ import annotations

import json
from collections import deque
from collections.abc import Iterable, Mapping
from typing import Any

from opentelemetry.sdk.trace import Event as _SdkEvent

from otel_errcompact.trajectory import jsonable

__all__ = [
    "AGENT_KINDS",
    "AGENT_NAME_ATTRIBUTES",
    "AGENT_OPERATIONS",
    "CONVERSATION_ATTRIBUTES",
    "ERROR_TYPE",
    "EXCEPTION_EVENT",
    "GEN_AI_AGENT_ID",
    "GEN_AI_AGENT_NAME",
    "GEN_AI_CONVERSATION_ID",
    "GEN_AI_OPERATION_NAME",
    "GEN_AI_TOOL_CALL_ARGUMENTS",
    "GEN_AI_TOOL_CALL_ID",
    "GEN_AI_TOOL_CALL_RESULT",
    "GEN_AI_TOOL_DESCRIPTION",
    "GEN_AI_TOOL_NAME",
    "GEN_AI_TOOL_TYPE",
    "OPENINFERENCE_KIND",
    "TOOL_ARGUMENTS_ATTRIBUTES",
    "TOOL_CALL_ID_ATTRIBUTES",
    "TRACELOOP_KIND",
    "agent_name",
    "attribute_text",
    "conversation_id",
    "error_type_of",
    "exception_from_attributes",
    "exception_from_events",
    "is_agent_span",
    "is_tool_span",
    "scope_for",
    "tool_arguments",
    "tool_call_id",
    "tool_name",
    "tool_result",
]

GEN_AI_OPERATION_NAME = "gen_ai.operation.name"
GEN_AI_TOOL_NAME = "gen_ai.tool.name"
GEN_AI_TOOL_CALL_ID = "gen_ai.tool.call.id"
GEN_AI_TOOL_CALL_ARGUMENTS = "gen_ai.tool.call.arguments"
GEN_AI_TOOL_CALL_RESULT = "gen_ai.tool.call.result"
GEN_AI_TOOL_DESCRIPTION = "gen_ai.tool.description"
GEN_AI_TOOL_TYPE = "gen_ai.tool.type"
"""``function`` for a function the application runs on the model's arguments (the conventions' other values:
``extension``, ``datastore``)."""
GEN_AI_CONVERSATION_ID = "gen_ai.conversation.id"
GEN_AI_AGENT_NAME = "gen_ai.agent.name"
GEN_AI_AGENT_ID = "gen_ai.agent.id"
ERROR_TYPE = "error.type"
EXCEPTION_EVENT = "exception"

OPENINFERENCE_KIND = "openinference.span.kind"
TRACELOOP_KIND = "traceloop.span.kind"
AGENT_OPERATIONS = ("invoke_agent", "create_agent", "invoke_workflow")
"""``gen_ai.operation.name`` values of an agent span. ``invoke_workflow`` (a process of several agents, in
the GenAI conventions since their agent spans) counts as one, as OpenLLMetry's ``workflow`` kind does: the
conversation it records is its agents' and their tools'."""
AGENT_KINDS = ("agent", "workflow")
"""``traceloop.span.kind`` values of an agent span."""
CONVERSATION_ATTRIBUTES = (GEN_AI_CONVERSATION_ID, "session.id", "traceloop.association.properties.session_id")
"""Where the three conventions record the conversation (session), in order of preference."""
AGENT_NAME_ATTRIBUTES = (GEN_AI_AGENT_NAME, "agent.name", "traceloop.entity.name")
"""Where the agent's name is recorded, in order of preference (``traceloop.entity.name`` names the span's
own entity: an agent's name only on an agent or workflow span, see :func:`agent_name`)."""
TOOL_CALL_ID_ATTRIBUTES = (GEN_AI_TOOL_CALL_ID, "tool.id", "tool_call.id", "tool.call_id")
"""Where the model-assigned id of a tool call is recorded, in order of preference. OpenInference records
it on a TOOL span as ``tool.id`` ("the identifier for the result of the tool call, corresponding to
``tool_call.id``", its message-level attribute)."""
TOOL_ARGUMENTS_ATTRIBUTES = (GEN_AI_TOOL_CALL_ARGUMENTS, "input.value", "traceloop.entity.input")
"""Where a tool call's arguments are recorded (opt-in in all three conventions), in order of preference.
OpenInference's ``tool.parameters`` is not among them: it holds the tool's parameter schema, not the call's
arguments (``input.value``)."""


def is_tool_span(attrs: Mapping[str, Any]) -> bool:
    """True for a tool-execution span in any of the three conventions."""
    return (
        attrs.get(GEN_AI_OPERATION_NAME) == "execute_tool"
        or attrs.get(OPENINFERENCE_KIND) == "TOOL"
        or attrs.get(TRACELOOP_KIND) == "tool"
    )


def is_agent_span(attrs: Mapping[str, Any]) -> bool:
    """True for an agent-invocation span (the span an escalation event is added to)."""
    return (
        attrs.get(GEN_AI_OPERATION_NAME) in AGENT_OPERATIONS
        or attrs.get(OPENINFERENCE_KIND) == "AGENT"
        or attrs.get(TRACELOOP_KIND) in AGENT_KINDS
    )


def _first_str(attrs: Mapping[str, Any], *names: str) -> str | None:
    for name in names:
        value = attrs.get(name)
        if value is not None and value != "":
            return str(value)
    return None


def tool_name(attrs: Mapping[str, Any], span_name: str | None = None) -> str | None:
    """The tool's name; from the span name ``execute_tool {name}`` when no attribute carries it."""
    name = _first_str(attrs, GEN_AI_TOOL_NAME, "tool.name", "traceloop.entity.name")
    if name is None and span_name and span_name.startswith("execute_tool "):
        name = span_name[len("execute_tool ") :].strip() or None
    return name


def tool_call_id(attrs: Mapping[str, Any]) -> str | None:
    """The model-assigned id of this tool call, when recorded."""
    return _first_str(attrs, *TOOL_CALL_ID_ATTRIBUTES)


def attribute_text(value: Any) -> str:
    """An attribute value as text: a string as it is, a structured value (a mapping or a sequence, as the
    GenAI conventions record a tool call's arguments and result) as the JSON string the conventions give
    for it where a string is needed (``str`` would make a Python repr of it, with single quotes and
    tuples), anything else by ``str``."""
    if isinstance(value, str):
        return value
    if isinstance(value, (Mapping, list, tuple)):
        return json.dumps(jsonable(value), ensure_ascii=False)
    return str(value)


def tool_arguments(attrs: Mapping[str, Any]) -> str | None:
    """The arguments the tool was called with, when recorded (opt-in in all three conventions): JSON text
    also when the span records them as an object."""
    for name in TOOL_ARGUMENTS_ATTRIBUTES:
        value = attrs.get(name)
        if value is not None and value != "":
            return attribute_text(value)
    return None


def tool_result(attrs: Mapping[str, Any]) -> str | None:
    """What the tool returned (``gen_ai.tool.call.result``, opt-in), as text (JSON for an object); None
    when absent or empty."""
    value = attrs.get(GEN_AI_TOOL_CALL_RESULT)
    return attribute_text(value) if value else None


def conversation_id(attrs: Mapping[str, Any]) -> str | None:
    """The conversation (session) the span belongs to, when recorded."""
    return _first_str(attrs, *CONVERSATION_ATTRIBUTES)


def agent_name(attrs: Mapping[str, Any]) -> str | None:
    """The agent's name, when recorded. OpenLLMetry's ``traceloop.entity.name`` counts only on its agent
    and workflow spans: on a tool span it is the tool's name."""
    name = _first_str(attrs, GEN_AI_AGENT_NAME, "agent.name")
    if name is None and attrs.get(TRACELOOP_KIND) in AGENT_KINDS:
        name = _first_str(attrs, "traceloop.entity.name")
    return name


def error_type_of(error_type: str | None, exception_type: str | None, fallback: str) -> str:
    """The ``error.type`` to report for a failure in metrics and log records: the one its span records
    (the conventions ask for the same value on a failure's span, metrics and logs), else its exception's
    type (a fully-qualified class name, as the conventions define ``error.type`` for an exception), else
    ``fallback`` (the digest's type, for a failure described by text alone)."""
    return error_type or exception_type or fallback


def exception_from_attributes(attrs: Mapping[str, Any]) -> tuple[str | None, str | None, str | None] | None:
    """``(type, message, stacktrace)`` from ``exception.*`` attributes, or ``None`` when absent."""
    etype = attrs.get("exception.type")
    message = attrs.get("exception.message")
    stack = attrs.get("exception.stacktrace")
    if etype is None and message is None and stack is None:
        return None
    return (
        str(etype) if etype is not None else None,
        str(message) if message is not None else None,
        str(stack) if stack is not None else None,
    )


def exception_from_events(events: Iterable[Any]) -> tuple[str | None, str | None, str | None] | None:
    """The last ``exception`` event's ``(type, message, stacktrace)``: the one that ended the span.

    Read on the agent's thread for every failed tool span: the events are searched from the newest (by
    index when they are a sequence: iterating the SDK's ``BoundedList`` copies it under a lock), and
    an SDK event's attributes are read through their plain dict (``BoundedAttributes.get`` goes through
    the slower ``Mapping`` mixin)."""
    dq = getattr(events, "_dq", None)
    if type(dq) is deque:
        # The SDK's BoundedList: its deque, indexed directly (each of the list's own len and [] is a
        # Python call, on the agent's thread). Indexing a deque is safe while another thread appends:
        # only iterating it raises.
        if dq:
            # The common case, first: the span's last event is the SDK's exception event, its attributes
            # the SDK's BoundedAttributes with the three texts record_exception writes.
            last = dq[-1]
            if type(last) is _SdkEvent and last._name == EXCEPTION_EVENT:
                plain = getattr(last._attributes, "_dict", None)
                if type(plain) is dict:
                    etype, message, stack = (
                        plain.get("exception.type"), plain.get("exception.message"), plain.get("exception.stacktrace")
                    )
                    if type(etype) is str and type(message) is str and type(stack) is str:
                        return etype, message, stack
        events = dq
    try:
        count = len(events)  # type: ignore[arg-type]
        if not count:  # a span that failed without recording an exception, as a one-line error does
            return None
        events[0]  # type: ignore[index]  # a sequence: indexed without a copy
    except (TypeError, IndexError, KeyError):
        events = tuple(events)
        count = len(events)
    for index in range(count - 1, -1, -1):
        event = events[index]  # type: ignore[index]
        if type(event) is _SdkEvent:  # its fields: ``name`` and ``attributes`` are Python properties
            if event._name != EXCEPTION_EVENT:
                continue
            attributes = event._attributes
        else:
            if getattr(event, "name", None) != EXCEPTION_EVENT:
                continue
            attributes = getattr(event, "attributes", None)
        if attributes is None:
            continue
        plain = getattr(attributes, "_dict", None)
        if isinstance(plain, dict):  # tested for emptiness too: BoundedAttributes' len is a Python call
            attributes = plain
        if not attributes:
            continue
        found = exception_from_attributes(attributes)
        if found is not None:
            return found
    return None


DEFAULT_SCOPE = "default"
"""The scope of tool calls that belong to no conversation and no larger trace (top-level calls)."""


def scope_for(conversation: str | None, trace_id: int | None, in_trace: bool) -> str:
    """The history scope of a tool call: its conversation, else its trace when the call is part of a
    larger trace (an agent run), else :data:`DEFAULT_SCOPE` so repeated top-level calls still count
    together."""
    if conversation:
        return conversation
    if in_trace and trace_id:
        return f"trace:{trace_id:032x}"
    return DEFAULT_SCOPE
