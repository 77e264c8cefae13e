"""The ordered steps for one failure, independent of where it was observed.

For every failure, in this order (the pattern's contract):

1. the compactor turns the raw error into a digest;
2. the history counts it and decides on escalation;
3. the trajectory record (the full raw error, its digest, key, count and escalation) is submitted to the
   writer, once. It is submitted from a ``finally`` block: if compaction or counting ever raised, the
   record still goes out with the raw error and whatever was known, so the audit never depends on the
   steps before it (the compactor itself never raises);
4. metrics and escalation listeners are told.

One submission per failure, not a raw version and then an amended one: the queue, the writer's worker
and the store each handle one record instead of two, and the record's id comes from a counter
(:func:`otel_errcompact.trajectory.new_record_id`) rather than a system call. The exception is a failed
span whose digest is made after it ended (:meth:`ErrorPipeline.defer`): its raw record goes out at once,
so that it is durable before the call returns, and the record with its digest supersedes it.

Both the span processor and the tool boundary call :meth:`ErrorPipeline.handle`; it never raises.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any, Literal

from otel_errcompact._compacting_process import CompactingProcess
from otel_errcompact._frozen import fast_constructor
from otel_errcompact._helper_process import HelperProcessError
from otel_errcompact._sanitize import MAX_INPUT_CHARS
from otel_errcompact.capture import FailureCapture
from otel_errcompact.compactor import Compactor, compact_text
from otel_errcompact.digest import Digest
from otel_errcompact.history import ErrorHistory, Escalation, Observation
from otel_errcompact.recovery.classify import with_retry_after_attribute
from otel_errcompact.redact import patterns as redact_patterns
from otel_errcompact.sinks import TrajectoryWriter
from otel_errcompact.sinks.writer import Amendment
from otel_errcompact.statuscode import with_status
from otel_errcompact.trajectory import (
    DigestInfo,
    TrajectoryRecord,
    amended_line,
    jsonable,
    new_record_id,
    record_values,
)

__all__ = [
    "DeferredFailure", "ErrorPipeline", "EscalationListener", "Failure", "FailureListener", "Outcome",
    "SuccessListener",
]

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


new_failure = fast_constructor(Failure)
"""``Failure(...)`` with every field given by keyword, at half the cost (see :mod:`otel_errcompact._frozen`):
the span processor builds one on the agent's thread for every failed tool span."""
_new_outcome = fast_constructor(Outcome)


