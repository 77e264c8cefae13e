"""The ordered steps for one failure, independent of where it was observed.

For every failure, in this order (the pattern's contract):

1. the raw error goes to the trajectory writer (audit first: if anything after this fails, the raw error
   is already queued for the store);
2. the compactor turns it into a digest;
3. the history counts it and decides on escalation;
4. the trajectory record is written again with its digest, key, count and escalation (the writer
   coalesces the two versions, so a store normally holds one row);
5. metrics and escalation listeners are told.

Both the span processor and the tool boundary call :meth:`ErrorPipeline.handle`; it never raises.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, Literal

from otel_errcompact.compactor import Compactor, compact_text
from otel_errcompact.digest import Digest
from otel_errcompact.history import ErrorHistory, Escalation, Observation
from otel_errcompact.recovery.classify import with_retry_after_attribute
from otel_errcompact.sinks import TrajectoryWriter
from otel_errcompact.trajectory import DigestInfo, TrajectoryRecord

__all__ = ["ErrorPipeline", "EscalationListener", "Failure", "FailureListener", "Outcome", "SuccessListener"]

_log = logging.getLogger("otel_errcompact")


@dataclass(frozen=True, slots=True)
class Failure:
    """Everything known about one failed tool call, before compaction."""

    scope: str
    raw_error: str
    source: Literal["span", "log", "tool", "api"] = "api"
    tool_name: str | None = None
    tool_call_id: str | None = None
    tool_arguments: str | None = None
    conversation_id: str | None = None
    agent_name: str | None = None
    trace_id: str | None = None
    span_id: str | None = None
    parent_span_id: str | None = None
    span_name: str | None = None
    status_description: str | None = None
    error_type: str | None = None
    exception_type: str | None = None
    exception_message: str | None = None
    exception_stacktrace: str | None = None
    started_at: datetime | None = None
    ended_at: datetime | None = None
    attributes: Mapping[str, Any] = field(default_factory=dict)
    resource: Mapping[str, Any] = field(default_factory=dict)
    exit_code: int | None = None
    command: str | None = None
    kind: str | None = None
    model_text: str | None = None
    """What the agent would have received for this failure without otel-errcompact (a framework's own
    error message), when the caller knows it: the basis of the token-savings metrics."""


@dataclass(frozen=True, slots=True)
class Outcome:
    """What handling one failure produced."""

    digest: Digest
    observation: Observation
    record_id: str | None


EscalationListener = Callable[[Escalation, Failure], None]
FailureListener = Callable[[Failure, Outcome], None]
SuccessListener = Callable[[str | None], None]


class ErrorPipeline:
    """Audit, compact, count, escalate: one failure at a time, thread-safe, never raising."""

    def __init__(
        self,
        history: ErrorHistory,
        writer: TrajectoryWriter | None = None,
        *,
        compactor: Compactor | None = None,
        on_failure: Sequence[FailureListener] = (),
        on_escalation: Sequence[EscalationListener] = (),
    ) -> None:
        self.history = history
        self.writer = writer
        self._compact = compactor.compact if compactor is not None else compact_text
        self._on_failure = list(on_failure)
        self._on_escalation = list(on_escalation)
        self._on_success: list[SuccessListener] = []

    def add_failure_listener(self, listener: FailureListener) -> None:
        """Call ``listener(failure, outcome)`` after each failure is counted (metrics, annotations)."""
        self._on_failure.append(listener)

    def add_success_listener(self, listener: SuccessListener) -> None:
        """Call ``listener(tool_name)`` for each successful tool call (the error ratio's denominator)."""
        self._on_success.append(listener)

    def succeeded(self, scope: str, tool_name: str | None, *, counted: bool = True) -> None:
        """A tool call in ``scope`` succeeded: reset its consecutive counter and, when ``counted``, tell
        the success listeners (``counted=False`` for a span that only wraps a call already counted)."""
        self.history.observe_success(scope)
        if counted:
            for listener in self._on_success:
                _call(listener, tool_name)

    def add_escalation_listener(self, listener: EscalationListener) -> None:
        """Call ``listener(escalation, failure)`` when a failure breaches the thresholds."""
        self._on_escalation.append(listener)

    def handle(self, failure: Failure) -> Outcome:
        """Run the ordered steps for ``failure`` and return its digest and observation."""
        record = self._audit_raw(failure)
        digest = self._compact(
            failure.raw_error, exit_code=failure.exit_code, command=failure.command, kind=failure.kind
        )
        digest = with_retry_after_attribute(digest, failure.attributes)
        observation = self.history.observe(failure.scope, digest)
        if record is not None and self.writer is not None:
            try:
                self.writer.submit(
                    record.model_copy(
                        update={
                            "digest": DigestInfo.from_digest(digest),
                            "count": observation.count,
                            "escalation": (
                                observation.escalation.to_dict() if observation.escalation else None
                            ),
                        }
                    )
                )
            except Exception:
                _log.exception("otel-errcompact: could not amend trajectory record %s", record.record_id)
        outcome = Outcome(digest, observation, record.record_id if record is not None else None)
        for listener in self._on_failure:
            _call(listener, failure, outcome)
        if observation.escalation is not None:
            for escalation_listener in self._on_escalation:
                _call(escalation_listener, observation.escalation, failure)
        return outcome

    def _audit_raw(self, failure: Failure) -> TrajectoryRecord | None:
        if self.writer is None:
            return None
        try:
            record = TrajectoryRecord(
                source=failure.source,
                scope=failure.scope,
                trace_id=failure.trace_id,
                span_id=failure.span_id,
                parent_span_id=failure.parent_span_id,
                conversation_id=failure.conversation_id,
                agent_name=failure.agent_name,
                tool_name=failure.tool_name,
                tool_call_id=failure.tool_call_id,
                tool_arguments=failure.tool_arguments,
                span_name=failure.span_name,
                status_description=failure.status_description,
                error_type=failure.error_type,
                exception_type=failure.exception_type,
                exception_message=failure.exception_message,
                exception_stacktrace=failure.exception_stacktrace,
                raw_error=failure.raw_error,
                started_at=failure.started_at,
                ended_at=failure.ended_at,
                attributes=dict(failure.attributes),
                resource=dict(failure.resource),
            )
            self.writer.submit(record)
            return record
        except Exception:
            _log.exception("otel-errcompact: could not queue a trajectory record")
            return None


def _call(listener: Callable[..., None], *args: Any) -> None:
    try:
        listener(*args)
    except Exception:
        _log.exception("otel-errcompact: listener %r failed", listener)
