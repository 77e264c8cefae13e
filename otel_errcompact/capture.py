"""A failed span's trajectory record: captured on the agent's thread, laid out off it.

Why. A failed tool call's record must reach the operating system before the call returns (the spool:
``kill -9`` then loses nothing the agent saw fail), but laying the record out (hex ids made into
fields, UTC datetimes, a bounded JSON-able copy of the attributes, the storage JSON with the raw text
stored once) was about a third of the instructions the span processor ran on the agent's thread for a
failed span, and an agent that waited for its model runs every step of it cold, several times slower
(``benchmarks/RESULTS.md``, "A failed span's record, captured"). A :class:`FailureCapture` keeps what
the record is made of in the form the span holds it (texts, ints, a shallow copy of the attributes)
and is spooled as one ``orjson.dumps`` of those (:meth:`FailureCapture.line`). The record's values
(:meth:`FailureCapture.values`) are laid out later, by whichever thread needs them first: the digest
thread, the writer when no digest came, or the replay of a spool a killed process left behind
(:func:`record_of_spool_line`). They are the same values in every case: laying out reads only the
capture, which nothing changes once it is made.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from datetime import UTC, datetime
from typing import Any, Final

import orjson

from otel_errcompact import semconv
from otel_errcompact.trajectory import _MIN_REF_CHARS, TrajectoryRecord, jsonable, record_values

__all__ = [
    "CAPTURE_MARK", "MAX_ATTRIBUTE_CHARS", "FailureCapture", "first_text", "is_capture_line", "jsonable_attributes",
    "raw_error_of", "record_of_spool_line",
]

MAX_ATTRIBUTE_CHARS: Final = 65_536
"""A record keeps at most this many characters of a text attribute."""

CAPTURE_MARK: Final = "@capture"
"""The first key of a spool line that holds a capture rather than a record; its value, the format's version."""
_CAPTURE_VERSION: Final = 1
_CAPTURE_PREFIX: Final = b'{"' + CAPTURE_MARK.encode() + b'":'

_TOOL_NAME = semconv.GEN_AI_TOOL_NAME
_ERROR_TYPE = semconv.ERROR_TYPE
_TOOL_CALL_ID = semconv.GEN_AI_TOOL_CALL_ID
_TOOL_CALL_ARGUMENTS = semconv.GEN_AI_TOOL_CALL_ARGUMENTS
_CALL_ATTRIBUTES = frozenset(semconv.TOOL_CALL_ID_ATTRIBUTES + semconv.TOOL_ARGUMENTS_ATTRIBUTES)
_from_timestamp = datetime.fromtimestamp
_isfinite = math.isfinite


def first_text(attrs: Mapping[str, Any], name: str, read: Callable[[Mapping[str, Any]], str | None]) -> str | None:
    """``read(attrs)`` (a :mod:`semconv` reader whose first choice is ``name``), answered without the
    call when ``name`` holds a non-empty string, as it does on most spans."""
    value = attrs.get(name)
    if type(value) is str and value:
        return value
    return read(attrs)


def jsonable_attributes(attrs: Mapping[str, Any], into: type[dict[str, Any]] = dict) -> dict[str, Any]:
    """A JSON-able copy of span attributes for a record: texts cut at :data:`MAX_ATTRIBUTE_CHARS`, and
    what JSON cannot carry (tuples, NaN, bytes...) converted as :func:`~otel_errcompact.trajectory.jsonable`
    converts it.

    Values are replaced in place in the copy (no key is added or removed while iterating), so the
    common case, a few short strings and numbers, costs one ``dict()`` and a pass of type checks. The
    copy is an ``into`` (the pipeline marks one it may take as it is with its own ``dict`` subclass);
    with a key that is not a string (not from the SDK, which only keeps string keys) it is a plain
    dict, converted whole by ``jsonable``."""
    out = into(attrs)
    plain_keys = True
    for key, value in out.items():
        cls = type(value)
        if cls is str:
            if len(value) > MAX_ATTRIBUTE_CHARS:
                out[key] = value[:MAX_ATTRIBUTE_CHARS]
        elif cls is not bool and cls is not int and value is not None and not (cls is float and _isfinite(value)):
            out[key] = value[:MAX_ATTRIBUTE_CHARS] if isinstance(value, str) else jsonable(value)
        if type(key) is not str:
            plain_keys = False
    return out if plain_keys else jsonable(out)


def raw_error_of(
    attrs: Mapping[str, Any],
    exception: tuple[str | None, str | None, str | None] | None,
    status_description: str | None,
) -> str:
    """The fullest raw error a span carries: the stack trace, else type and message, else the status
    description or a tool's error result, else the error type."""
    if exception is not None:
        etype, message, stack = exception
        if stack:
            return stack
        if etype or message:
            return f"{etype or 'Error'}: {message or ''}".rstrip(": ")
    result = semconv.tool_result(attrs)  # JSON text when recorded as an object
    if status_description and result and result not in status_description:
        return f"{status_description}\n{result}"
    if status_description:
        return status_description
    if result:
        return result
    error_type = attrs.get(semconv.ERROR_TYPE)
    return str(error_type) if error_type else "tool call failed (no error details were recorded)"