class JsonableAttributes(dict):  # type: ignore[type-arg]
    """A dict of attributes already JSON-able as :func:`~otel_errcompact.trajectory.jsonable` makes
    them (the span processor's copy of a span's attributes), so that :func:`_values` does not convert
    them a second time on the agent's thread (it copies them into a plain dict instead, 0.1 µs against
    0.8 µs)."""

    __slots__ = ()


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
        compacting: CompactingProcess | None = None,
    ) -> None:
        self.history = history
        self.writer = writer
        self._compact = compactor.compact if compactor is not None else compact_text
        self.compactor = compactor
        """The compactor given (``None``: :func:`compact_text`'s default one), for every other place that
        compacts on this pipeline's behalf, such as ``ErrCompact.compact_messages``."""
        self._on_failure = list(on_failure)
        self._on_escalation = list(on_escalation)
        self._on_success: list[SuccessListener] = []
        self.compacting = compacting if compactor is None else None
        """Where :meth:`digest_all` makes the default compactor's digests (None: in place)."""
        self._said_in_place = False

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
            self.notify_success(tool_name)

    def notify_success(self, tool_name: str | None) -> None:
        """Tell the success listeners about one successful call (a deferred success calls it when it is
        resolved: see :meth:`ErrorHistory.defer_success <otel_errcompact.history.ErrorHistory.defer_success>`)."""
        for listener in self._on_success:
            try:
                listener(tool_name)
            except Exception:
                _log.exception("otel-errcompact: listener %r failed", listener)

    def add_escalation_listener(self, listener: EscalationListener) -> None:
        """Call ``listener(escalation, failure)`` when a failure breaches the thresholds."""
        self._on_escalation.append(listener)

    def handle(self, failure: Failure, *, values: dict[str, Any] | None = None) -> Outcome:
        """Run the ordered steps for ``failure`` and return its digest and observation.

        ``values``: ``failure``'s raw trajectory record as :func:`record_values` lays it out, when the
        caller made it already (the span processor lays a failed span's capture out into it, then makes
        ``failure`` from it): the record is then that one, with the digest added, not laid out a second time.
        """
        digest: Digest | None = None
        observation: Observation | None = None
        record_id: str | None = None
        try:
            digest = self.digest_of(failure)
            observation = self.history.observe(failure.scope, digest)
        finally:
            record_id = self._audit(failure, digest, observation, values)
        return self._told(failure, _new_outcome(digest=digest, observation=observation, record_id=record_id))

    def handle_repeat(self, failure: Failure, digest: Digest) -> Outcome:
        """A call the circuit breaker refused (``failure.raw_error`` is the refusal's text), as one more
        occurrence of the class its ``digest`` names: the tool did not run, so it is no tool failure of its
        own (no record, no failure listener), but a breach it causes is alerted on like any other: its
        record holds the refusal and the escalation, and the escalation listeners (span event, metric,
        review hook) hear of it."""
        observation = self.history.observe(failure.scope, digest)
        escalation = observation.escalation
        if escalation is None:
            return _new_outcome(digest=digest, observation=observation, record_id=None)
        record_id = self._audit(failure, digest, observation)
        for listener in self._on_escalation:
            _call(listener, escalation, failure)
        return _new_outcome(digest=digest, observation=observation, record_id=record_id)

    def digest_of(self, failure: Failure) -> Digest:
        """Step 1: the digest of ``failure``'s raw error, its HTTP status or exit code joined to the type."""
        # The exception's type and message are not passed: a traceback's last line names them, and
        # the compactor reads it either way (see Compactor.compact).
        digest = self._compact(
            failure.raw_error, exit_code=failure.exit_code, command=failure.command, kind=failure.kind
        )
        return _with_attributes(digest, failure)

    def digest_all(self, deferred: Sequence[DeferredFailure]) -> int:
        """Make the digests of ``deferred`` not made yet (the digest thread's batch): in the compacting
        process when there is one (see :mod:`otel_errcompact._compacting_process`), which takes the GIL
        only to send the texts and read the answers; in place otherwise, or when that process cannot
        answer. Returns how many were not made yet."""
        todo = [item for item in deferred if not item.has_digest]
        # A text the compactor would cut (a megabyte HTTP body) is cut here, in place, for less than it
        # would cost to send whole: only the others go.
        sent = [item for item in todo if len(item.failure.raw_error) <= _SENT_CHARS] if self.compacting else []
        if sent and self.compacting is not None:
            try:
                digests = self.compacting.compact([item.failure.raw_error for item in sent], redact_patterns())
            except HelperProcessError as exc:
                if not self._said_in_place:
                    self._said_in_place = True
                    _log.info("otel-errcompact: digests are made in this process: %s", exc)
            else:
                for item, digest in zip(sent, digests, strict=True):
                    item.offer_digest(_with_attributes(digest, item.failure))
        for item in todo:
            item.digest()  # the digest offered, or made here
        return len(todo)

    def _told(self, failure: Failure, outcome: Outcome) -> Outcome:
        """Step 4: the failure and escalation listeners."""
        for listener in self._on_failure:
            _call(listener, failure, outcome)
        escalation = outcome.observation.escalation
        if escalation is not None:
            for escalation_listener in self._on_escalation:
                _call(escalation_listener, escalation, failure)
        return outcome

    def defer(
        self, capture: FailureCapture, done: Callable[[DeferredFailure, Outcome | None], None], subject: Any = None
    ) -> DeferredFailure:
        """:meth:`handle`, with only what must happen before the failed call returns done now.

        ``capture``: what the failure's trajectory record is made of (see :mod:`otel_errcompact.capture`),
        as the span processor reads it off a failed span.

        Now, on the caller's thread: the capture is spooled and queued for the writer, so it is durable
        before the call returns (a capture orjson cannot write, which no span of the SDK holds, is laid
        out and spooled as its record). Later, in its turn among the history's other failures and
        successes (:meth:`ErrorHistory.defer_failure`): the record laid out, the :class:`Failure` and its
        digest, the counting, the record again with its digest, count and escalation (same
        ``record_id``: it supersedes the raw one; handed to the writer through the queued capture's
        :class:`~otel_errcompact.sinks.writer.Amendment`, not submitted again), the listeners, and then
        ``done(deferred, outcome)`` (``None`` when counting it failed; ``subject``, what the caller
        needs then, such as the span to annotate, is ``deferred.subject``). Anything that reads the
        history counts the queued failures first, so what the agent is shown and the escalation
        decisions are the same as with :meth:`handle`.
        """
        line: bytes | None = None
        amendment: Amendment | None = None
        writer = self.writer
        if writer is not None:
            amendment = Amendment()
            try:
                if not writer.spooled:
                    writer.submit_capture(capture, None, amendment=amendment)
                elif (spooled := capture.line()) is not None:
                    writer.submit_capture(capture, spooled, amendment=amendment)
                else:
                    line = writer.submit_values(capture.values(), amendment=amendment)
            except Exception:
                _log.exception("otel-errcompact: could not queue a trajectory record")
        deferred = DeferredFailure(self, capture, done, subject, line, amendment)
        self.history.defer_failure(deferred)
        return deferred

    def settle(self) -> None:
        """Count every deferred failure now, on this thread, and finish them (see :meth:`defer`)."""
        self.history.apply_successes()

    def _finish(self, deferred: DeferredFailure, observation: Observation | None) -> None:
        """The steps of a deferred failure after its counting (see :meth:`defer`)."""
        outcome: Outcome | None = None
        try:
            if observation is not None:
                failure, digest, values = deferred.failure, observation.digest, deferred.values
                if self.writer is not None:
                    try:
                        amended = _amended(values, digest, observation)
                        raw_line, deferred.line = deferred.line, None
                        amendment, deferred.amendment = deferred.amendment, None
                        # Handed to the raw record still queued, as a rule: one submission per failure.
                        if amendment is None or not amendment.offer(amended):
                            line = amended_line(raw_line, amended) if raw_line is not None else None
                            self.writer.submit_values(amended, amends=True, line=line)
                    except Exception:
                        _log.exception("otel-errcompact: could not queue a trajectory record")
                outcome = self._told(
                    failure, _new_outcome(digest=digest, observation=observation, record_id=values["record_id"])
                )
        finally:
            _call(deferred.done, deferred, outcome)
            deferred.finished = True

    def _audit(
        self,
        failure: Failure,
        digest: Digest | None,
        observation: Observation | None,
        values: dict[str, Any] | None = None,
    ) -> str | None:
        """Submit the one trajectory record of ``failure`` (``values``: its raw record, see
        :meth:`handle`); its id, or None when there is no writer."""
        if self.writer is None:
            return None
        try:
            if values is not None:
                self.writer.submit_values(_amended(values, digest, observation))
                given_id: str = values["record_id"]
                return given_id
            if _prevalidated(failure):
                # The record's values go to the writer as they are: it writes the spool line from them
                # here and builds the TrajectoryRecord on its own thread.
                values = _values(failure, digest, observation)
                self.writer.submit_values(values)
                record_id: str = values["record_id"]
                return record_id
            record = TrajectoryRecord(
                record_id=new_record_id(),
                **_failure_fields(failure),
                attributes=dict(failure.attributes),
                resource=dict(failure.resource),
                digest=DigestInfo.from_digest(digest) if digest is not None else None,
                count=observation.count if observation is not None else None,
                escalation=(
                    observation.escalation.to_dict()
                    if observation is not None and observation.escalation is not None
                    else None
                ),
            )
            self.writer.submit(record)
            return record.record_id
        except Exception:
            _log.exception("otel-errcompact: could not queue a trajectory record")
            return None


