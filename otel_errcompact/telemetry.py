"""Metrics and log events that make escalations alertable.

Instruments (all counters, on the meter ``otel_errcompact``):

=============================  ==========  ==========================================================
name                           unit        attributes
=============================  ==========  ==========================================================
``errcompact.errors``          {error}     ``gen_ai.tool.name``, ``error.type``, ``errcompact.new_class``
``errcompact.escalations``     {escalation} ``gen_ai.tool.name``, ``errcompact.reason``, ``errcompact.action``
``errcompact.tokens.raw``      {token}     ``gen_ai.tool.name``: tokens of the raw errors
``errcompact.tokens.compact``  {token}     ``gen_ai.tool.name``: tokens of their digest lines
=============================  ==========  ==========================================================

Attributes stay low-cardinality: tool names and error types only; error types beyond the first
:data:`MAX_ERROR_TYPES` distinct ones, and tool names beyond the first :data:`MAX_TOOL_NAMES`, are
reported as ``other`` (an agent that names tools from user input would otherwise fill the SDK's
cardinality limit). Tool names are made prompt-safe and cut to 80 characters. Never the message, the key
or the scope.
Token counts run on a background thread (a BPE pass over a large raw error takes milliseconds).

A breach is also emitted as a log event ``errcompact.escalation`` (severity WARN), correlated with the
failed tool span, so log-based alerting works without metrics.
"""

from __future__ import annotations

import threading
from typing import Any

from opentelemetry import trace
from opentelemetry._logs import Logger, SeverityNumber
from opentelemetry.metrics import Meter

from otel_errcompact._sanitize import prompt_text
from otel_errcompact._worker import BackgroundQueue
from otel_errcompact.history import Escalation
from otel_errcompact.pipeline import Failure, Outcome
from otel_errcompact.tokens import count_tokens

__all__ = [
    "MAX_ERROR_TYPES", "MAX_TOOL_NAMES", "OVERFLOW", "ErrorMetrics", "EscalationLog", "span_context_of", "tool_label",
]

MAX_ERROR_TYPES = 64
MAX_TOOL_NAMES = 128
OVERFLOW = "other"
"""The attribute value that stands for every value beyond a cap."""
_MAX_TOOL_NAME_CHARS = 80


class _CappedValues:
    """The first ``cap`` distinct values pass; later new ones become :data:`OVERFLOW`. Thread-safe."""

    def __init__(self, cap: int) -> None:
        self._cap = cap
        self._seen: set[str] = set()
        self._lock = threading.Lock()

    def __call__(self, value: str) -> str:
        if value in self._seen:  # set membership is atomic under the GIL; the lock guards the add
            return value
        with self._lock:
            if len(self._seen) < self._cap:
                self._seen.add(value)
                return value
        return OVERFLOW


def tool_label(name: str | None) -> str:
    """A tool name as an attribute value: prompt-safe, bounded, ``unknown`` when absent."""
    if not name:
        return "unknown"
    return prompt_text(name)[:_MAX_TOOL_NAME_CHARS] or "unknown"


def span_context_of(trace_id: str | None, span_id: str | None) -> Any:
    """A context whose current span has these ids, so a log record is correlated with that span."""
    if not trace_id or not span_id:
        return None
    span_context = trace.SpanContext(
        trace_id=int(trace_id, 16),
        span_id=int(span_id, 16),
        is_remote=False,
        trace_flags=trace.TraceFlags(trace.TraceFlags.SAMPLED),
    )
    return trace.set_span_in_context(trace.NonRecordingSpan(span_context))


class ErrorMetrics:
    """Counts failures, escalations and tokens; plug into a pipeline as failure/escalation listener."""

    def __init__(self, meter: Meter) -> None:
        self._errors = meter.create_counter(
            "errcompact.errors", unit="{error}", description="Failed tool calls seen by otel-errcompact"
        )
        self._escalations = meter.create_counter(
            "errcompact.escalations", unit="{escalation}", description="Error-threshold breaches"
        )
        self._raw_tokens = meter.create_counter(
            "errcompact.tokens.raw", unit="{token}", description="Tokens of raw error text"
        )
        self._compact_tokens = meter.create_counter(
            "errcompact.tokens.compact", unit="{token}", description="Tokens of the digests that replaced it"
        )
        self._error_type = _CappedValues(MAX_ERROR_TYPES)
        self._tool_name = _CappedValues(MAX_TOOL_NAMES)
        self._tokens: BackgroundQueue[tuple[str, str, dict[str, str]]] = BackgroundQueue(
            "otel-errcompact-tokens", self._count_tokens, max_size=4096
        )

    def on_failure(self, failure: Failure, outcome: Outcome) -> None:
        """Failure listener: count the error and queue its token counts."""
        tool = {"gen_ai.tool.name": self._tool_name(tool_label(failure.tool_name))}
        self._errors.add(
            1,
            {
                **tool,
                "error.type": self._error_type(outcome.digest.type),
                "errcompact.new_class": outcome.observation.is_new,
            },
        )
        self._tokens.submit((failure.raw_error, outcome.digest.line, tool))

    def on_escalation(self, escalation: Escalation, failure: Failure) -> None:
        """Escalation listener: count the breach."""
        self._escalations.add(
            1,
            {
                "gen_ai.tool.name": self._tool_name(tool_label(failure.tool_name)),
                "errcompact.reason": escalation.reason,
                "errcompact.action": escalation.action,
            },
        )

    def _count_tokens(self, item: tuple[str, str, dict[str, str]]) -> None:
        raw, line, attributes = item
        self._raw_tokens.add(count_tokens(raw), attributes)
        self._compact_tokens.add(count_tokens(line), attributes)

    def flush(self, timeout_s: float = 10.0) -> bool:
        """Wait for queued token counts."""
        return self._tokens.flush(timeout_s)

    def shutdown(self, timeout_s: float = 10.0) -> None:
        self._tokens.shutdown(timeout_s)


class EscalationLog:
    """Emits each breach as a WARN log event ``errcompact.escalation`` correlated with the failed span."""

    def __init__(self, logger: Logger) -> None:
        self._logger = logger

    def on_escalation(self, escalation: Escalation, failure: Failure) -> None:
        """Escalation listener."""
        attributes: dict[str, Any] = dict(escalation.to_attributes())
        if failure.tool_name:
            attributes["gen_ai.tool.name"] = tool_label(failure.tool_name)
        if failure.conversation_id:
            attributes["gen_ai.conversation.id"] = failure.conversation_id
        self._logger.emit(
            event_name="errcompact.escalation",
            severity_number=SeverityNumber.WARN,
            severity_text="WARN",
            body=escalation.describe(),
            attributes=attributes,
            context=span_context_of(failure.trace_id, failure.span_id),
        )
