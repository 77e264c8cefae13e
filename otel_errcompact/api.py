"""``init()``: instrument an agent with one call, and the :class:`ErrCompact` handle it returns.

``init()`` attaches to the application's OpenTelemetry SDK providers when it has set them, and never
replaces or duplicates them; otherwise it creates a tracer, logger and meter provider, exporting over
OTLP when the standard ``OTEL_EXPORTER_OTLP_*`` variables name an endpoint. Those become the
process-wide providers, which OpenTelemetry sets once per process: they outlive the handle
(``shutdown()`` flushes them, a later ``init()`` uses them again) and are shut down at interpreter exit.
Trajectory records go to the embedded SQLite store by default, so nothing needs a server.

A second call returns the same handle. With the same arguments that is all; with different ones (another
threshold, action, path, breaker, retry policy or state store) it warns with a :class:`ConfigurationWarning`
naming each differing setting and keeps the first ones: call ``shutdown()`` first to start again with new
settings. Invalid values and unknown keywords raise :class:`ConfigurationError` on every call.
``OTEL_ERRCOMPACT_ENABLED=false`` (or ``enabled=False``) returns an inert handle: tools run unwrapped,
``context()`` is ``""``, and no provider, processor, store or thread is created.
"""

from __future__ import annotations

import atexit
import functools
import logging
import os
import sys
import threading
import warnings
from collections.abc import Callable, Mapping, Sequence
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

from otel_errcompact import _compacting_process
from otel_errcompact._bounded import Deadline, call_within, reserve
from otel_errcompact._forked import new_locks_in_child, rebuild_in_child
from otel_errcompact._sigterm import install_sigterm_flush, uninstall_sigterm_flush
from otel_errcompact._worker import BackgroundQueue
from otel_errcompact.boundary import OnError, ToolBoundary, conversation
from otel_errcompact.compactor import Compactor
from otel_errcompact.config import Settings, load_settings, setting_origin
from otel_errcompact.config_check import wrong_argument
from otel_errcompact.exceptions import ConfigurationError, ConfigurationWarning
from otel_errcompact.history import ErrorHistory, Escalation, Limits, Thresholds
from otel_errcompact.inert import InertToolBoundary
from otel_errcompact.messages import MessageFormat, compact_messages
from otel_errcompact.pipeline import ErrorPipeline, Failure, Outcome
from otel_errcompact.processor import (
    ErrorCompactionProcessor,
    SpanPredicate,
    attach_exception_logs,
    attach_span_processor,
)
from otel_errcompact.prometheus import PrometheusEndpoint, prometheus_address, prometheus_requested, start_prometheus
from otel_errcompact.recovery.breaker import BreakerPolicy, CircuitBreakers
from otel_errcompact.recovery.fleet import FleetMetrics, fleet_store
from otel_errcompact.recovery.loop import ModelAdapter, RecoveryLoop
from otel_errcompact.recovery.observe import MODEL_SPAN_SIGNALS, RecoveryTelemetry
from otel_errcompact.recovery.pacing import Pacer, pace
from otel_errcompact.recovery.retry import RetryPolicy
from otel_errcompact.recovery.state import RecoveryStateStore
from otel_errcompact.redact import add_patterns
from otel_errcompact.sinks import OTLPLogSink, TrajectorySink, TrajectoryWriter
from otel_errcompact.sinks.redacting import RedactingSink
from otel_errcompact.storepath import open_jsonl_sink, open_sqlite_sink
from otel_errcompact.telemetry import ErrorMetrics, EscalationLog, metrics_are_read

__all__ = ["ErrCompact", "HumanReviewHook", "init", "instance"]

_log = logging.getLogger("otel_errcompact")

HumanReviewHook = Callable[[Escalation], None]
"""Called (on a background thread) with each breach when the action is ``human``. It may call
``shutdown()`` (a reviewer who stops the agent) or ``flush()``: neither waits for the hook's own call.
``flush()`` and ``shutdown()`` called elsewhere export the breach first and wait for a hook still
running last, with what is left of their timeout: a hook may wait for a person."""

_INSTANCE: ErrCompact | None = None
_INSTANCE_LOCK = threading.Lock()
new_locks_in_child(sys.modules[__name__], "_INSTANCE_LOCK")
_SCOPE_NAME = "otel_errcompact"

_LIBRARY_PROVIDERS: list[Any] = []
"""The providers ``init()`` created and set as the process-wide ones (and the Prometheus endpoint that
reads the meter provider). OpenTelemetry sets each global provider once per process, so a provider shut
down with a handle would stay the global, dead, and a later ``init()`` would find it: they outlive every
handle, and :func:`_shut_down_at_exit` shuts them down."""
_exit_timeout_s = 30.0
"""``OTEL_ERRCOMPACT_SHUTDOWN_TIMEOUT_S`` of the last ``init()``: the exit's bound when no handle is live."""


