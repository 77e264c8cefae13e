"""The trace flags of the failed spans that log records point at.

An escalation log record and a trajectory log record carry the ids of the failed tool span, so a backend
shows them with it; they must carry its trace flags too. A trace the sampler left out is not exported, and
a log record that claims it was sampled points at a trace nobody will find (and defeats a pipeline that
keeps only the logs of sampled traces). A record carries ids, not flags: the flags of the few failed spans
whose trace was not sampled are remembered here, where the span's context is read (the tool boundary, the
span processor), and every other id pair is taken as sampled, the common case, which needs no entry.

Bounded (:data:`MAX_UNSAMPLED`, the oldest forgotten first). A record replayed from the spool by a later
process has no entry and is emitted as sampled.
"""

from __future__ import annotations

import threading
from collections import OrderedDict

from opentelemetry import trace
from opentelemetry.context import Context

from otel_errcompact._forked import new_locks_in_child

__all__ = ["MAX_UNSAMPLED", "note_span", "span_context_of"]

MAX_UNSAMPLED = 4096
"""Failed spans of traces that were not sampled, remembered at most."""


class _Unsampled:
    """The (trace id, span id) pairs, in hex, of failed spans whose trace was not sampled."""

    def __init__(self) -> None:
        self.pairs: OrderedDict[tuple[str, str], None] = OrderedDict()
        self.lock = threading.Lock()
        new_locks_in_child(self, "lock")


_unsampled = _Unsampled()


def note_span(trace_id: str | None, span_id: str | None, flags: int) -> None:
    """Remember the trace ``flags`` of the span whose ids (hex) a record will carry; a sampled span's need
    no entry (an attribute test, on the agent's thread, for every failure)."""
    if flags & trace.TraceFlags.SAMPLED or not trace_id or not span_id:
        return
    with _unsampled.lock:
        pairs = _unsampled.pairs
        pairs[(trace_id, span_id)] = None
        while len(pairs) > MAX_UNSAMPLED:
            pairs.popitem(last=False)


def span_context_of(trace_id: str | None, span_id: str | None, *, remote: bool = False) -> Context | None:
    """A context whose current span has these ids (hex) and its trace's flags, so that a log record is
    correlated with that span; None without both ids."""
    if not trace_id or not span_id:
        return None
    sampled = (trace_id, span_id) not in _unsampled.pairs  # a read: atomic under the GIL
    span_context = trace.SpanContext(
        trace_id=int(trace_id, 16),
        span_id=int(span_id, 16),
        is_remote=remote,
        trace_flags=trace.TraceFlags(trace.TraceFlags.SAMPLED if sampled else trace.TraceFlags.DEFAULT),
    )
    return trace.set_span_in_context(trace.NonRecordingSpan(span_context))
