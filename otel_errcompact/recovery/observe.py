"""How recovery is seen in OpenTelemetry: span events on the agent span and counters.

==================================  =============  ===================================================
instrument / event                  unit           attributes
==================================  =============  ===================================================
``errcompact.transitions``          {transition}   ``errcompact.transition``, ``errcompact.error_class``,
                                                   ``errcompact.source`` (``loop`` or ``spans``)
``errcompact.breaker.changes``      {change}       ``gen_ai.tool.name``, ``errcompact.breaker.from``,
                                                   ``errcompact.breaker.state``
span event ``errcompact.transition``               transition, reason, attempt (on the agent span)
span event ``errcompact.breaker``                  state change, tool, key, failures (on the tool span
                                                   and the agent span)
==================================  =============  ===================================================

The transitions a framework's own retries make are read from its model spans (``chat`` …) as they end:
prompt too long → ``reactive_compact_retry``, truncated (``finish_reasons`` ``length``/``max_tokens``) →
``max_output_tokens_recovery``, 429/5xx/529 → ``retry_wait``; a later successful model span in the same
trace is the recovery (``errcompact.recovered`` on its event). Same event and metric names as the loop.
"""

from __future__ import annotations

import logging
import threading
from collections import OrderedDict
from collections.abc import Mapping, Sized
from typing import Any

from opentelemetry import trace
from opentelemetry.metrics import Meter
from opentelemetry.sdk.trace import ReadableSpan, Span

from otel_errcompact import semconv
from otel_errcompact._forked import new_locks_in_child
from otel_errcompact.recovery.classify import classify_span
from otel_errcompact.recovery.loop import Transition, TransitionEvent
from otel_errcompact.recovery.state import BreakerChange

__all__ = ["RecoveryTelemetry"]

_log = logging.getLogger("otel_errcompact")

_BY_CLASS: dict[str, Transition] = {
    "prompt_too_long": "reactive_compact_retry",
    "output_truncated": "max_output_tokens_recovery",
    "rate_limited": "retry_wait",
    "transient": "retry_wait",
}
_MAX_TRACES = 4096
# The attributes classify_span reads: a model span without any of them shows no failure.
_ERROR_TYPE = semconv.ERROR_TYPE
_HTTP_STATUS = "http.response.status_code"
_FINISH_REASONS = "gen_ai.response.finish_reasons"
MODEL_SPAN_SIGNALS = frozenset({_ERROR_TYPE, _HTTP_STATUS, _FINISH_REASONS})
"""The attributes without which :meth:`RecoveryTelemetry.model_span_matters` is False unless a retry is
waiting (:attr:`RecoveryTelemetry.waiting`): the span processor's cheap test before asking it."""
# Finish reasons of a model call that ended normally, in the forms instrumentations record them.
_PLAIN_FINISHES = frozenset(
    reason
    for name in ("stop", "tool_calls", "end_turn", "tool_use", "function_call", "STOP")
    for reason in (name, (name,))
)