def _otlp_endpoint(signal: str) -> bool:
    return bool(
        os.environ.get("OTEL_EXPORTER_OTLP_ENDPOINT")
        or os.environ.get(f"OTEL_EXPORTER_OTLP_{signal.upper()}_ENDPOINT")
    )


_EXPORTERS = {"traces": ("otlp",), "logs": ("otlp",), "metrics": ("otlp", "prometheus")}
"""The exporters the providers ``init()`` creates can have, per signal (besides ``none``)."""


def _otlp_export(signal: str) -> bool:
    """An OTLP endpoint is set for ``signal`` (``traces``, ``metrics``, ``logs``) and its standard
    ``OTEL_<SIGNAL>_EXPORTER`` (default ``otlp``; ``none`` turns it off) does not rule OTLP out.

    Called when ``init()`` creates the signal's provider: an exporter the variable names that it cannot
    have (``console``, ``zipkin``, a misspelt ``otpl``) is a :class:`ConfigurationWarning`, as the signal
    would otherwise go nowhere without a word."""
    variable = f"OTEL_{signal.upper()}_EXPORTER"
    names = {n.strip().lower() for n in os.environ.get(variable, "otlp").split(",") if n.strip()}
    unknown = sorted(names - {"none", *_EXPORTERS[signal]})
    if unknown:
        warnings.warn(
            f"otel-errcompact: {variable}={os.environ[variable]!r}: the {signal} provider init() creates "
            f"exports with {' or '.join(_EXPORTERS[signal])} (or none); ignoring {', '.join(unknown)}",
            ConfigurationWarning, stacklevel=4,
        )
    return _otlp_endpoint(signal) and "otlp" in names


