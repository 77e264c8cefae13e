"""OTLP logs: ship trajectory records through the application's own OpenTelemetry log pipeline.

Each record becomes one log record with ``event_name = "errcompact.trajectory"``, severity ERROR, the
record's trace and span ids (so a trace UI shows the full raw error next to the failed span), the
searchable fields as flat attributes, and the whole record as the body. When the amended version of a
record is written, a second log record with the same ``errcompact.record_id`` is emitted; a backend
keeps both, and the one with a digest (``errcompact.digest`` set) is the complete one. Records replayed from
the writer's spool after a crash are emitted again, so a backend may hold a record twice (same
``errcompact.record_id``).

Long texts are capped (``max_text_chars``, 64 Ki characters by default: the first quarter and the last
three quarters, where a traceback keeps its final exception, around an ``[… N characters omitted …]``
marker): an exporter sends a batch of log records in one request, and a 10 MB error must not make that
request fail or hold the export pipeline. The body then carries ``raw_error_chars``, the original length;
the full text is in the SQLite store and the JSONL file. Lone surrogates are escaped, since the OTLP
encoding is UTF-8.

A processor that turns exception log records into trajectory records must skip log records whose
``event_name`` is ``errcompact.trajectory``; they carry ``exception.*`` attributes and would otherwise
be recorded again, endlessly.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

from opentelemetry import trace
from opentelemetry._logs import LoggerProvider, SeverityNumber
from opentelemetry.context import Context

from otel_errcompact._bounded import BoundedCall
from otel_errcompact._sampled import span_context_of
from otel_errcompact.semconv import error_type_of
from otel_errcompact.trajectory import SCHEMA_NAME, TrajectoryRecord, escape_surrogates

__all__ = ["OTLPLogSink"]

_LOGGER_NAME = "otel_errcompact.trajectory"
_CAPPED = ("raw_error", "exception_stacktrace", "exception_message", "status_description")


def cap_text(text: str, limit: int) -> str:
    """``text`` if it has at most ``limit`` characters, else its head and tail around a marker."""
    if len(text) <= limit:
        return text
    head = limit // 4
    tail = limit - head
    return f"{text[:head]}\n[… {len(text) - limit} characters omitted …]\n{text[-tail:]}"


def _body(rec: TrajectoryRecord, limit: int) -> dict[str, Any]:
    long_fields = {n for n in _CAPPED if len(getattr(rec, n) or "") > limit}
    body = rec.to_dict() if not long_fields else rec.model_copy(
        update={n: cap_text(getattr(rec, n), limit) for n in long_fields}).to_dict()
    if "raw_error" in long_fields:
        body["raw_error_chars"] = len(rec.raw_error)
    try:
        json.dumps(body, ensure_ascii=False).encode("utf-8")
    except UnicodeEncodeError:
        body = _escaped(body)
    return body


def _escaped(value: Any) -> Any:
    if isinstance(value, str):
        return escape_surrogates(value)
    if isinstance(value, dict):
        return {escape_surrogates(str(k)): _escaped(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_escaped(v) for v in value]
    return value


def _attributes(rec: TrajectoryRecord, limit: int) -> dict[str, Any]:
    d = rec.digest
    pairs: dict[str, Any] = {
        "errcompact.record_id": rec.record_id,
        "errcompact.source": rec.source,
        "errcompact.scope": rec.scope,
        "gen_ai.tool.name": rec.tool_name,
        "gen_ai.tool.call.id": rec.tool_call_id,
        "gen_ai.conversation.id": rec.conversation_id,
        "gen_ai.agent.name": rec.agent_name,
        # as the failure's span and metrics name it; the digest's type is errcompact.error_type
        "error.type": error_type_of(rec.error_type, rec.exception_type, d.type) if d is not None
        else (rec.error_type or rec.exception_type),
        "errcompact.error_type": d.type if d is not None else None,
        "errcompact.key": d.key if d is not None else None,
        "errcompact.digest": d.line if d is not None else None,
        "errcompact.count": rec.count,
        "errcompact.escalated": True if rec.escalation else None,
        "exception.type": rec.exception_type,
        "exception.message": rec.exception_message,
        "exception.stacktrace": rec.exception_stacktrace,
    }
    return {k: (_escaped(cap_text(v, limit)) if isinstance(v, str) else v)
            for k, v in pairs.items() if v is not None}


def _context(rec: TrajectoryRecord) -> Context:
    if rec.trace_id is None or rec.span_id is None:
        # An empty (falsy) context would make the SDK fall back to the *current* context, which on the
        # writer thread is unrelated to the failure; an explicit invalid span keeps the ids unset.
        return trace.set_span_in_context(trace.INVALID_SPAN)
    context = span_context_of(rec.trace_id, rec.span_id, remote=True)  # with its trace's flags
    return context if context is not None else trace.set_span_in_context(trace.INVALID_SPAN)


def _timestamp_ns(rec: TrajectoryRecord) -> int:
    when = rec.ended_at or rec.recorded_at
    return int(when.timestamp()) * 1_000_000_000 + when.microsecond * 1_000


class OTLPLogSink:
    """Emits each record as an OTel log event through ``logger_provider``.

    The provider belongs to the application: :meth:`close` flushes it but does not shut it down,
    because other code may still be logging through it.
    """

    def __init__(
        self, logger_provider: LoggerProvider, *, max_text_chars: int = 65_536, flush_timeout_s: float = 1.0
    ) -> None:
        if max_text_chars < 64:
            raise ValueError("max_text_chars must be at least 64")
        self._max_text = max_text_chars
        self._provider = logger_provider
        self._logger = logger_provider.get_logger(_LOGGER_NAME)
        # The SDK's force_flush exports on the calling thread (the trajectory writer's) and retries a
        # dead endpoint for up to 10 s, which would hold back every other sink; wait a bounded time.
        self._flush_timeout_s = flush_timeout_s
        force_flush = getattr(logger_provider, "force_flush", None)
        self._force_flush = (
            BoundedCall(force_flush, "otel_errcompact.OTLPLogSink.flush") if callable(force_flush) else None
        )

    def write(self, records: Sequence[TrajectoryRecord]) -> None:
        """Emit one log record per trajectory record."""
        for rec in records:
            self._logger.emit(
                timestamp=_timestamp_ns(rec),
                context=_context(rec),
                severity_number=SeverityNumber.ERROR,
                severity_text="ERROR",
                body=_body(rec, self._max_text),
                attributes=_attributes(rec, self._max_text),
                event_name=SCHEMA_NAME,
            )

    def flush(self) -> None:
        """Ask the provider's processors to export what they hold (SDK providers only), waiting at most
        ``flush_timeout_s``; an export still running then goes on in the background."""
        if self._force_flush is not None:
            self._force_flush(self._flush_timeout_s)

    def close(self) -> None:
        """Flush; leave the provider running (see the class docstring)."""
        self.flush()

    def __repr__(self) -> str:
        return f"OTLPLogSink({self._provider!r})"
