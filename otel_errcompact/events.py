"""Accept the plain agent-event shape of the Factor 9 note: ``{type, message, payload?}``.

Agent runners that do not use OpenTelemetry often keep a list of events like::

    {"type": "TOOL_RUN_FINISHED", "message": "Tool failed: node triage.ts",
     "payload": {"ok": False, "command": "node triage.ts",
                 "error": {"code": "TOOL_EXIT_NON_ZERO", "message": "Cannot read input file"},
                 "metrics": {"duration_ms": 912, "exit_code": 1}}}

A ``TOOL_RUN_FINISHED`` event whose ``payload.ok`` is false is a failure; its error message, command and
exit code are compacted like any other raw error. Events without a payload (the older
``{type, message}`` shape) are accepted and carry no failure, so old callers keep working. Events may be
plain mappings or objects with those attributes (pydantic models, dataclasses).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from otel_errcompact.compactor import Compactor, compact_text
from otel_errcompact.digest import Digest
from otel_errcompact.history import ErrorHistory, Limits, Thresholds
from otel_errcompact.parsers import Hints, Parsed

__all__ = ["TOOL_RUN_FINISHED", "digest_event", "render_events"]

TOOL_RUN_FINISHED = "TOOL_RUN_FINISHED"


def _get(obj: Any, name: str) -> Any:
    if isinstance(obj, Mapping):
        return obj.get(name)
    return getattr(obj, name, None)


def _int_or_none(value: Any) -> int | None:
    try:
        return int(value) if value is not None and not isinstance(value, bool) else None
    except (TypeError, ValueError):
        return None


def digest_event(event: Any, compactor: Compactor | None = None) -> Digest | None:
    """The digest of a failed ``TOOL_RUN_FINISHED`` event, or ``None`` for any other event."""
    if _get(event, "type") != TOOL_RUN_FINISHED:
        return None
    payload = _get(event, "payload")
    if payload is None or _get(payload, "ok") is not False:
        return None
    error = _get(payload, "error") or {}
    metrics = _get(payload, "metrics") or {}
    command = _get(payload, "command")
    code = _get(error, "code")
    message = _get(error, "message") or _get(event, "message") or ""
    exit_code = _int_or_none(_get(metrics, "exit_code"))
    compact = compactor.compact if compactor is not None else compact_text
    command_text = str(command) if command else None
    digest = compact(str(message), exit_code=exit_code, command=command_text)
    if code and digest.format == "fallback" and digest.type == "Error":
        # The runner's own error code is the best type we have for unstructured text. (Prefixing the
        # message with it is not enough: the fallback only takes a type that looks like an error class.)
        parsed = Parsed(str(code), digest.cause, "fallback", status=digest.status)
        return Compactor.from_parsed(parsed, Hints(exit_code=exit_code, command=command_text), digest.raw_chars)
    return digest


def render_events(
    events: Iterable[Any],
    *,
    thresholds: Thresholds | None = None,
    limits: Limits | None = None,
    compactor: Compactor | None = None,
) -> str:
    """The ``[RECENT ERRORS]`` block for a list of plain events; ``""`` when none of them failed."""
    history = ErrorHistory(thresholds, limits)
    for event in events:
        digest = digest_event(event, compactor)
        if digest is not None:
            history.observe("events", digest)
        elif _get(event, "type") == TOOL_RUN_FINISHED and _get(_get(event, "payload"), "ok") is True:
            history.observe_success("events")
    return history.render("events")