class RecoveryTelemetry:
    """Counters and span events for transitions and breaker changes; never raises."""

    def __init__(self, meter: Meter) -> None:
        self._transitions = meter.create_counter(
            "errcompact.transitions", unit="{transition}", description="Recovery-loop transitions"
        )
        self._breaker = meter.create_counter(
            "errcompact.breaker.changes", unit="{change}", description="Circuit-breaker state changes"
        )
        self._pending: OrderedDict[int, int] = OrderedDict()  # trace id -> recoverable model failures
        self._lock = threading.Lock()
        new_locks_in_child(self, "_lock")

    def on_transition(self, event: TransitionEvent, source: str = "loop") -> None:
        """Count one transition (the loop adds its span event itself)."""
        try:
            self._transitions.add(
                1,
                {
                    "errcompact.transition": event.transition,
                    "errcompact.error_class": event.error_class or "none",
                    "errcompact.source": source,
                },
            )
        except Exception:
            _log.exception("otel-errcompact: could not count a transition")

    def on_breaker_change(self, change: BreakerChange) -> None:
        """Count a breaker state change; add an ``errcompact.breaker`` event to the current span."""
        try:
            self._breaker.add(
                1,
                {
                    semconv.GEN_AI_TOOL_NAME: change.tool,
                    "errcompact.breaker.from": change.old,
                    "errcompact.breaker.state": change.new,
                },
            )
            span = trace.get_current_span()
            if span.is_recording():
                span.add_event("errcompact.breaker", _breaker_attributes(change))
        except Exception:
            _log.exception("otel-errcompact: could not record a breaker change")

    @property
    def waiting(self) -> Sized:
        """The traces with a retry waiting to be called recovered (see :data:`MODEL_SPAN_SIGNALS`)."""
        return self._pending

    def model_span_matters(self, span: ReadableSpan, attrs: Mapping[str, Any]) -> bool:
        """Whether :meth:`on_model_span` can do anything for ``span``: it shows a failure or a truncation
        (the attributes :func:`classify_span` reads), or its trace has a retry waiting to be called
        recovered. False for the plain successful model call (an HTTP status below 400, a normal
        finish reason), which then costs the processor no look-up of the trace's agent span.
        Lock-free: a racy read of the pending map is fine, the pop in :meth:`on_model_span` decides."""
        if _ERROR_TYPE in attrs:
            return True
        if _HTTP_STATUS in attrs:
            status = attrs[_HTTP_STATUS]
            if type(status) is not int or status >= 400:
                return True
        if self._pending and span.context is not None and span.context.trace_id in self._pending:
            return True
        if _FINISH_REASONS not in attrs:
            return False
        reasons = attrs[_FINISH_REASONS]
        try:
            if reasons in _PLAIN_FINISHES:
                return False
        except TypeError:  # an unhashable value (a list): classify_span reads it
            pass
        return classify_span(attrs) is not None

    def on_model_span(self, span: ReadableSpan, anchor: Span | None) -> None:
        """Processor listener: the transition a framework's model span shows, on the live agent span."""
        try:
            attrs: Any = span.attributes or {}
            message = span.status.description or ""
            for recorded in span.events:
                if recorded.name == "exception" and recorded.attributes:
                    message = f"{message}\n{recorded.attributes.get('exception.message', '')}"
            c = classify_span(attrs, message)
            trace_id = span.context.trace_id if span.context is not None else 0
            if c is None:
                with self._lock:
                    recovered = self._pending.pop(trace_id, 0)
                if recovered and anchor is not None and anchor.is_recording():
                    anchor.add_event("errcompact.recovered", {"errcompact.retries": recovered})
                return
            transition = _BY_CLASS.get(c.error_class, "model_error")
            with self._lock:
                if transition != "model_error":
                    self._pending[trace_id] = self._pending.get(trace_id, 0) + 1
                    self._pending.move_to_end(trace_id)
                    while len(self._pending) > _MAX_TRACES:
                        self._pending.popitem(last=False)
            event = TransitionEvent(transition, f"observed: {c.reason}", 0, c.error_class)
            self.on_transition(event, source="spans")
            if anchor is not None and anchor.is_recording():
                attributes = dict(event.to_attributes())
                attributes.pop("errcompact.attempt", None)
                attributes["errcompact.source"] = "spans"
                anchor.add_event("errcompact.transition", attributes)
        except Exception:
            _log.exception("otel-errcompact: could not read a model span")


def _breaker_attributes(change: BreakerChange) -> dict[str, str | int]:
    return {
        semconv.GEN_AI_TOOL_NAME: change.tool,
        "errcompact.key": change.key,
        "errcompact.breaker.from": change.old,
        "errcompact.breaker.state": change.new,
        "errcompact.count": change.failures,
        "errcompact.digest": change.digest,
    }