class DeferredFailure:
    """A failure handed to :meth:`ErrorPipeline.defer`, waiting in the history's queue."""

    __slots__ = (
        "_digest", "_failure", "_pipeline", "amendment", "capture", "done", "finished", "line", "scope", "subject"
    )

    def __init__(
        self,
        pipeline: ErrorPipeline,
        capture: FailureCapture,
        done: Callable[[DeferredFailure, Outcome | None], None],
        subject: Any = None,
        line: bytes | None = None,
        amendment: Amendment | None = None,
    ) -> None:
        self._pipeline = pipeline
        self.capture = capture
        """What its raw trajectory record is made of."""
        self.line = line
        """The raw record's storage line when it was spooled as one, until the record with its digest is
        made from it; None when the capture was spooled."""
        self.amendment = amendment
        """How the record with its digest reaches the writer in the raw one's place (see
        :class:`~otel_errcompact.sinks.writer.Amendment`), until it is offered."""
        self.scope: str = capture.scope
        self.done = done
        self.subject = subject
        self._failure: Failure | None = None
        self._digest: Digest | None = None
        self.finished = False
        """True once ``done`` has returned: the span's annotation and the record are final."""

    @property
    def values(self) -> dict[str, Any]:
        """Its raw trajectory record's values (read only), laid out on the first call (off the agent's
        thread, as a rule)."""
        return self.capture.values()

    @property
    def failure(self) -> Failure:
        """The :class:`Failure` its values describe, made on the first call (off the agent's thread, as a
        rule: by the digest thread, or whoever counts it)."""
        failure = self._failure
        if failure is None:
            failure = self._failure = failure_of_values(self.values)
        return failure

    def digest(self) -> Digest:
        """The failure's digest, computed on the first call (by whichever thread asks first)."""
        digest = self._digest
        if digest is None:
            digest = self._digest = self._pipeline.digest_of(self.failure)
        return digest

    @property
    def has_digest(self) -> bool:
        """Whether its digest is made."""
        return self._digest is not None

    def offer_digest(self, digest: Digest) -> None:
        """Its digest, made elsewhere (see :meth:`ErrorPipeline.digest_all`): kept unless one was made
        meanwhile (the same digest: made from the same text by the same compactor)."""
        if self._digest is None:
            self._digest = digest

    def observed(self, observation: Observation | None) -> None:
        self._pipeline._finish(self, observation)


