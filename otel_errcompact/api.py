"""``init()``: instrument an agent with one call, and the :class:`ErrCompact` handle it returns.

``init()`` attaches to the application's OpenTelemetry SDK providers when it has set them, and never
replaces or duplicates them; otherwise it creates a tracer, logger and meter provider, exporting over
OTLP when the standard ``OTEL_EXPORTER_OTLP_*`` variables name an endpoint. Trajectory records go to the
embedded SQLite store by default, so nothing needs a server. It is idempotent: a second call returns the
same handle.
"""

from __future__ import annotations

import atexit
import logging
import os
import threading
from collections.abc import Callable, Sequence
from contextlib import AbstractContextManager
from pathlib import Path
from typing import Any

from opentelemetry import _logs as logs_api
from opentelemetry import metrics as metrics_api
from opentelemetry import trace as trace_api
from opentelemetry.sdk._logs import LoggerProvider
from opentelemetry.sdk._logs.export import BatchLogRecordProcessor
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import PeriodicExportingMetricReader
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor

from otel_errcompact._worker import BackgroundQueue
from otel_errcompact.boundary import OnError, ToolBoundary, conversation
from otel_errcompact.compactor import Compactor
from otel_errcompact.config import Settings, load_settings
from otel_errcompact.history import ErrorHistory, Escalation, Limits, Thresholds
from otel_errcompact.pipeline import ErrorPipeline, Failure, Outcome
from otel_errcompact.processor import ErrorCompactionProcessor, ExceptionLogProcessor, SpanPredicate
from otel_errcompact.recovery.breaker import BreakerPolicy, CircuitBreakers
from otel_errcompact.recovery.fleet import FleetMetrics, fleet_store
from otel_errcompact.recovery.loop import ModelAdapter, RecoveryLoop
from otel_errcompact.recovery.observe import RecoveryTelemetry
from otel_errcompact.recovery.pacing import Pacer, pace
from otel_errcompact.recovery.retry import RetryPolicy
from otel_errcompact.recovery.state import InMemoryStateStore, RecoveryStateStore
from otel_errcompact.sinks import JSONLSink, OTLPLogSink, SQLiteSink, TrajectorySink, TrajectoryWriter
from otel_errcompact.telemetry import ErrorMetrics, EscalationLog

__all__ = ["ErrCompact", "HumanReviewHook", "init", "instance"]

_log = logging.getLogger("otel_errcompact")

HumanReviewHook = Callable[[Escalation], None]
"""Called (on a background thread) with each breach when the action is ``human``."""

_INSTANCE: ErrCompact | None = None
_INSTANCE_LOCK = threading.Lock()
_SCOPE_NAME = "otel_errcompact"


def _otlp_endpoint(signal: str) -> bool:
    return bool(
        os.environ.get("OTEL_EXPORTER_OTLP_ENDPOINT")
        or os.environ.get(f"OTEL_EXPORTER_OTLP_{signal.upper()}_ENDPOINT")
    )


def _protocol(signal: str) -> str:
    return (
        os.environ.get(f"OTEL_EXPORTER_OTLP_{signal.upper()}_PROTOCOL")
        or os.environ.get("OTEL_EXPORTER_OTLP_PROTOCOL")
        or "http/protobuf"
    ).strip().lower()


def _span_exporter() -> Any:
    if _protocol("traces") == "grpc":
        from opentelemetry.exporter.otlp.proto.grpc.trace_exporter import OTLPSpanExporter
    else:
        from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter  # type: ignore[assignment]
    return OTLPSpanExporter()


def _log_exporter() -> Any:
    if _protocol("logs") == "grpc":
        from opentelemetry.exporter.otlp.proto.grpc._log_exporter import OTLPLogExporter
    else:
        from opentelemetry.exporter.otlp.proto.http._log_exporter import OTLPLogExporter  # type: ignore[assignment]
    return OTLPLogExporter()


