"""Metrics and log events that make escalations alertable.

Instruments (all counters, on the meter ``otel_errcompact``):

=============================  ==========  ==========================================================
name                           unit        attributes
=============================  ==========  ==========================================================
``errcompact.errors``          {error}     ``gen_ai.tool.name``, ``error.type``, ``errcompact.new_class``
``errcompact.escalations``     {escalation} ``gen_ai.tool.name``, ``errcompact.reason``, ``errcompact.action``
``errcompact.tokens.raw``      {token}     ``gen_ai.tool.name``: tokens of the raw errors
``errcompact.tokens.compact``  {token}     ``gen_ai.tool.name``: tokens of their digest lines
``errcompact.history.evictions`` {scope}   none: conversations dropped at the ``max_scopes`` cap
=============================  ==========  ==========================================================

Attributes stay low-cardinality: tool names and error types only, and error types beyond the first
:data:`MAX_ERROR_TYPES` distinct ones are reported as ``other``. Never the message, the key or the scope.
Token counts run on a background thread, and only when something will read them: a meter provider of
the OpenTelemetry SDK with at least one metric reader (:func:`metrics_are_read`). Without one the token
counters would go nowhere, so the raw text is not even queued. Each queued item holds at most
:data:`~otel_errcompact.tokens.MAX_COUNTED_CHARS` characters of the raw error (the rest is extrapolated
from that head) and the queue is bounded by characters as well as items (:data:`MAX_QUEUED_TOKEN_CHARS`),
so a flood of megabyte errors cannot pile up memory.

A breach is also emitted as a log event ``errcompact.escalation`` (severity WARN), correlated with the
failed tool span, so log-based alerting works without metrics.
"""

from __future__ import annotations

import threading
from typing import Any

from opentelemetry import trace
from opentelemetry._logs import Logger, SeverityNumber
from opentelemetry.metrics import CallbackOptions, Meter
from opentelemetry.metrics import Observation as MetricObservation

from otel_errcompact._worker import BackgroundQueue
from otel_errcompact.history import ErrorHistory, Escalation
from otel_errcompact.pipeline import Failure, Outcome
from otel_errcompact.tokens import MAX_COUNTED_CHARS, count_tokens

__all__ = ["MAX_ERROR_TYPES", "MAX_QUEUED_TOKEN_CHARS", "ErrorMetrics", "EscalationLog", "metrics_are_read",
           "span_context_of"]

MAX_ERROR_TYPES = 64
MAX_QUEUED_TOKEN_CHARS = 8 * 1024 * 1024
"""Characters of raw error text waiting for token counting at most; beyond it counts are skipped."""

_TokenItem = tuple[str, int, str, str, str, bool]  # raw head, raw length, digest line, tool, type, new class


def metrics_are_read(meter_provider: Any) -> bool:
    """True when ``meter_provider`` is the SDK's and has a metric reader, i.e. counters reach someone.

    The API's no-op and proxy providers (no SDK configured) and an SDK provider built without readers
    drop every measurement; counting tokens for them would be work nobody sees.
    """
    try:
        from opentelemetry.sdk.metrics import MeterProvider
    except ImportError:  # pragma: no cover - the SDK is a dependency
        return False
    if not isinstance(meter_provider, MeterProvider):
        return False
    if getattr(meter_provider, "_disabled", False):  # OTEL_SDK_DISABLED=true
        return False
    readers = getattr(meter_provider, "_metric_readers", None)  # the constructor's metric_readers (1.45)
    # An SDK whose internals moved: keep counting rather than silently losing the metric.
    return bool(readers) if readers is not None else True


def _token_item_cost(item: _TokenItem) -> int:
    return len(item[0]) + len(item[2])


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

    def __init__(self, meter: Meter, *, token_counts: bool = True) -> None:
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
        self._meter = meter
        self._types: set[str] = set()
        self._types_lock = threading.Lock()
        self._tokens: BackgroundQueue[_TokenItem] | None = (
            BackgroundQueue(
                "otel-errcompact-tokens",
                self._count_tokens,
                max_size=4096,
                cost=_token_item_cost,
                max_cost=MAX_QUEUED_TOKEN_CHARS,
                wake_every=256,
                max_delay_s=1.0,
            )
            if token_counts
            else None
        )

    def watch_history(self, history: ErrorHistory) -> None:
        """Export ``history``'s evictions at the scope cap as ``errcompact.history.evictions``.

        An observable counter: read when the metric reader collects, so evictions cost nothing extra on
        the agent's thread.
        """

        def observe(_options: CallbackOptions) -> list[MetricObservation]:
            return [MetricObservation(history.evicted_at_cap)]

        self._meter.create_observable_counter(
            "errcompact.history.evictions",
            callbacks=[observe],
            unit="{scope}",
            description="Conversations evicted from the error history at the max_scopes cap",
        )

    @property
    def counts_tokens(self) -> bool:
        """Whether raw and digest tokens are counted (off when no metric reader would see them)."""
        return self._tokens is not None

    def _error_type(self, type_: str) -> str:
        with self._types_lock:
            if type_ in self._types:
                return type_
            if len(self._types) < MAX_ERROR_TYPES:
                self._types.add(type_)
                return type_
        return "other"

    def on_failure(self, failure: Failure, outcome: Outcome) -> None:
        """Failure listener: count the error and its tokens, on the metrics thread when there is one.

        Recording a counter with attributes costs the SDK about as much as a third of compaction, so with
        a metric reader the count travels with the token item to the background thread (a metric is
        read at the next collection anyway). If that queue is full the count is recorded here instead:
        token counts may be skipped under a flood, error counts never.
        """
        tool = failure.tool_name or "unknown"
        digest = outcome.digest
        if self._tokens is not None:
            raw = failure.raw_error
            # Slicing a short string returns the string itself; a huge one is cut to the counted head.
            item = (raw[:MAX_COUNTED_CHARS], len(raw), digest.line, tool, digest.type, outcome.observation.is_new)
            if self._tokens.submit(item):
                return
        self._count_error(tool, digest.type, outcome.observation.is_new)

    def _count_error(self, tool: str, type_: str, is_new: bool) -> None:
        self._errors.add(
            1,
            {"gen_ai.tool.name": tool, "error.type": self._error_type(type_), "errcompact.new_class": is_new},
        )

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

    def _count_tokens(self, item: _TokenItem) -> None:
        head, raw_chars, line, tool, type_, is_new = item
        self._count_error(tool, type_, is_new)
        attributes = {"gen_ai.tool.name": tool}
        tokens = count_tokens(head)
        if raw_chars > len(head) > 0:
            tokens = round(tokens * raw_chars / len(head))
        self._raw_tokens.add(tokens, attributes)
        self._compact_tokens.add(count_tokens(line), attributes)

    def flush(self, timeout_s: float = 10.0) -> bool:
        """Wait for queued token counts."""
        return self._tokens.flush(timeout_s) if self._tokens is not None else True

    def shutdown(self, timeout_s: float = 10.0) -> None:
        if self._tokens is not None:
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
