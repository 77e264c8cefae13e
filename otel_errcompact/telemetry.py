"""Metrics and log events that make escalations alertable.

Instruments (all counters, on the meter ``otel_errcompact``):

=============================  ==========  ==========================================================
name                           unit        attributes
=============================  ==========  ==========================================================
``errcompact.tool.calls``      {call}      ``gen_ai.tool.name``, ``errcompact.outcome`` (``ok``/``error``)
``errcompact.errors``          {error}     ``gen_ai.tool.name``, ``error.type``, ``errcompact.new_class``
``errcompact.classes.new``     {class}     ``gen_ai.tool.name``, ``error.type``: first sight of a dedup key
                                           in this process (not per conversation)
``errcompact.escalations``     {escalation} ``gen_ai.tool.name``, ``errcompact.reason``, ``errcompact.action``
``errcompact.tokens.raw``      {token}     ``gen_ai.tool.name``, ``errcompact.basis``: tokens of what the
                                           agent would have received without otel-errcompact
``errcompact.tokens.compact``  {token}     ``gen_ai.tool.name``, ``errcompact.basis``: tokens of their
                                           digest lines
=============================  ==========  ==========================================================

``errcompact.tool.calls`` is the denominator of an error ratio: every tool span is one call, and a
framework's tool span that wraps an ``@ec.tool`` span is not counted again. ``errcompact.new_class`` on
``errcompact.errors`` means new *in its conversation*; ``errcompact.classes.new`` counts a class once per
process (the last :data:`MAX_SEEN_KEYS` keys are remembered), so 1,000 conversations hitting the same two
errors count 2, not 2,000. Summed over a fleet of N workers it counts a class at most N times.

The token basis (``errcompact.basis``) says what the savings are measured against: ``model_text`` when the
caller knows the text the agent would have received instead (a framework's own error message, passed as
``Failure.model_text`` by the bridges), else ``raw_error`` (the full raw error, an upper bound: some
frameworks never put the full traceback into the context).

Attributes stay low-cardinality: tool names and error types only, and error types beyond the first
:data:`MAX_ERROR_TYPES` distinct ones are reported as ``other``. Never the message, the key or the scope.
Token counts run on a background thread (a BPE pass over a large raw error takes milliseconds).

A breach is also emitted as a log event ``errcompact.escalation`` (severity WARN), correlated with the
failed tool span, so log-based alerting works without metrics.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from typing import Any

from opentelemetry import trace
from opentelemetry._logs import Logger, SeverityNumber
from opentelemetry.metrics import Meter

from otel_errcompact._worker import BackgroundQueue
from otel_errcompact.history import Escalation
from otel_errcompact.pipeline import Failure, Outcome
from otel_errcompact.tokens import count_tokens

__all__ = ["MAX_ERROR_TYPES", "MAX_SEEN_KEYS", "ErrorMetrics", "EscalationLog", "span_context_of"]

MAX_ERROR_TYPES = 64
MAX_SEEN_KEYS = 65_536


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
        self._calls = meter.create_counter(
            "errcompact.tool.calls", unit="{call}", description="Tool calls seen by otel-errcompact, by outcome"
        )
        self._errors = meter.create_counter(
            "errcompact.errors", unit="{error}", description="Failed tool calls seen by otel-errcompact"
        )
        self._new_classes = meter.create_counter(
            "errcompact.classes.new",
            unit="{class}",
            description="Error classes (dedup keys) seen for the first time by this process",
        )
        self._seen_keys: OrderedDict[str, None] = OrderedDict()
        self._escalations = meter.create_counter(
            "errcompact.escalations", unit="{escalation}", description="Error-threshold breaches"
        )
        self._raw_tokens = meter.create_counter(
            "errcompact.tokens.raw", unit="{token}", description="Tokens of raw error text"
        )
        self._compact_tokens = meter.create_counter(
            "errcompact.tokens.compact", unit="{token}", description="Tokens of the digests that replaced it"
        )
        self._types: set[str] = set()
        self._types_lock = threading.Lock()
        self._tokens: BackgroundQueue[tuple[str, str, dict[str, str]]] = BackgroundQueue(
            "otel-errcompact-tokens", self._count_tokens, max_size=4096
        )

    def _error_type(self, type_: str) -> str:
        with self._types_lock:
            if type_ in self._types:
                return type_
            if len(self._types) < MAX_ERROR_TYPES:
                self._types.add(type_)
                return type_
        return "other"

    def _first_sight(self, key: str) -> bool:
        with self._types_lock:
            if key in self._seen_keys:
                self._seen_keys.move_to_end(key)
                return False
            self._seen_keys[key] = None
            if len(self._seen_keys) > MAX_SEEN_KEYS:
                self._seen_keys.popitem(last=False)
            return True

    def on_success(self, tool_name: str | None) -> None:
        """Success listener: count one successful tool call."""
        self._calls.add(1, {"gen_ai.tool.name": tool_name or "unknown", "errcompact.outcome": "ok"})

    def on_failure(self, failure: Failure, outcome: Outcome) -> None:
        """Failure listener: count the error and queue its token counts."""
        tool = {"gen_ai.tool.name": failure.tool_name or "unknown"}
        error_type = self._error_type(outcome.digest.type)
        self._calls.add(1, {**tool, "errcompact.outcome": "error"})
        self._errors.add(
            1,
            {
                **tool,
                "error.type": error_type,
                "errcompact.new_class": outcome.observation.is_new,
            },
        )
        if self._first_sight(outcome.digest.key):
            self._new_classes.add(1, {**tool, "error.type": error_type})
        basis = "model_text" if failure.model_text is not None else "raw_error"
        baseline = failure.model_text if failure.model_text is not None else failure.raw_error
        self._tokens.submit((baseline, outcome.digest.line, {**tool, "errcompact.basis": basis}))

    def on_escalation(self, escalation: Escalation, failure: Failure) -> None:
        """Escalation listener: count the breach."""
        self._escalations.add(
            1,
            {
                "gen_ai.tool.name": failure.tool_name or "unknown",
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
            attributes["gen_ai.tool.name"] = failure.tool_name
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