def _metric_exporter() -> Any:
    if _protocol("metrics") == "grpc":
        from opentelemetry.exporter.otlp.proto.grpc.metric_exporter import OTLPMetricExporter
    else:
        from opentelemetry.exporter.otlp.proto.http.metric_exporter import OTLPMetricExporter  # type: ignore[assignment]
    return OTLPMetricExporter()


class ErrCompact:
    """The handle ``init()`` returns: context for the next prompt, the tool boundary, and shutdown.

    >>> ec = init(service_name="support-agent")                       # doctest: +SKIP
    >>> ec.context("conv-1")                                           # doctest: +SKIP
    ''
    """

    def __init__(
        self,
        settings: Settings,
        *,
        history: ErrorHistory,
        pipeline: ErrorPipeline,
        writer: TrajectoryWriter | None,
        processor: ErrorCompactionProcessor | None,
        boundary: ToolBoundary,
        owned_providers: Sequence[Any],
        metrics: ErrorMetrics | None,
        review_queue: BackgroundQueue[Escalation] | None,
    ) -> None:
        self.settings = settings
        self.history = history
        self.pipeline = pipeline
        self.writer = writer
        self.processor = processor
        self.boundary = boundary
        self.tool = boundary.tool
        """Decorator for sync and async tools: ``@ec.tool`` or ``@ec.tool(name=..., on_error=...)``. The
        wrapped tool returns its result, or a :class:`ToolErrorText` (the digest) instead of raising."""
        self.tool_call = boundary.call
        """Context manager for one tool call: ``with ec.tool_call("search") as call: ...``."""
        self._owned_providers = list(owned_providers)
        self._metrics = metrics
        self._review_queue = review_queue
        self._shutdown_lock = threading.Lock()
        self._is_shutdown = False

    # -- what an agent loop calls ------------------------------------------------------------------

    def context(self, conversation_id: str | None = None) -> str:
        """The ``[RECENT ERRORS]`` block for the next prompt of ``conversation_id`` (default: the current
        scope); ``""`` when nothing failed."""
        scope = conversation_id if conversation_id is not None else self.boundary.current_scope()
        return self.history.render(scope)

    def check(self, scope: str | None = None) -> None:
        """Raise :class:`ErrorBudgetExceeded` if ``scope`` (default: the current one) has breached with the
        halt action. Call it at the top of each agent step."""
        self.boundary.check(scope)

    def acknowledge(self, scope: str) -> None:
        """Clear a standing breach after review, keeping the history (see ErrorHistory.acknowledge)."""
        self.history.acknowledge(scope)

    def reset(self, scope: str) -> None:
        """Forget a scope, e.g. when its conversation ends."""
        self.history.reset(scope)

    def conversation(self, conversation_id: str) -> AbstractContextManager[str]:
        """Context manager: tool calls inside share ``conversation_id`` as their scope."""
        return conversation(conversation_id)

    # -- recovery ------------------------------------------------------------------------------------

    recovery_telemetry: RecoveryTelemetry | None = None
    pacer: Pacer | None = None

    def abort(self, scope: str | None = None, reason: str = "abort") -> int:
        """Abort ``scope`` (default: the current one): cancel its in-flight model calls and read-only
        tools (mutating tools finish); loops on it end ``aborted_streaming``. Returns the tasks cancelled."""
        return self.boundary.aborts.abort(scope if scope is not None else self.boundary.current_scope(), reason)

    def pace(self, client: Any) -> Any:
        """Pace an httpx client, or an ``openai``/``anthropic`` client, by its rate-limit headers."""
        return pace(client, self.pacer)

    def recovery_loop(
        self, model: ModelAdapter, tools: dict[str, Callable[..., Any]] | None = None, **options: Any
    ) -> RecoveryLoop:
        """A :class:`~otel_errcompact.recovery.loop.RecoveryLoop` wired to this handle: its scope is the
        current conversation (so ``abort()`` reaches it), its transitions are span events on its
        ``invoke_agent`` span and counted in ``errcompact.transitions``."""
        telemetry = self.recovery_telemetry
        options.setdefault("scope", self.boundary.current_scope())
        options.setdefault("aborts", self.boundary.aborts)
        options.setdefault("tracer", self.boundary._tracer)
        if telemetry is not None:
            options.setdefault("on_transition", telemetry.on_transition)
        return RecoveryLoop(model, tools, **options)

    def record_error(
        self,
        raw: str,
        *,
        scope: str,
        tool_name: str | None = None,
        exit_code: int | None = None,
        command: str | None = None,
        kind: str | None = None,
    ) -> Outcome:
        """Feed one raw error that did not come through a span (audit, compact, count, escalate)."""
        return self.pipeline.handle(
            Failure(
                scope=scope,
                raw_error=raw,
                source="api",
                tool_name=tool_name,
                exit_code=exit_code,
                command=command,
                kind=kind,
                conversation_id=scope,
            )
        )

    @property
    def sqlite_path(self) -> Path | None:
        """Where trajectory records are stored, when the SQLite sink is on."""
        return self.settings.sqlite_path

    # -- lifecycle -----------------------------------------------------------------------------------

    def flush(self, timeout_s: float = 10.0) -> bool:
        """Write every queued trajectory record and token count; True when all finished in time."""
        ok = True
        if self.writer is not None:
            ok = self.writer.force_flush(timeout_s) and ok
        if self._metrics is not None:
            ok = self._metrics.flush(timeout_s) and ok
        if self._review_queue is not None:
            ok = self._review_queue.flush(timeout_s) and ok
        for provider in self._owned_providers:
            try:
                ok = bool(provider.force_flush()) and ok
            except Exception:
                ok = False
        return ok

    def shutdown(self) -> None:
        """Flush and stop everything this handle started. Idempotent; also runs at interpreter exit."""
        global _INSTANCE
        with self._shutdown_lock:
            if self._is_shutdown:
                return
            self._is_shutdown = True
        timeout = self.settings.shutdown_timeout_s
        if self.processor is not None:
            # Detach from providers this handle does not own: a later init() on them must not find
            # its failures already claimed (annotated) by this handle's processor.
            self.processor.shutdown()
        if self._review_queue is not None:
            self._review_queue.shutdown(timeout)
        if self._metrics is not None:
            self._metrics.shutdown(timeout)
        if self.writer is not None:
            self.writer.shutdown(timeout)
        for provider in self._owned_providers:
            try:
                provider.shutdown()
            except Exception:
                _log.exception("otel-errcompact: provider shutdown failed")
        with _INSTANCE_LOCK:
            if _INSTANCE is self:
                _INSTANCE = None