def _protocol(signal: str) -> str:
    """``grpc`` or ``http/protobuf`` (the default), from the standard variables. Another value (``http/json``,
    which the Python SDK has no exporter for, or a typo) is a :class:`ConfigurationWarning` naming the
    variable, and the default is used: it was used without a word."""
    for variable in (f"OTEL_EXPORTER_OTLP_{signal.upper()}_PROTOCOL", "OTEL_EXPORTER_OTLP_PROTOCOL"):
        value = os.environ.get(variable, "").strip().lower()
        if value in ("grpc", "http/protobuf"):
            return value
        if value:
            warnings.warn(
                f"otel-errcompact: {variable}={os.environ[variable]!r}: expected grpc or http/protobuf; "
                f"exporting {signal} with http/protobuf",
                ConfigurationWarning, stacklevel=5,
            )
            return "http/protobuf"
    return "http/protobuf"


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
        self._shutdown_done = threading.Event()
        self._shutdown_thread: threading.Thread | None = None
        self._exit_in_workers = False
        self._init_arguments: dict[str, Any] = {}
        self._store_path = settings.sqlite_path if settings.enabled else None
        rebuild_in_child(self._after_fork_in_child)

    def _after_fork_in_child(self) -> None:
        """In a process forked from this one (see :mod:`otel_errcompact._forked`)."""
        self._shutdown_lock = threading.Lock()
        self._shutdown_done = threading.Event()
        if self._is_shutdown:
            self._shutdown_done.set()
        else:
            self._shut_down_at_worker_exit()

    def _shut_down_at_worker_exit(self) -> None:
        """Make :meth:`shutdown` run when a multiprocessing worker this process is, or forks, ends.

        Such a worker ends with ``os._exit()`` (with the fork and forkserver start methods), which runs
        no ``atexit`` handler, only multiprocessing's own finalizers: without one, the worker's last
        records would wait in its spool for the next start, and its segments would stay on disk. A
        worker clears its finalizers when it starts, after ``init()`` ran in it (at the import of the
        main module) or was inherited from its parent, then runs multiprocessing's after-fork hooks:
        the finalizer is registered from one of those. Once per process (the hooks are inherited)."""
        util = sys.modules.get("multiprocessing.util")
        if util is not None and not self._exit_in_workers:
            self._exit_in_workers = True
            util.register_after_fork(self, _shut_down_at_multiprocessing_exit)

    # -- what an agent loop calls ------------------------------------------------------------------

    def context(self, conversation_id: str | None = None) -> str:
        """The ``[RECENT ERRORS]`` block for the next prompt of ``conversation_id`` (default: the current
        scope); ``""`` when nothing failed."""
        if not self.settings.enabled:
            return ""
        scope = conversation_id if conversation_id is not None else self.boundary.current_scope()
        return self.history.render(scope)

    def check(self, scope: str | None = None) -> None:
        """Raise :class:`ErrorBudgetExceeded` if ``scope`` (default: the current one) has breached with the
        halt action. Call it at the top of each agent step."""
        self.boundary.check(scope)

    def acknowledge(self, scope: str) -> None:
        """Clear a standing breach after review, keeping the history (see ErrorHistory.acknowledge), a
        standing :meth:`abort` of the scope, and the circuit breakers its calls ran into (the calls, by
        tool and arguments, that failed into a breaker or were refused by an open one: closed for every
        conversation, as a success of the call would close them): the conversation goes on. Without it,
        an abort that no recovery loop consumed would refuse every later tool call of a conversation
        whose id is used again by a later run, and the reviewed call would still be refused."""
        self.history.acknowledge(scope)
        self.boundary.aborts.clear(scope)
        self.boundary.close_breakers(scope)

    def reset(self, scope: str) -> None:
        """Forget a scope, e.g. when its conversation ends: its history, a standing :meth:`abort`, and which
        circuit breakers its calls ran into. The breakers stay as they are: a conversation ending says
        nothing about whether the tool works again (they close at a successful probe after their cooldown,
        or at an :meth:`acknowledge` of a conversation that ran into them)."""
        self.history.reset(scope)
        self.boundary.aborts.clear(scope)
        self.boundary.forget_breakers(scope)

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
        self, model: ModelAdapter, tools: Mapping[str, Callable[..., Any]] | None = None, **options: Any
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

    def compact_messages(self, messages: Sequence[Any], format: MessageFormat = "openai") -> list[Any]:
        """A copy of a message list whose raw tool errors are digests with counts (see
        :func:`otel_errcompact.messages.compact_messages`), made by the compactor given to ``init``, so
        that they match the digests its spans and records carry; the input is never changed."""
        return compact_messages(messages, format, compactor=self.pipeline.compactor)

    @property
    def sqlite_path(self) -> Path | None:
        """Where trajectory records are stored, when the SQLite sink is on (``None`` when off, when the
        library is disabled, or when the default path was unusable)."""
        return self._store_path

    # -- lifecycle -----------------------------------------------------------------------------------

    def flush(self, timeout_s: float = 10.0) -> bool:
        """Write every queued trajectory record and token count, and export what the providers the
        library created hold; True when all finished in time and no trajectory record has been lost
        (dropped at a full queue, or refused by a sink). Returns within ``timeout_s`` in all, even
        when an OTLP endpoint is dead (an export still running goes on in the background). The calls of
        the human-review hook are waited for last (see :data:`HumanReviewHook`)."""
        deadline = Deadline(timeout_s)
        ok = True
        if self.processor is not None:
            self.processor.settle()  # failures whose digest is still to be made (see otel_errcompact.deferred)
        if self.writer is not None:
            ok = self.writer.force_flush(deadline.remaining()) and ok
        if self._metrics is not None:
            ok = self._metrics.flush(deadline.remaining()) and ok
        for provider in self._owned_providers:
            if not callable(getattr(provider, "force_flush", None)):
                continue  # e.g. the Prometheus endpoint: nothing buffered, scraped on demand
            flush = functools.partial(provider.force_flush, int(deadline.remaining() * 1000))
            ok = call_within(flush, deadline.remaining(), f"otel_errcompact.flush.{type(provider).__name__}") and ok
        if self._review_queue is not None:
            # Last: a hook may wait for a person for longer than any timeout, and the breach it reviews
            # must be exported (its span event, log event and metric) whatever the person does.
            ok = self._review_queue.flush(deadline.remaining()) and ok
        return ok

    def shutdown(self) -> None:
        """Flush and stop everything this handle started. Idempotent; also runs at interpreter exit.

        The providers the library created are flushed and left running: they stay the process-wide
        providers, and a later ``init()`` uses them (they are shut down at exit).

        A call made while another thread shuts the handle down waits for it to finish (at most
        ``OTEL_ERRCOMPACT_SHUTDOWN_TIMEOUT_S``): the SIGTERM handler's call, arriving while a
        multiprocessing worker's exit shuts it down, must not let the process die halfway."""
        self._shut_down_by(Deadline(self.settings.shutdown_timeout_s), flush_providers=True)

    def _shut_down_by(self, deadline: Deadline, *, flush_providers: bool) -> None:
        """:meth:`shutdown` within ``deadline``; ``flush_providers=False`` at exit, where the providers
        are shut down next (which exports what they hold)."""
        with self._shutdown_lock:
            first = not self._is_shutdown
            self._is_shutdown = True
            if first:
                self._shutdown_thread = threading.current_thread()
        if not first:
            if self._shutdown_thread is not threading.current_thread():
                self._shutdown_done.wait(deadline.remaining())
            return
        try:
            self._shut_down(deadline, flush_providers)
        finally:
            self._shutdown_done.set()

    def _shut_down(self, deadline: Deadline, flush_providers: bool) -> None:
        """Each step on its own: one that fails (a sink's close, a review hook's thread) is logged and
        the rest still run, and the handle stops being the instance whatever happened, so that the next
        ``init()`` builds a new one instead of returning this one half shut down."""
        global _INSTANCE
        # One deadline for everything this handle started: the SDK's provider flushes ignore their
        # timeout and wait out their exporters' retries, so they run on helper threads (see _bounded).
        try:
            processor, writer, review_queue, metrics = self.processor, self.writer, self._review_queue, self._metrics
            if processor is not None:
                # Detach from providers this handle does not own: a later init() on them must not find
                # its failures already claimed (annotated) by this handle's processor.
                _step("the span processor", processor.shutdown)
            if writer is not None:  # the audit trail first: it gets the most of the deadline
                _step("the trajectory writer", lambda: writer.shutdown(deadline.remaining()))
            if review_queue is not None:  # closed now, waited for last (see _await_reviews)
                _step("the review queue", lambda: review_queue.shutdown(0))
            if metrics is not None:
                _step("the metrics", lambda: metrics.shutdown(deadline.remaining()))
            _step("the SIGTERM handler", uninstall_sigterm_flush)
            if flush_providers:
                _step("the providers", lambda: self._flush_providers(deadline))
                self._await_reviews(deadline)
        finally:
            with _INSTANCE_LOCK:
                if _INSTANCE is self:
                    _INSTANCE = None

    def _await_reviews(self, deadline: Deadline) -> None:
        """Wait for the review hook's calls still queued or running, until ``deadline``: after the
        providers are flushed (or, at exit, shut down), as a hook may wait for a person for longer than
        the whole shutdown may take, and the breach it reviews is exported before."""
        review_queue = self._review_queue
        if review_queue is not None:
            _step("the review queue", lambda: review_queue.shutdown(deadline.remaining()))

    def _flush_providers(self, deadline: Deadline) -> None:
        for provider in self._owned_providers:
            if callable(getattr(provider, "force_flush", None)):
                _within(provider.force_flush, deadline, "flush", self.settings.shutdown_timeout_s)