_SENT_CHARS = 2 * MAX_INPUT_CHARS
"""The longest raw error sent to the compacting process: the compactor cuts longer ones first."""


def _with_attributes(digest: Digest, failure: Failure) -> Digest:
    """``digest`` with what ``failure``'s attributes add: the HTTP status joined to the type, the wait a
    ``Retry-After`` attribute asks for."""
    digest = with_status(digest, failure.attributes)
    return with_retry_after_attribute(digest, failure.attributes)


def failure_of_values(values: Mapping[str, Any]) -> Failure:
    """The :class:`Failure` whose trajectory record's values are ``values`` (see :func:`record_values`)."""
    v = values
    return new_failure(
        scope=v["scope"], raw_error=v["raw_error"], source=v["source"], tool_name=v["tool_name"],
        tool_call_id=v["tool_call_id"], tool_arguments=v["tool_arguments"], conversation_id=v["conversation_id"],
        agent_name=v["agent_name"], trace_id=v["trace_id"], span_id=v["span_id"],
        parent_span_id=v["parent_span_id"], span_name=v["span_name"], status_description=v["status_description"],
        error_type=v["error_type"], exception_type=v["exception_type"], exception_message=v["exception_message"],
        exception_stacktrace=v["exception_stacktrace"], started_at=v["started_at"], ended_at=v["ended_at"],
        attributes=v["attributes"], resource=v["resource"], exit_code=None, command=None, kind=None,
        model_text=None,
    )