def _utc(ns: int) -> datetime:
    """OTel's nanoseconds since the epoch as an aware UTC datetime, exact to the microsecond.

    Exact although it goes through a float: the whole microseconds (below 2**53 until the year 2255)
    are an exact float, dividing by 10**6 is correctly rounded (an error far below half a
    microsecond), and ``fromtimestamp`` rounds to the nearest microsecond. Half the cost of adding a
    ``timedelta`` to the epoch (``trajectory.utc_from_ns``), and a record converts three."""
    return _from_timestamp(ns // 1000 / 1e6, UTC)


class FailureCapture:
    """What a failed tool span's trajectory record is made of, read off the ended span on the agent's
    thread (see the module docstring). Made by the span processor; read only once made.

    ``attributes`` is a shallow copy of the span's (the span is annotated with its digest later),
    without the tool call's arguments unless ``with_arguments``: the spool never holds what the record
    would not. ``resource`` is the resource's attributes, already JSON-able. ``start_ns`` and ``end_ns``
    are the span's, ``recorded_ns`` the capture's own time.

    It is kept as :attr:`data`, the JSON object its spool line holds (made once, on the agent's thread,
    in one step, and written by one ``orjson.dumps``), so a capture laid out in this process and one
    replayed from the spool are laid out from the same form. The exception's message and the status
    description are ``[start, end]`` into the stack trace there when they are long pieces of it, as a
    stored record holds them: a 10 MB message is spooled once."""

    __slots__ = ("_values", "data", "record_id", "scope")

    def __init__(
        self,
        record_id: str,
        recorded_ns: int,
        scope: str,
        trace_id: str | None,
        span_id: str | None,
        parent_span_id: str | None,
        conversation_id: str | None,
        agent_name: str | None,
        span_name: str,
        status_description: str | None,
        exception: tuple[str | None, str | None, str | None] | None,
        start_ns: int | None,
        end_ns: int,
        attributes: dict[str, Any],
        with_arguments: bool,
        resource: dict[str, Any],
        /,
    ) -> None:
        description: str | list[int] | None = status_description
        spooled: tuple[str | None, str | list[int] | None, str | None] | None = exception
        if exception is not None and (stack := exception[2]):
            message = exception[1]
            if message and len(message) >= _MIN_REF_CHARS:
                spooled = (exception[0], _ref(message, stack), stack)
            if status_description and len(status_description) >= _MIN_REF_CHARS:
                description = _ref(status_description, stack)
        self.record_id = record_id
        self.scope = scope
        self._values: dict[str, Any] | None = None
        self.data: dict[str, Any] = {
            CAPTURE_MARK: _CAPTURE_VERSION,
            "record_id": record_id,
            "recorded_ns": recorded_ns,
            "scope": scope,
            "trace_id": trace_id,
            "span_id": span_id,
            "parent_span_id": parent_span_id,
            "conversation_id": conversation_id,
            "agent_name": agent_name,
            "span_name": span_name,
            "status_description": description,
            "exception": spooled,
            "start_ns": start_ns,
            "end_ns": end_ns,
            "attributes": attributes,
            "with_arguments": with_arguments,
            "resource": resource,
        }
        """The capture as its spool line holds it (read only)."""

    def values(self) -> dict[str, Any]:
        """The record's field values, without a digest (see :func:`~otel_errcompact.trajectory.record_values`),
        laid out on the first call and shared from then on: read them, do not change them."""
        values = self._values
        if values is None:
            values = self._values = _lay_out(self.data)
        return values

    def line(self) -> bytes | None:
        """The spool line: :attr:`data` as one JSON object, :data:`CAPTURE_MARK` its first key, newline
        ended; None when orjson cannot write it (an int past 64 bits, a lone surrogate, a value no span
        of the SDK's holds): spool the laid-out record instead (see ``storage_line``, which repairs).

        A float attribute that is not finite is written ``null`` (a record laid out in this process keeps
        it as the text ``jsonable`` makes of it, ``"nan"``; one replayed from the spool after a crash has
        ``null``)."""
        try:
            return orjson.dumps(self.data, option=orjson.OPT_APPEND_NEWLINE)
        except orjson.JSONEncodeError:
            return None

    @property
    def chars(self) -> int:
        """The characters of error text it holds, roughly (its raw error's): the writer's queue is bounded
        by them. Asked on the agent's thread, so it reads the one text that is usually the longest."""
        data = self.data
        exception = data["exception"]
        if exception is not None and exception[2]:
            return len(exception[2])
        description = data["status_description"]
        return len(description) if type(description) is str else 0

    @classmethod
    def from_line(cls, line: bytes) -> FailureCapture:
        """The capture :meth:`line` wrote; raises ``ValueError`` (or ``KeyError``, ``TypeError``) on
        anything else, as a torn or foreign line: what is read back from disk is checked before it is
        laid out."""
        data = orjson.loads(line)
        if not isinstance(data, dict) or data.get(CAPTURE_MARK) != _CAPTURE_VERSION:
            raise ValueError("not a failure capture")
        exception = data["exception"]
        stack: str | None = None
        if exception is not None:
            etype, message, stack = exception
            _text(etype, None)
            _text(message, _text(stack, None))
        _text(data["status_description"], stack)
        for name in ("trace_id", "span_id", "parent_span_id", "conversation_id", "agent_name"):
            _text(data[name], None)
        if type(data["record_id"]) is not str or type(data["scope"]) is not str or type(data["span_name"]) is not str:
            raise TypeError("a capture's record id, scope and span name are texts")
        for name in ("recorded_ns", "end_ns"):
            if type(data[name]) is not int:
                raise TypeError(f"a capture's {name} is an int")
        if data["start_ns"] is not None and type(data["start_ns"]) is not int:
            raise TypeError("a capture's start_ns is an int")
        if not isinstance(data["attributes"], dict) or not isinstance(data["resource"], dict):
            raise TypeError("a capture's attributes and resource are objects")
        capture = cls.__new__(cls)
        capture.data = data
        capture.record_id = data["record_id"]
        capture.scope = data["scope"]
        capture._values = None
        return capture


def _lay_out(data: Mapping[str, Any]) -> dict[str, Any]:
    """A capture's record values (see :meth:`FailureCapture.values`), from its :attr:`~FailureCapture.data`."""
    attrs = data["attributes"]
    if _CALL_ATTRIBUTES.isdisjoint(attrs):  # none recorded on the span, as usual: no look-ups
        call_id = arguments = None
    else:
        call_id = first_text(attrs, _TOOL_CALL_ID, semconv.tool_call_id)
        arguments = first_text(attrs, _TOOL_CALL_ARGUMENTS, semconv.tool_arguments) if data["with_arguments"] else None
    name = data["span_name"]
    tool = attrs.get(_TOOL_NAME)
    if type(tool) is not str or not tool:
        tool = semconv.tool_name(attrs, name)
    error_type = attrs.get(_ERROR_TYPE)
    spooled = data["exception"]
    exception: tuple[str | None, str | None, str | None] | None = None
    stack: str | None = None
    if spooled is not None:
        stack = spooled[2]
        exception = (spooled[0], _text(spooled[1], stack), stack)
    description = _text(data["status_description"], stack)
    start = data["start_ns"]
    return record_values(
        data["record_id"],
        "span",
        _utc(data["recorded_ns"]),
        data["scope"],
        data["trace_id"],
        data["span_id"],
        data["parent_span_id"],
        data["conversation_id"],
        data["agent_name"],
        tool,
        call_id,
        arguments,
        name,
        description,
        str(error_type) if error_type is not None or _ERROR_TYPE in attrs else None,
        exception[0] if exception else None,
        exception[1] if exception else None,
        stack,
        raw_error_of(attrs, exception, description),
        _utc(start) if start is not None else None,
        _utc(data["end_ns"]),
        jsonable_attributes(attrs),
        data["resource"],
    )


def _ref(text: str, stack: str) -> str | list[int]:
    """``text``, or ``[start, end]`` when it is a piece of ``stack``."""
    start = stack.find(text)
    return text if start < 0 else [start, start + len(text)]


def _text(value: Any, stack: str | None) -> str | None:
    """A text :meth:`FailureCapture.line` wrote: itself, or the piece of ``stack`` a ``[start, end]`` names."""
    if value is None or type(value) is str:
        return value
    if type(value) is list and len(value) == 2 and stack is not None:
        return stack[int(value[0]):int(value[1])]
    raise TypeError(f"not a text: {type(value).__name__}")


def is_capture_line(line: bytes) -> bool:
    """Whether a spool line holds a :class:`FailureCapture` (else a stored record's JSON)."""
    return line.startswith(_CAPTURE_PREFIX)


def record_of_spool_line(line: bytes) -> tuple[TrajectoryRecord, str]:
    """The record a spool line holds and its storage JSON (see :meth:`TrajectoryRecord.to_storage_json`):
    a capture's, laid out and validated (the line was read back from disk), or the stored record's as
    written. Raises on a line that is neither (torn by a crash, or foreign)."""
    if is_capture_line(line):
        record = TrajectoryRecord.model_validate(FailureCapture.from_line(line).values())
        return record, record.to_storage_json()
    return TrajectoryRecord.from_storage_json(line), line.decode("utf-8").rstrip("\n")