def _within(call: Callable[..., object], deadline: Deadline, what: str, timeout_s: float) -> None:
    """``call`` (a provider's ``shutdown`` or ``force_flush``) on a helper thread, waited for until
    ``deadline``; a warning when it did not finish by then."""
    name = type(getattr(call, "__self__", call)).__name__
    if not call_within(call, deadline.remaining(), f"otel_errcompact.{what.replace(' ', '')}.{name}"):
        _log.warning("otel-errcompact: %s did not %s within OTEL_ERRCOMPACT_SHUTDOWN_TIMEOUT_S=%gs (is the "
                     "OTLP endpoint reachable?); not waiting for it", name, what, timeout_s)


def _shut_down_at_exit() -> None:
    """At interpreter exit: the live handle, then the providers the library created, within one
    ``OTEL_ERRCOMPACT_SHUTDOWN_TIMEOUT_S`` in all."""
    handle = _INSTANCE
    deadline = Deadline(handle.settings.shutdown_timeout_s if handle is not None else _exit_timeout_s)
    if handle is not None:
        handle._shut_down_by(deadline, flush_providers=False)
    while _LIBRARY_PROVIDERS:
        _step("a provider", functools.partial(_within, _LIBRARY_PROVIDERS.pop(0).shutdown, deadline,
                                              "shut down", _exit_timeout_s))
    if handle is not None:
        handle._await_reviews(deadline)


def _shut_down_at_exit_before_earlier_handlers() -> None:
    """Register :func:`_shut_down_at_exit` (once) as the last exit handler so far, so that it runs before
    the handlers registered before this ``init()`` (``atexit`` runs the last registered first), as a
    handler registered by each ``init()`` would."""
    atexit.unregister(_shut_down_at_exit)
    atexit.register(_shut_down_at_exit)


def _step(what: str, action: Callable[[], object]) -> None:
    """Run one step of a shutdown; an exception is logged, never raised into the host."""
    try:
        action()
    except Exception:
        _log.exception("otel-errcompact: shutting down %s failed; the rest of the shutdown goes on", what)