def instance() -> ErrCompact | None:
    """The handle of the last ``init()``, if it has not been shut down."""
    return _INSTANCE


def init(
    service_name: str | None = None,
    *,
    tracer_provider: TracerProvider | None = None,
    logger_provider: LoggerProvider | None = None,
    meter_provider: MeterProvider | None = None,
    thresholds: Thresholds | None = None,
    limits: Limits | None = None,
    human_review: HumanReviewHook | None = None,
    tool_predicate: SpanPredicate | None = None,
    compactor: Compactor | None = None,
    sinks: Sequence[TrajectorySink] = (),
    on_tool_error: OnError | None = None,
    breaker: BreakerPolicy | None = None,
    retry: RetryPolicy | None = None,
    state_store: RecoveryStateStore | None = None,
    **settings: Any,
) -> ErrCompact:
    """Instrument the process: failed tool spans become trajectory records, digests and escalations.

    Providers: the ones passed in, else the global SDK providers the application set, else new ones
    (exporting over OTLP when ``OTEL_EXPORTER_OTLP_ENDPOINT`` or a per-signal endpoint is set).
    ``settings`` are the fields of :class:`otel_errcompact.config.Settings` (``sqlite_path=...``,
    ``jsonl_path=...``, ``consecutive=...``); ``OTEL_ERRCOMPACT_*`` variables fill the rest. ``sinks`` adds
    trajectory sinks of your own. ``breaker``, ``retry`` and ``state_store`` configure recovery at the
    tool boundary (defaults: open after 3 identical failures for 30 s; one retry of transient failures;
    process-wide in-memory state). Idempotent: a second call returns the first handle.
    """
    global _INSTANCE
    with _INSTANCE_LOCK:
        if _INSTANCE is not None:
            _log.debug("otel-errcompact: init() called again; returning the existing handle")
            return _INSTANCE
        config = load_settings(on_tool_error=on_tool_error, **settings)
        handle = _build(
            config,
            service_name=service_name,
            tracer_provider=tracer_provider,
            logger_provider=logger_provider,
            meter_provider=meter_provider,
            thresholds=thresholds,
            limits=limits,
            human_review=human_review,
            tool_predicate=tool_predicate,
            compactor=compactor,
            extra_sinks=sinks,
            recovery=(breaker, retry, state_store),
        )
        _INSTANCE = handle
    atexit.register(handle.shutdown)
    return handle