def _prevalidated(failure: Failure) -> bool:
    """True for a failure the span processor built: ids already hex, times aware UTC datetimes,
    attributes and resource dicts (made JSON-able by the processor, a :class:`JsonableAttributes`, or
    else in :func:`_values`), every text field a ``str``. Validating such a record again costs more on
    the agent's thread than everything else in it."""
    if failure.source != "span" or type(failure.raw_error) is not str:
        return False
    if type(failure.attributes) not in _PLAIN_DICTS or type(failure.resource) not in _PLAIN_DICTS:
        return False
    # One set of the fields' types, not a generator over them: this runs for every failure.
    f = failure
    return {
        type(f.scope), type(f.conversation_id), type(f.agent_name), type(f.tool_name), type(f.tool_call_id),
        type(f.tool_arguments), type(f.span_name), type(f.status_description), type(f.error_type),
        type(f.exception_type), type(f.exception_message), type(f.exception_stacktrace),
    } <= _STR_OR_NONE


_STR_OR_NONE = frozenset({str, type(None)})
_PLAIN_DICTS = frozenset({dict, JsonableAttributes})


_FAILURE_FIELDS = (
    "source", "scope", "trace_id", "span_id", "parent_span_id", "conversation_id", "agent_name", "tool_name",
    "tool_call_id", "tool_arguments", "span_name", "status_description", "error_type", "exception_type",
    "exception_message", "exception_stacktrace", "raw_error", "started_at", "ended_at",
)
"""The trajectory record's fields that a :class:`Failure` carries under the same name."""


def _failure_fields(failure: Failure) -> dict[str, Any]:
    return {name: getattr(failure, name) for name in _FAILURE_FIELDS}


def _values(
    failure: Failure,
    digest: Digest | None,
    observation: Observation | None,
) -> dict[str, Any]:
    """The trajectory record's field values for a prevalidated failure, the digest as a plain dict."""
    # The processor's copy has no bytes, odd keys or NaN left: it is only made a plain dict again, the form
    # a record holds (JsonableAttributes only marks attributes that need no converting).
    attributes = failure.attributes
    attributes = dict(attributes) if type(attributes) is JsonableAttributes else jsonable(attributes)
    f = failure
    values = record_values(
        new_record_id(), f.source, _now(UTC), f.scope, f.trace_id, f.span_id, f.parent_span_id, f.conversation_id,
        f.agent_name, f.tool_name, f.tool_call_id, f.tool_arguments, f.span_name, f.status_description,
        f.error_type, f.exception_type, f.exception_message, f.exception_stacktrace, f.raw_error, f.started_at,
        f.ended_at, attributes, _jsonable_resource(f.resource),
    )
    if digest is not None:
        _with_outcome(values, digest, observation)
    return values


def _with_outcome(values: dict[str, Any], digest: Digest, observation: Observation | None) -> None:
    """Set a record's compactor values: the digest (a plain dict), count and escalation."""
    escalation = observation.escalation if observation is not None else None
    # The compactor's own values: bounded strings, ints and a bool.
    values["digest"] = DigestInfo.fields_of(digest)
    values["count"] = observation.count if observation is not None else None
    values["escalation"] = jsonable(escalation.to_dict()) if escalation is not None else None


def _amended(values: Mapping[str, Any], digest: Digest | None, observation: Observation | None) -> dict[str, Any]:
    """A copy of a raw record's values with the compactor's values set (none when there is no digest:
    compacting it failed), to submit as the record that supersedes the raw one."""
    amended = dict(values)
    if digest is not None:
        _with_outcome(amended, digest, observation)
    return amended


_now = datetime.now  # bound once: _values runs for every failure


_resource_memo: tuple[Mapping[str, Any], dict[str, Any]] | None = None


def _jsonable_resource(resource: Mapping[str, Any]) -> dict[str, Any]:
    """``jsonable(resource)``, remembered for the last resource: a provider has one, shared by every
    failure of its spans, and records only read it."""
    global _resource_memo
    memo = _resource_memo
    if memo is not None and memo[0] is resource:
        return memo[1]
    converted: dict[str, Any] = jsonable(resource)
    _resource_memo = (resource, converted)
    return converted


def _call(listener: Callable[..., None], *args: Any) -> None:
    try:
        listener(*args)
    except Exception:
        _log.exception("otel-errcompact: listener %r failed", listener)