def _shut_down_at_multiprocessing_exit(handle: ErrCompact) -> None:
    from multiprocessing import util

    util.Finalize(handle, handle.shutdown, exitpriority=1)


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
    ``jsonl_path=...``, ``consecutive=...``); ``OTEL_ERRCOMPACT_*`` variables fill the rest. ``None`` turns off
    a setting that can be off (``sqlite_path=None``: no store; ``budget=None``: no budget). ``sinks`` adds
    trajectory sinks of your own. ``breaker``, ``retry`` and ``state_store`` configure recovery at the
    tool boundary (defaults: open after 3 identical failures for 30 s; one retry of transient failures;
    process-wide in-memory state).

    A second call returns the first handle; when its arguments differ from the first call's, a
    :class:`ConfigurationWarning` names each differing setting, which is ignored (``shutdown()`` first
    to change settings). Invalid values, unknown keywords and arguments of the wrong kind (``retry=3``, a
    ``human_review`` that is not callable) raise :class:`ConfigurationError` on every call. An unusable
    ``sqlite_path`` / ``jsonl_path`` set explicitly raises ConfigurationError naming the setting and the
    path; an unusable *default* SQLite path warns and runs without the store.
    """
    global _INSTANCE
    _check_arguments(locals())
    arguments: dict[str, Any] = {
        "service_name": service_name,
        "tracer_provider": tracer_provider,
        "logger_provider": logger_provider,
        "meter_provider": meter_provider,
        "thresholds": thresholds,
        "limits": limits,
        "human_review": human_review,
        "tool_predicate": tool_predicate,
        "compactor": compactor,
        "sinks": tuple(sinks),
        "breaker": breaker,
        "retry": retry,
        "state_store": state_store,
    }
    with _INSTANCE_LOCK:
        config = load_settings(on_tool_error=on_tool_error, **settings)
        if _INSTANCE is not None:
            differences = _differences(_INSTANCE, config, arguments, settings)
            if differences:
                warnings.warn(
                    "otel-errcompact: init() was already called; keeping the first handle and ignoring "
                    f"{'; '.join(differences)}. Call shutdown() first to re-initialise with new settings.",
                    ConfigurationWarning,
                    stacklevel=2,
                )
            return _INSTANCE
        _warn_covered(config, thresholds, limits, settings)
        if not config.enabled:
            handle = _build_inert(config)
            handle._init_arguments = arguments
            _INSTANCE = handle
            return handle
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
            overrides=settings,
            recovery=(breaker, retry, state_store),
        )
        handle._init_arguments = arguments
        _INSTANCE = handle
    _shut_down_at_exit_before_earlier_handlers()
    handle._shut_down_at_worker_exit()
    if handle.writer is not None:
        install_sigterm_flush(_shut_down_current, config.shutdown_timeout_s, hold=_hold_current)
    return handle


_ARGUMENT_KINDS: tuple[tuple[str, type[Any] | tuple[type[Any], ...], str], ...] = (
    ("service_name", str, "a string"),
    ("tracer_provider", TracerProvider, "an OpenTelemetry SDK TracerProvider"),
    ("logger_provider", LoggerProvider, "an OpenTelemetry SDK LoggerProvider"),
    ("meter_provider", metrics_api.MeterProvider, "an OpenTelemetry MeterProvider"),
    ("thresholds", Thresholds, "a Thresholds"),
    ("limits", Limits, "a Limits"),
    ("compactor", Compactor, "a Compactor"),
    ("breaker", BreakerPolicy, "a BreakerPolicy"),
    ("retry", RetryPolicy, "a RetryPolicy"),
    ("state_store", RecoveryStateStore, "a RecoveryStateStore, such as InMemoryStateStore()"),
)
"""The object arguments of ``init()`` (``None``: not given), each with what it must be."""
_CALLABLE_ARGUMENTS = (
    ("human_review", "a function called with each Escalation"),
    ("tool_predicate", "a function of a span that returns True for a tool call"),
)


def _check_arguments(arguments: Mapping[str, Any]) -> None:
    """Refuse an ``init()`` argument of the wrong kind, with a ConfigurationError naming it, before anything
    is attached or started. Each is used only later, and most of them only off ``init()``'s thread or
    inside a tool call: ``retry=3`` turned every failing call's digest into the library's own
    ``AttributeError``, and a hook or a sink that is no such thing failed on a background thread, logged,
    with nothing said to the caller."""
    problems = [
        wrong_argument(name, arguments[name], want)
        for name, kind, want in _ARGUMENT_KINDS
        if arguments[name] is not None and not isinstance(arguments[name], kind)
    ]
    problems += [
        wrong_argument(name, arguments[name], want)
        for name, want in _CALLABLE_ARGUMENTS
        if arguments[name] is not None and not callable(arguments[name])
    ]
    sinks = arguments["sinks"]
    if isinstance(sinks, str | bytes) or not isinstance(sinks, Sequence) or not all(
        isinstance(sink, TrajectorySink) for sink in sinks
    ):
        problems.append(wrong_argument("sinks", sinks, "a list of TrajectorySink (with write() and close())"))
    if problems:
        raise ConfigurationError(f"invalid otel-errcompact settings: {'; '.join(problems)}")


_COVERED_FIELDS = (
    ("thresholds", ("consecutive", "budget", "action")),
    ("limits", ("max_classes", "max_scopes", "idle_seconds", "max_lines", "max_chars", "max_values")),
)
"""The settings a ``thresholds=`` / ``limits=`` object given to ``init()`` holds, each of them."""


def _warn_covered(
    config: Settings, thresholds: Thresholds | None, limits: Limits | None, overrides: dict[str, Any]
) -> None:
    """A ``thresholds=`` or ``limits=`` object holds every setting it covers, its defaults included, so a
    keyword or an ``OTEL_ERRCOMPACT_*`` variable for one of them cannot take effect: a
    :class:`ConfigurationWarning` names each one that asks for another value than the object's (an
    operator's ``OTEL_ERRCOMPACT_ACTION=human`` beside ``thresholds=Thresholds(consecutive=5)`` was
    ignored without a word, and ``ec.settings`` showed it as if in effect)."""
    ignored: list[str] = []
    for argument, fields in _COVERED_FIELDS:
        given = thresholds if argument == "thresholds" else limits
        if given is None:
            continue
        for name in fields:
            origin, wanted, used = setting_origin(name, overrides), getattr(config, name), getattr(given, name)
            if not origin.startswith("the default") and wanted != used:
                ignored.append(f"{origin.rstrip('=')}={wanted!r} (the {argument}= given has {name}={used!r})")
    if ignored:
        warnings.warn(
            f"otel-errcompact: ignoring {'; '.join(ignored)}: give each setting in one place",
            ConfigurationWarning,
            stacklevel=3,
        )


# SIGTERM's handler acts on the handle live when the signal comes, not on the one that installed it: a
# shutdown() off the main thread (from the human-review hook, say) cannot remove the handler, and the next
# init() finds it installed and leaves it, so bound to its first handle it would flush a shut-down one.


def _shut_down_current() -> None:
    handle = _INSTANCE
    if handle is not None:
        handle.shutdown()


def _hold_current() -> None:
    handle = _INSTANCE
    if handle is not None and handle.writer is not None:
        handle.writer.hold()


def _differences(
    handle: ErrCompact, config: Settings, arguments: dict[str, Any], overrides: dict[str, Any]
) -> list[str]:
    """Each setting of a repeated ``init()`` that differs from the running handle's, as ``name: a → b``."""
    out: list[str] = []
    old_settings, new_settings = handle.settings.model_dump(), config.model_dump()
    old_arguments = handle._init_arguments
    in_force = _in_force_by_objects(handle, old_arguments)
    for name, new in new_settings.items():
        if name in in_force:
            # A thresholds= / limits= object of the first call decided it, whatever the settings say: a
            # keyword asking for it now is compared with what is in force (its variable or default, with
            # which the first call warned already, is not asked for again).
            if name in overrides and in_force[name] != new:
                out.append(f"{name}: {in_force[name]!r} → {new!r}")
        elif old_settings.get(name) != new:
            out.append(f"{name}: {old_settings.get(name)!r} → {new!r}")
    for name in ("thresholds", "limits"):
        new = arguments[name]
        if new is not None and new != getattr(handle.history, name):
            out.append(f"{name}: {getattr(handle.history, name)!r} → {new!r}")
    for name, in_use in _recovery_policies(handle, old_arguments).items():
        new = arguments[name]
        if new is not None and new != in_use:
            out.append(f"{name}: {in_use!r} → {new!r}")
    for name in ("service_name", "tracer_provider", "logger_provider", "meter_provider",
                 "human_review", "tool_predicate", "compactor", "state_store"):
        new = arguments[name]
        if new is not None and new is not old_arguments.get(name) and new != old_arguments.get(name):
            out.append(f"{name}: {old_arguments.get(name)!r} → {new!r}")
    old_sinks: tuple[Any, ...] = old_arguments.get("sinks", ())
    if arguments["sinks"] and (len(arguments["sinks"]) != len(old_sinks)
                               or any(a is not b for a, b in zip(arguments["sinks"], old_sinks, strict=False))):
        out.append(f"sinks: {list(old_sinks)!r} → {list(arguments['sinks'])!r}")
    return out