def _build(
    config: Settings,
    *,
    service_name: str | None,
    tracer_provider: TracerProvider | None,
    logger_provider: LoggerProvider | None,
    meter_provider: MeterProvider | None,
    thresholds: Thresholds | None,
    limits: Limits | None,
    human_review: HumanReviewHook | None,
    tool_predicate: SpanPredicate | None,
    compactor: Compactor | None,
    extra_sinks: Sequence[TrajectorySink],
    recovery: tuple[BreakerPolicy | None, RetryPolicy | None, RecoveryStateStore | None] = (None, None, None),
) -> ErrCompact:
    owned: list[Any] = []
    resource = Resource.create({"service.name": service_name} if service_name else {})

    # Traces: the caller's, the application's global SDK provider, or a new one.
    tp = tracer_provider
    if tp is None:
        current = trace_api.get_tracer_provider()
        if isinstance(current, TracerProvider):
            tp = current
        elif config.enabled and isinstance(current, trace_api.ProxyTracerProvider):
            tp = TracerProvider(resource=resource)
            if _otlp_endpoint("traces"):
                tp.add_span_processor(BatchSpanProcessor(_span_exporter()))
            trace_api.set_tracer_provider(tp)
            owned.append(tp)
        else:
            _log.warning(
                "otel-errcompact: the global tracer provider is not the OpenTelemetry SDK's (%s); "
                "spans are not processed, the tool boundary still works",
                type(current).__name__,
            )

    # Logs: needed for exceptions recorded as log records and for the trajectory/escalation events.
    lp = logger_provider
    if lp is None:
        current_lp = logs_api.get_logger_provider()
        if isinstance(current_lp, LoggerProvider):
            lp = current_lp
        elif config.enabled and _otlp_endpoint("logs"):
            lp = LoggerProvider(resource=resource)
            lp.add_log_record_processor(BatchLogRecordProcessor(_log_exporter()))
            logs_api.set_logger_provider(lp)
            owned.append(lp)

    # Metrics.
    mp: Any = meter_provider
    if mp is None:
        current_mp = metrics_api.get_meter_provider()
        if isinstance(current_mp, MeterProvider):
            mp = current_mp
        elif config.enabled and _otlp_endpoint("metrics"):
            mp = MeterProvider(
                resource=resource, metric_readers=[PeriodicExportingMetricReader(_metric_exporter())]
            )
            metrics_api.set_meter_provider(mp)
            owned.append(mp)
        else:
            mp = current_mp

    history = ErrorHistory(thresholds or config.thresholds(), limits or config.limits())
    sinks: list[TrajectorySink] = []
    if config.enabled:
        if config.sqlite_path is not None:
            sinks.append(SQLiteSink(config.sqlite_path))
        if config.jsonl_path is not None:
            sinks.append(JSONLSink(config.jsonl_path))
        if config.otlp_logs and lp is not None:
            sinks.append(OTLPLogSink(lp))
        sinks.extend(extra_sinks)
    writer = (
        TrajectoryWriter(
            sinks,
            max_queue_size=config.max_queue_size,
            max_batch_size=config.max_batch_size,
            schedule_delay_s=config.schedule_delay_s,
        )
        if sinks
        else None
    )
    pipeline = ErrorPipeline(history, writer, compactor=compactor)

    metrics: ErrorMetrics | None = None
    if config.enabled:
        metrics = ErrorMetrics(mp.get_meter(_SCOPE_NAME))
        pipeline.add_failure_listener(metrics.on_failure)
        pipeline.add_escalation_listener(metrics.on_escalation)
        if lp is not None:
            pipeline.add_escalation_listener(EscalationLog(lp.get_logger(_SCOPE_NAME)).on_escalation)

    review_queue: BackgroundQueue[Escalation] | None = None
    if human_review is not None:
        queue: BackgroundQueue[Escalation] = BackgroundQueue(
            "otel-errcompact-review", human_review, max_size=1024
        )

        def ask_for_review(escalation: Escalation, _failure: Failure) -> None:
            if escalation.action == "human":
                queue.submit(escalation)

        pipeline.add_escalation_listener(ask_for_review)
        review_queue = queue
    elif history.thresholds.action == "human":
        _log.warning("otel-errcompact: action is 'human' but no human_review hook was given to init()")

    processor: ErrorCompactionProcessor | None = None
    if config.enabled and tp is not None:
        processor = ErrorCompactionProcessor(
            pipeline, predicate=tool_predicate, capture_arguments=config.capture_arguments
        )
        tp.add_span_processor(processor)
        if lp is not None:
            lp.add_log_record_processor(ExceptionLogProcessor(processor))

    tracer = (tp or trace_api.get_tracer_provider()).get_tracer(_SCOPE_NAME)
    breaker_policy, retry_policy, state_store = recovery
    fleet_metrics = FleetMetrics(mp.get_meter(_SCOPE_NAME)) if config.enabled else None
    store = state_store or (fleet_store(config.redis_url, fleet_metrics) if config.enabled else InMemoryStateStore())
    if breaker_policy is None and config.breaker_threshold > 0:
        breaker_policy = BreakerPolicy(config.breaker_threshold, config.breaker_cooldown_s)
    breakers = CircuitBreakers(breaker_policy, store)
    boundary = ToolBoundary(
        pipeline,
        tracer,
        processor,
        on_error=config.on_tool_error,
        capture_arguments=config.capture_arguments,
        breakers=breakers if config.enabled and breaker_policy is not None else None,
        retry=retry_policy or RetryPolicy(attempts=config.retry_attempts),
    )

    def halt_siblings(escalation: Escalation, _failure: Failure) -> None:
        if escalation.action == "halt":  # a halt cancels the scope's other in-flight read-only tools
            boundary.aborts.cancel_tools(escalation.scope, reason="halt")

    pipeline.add_escalation_listener(halt_siblings)
    telemetry: RecoveryTelemetry | None = None
    if config.enabled:
        telemetry = RecoveryTelemetry(mp.get_meter(_SCOPE_NAME))
        breakers.add_listener(telemetry.on_breaker_change)
        if fleet_metrics is not None:
            breakers.add_refusal_listener(fleet_metrics.on_refusal)
        if processor is not None:
            processor.model_span_listeners.append(telemetry.on_model_span)
    handle = ErrCompact(
        config,
        history=history,
        pipeline=pipeline,
        writer=writer,
        processor=processor,
        boundary=boundary,
        owned_providers=owned,
        metrics=metrics,
        review_queue=review_queue,
    )
    handle.recovery_telemetry = telemetry
    handle.pacer = Pacer(store)
    return handle