def _in_force_by_objects(handle: ErrCompact, old_arguments: dict[str, Any]) -> dict[str, Any]:
    """The settings that the ``thresholds=`` / ``limits=`` objects given to ``handle``'s ``init()`` hold,
    with the values in force (see :data:`_COVERED_FIELDS`)."""
    in_force: dict[str, Any] = {}
    for argument, fields in _COVERED_FIELDS:
        if old_arguments.get(argument) is not None:
            used = getattr(handle.history, argument)
            in_force.update((name, getattr(used, name)) for name in fields)
    return in_force


def _recovery_policies(handle: ErrCompact, old_arguments: dict[str, Any]) -> dict[str, Any]:
    """The breaker and retry policies ``handle``'s tool boundary uses (``breaker`` is None when it has no
    breaker), whether given to ``init()`` or made from the settings; what was given, for a boundary
    that does not say."""
    boundary = handle.boundary
    breakers = getattr(boundary, "breakers", old_arguments.get("breaker"))
    return {
        "breaker": getattr(breakers, "policy", breakers),
        "retry": getattr(boundary, "retry", old_arguments.get("retry")),
    }


def _build_inert(config: Settings) -> ErrCompact:
    """The handle of a disabled library: nothing attached, started or stored (see :mod:`inert`)."""
    history = ErrorHistory(config.thresholds(), config.limits())
    pipeline = ErrorPipeline(history, None)
    return ErrCompact(
        config,
        history=history,
        pipeline=pipeline,
        writer=None,
        processor=None,
        boundary=InertToolBoundary(pipeline),
        owned_providers=(),
        metrics=None,
        review_queue=None,
    )


def _trajectory_sinks(config: Settings, overrides: dict[str, Any]) -> tuple[list[TrajectorySink], bool]:
    """The file sinks the settings ask for, and whether the SQLite store is among them.

    An explicitly set path that cannot be used raises ConfigurationError (the user asked for that file;
    running without it would lose the audit trail silently). The *default* SQLite path was never chosen
    by the user, and may sit in a read-only home of a container: then a ConfigurationWarning says why
    and the library runs without the store.
    """
    sinks: list[TrajectorySink] = []
    has_store = False
    if config.sqlite_path is not None:
        origin = setting_origin("sqlite_path", overrides)
        try:
            sinks.append(open_sqlite_sink(config.sqlite_path, origin))
            has_store = True
        except ConfigurationError as exc:
            if not origin.startswith("the default"):
                raise
            warnings.warn(f"otel-errcompact: running without the trajectory store: {exc}; set "
                          "OTEL_ERRCOMPACT_SQLITE_PATH to a writable file", ConfigurationWarning, stacklevel=4)
    if config.jsonl_path is not None:
        sinks.append(open_jsonl_sink(config.jsonl_path, setting_origin("jsonl_path", overrides)))
    return sinks, has_store


def _start_prometheus(address: tuple[str, int]) -> PrometheusEndpoint | None:
    """The endpoint Prometheus scrapes, or ``None`` with a ``ConfigurationWarning`` when the address cannot
    be bound. Not an error: it is most often another worker process of the same application, started with
    the same variables, that serves the port, and failing ``init()`` there would stop the agent for want
    of a metrics endpoint (the other metric readers, spans and trajectory records go on)."""
    try:
        return start_prometheus(*address)
    except OSError as exc:
        warnings.warn(
            f"otel-errcompact: not serving metrics for Prometheus on {address[0]}:{address[1]} "
            f"(OTEL_EXPORTER_PROMETHEUS_HOST/_PORT): {exc}; give each process its own port",
            ConfigurationWarning, stacklevel=4,
        )
        return None


def _ours_again(provider: Any, owned: list[Any]) -> Any:
    """``provider``, counted among this handle's own when an earlier ``init()`` created it (the handle
    then flushes it, as the one that created it did)."""
    if any(provider is ours for ours in _LIBRARY_PROVIDERS):
        owned.append(provider)
    return provider


def _library_created(provider: Any, owned: list[Any]) -> None:
    """A provider (or the Prometheus endpoint) just created and made the process-wide one: it lives
    until exit (see :data:`_LIBRARY_PROVIDERS`)."""
    _LIBRARY_PROVIDERS.append(provider)
    owned.append(provider)


def _service_name(tracer_provider: TracerProvider | None, resource: Resource) -> str:
    """The ``service.name`` the process's spans carry: the tracer provider's resource (the one passed in,
    else the application's global SDK provider), else the resource a provider of ours would get. It names
    a fleet's keys in Redis (see :func:`~otel_errcompact.recovery.fleet.fleet_store`)."""
    provider = tracer_provider or trace_api.get_tracer_provider()
    own = provider.resource if isinstance(provider, TracerProvider) else resource
    return str(own.attributes.get("service.name") or resource.attributes.get("service.name") or "")


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
    overrides: dict[str, Any],
    recovery: tuple[BreakerPolicy | None, RetryPolicy | None, RecoveryStateStore | None] = (None, None, None),
) -> ErrCompact:
    global _exit_timeout_s
    owned: list[Any] = []
    _exit_timeout_s = config.shutdown_timeout_s
    # Files first: a refused path must fail init() before any provider or thread exists. So must a bad
    # Prometheus port, when a meter provider of ours would serve it.
    serve_prometheus = (
        config.enabled and meter_provider is None and prometheus_requested()
        and not isinstance(metrics_api.get_meter_provider(), MeterProvider)
    )
    prometheus = prometheus_address() if serve_prometheus else None
    file_sinks, has_store = _trajectory_sinks(config, overrides)
    # The recovery state store too (redis-py missing fails here): its outage counter is wired below.
    breaker_policy, retry_policy, state_store = recovery
    resource = Resource.create({"service.name": service_name} if service_name else {})
    store = state_store or fleet_store(
        config.redis_url, namespace=config.fleet_namespace or _service_name(tracer_provider, resource)
    )

    # Traces: the caller's, the application's global SDK provider (or the one an earlier init() created),
    # or a new one.
    tp = tracer_provider
    if tp is None:
        current = trace_api.get_tracer_provider()
        if isinstance(current, TracerProvider):
            tp = _ours_again(current, owned)
        elif config.enabled and isinstance(current, trace_api.ProxyTracerProvider):
            # Our atexit shutdown bounds the time; the SDK's own would wait out a dead endpoint.
            tp = TracerProvider(resource=resource, shutdown_on_exit=False)
            if _otlp_export("traces"):
                tp.add_span_processor(BatchSpanProcessor(_span_exporter()))
            trace_api.set_tracer_provider(tp)
            _library_created(tp, owned)
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
            lp = _ours_again(current_lp, owned)
        elif config.enabled and _otlp_export("logs"):
            lp = LoggerProvider(resource=resource, shutdown_on_exit=False)
            lp.add_log_record_processor(BatchLogRecordProcessor(_log_exporter()))
            logs_api.set_logger_provider(lp)
            _library_created(lp, owned)

    # Metrics.
    mp: Any = meter_provider
    if mp is None:
        current_mp = metrics_api.get_meter_provider()
        if isinstance(current_mp, MeterProvider):
            mp = _ours_again(current_mp, owned)
        elif config.enabled and (otlp_metrics := _otlp_export("metrics")) | prometheus_requested():
            readers: list[Any] = []
            if otlp_metrics:
                readers.append(PeriodicExportingMetricReader(_metric_exporter()))
            endpoint = _start_prometheus(prometheus) if prometheus is not None else None
            if endpoint is not None:
                readers.append(endpoint.reader)
            # Our atexit shutdown bounds the time; the SDK's own would wait out a dead endpoint.
            mp = MeterProvider(resource=resource, metric_readers=readers, shutdown_on_exit=False)
            metrics_api.set_meter_provider(mp)
            _library_created(mp, owned)
            if endpoint is not None:
                _library_created(endpoint, owned)
        else:
            mp = current_mp

    history = ErrorHistory(thresholds or config.thresholds(), limits or config.limits())
    sinks: list[TrajectorySink] = []
    bounded_at_exit = len(_LIBRARY_PROVIDERS)  # the bounded calls made at exit: one per provider
    if config.redact_patterns:
        add_patterns(config.redact_patterns)
    if config.enabled:
        # Security policy: what leaves the process is redacted; local stores only on request.
        at_rest: Callable[[TrajectorySink], TrajectorySink] = (
            RedactingSink if config.redact_at_rest else (lambda sink: sink)
        )
        sinks.extend(at_rest(sink) for sink in file_sinks)
        if config.otlp_logs and lp is not None:
            sinks.append(RedactingSink(OTLPLogSink(lp, flush_timeout_s=min(1.0, config.shutdown_timeout_s / 4))))
            bounded_at_exit += 1  # the sink's flush when the writer closes
        sinks.extend(extra_sinks)
    writer = (
        TrajectoryWriter(
            sinks,
            max_queue_size=config.max_queue_size,
            max_batch_size=config.max_batch_size,
            schedule_delay_s=config.schedule_delay_s,
            spool_dir=config.spool_dir(),
        )
        if sinks
        else None
    )
    use_process = config.compaction_process
    if use_process == "auto":
        use_process = _compacting_process.usable_cores() >= _compacting_process.MIN_CORES
    compacting = _compacting_process.shared() if use_process and compactor is None else None
    pipeline = ErrorPipeline(history, writer, compactor=compactor, compacting=compacting)

    metrics: ErrorMetrics | None = None
    if config.enabled:
        metrics = ErrorMetrics(mp.get_meter(_SCOPE_NAME), token_counts=metrics_are_read(mp))
        if writer is not None:
            writer.register_metrics(mp.get_meter(_SCOPE_NAME))
        pipeline.add_failure_listener(metrics.on_failure)
        pipeline.add_success_listener(metrics.on_success)
        pipeline.add_escalation_listener(metrics.on_escalation)
        metrics.watch_history(history)
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
        # An earlier handle's processor, shut down on the provider, is taken over (see attach_span_processor).
        processor = attach_span_processor(
            tp, pipeline, predicate=tool_predicate, capture_arguments=config.capture_arguments
        )
        processor.defer_digests(tp)
        if lp is not None:
            attach_exception_logs(lp, processor)

    tracer = (tp or trace_api.get_tracer_provider()).get_tracer(_SCOPE_NAME)
    fleet_metrics = FleetMetrics(mp.get_meter(_SCOPE_NAME)) if config.enabled else None
    if fleet_metrics is not None and state_store is None:
        fleet_metrics.watch(store)
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
            processor.add_model_span_listener(
                telemetry.on_model_span,
                telemetry.model_span_matters,
                signals=MODEL_SPAN_SIGNALS,
                waiting=telemetry.waiting,
            )
    # No thread can be started at exit on Python 3.12+: those calls get their helpers now (see _bounded).
    reserve(bounded_at_exit)
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
    if not has_store:
        handle._store_path = None
    handle.recovery_telemetry = telemetry
    handle.pacer = Pacer(store)
    return handle
