"""The trajectory record: the full, raw account of one failed tool call, kept for later debugging.

The agent sees a one-line digest; the person debugging the agent later needs everything the digest left
out: the whole traceback, the tool's arguments, the span it happened in. A :class:`TrajectoryRecord` is
that account. The pipeline builds it once per failure, after compaction, with its :class:`DigestInfo`,
dedup counter and escalation, and submits it once (from a ``finally`` block, so the raw error is
submitted even if compaction failed). Sinks store records with upsert semantics, so a caller that does
submit an amended version (:meth:`TrajectoryRecord.amended`, same ``record_id``) replaces the first.

The record is a versioned schema (``schema_name`` + ``schema_version``) because it outlives the process
that wrote it: a JSONL file or SQLite database is read back by a later version of the CLI. Adding an
optional field keeps version 1; renaming or changing the meaning of a field bumps it.

Nothing here truncates ``raw_error``: full fidelity is the reason this record exists, and the digest is
the bounded view. What *is* normalised on the way in:

* trace and span ids become lowercase hex strings (32 and 16 digits); OTel's integer ids are accepted
  and the all-zero "invalid" id becomes ``None``;
* integer timestamps are read as nanoseconds since the epoch (the OTel convention), naive datetimes as
  UTC;
* values in ``attributes``, ``resource``, ``tool_arguments`` and ``escalation`` that JSON cannot carry
  (bytes, sets, arbitrary objects, NaN) are turned into strings, tuples into lists, so every stored
  record serialises.

Text is kept as Python holds it, lone surrogates included: an undecodable byte of a file name inside an
error (``os.listdir`` keeps it as U+DC80..U+DCFF), or of a ``bytes`` ``raw_error`` (decoded with
``surrogateescape``). The stored JSON writes each as its ``\\udcNN`` escape, so the line is valid UTF-8
(ASCII there) and reads back as the very text; a backslash typed in the error is JSON's ``\\\\`` as ever, so the
four characters ``\\xe9`` and the byte 0xE9 are stored apart. Lines written before keep their ``\\xNN`` escapes.

>>> rec = TrajectoryRecord(source="tool", tool_name="search", raw_error="KeyError: 'id'")
>>> rec.schema_name, rec.schema_version, len(rec.record_id)
('errcompact.trajectory', 1, 32)
"""

from __future__ import annotations

import itertools
import json
import math
import os
import re
import sys
import threading
import time
from collections.abc import Mapping
from datetime import UTC, datetime, timedelta
from typing import Any, Final, Literal, TypeVar

import orjson
from pydantic import BaseModel, ConfigDict, Field, field_validator
from pydantic_core import PydanticSerializationError, to_json

from otel_errcompact._forked import hold_across_fork, new_locks_in_child, rebuild_in_child
from otel_errcompact.digest import Digest

__all__ = [
    "SCHEMA_NAME",
    "SCHEMA_VERSION",
    "DigestInfo",
    "TrajectoryRecord",
    "amended_line",
    "escape_surrogates",
    "jsonable",
    "lossless_json",
    "new_record_id",
    "record_from_values",
    "record_of",
    "span_id_hex",
    "storage_line",
    "trace_id_hex",
    "trajectory_json_schema",
    "utc_from_ns",
]

SCHEMA_NAME: Final[Literal["errcompact.trajectory"]] = "errcompact.trajectory"
"""The ``schema_name`` of every record; also the OTel log ``event_name`` the OTLP sink emits."""

SCHEMA_VERSION: Final[Literal[1]] = 1
"""Bumped only for incompatible changes; readers reject records of a version they do not know."""

_HEX_DIGITS = "0123456789abcdef"
_ZEROS = {32: "0" * 32, 16: "0" * 16}
_MAX_DEPTH = 32


def jsonable(value: Any, _depth: int = 0) -> Any:
    """``value`` as something ``json.dumps`` accepts without a ``default=`` hook.

    Attributes come from OTel spans, user code and third-party instrumentations; one odd value (a
    ``bytes`` payload, a ``Path``, a NaN) must not make the whole record unserialisable in the writer
    thread, where nobody would see the failure. Mappings and sequences are converted recursively (keys
    become strings); anything else that is not a JSON scalar becomes ``str(value)``.
    """
    if value is None or isinstance(value, (str, bool, int)):
        return value
    if isinstance(value, float):
        return value if math.isfinite(value) else str(value)
    if _depth >= _MAX_DEPTH:
        return str(value)
    if isinstance(value, Mapping):
        return {str(k): jsonable(v, _depth + 1) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [jsonable(v, _depth + 1) for v in value]
    if isinstance(value, (bytes, bytearray, memoryview)):
        return bytes(value).decode("utf-8", errors="backslashreplace")
    if isinstance(value, (set, frozenset)):
        return sorted((jsonable(v, _depth + 1) for v in value), key=repr)
    try:
        return str(value)
    except Exception:
        return f"<unprintable {type(value).__name__}>"


def trace_id_hex(value: int | str | None) -> str | None:
    """An OTel trace id (int, or hex with or without ``0x``) as 32 lowercase hex digits; 0 → ``None``.

    The record's fields are typed ``str | None``; this is the typed way to fill them from a
    ``SpanContext`` (the model also accepts the int at runtime).
    """
    return _hex_id(value, 32, "trace_id")


def span_id_hex(value: int | str | None) -> str | None:
    """An OTel span id as 16 lowercase hex digits; 0 → ``None`` (see :func:`trace_id_hex`)."""
    return _hex_id(value, 16, "span_id")


def utc_from_ns(value: int | None) -> datetime | None:
    """OTel's nanoseconds since the epoch (``span.start_time``) as an aware UTC datetime."""
    if value is None:
        return None
    result: datetime = _utc(int(value))
    return result


def _hex_id(value: Any, digits: int, what: str) -> str | None:
    if value is None:
        return None
    if isinstance(value, bool):
        raise ValueError(f"{what} must be a hex string or an int, not bool")
    if isinstance(value, int):
        if value == 0:
            return None
        if value < 0 or value.bit_length() > digits * 4:
            raise ValueError(f"{what} {value} does not fit in {digits} hex digits")
        return format(value, f"0{digits}x")
    if isinstance(value, str):
        # Fast path for what callers normally pass (already formatted): no regex, no copies.
        if len(value) == digits and not value.strip(_HEX_DIGITS) and value != _ZEROS[digits]:
            return value
        text = value.strip().lower()
        if text.startswith("0x"):
            text = text[2:]
        if not text:
            return None
        if len(text) != digits or text.strip(_HEX_DIGITS):
            raise ValueError(f"{what} must be {digits} hex digits, got {value!r}")
        return None if text == _ZEROS[digits] else text
    raise ValueError(f"{what} must be a hex string or an int, got {type(value).__name__}")


def _utc(value: Any) -> Any:
    if isinstance(value, bool):
        return value
    if isinstance(value, int):
        # Integer arithmetic: value / 1e9 as a float is off by a microsecond for current timestamps. One
        # timedelta from the epoch: a failed span converts two timestamps on the agent's thread.
        return _EPOCH + timedelta(microseconds=value // 1000)
    if isinstance(value, datetime) and value.tzinfo is None:
        return value.replace(tzinfo=UTC)
    return value


_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)


def _now() -> datetime:
    return datetime.now(UTC)


_MASK_48 = (1 << 48) - 1
_time_ns = time.time_ns


class _RecordIds:
    """Time-ordered record ids without a system call per id.

    32 hex digits: milliseconds since the epoch (12), a random prefix drawn once per process (8), and a
    per-process counter (12). Ids sort by creation time across processes, are unique within one (the
    counter) and across processes (the prefix, redrawn in a forked child). ``os.urandom`` per id was a
    system call on the agent's thread, and it releases the GIL, so a busy background thread could make
    it wait for milliseconds.
    """

    def __init__(self) -> None:
        self._reseed()
        rebuild_in_child(self._reseed)

    def _reseed(self) -> None:
        self._prefix = os.urandom(4).hex()
        # The first 20 digits (time and prefix) of the ids of the current millisecond, with it: a
        # millisecond sees several failures under load, and formatting costs more than the clock.
        # One tuple, replaced whole, so that a thread never pairs one millisecond with another's digits.
        self._head: tuple[int, str] = (-1, "")
        self._counter = itertools.count()  # next() on it is atomic under the GIL

    def new(self) -> str:
        millis = _time_ns() // 1_000_000 & _MASK_48
        head = self._head
        if head[0] != millis:
            head = self._head = (millis, f"{millis:012x}{self._prefix}")
        return f"{head[1]}{next(self._counter) & _MASK_48:012x}"


_IDS = _RecordIds()


def new_record_id() -> str:
    """A new record id: 32 lowercase hex digits, time-ordered, unique, made without a system call."""
    return _IDS.new()


class DigestInfo(BaseModel):
    """The digest of a record, flattened: the one-line summary and every part of its dedup key.

    Stored beside the raw error so that a wrong merge ("why did these two failures share a counter?")
    can be debugged from the store alone: ``key_type``, ``key_where`` and ``key_message`` are exactly
    what the key hash was built from.
    """

    model_config = ConfigDict(frozen=True, extra="forbid")

    line: str = Field(description="The one-line digest the agent saw: [Type] at file:line in func: cause.")
    type: str = Field(description="The runtime's own error class name (or HTTP status class).")
    cause: str = Field(description="The root cause, redacted and bounded.")
    file: str | None = Field(default=None, description="In-app file of the location, if any.")
    line_no: int | None = Field(default=None, description="Line number of the location, if known.")
    func: str | None = Field(default=None, description="Function of the location, if known.")
    format: str = Field(description="The parser that recognised the raw text (python, http, gcc, ...).")
    retryable: bool = Field(description="Whether the error class is usually transient.")
    status: int | None = Field(default=None, description="HTTP status or process exit code, if any.")
    key: str = Field(description="The dedup key hash; equal for repeated occurrences of one failure.")
    key_type: str = Field(description="Key component: the error type.")
    key_where: str = Field(description="Key component: in-app file and function (no line number).")
    key_message: str = Field(description="Key component: the message with variable parts masked.")
    error_class: str | None = Field(
        default=None,
        description="transient, rate_limited, prompt_too_long, output_truncated, permanent or aborted.",
    )
    retry_after_s: float | None = Field(default=None, description="The wait the failure asked for, if any.")

    @classmethod
    def from_digest(cls, d: Digest) -> DigestInfo:
        """Flatten a compactor :class:`~otel_errcompact.digest.Digest`."""
        return cls(**cls.fields_of(d))

    @staticmethod
    def fields_of(d: Digest) -> dict[str, Any]:
        """The field values of the :class:`DigestInfo` of ``d`` (one list for the validated and the fast,
        unvalidated construction)."""
        loc = d.location
        return {
            "line": d.line,
            "type": d.type,
            "cause": d.cause,
            "file": loc.file if loc else None,
            "line_no": loc.line if loc else None,
            "func": loc.func if loc else None,
            "format": d.format,
            "retryable": d.retryable,
            "status": d.status,
            "key": d.key,
            "key_type": d.key_parts.type,
            "key_where": d.key_parts.where,
            "key_message": d.key_parts.message,
            "error_class": d.error_class,
            "retry_after_s": d.retry_after_s,
        }


class TrajectoryRecord(BaseModel):
    """One failed tool call (or error log/API failure), with its full raw error and where it happened.

    ``source`` says what produced it: an ``execute_tool`` span that ended in error (``span``), an
    exception log record (``log``), the tool-boundary wrapper (``tool``) or a direct API call (``api``).
    ``scope`` is the history scope the failure was counted in (conversation id, else root trace).

    Build the amended version with :meth:`amended` (validated) or ``model_copy(update=...)`` (not
    validated: pass a :class:`DigestInfo`, not a dict); either way the ``record_id`` stays, which is
    what lets sinks replace the raw version.
    """

    model_config = ConfigDict(frozen=True, extra="forbid", ser_json_inf_nan="strings")

    schema_name: Literal["errcompact.trajectory"] = Field(
        default=SCHEMA_NAME, description="Identifies the record type in mixed streams."
    )
    schema_version: Literal[1] = Field(default=SCHEMA_VERSION, description="Schema version of this record.")
    record_id: str = Field(
        default_factory=new_record_id, min_length=1, description="Unique id (32 hex, time-ordered); the upsert key."
    )
    source: Literal["span", "log", "tool", "api"] = Field(description="What produced the record.")
    recorded_at: datetime = Field(default_factory=_now, description="When the record was created (UTC).")

    scope: str | None = Field(default=None, description="History scope: conversation id or root trace.")
    trace_id: str | None = Field(default=None, description="32 lowercase hex digits, or None.")
    span_id: str | None = Field(default=None, description="16 lowercase hex digits, or None.")
    parent_span_id: str | None = Field(default=None, description="16 lowercase hex digits, or None.")
    conversation_id: str | None = Field(default=None, description="gen_ai.conversation.id, if known.")
    agent_name: str | None = Field(default=None, description="gen_ai.agent.name, if known.")
    tool_name: str | None = Field(default=None, description="gen_ai.tool.name, if known.")
    tool_call_id: str | None = Field(default=None, description="gen_ai.tool.call.id, if known.")
    tool_arguments: str | dict[str, Any] | list[Any] | None = Field(
        default=None, description="The tool call's arguments, as sent (JSON text or a JSON-able value)."
    )
    span_name: str | None = Field(default=None, description="Name of the failed span.")
    status_description: str | None = Field(default=None, description="The span's status description.")
    error_type: str | None = Field(default=None, description="The error.type attribute, if set.")
    exception_type: str | None = Field(default=None, description="exception.type of the exception event.")
    exception_message: str | None = Field(default=None, description="exception.message, unabridged.")
    exception_stacktrace: str | None = Field(default=None, description="exception.stacktrace, unabridged.")
    raw_error: str = Field(default="", description="The full raw error text the digest was made from.")
    started_at: datetime | None = Field(default=None, description="Span start (UTC).")
    ended_at: datetime | None = Field(default=None, description="Span end (UTC).")
    attributes: dict[str, Any] = Field(default_factory=dict, description="Span/log attributes, JSON-able.")
    resource: dict[str, Any] = Field(default_factory=dict, description="Resource attributes, JSON-able.")

    digest: DigestInfo | None = Field(default=None, description="Set on the amended version.")
    count: int | None = Field(default=None, description="Occurrences of this error class in the scope.")
    escalation: dict[str, Any] | None = Field(default=None, description="Set when a threshold was breached.")

    @field_validator("trace_id", mode="before")
    @classmethod
    def _trace_id(cls, value: Any) -> str | None:
        return _hex_id(value, 32, "trace_id")

    @field_validator("span_id", "parent_span_id", mode="before")
    @classmethod
    def _span_id(cls, value: Any) -> str | None:
        return _hex_id(value, 16, "span_id")

    @field_validator("recorded_at", "started_at", "ended_at", mode="before")
    @classmethod
    def _timestamps(cls, value: Any) -> Any:
        return _utc(value)

    @field_validator("raw_error", mode="before")
    @classmethod
    def _raw_text(cls, value: Any) -> Any:
        # Binary tool output keeps every byte: invalid UTF-8 becomes lone surrogates (surrogateescape), which
        # the stored JSON keeps as escapes and ``--raw`` writes back as the bytes; not U+FFFD, and not a
        # \xNN escape, which reads like the same four characters typed in the error.
        if isinstance(value, (bytes, bytearray, memoryview)):
            return bytes(value).decode("utf-8", errors="surrogateescape")
        return "" if value is None else value

    @field_validator("attributes", "resource", mode="before")
    @classmethod
    def _json_mapping(cls, value: Any) -> Any:
        if value is None:
            return {}
        return jsonable(value) if isinstance(value, Mapping) else value

    @field_validator("escalation", mode="before")
    @classmethod
    def _json_optional_mapping(cls, value: Any) -> Any:
        return jsonable(value) if isinstance(value, Mapping) else value

    @field_validator("tool_arguments", mode="before")
    @classmethod
    def _json_arguments(cls, value: Any) -> Any:
        if value is None or isinstance(value, str):
            return value
        converted = jsonable(value)
        return converted if isinstance(converted, (dict, list)) else str(converted)

    def amended(
        self,
        digest: Digest | DigestInfo | None,
        *,
        count: int | None = None,
        escalation: Mapping[str, Any] | None = None,
    ) -> TrajectoryRecord:
        """The same record (same ``record_id``) with its digest, counter and escalation filled in.

        Unlike ``model_copy(update=...)`` this validates, so an escalation with odd values is made
        JSON-able here rather than failing later in a sink.
        """
        info = DigestInfo.from_digest(digest) if isinstance(digest, Digest) else digest
        data = self.model_dump()
        data.update(digest=info, count=count, escalation=escalation)
        return TrajectoryRecord.model_validate(data)

    def to_json(self) -> str:
        """The record as one line of JSON (no raw newlines), the form every sink stores.

        Values smuggled past validation by ``model_copy(update=...)`` are stringified instead of
        raising, so one odd value cannot lose the record. Text that UTF-8 cannot carry (a lone
        surrogate, e.g. a non-UTF-8 file name from ``os.listdir`` inside an error message) is written
        as its JSON escape (``\\udce9``), which :meth:`from_json` reads back as it was.
        """
        try:
            with _serializing:
                return self.model_dump_json(fallback=_fallback, warnings=False)
        except PydanticSerializationError:
            pass
        return lossless_json(self.model_dump(fallback=_fallback, warnings=False))

    def to_dict(self) -> dict[str, Any]:
        """A JSON-ready mapping (datetimes as ISO strings), e.g. for an OTel log body."""
        out: dict[str, Any] = self.model_dump(mode="json", fallback=_fallback, warnings=False)
        return out

    def repaired(self) -> TrajectoryRecord:
        """The same record with every lone surrogate escaped, for where text must be valid Unicode (an
        indexed SQLite column) and as a last resort for a record that could not be stored as it is.

        Python keeps undecodable bytes of file names and subprocess output as lone surrogates
        (``surrogateescape``): ``'caf\\udce9.txt'`` for the bytes ``caf\\xe9.txt``. They become
        ``\\xNN`` escapes; any other lone surrogate becomes ``\\udNNN``. Lossy (a typed ``\\xe9`` reads
        the same): the stored line keeps surrogates as they are (:func:`lossless_json`).
        """
        data = _escape_deep(self.model_dump(mode="python", fallback=_fallback, warnings=False))
        return TrajectoryRecord.model_validate(data)

    def to_storage_json(self) -> str:
        """One line of JSON in which the raw error text appears once: the spool, JSONL and SQLite form.

        A failed span usually carries its traceback twice (``raw_error`` and
        ``exception_stacktrace``), and its message and status description are pieces of it; stored
        as they are, a 10 MB error costs 40 MB. Here each of those fields that is a slice of
        ``raw_error`` becomes an entry ``[start, end]`` under ``"@refs"``; :meth:`from_storage_json`
        reverses this exactly. Lone surrogates are written as their JSON escapes (``\\udce9``), so the
        line is always valid UTF-8 and reads back as the text was.
        """
        return self.to_storage_line()[:-1].decode("utf-8")

    def to_storage_line(self) -> bytes:
        """:meth:`to_storage_json` as UTF-8 bytes ending in a newline: the spool's line.

        See :func:`storage_line`; a record it cannot write (a value smuggled in by ``model_copy`` that
        JSON cannot carry) is written :meth:`repaired`.
        """
        line = storage_line(self.__dict__)
        if line is not None:
            return line
        repaired = self.repaired()
        line = storage_line(repaired.__dict__)
        if line is not None:
            return line
        with _serializing:
            text = repaired.model_dump_json(fallback=_fallback, warnings=False)
        return (text + "\n").encode()

    @classmethod
    def from_storage_json(cls, text: str | bytes) -> TrajectoryRecord:
        """The record :meth:`to_storage_json` (or :meth:`to_json`) wrote."""
        data = json.loads(text)
        if not isinstance(data, dict):
            raise ValueError("a stored trajectory record must be a JSON object")
        refs = data.pop("@refs", None) or {}
        raw = data.get("raw_error") or ""
        for name, span in refs.items():
            if name in _TEXT_FIELDS and isinstance(span, list) and len(span) == 2:
                data[name] = raw[int(span[0]):int(span[1])]
        return cls.model_validate(data)

    @classmethod
    def from_json(cls, text: str | bytes) -> TrajectoryRecord:
        """Parse a record written by :meth:`to_json`; raises ``ValueError`` for another schema.

        Read by ``json``, not pydantic's own parser, which refuses the escape of a lone surrogate."""
        return cls.model_validate(json.loads(text))


_serializing = threading.Lock()
"""Held around each serialisation of a record to JSON (see :func:`_dumps`), and across a ``fork()``.

pydantic-core's ``to_json`` is not safe to fork inside. A process forked while another of its threads
was in ``to_json`` (here: the writer or the digest thread, or another agent thread, storing a record)
could hang in its own first ``to_json`` for good, waiting for a lock inside the extension that no thread
of the child holds: measured, one fork in 200 to 800 with two threads serialising records
continuously. ``fork()`` waits (a few seconds at most) until no thread of the library is inside one,
and the child gets a new lock. A thread of the host's own serialising with pydantic at the fork is not
covered."""
new_locks_in_child(sys.modules[__name__], "_serializing")
hold_across_fork(sys.modules[__name__], "_serializing")


def record_values(
    record_id: str,
    source: str,
    recorded_at: datetime,
    scope: str,
    trace_id: str | None,
    span_id: str | None,
    parent_span_id: str | None,
    conversation_id: str | None,
    agent_name: str | None,
    tool_name: str | None,
    tool_call_id: str | None,
    tool_arguments: str | None,
    span_name: str | None,
    status_description: str | None,
    error_type: str | None,
    exception_type: str | None,
    exception_message: str | None,
    exception_stacktrace: str | None,
    raw_error: str,
    started_at: datetime | None,
    ended_at: datetime | None,
    attributes: dict[str, Any],
    resource: dict[str, Any],
    /,
) -> dict[str, Any]:
    """A trajectory record's field values, in the model's field order, without a digest yet (see
    :func:`_with_outcome`), for values already in the record's form: hex ids, aware UTC datetimes,
    texts as ``str``, JSON-able plain dicts. Positional, with no keyword expansion and no re-ordering:
    it lays out every failed span's record (see :mod:`otel_errcompact.capture`) and every failure the
    tool boundary counts, on the agent's thread for the latter."""
    return {
        "schema_name": SCHEMA_NAME,
        "schema_version": SCHEMA_VERSION,
        "record_id": record_id,
        "source": source,
        "recorded_at": recorded_at,
        "scope": scope,
        "trace_id": trace_id,
        "span_id": span_id,
        "parent_span_id": parent_span_id,
        "conversation_id": conversation_id,
        "agent_name": agent_name,
        "tool_name": tool_name,
        "tool_call_id": tool_call_id,
        "tool_arguments": tool_arguments,
        "span_name": span_name,
        "status_description": status_description,
        "error_type": error_type,
        "exception_type": exception_type,
        "exception_message": exception_message,
        "exception_stacktrace": exception_stacktrace,
        "raw_error": raw_error,
        "started_at": started_at,
        "ended_at": ended_at,
        "attributes": attributes,
        "resource": resource,
        "digest": None,
        "count": None,
        "escalation": None,
    }


def storage_line(values: Mapping[str, Any]) -> bytes | None:
    """The storage line (:meth:`TrajectoryRecord.to_storage_json` as UTF-8 bytes, newline ended) of
    the record whose field values are ``values`` (in field order; ``digest`` a :class:`DigestInfo`, the
    dict of its fields, or None); ``None`` when the values need :meth:`TrajectoryRecord.repaired` first
    (a value JSON cannot carry that :func:`jsonable` did not convert).

    Made for every record: on the writer's thread for a failed span's (from its capture), on the agent's
    thread for a failure the tool boundary counts. The values are serialised as plain dicts, not the
    models (a model's serialiser visits every field's schema, and its ``str`` would then be encoded
    again), by :func:`_dumps`. The text is the same as ``model_dump_json``'s.
    """
    raw = values["raw_error"]
    if type(raw) is not str:
        return None
    out = dict(values)
    refs: dict[str, list[int]] | None = None
    for name in _TEXT_FIELDS:
        value = out[name]
        if not value or len(value) < _MIN_REF_CHARS:
            continue
        if value is raw or value == raw:
            start = 0
        elif len(value) < len(raw):
            start = raw.find(value)
            if start < 0:
                continue
        else:
            continue
        del out[name]
        if refs is None:
            refs = out["@refs"] = {}  # the last key, serialised with the rest: no splicing of bytes
        refs[name] = [start, start + len(value)]
    digest = out["digest"]
    if type(digest) is DigestInfo:
        out["digest"] = digest.__dict__  # a plain dict: no dispatch to the nested model's serialiser
    body = _dumps(out)
    return body + b"\n" if body is not None else None


def _dumps(value: dict[str, Any]) -> bytes | None:
    """``value`` as compact JSON, the bytes pydantic-core's ``to_json`` makes of it (and so
    ``model_dump_json``), made by orjson where it can; None when neither can (a lone surrogate).

    Why orjson: it writes the same bytes for the values a record holds (texts, ints, finite floats,
    aware datetimes, plain dicts and lists: :func:`jsonable` has made everything else one of these)
    in a third of the time, because it scans a long text for what must be escaped many bytes at a
    time. A failure's record, whose raw traceback is most of it, is serialised for every failure (on the
    agent's thread before the tool call returns, when it was): with pydantic-core this was a third of
    the instructions the library's span-end hooks ran for a failed span with a 45-line traceback
    (``benchmarks/RESULTS.md``, "Serialising the record"). What orjson refuses (an int past 64 bits, a
    key that is not a text) goes to pydantic-core. The one value they would write differently, a
    non-finite float (orjson: ``null``; pydantic-core: ``"NaN"``), is never one of a record's values:
    :func:`jsonable` makes it a text. A lone surrogate, which neither writes, goes to :func:`lossless_json`.

    Only pydantic-core's path takes :data:`_serializing`: orjson keeps no lock of its own and runs under
    the GIL (a ``fork()`` can fall only between two of its steps, in a ``default`` callback, where its
    state is whole), so the agent's threads do not queue on that lock for every failure."""
    try:
        return orjson.dumps(value, default=_fallback, option=orjson.OPT_UTC_Z)
    except orjson.JSONEncodeError:
        pass
    try:
        with _serializing:
            return to_json(value, inf_nan_mode="strings", fallback=_fallback)
    except PydanticSerializationError:
        pass
    try:
        return lossless_json(value).encode("utf-8")
    except (TypeError, ValueError):
        return None


def lossless_json(value: Any, *, indent: int | None = None) -> str:
    """``value`` as JSON that keeps every lone surrogate of its texts as its escape (``"caf\\udce9"``).

    A lone surrogate is how Python holds a byte it could not decode (a file name that is not UTF-8,
    in an error). UTF-8 cannot carry it, so orjson and pydantic-core refuse the text; JSON's own
    ``\\uXXXX`` escape can, and ``json.loads`` gives the surrogate back. A ``\\xNN`` escape in its
    place would be indistinguishable from those four characters typed in the error. The result is
    valid UTF-8. Datetimes are written as pydantic writes them (ISO 8601); anything else JSON cannot
    carry as :func:`jsonable` makes it.
    """
    text = json.dumps(value, ensure_ascii=False, separators=(",", ":") if indent is None else None,
                      indent=indent, default=_lossless_default, allow_nan=False)
    # A lone surrogate can only stand inside a JSON string, where its escape means the same.
    return _SURROGATE.sub(_json_escape, text)


def _lossless_default(value: Any) -> Any:
    if isinstance(value, datetime):
        text = value.isoformat()
        return text[:-6] + "Z" if text.endswith("+00:00") else text
    if isinstance(value, BaseModel):
        return value.model_dump(fallback=_fallback, warnings=False)
    return jsonable(value)


def _json_escape(match: re.Match[str]) -> str:
    return f"\\u{ord(match.group(0)):04x}"


_UNAMENDED: Final = b',"digest":null,"count":null,"escalation":null'
"""How a storage line without a digest holds the compactor's three fields: the last model fields, so
only ``"@refs"`` (numbers under field names) may follow them."""


def amended_line(line: bytes, values: Mapping[str, Any]) -> bytes | None:
    """The storage line of ``values`` (a record's values with its digest, count and escalation set, as
    :func:`storage_line` takes them), made from ``line``: the storage line of the same record without
    them. The three ``null``\\ s are replaced, so the raw error is not encoded again: the digest thread
    amends every failed span's record, and a second :func:`storage_line` of a 3 KB record cost it
    13-16 µs of the 55-60 µs a failure costs it, with the GIL held. The bytes are
    ``storage_line(values)``'s. ``None`` when ``line`` does not end as such a line does, or the new
    values are not JSON-able: the caller then makes the line from ``values``."""
    at = line.rfind(_UNAMENDED)
    end = at + len(_UNAMENDED)
    # A quote inside a JSON string is escaped, so the match is a key of an object; the last one that
    # only "@refs" or the end of the record follows is the record's own.
    if at < 0 or not (line.startswith(b"}\n", end) or line.startswith(b',"@refs":', end)):
        return None
    digest = values["digest"]
    if type(digest) is DigestInfo:
        digest = digest.__dict__
    fields = _dumps({"digest": digest, "count": values["count"], "escalation": values["escalation"]})
    if fields is None:
        return None
    return b"".join((line[:at], b",", fields[1:-1], line[end:]))


def record_from_values(values: dict[str, Any]) -> TrajectoryRecord:
    """The record whose field values are ``values`` (as :func:`storage_line` takes them), built without
    validation: the values are the pipeline's own, already checked (see ``pipeline._prevalidated``).
    Takes ownership of ``values``."""
    digest = values["digest"]
    if type(digest) is dict:
        values["digest"] = unvalidated(DigestInfo, digest)
    return unvalidated(TrajectoryRecord, values)


def record_of(item: TrajectoryRecord | dict[str, Any]) -> TrajectoryRecord:
    """``item`` when it is a record; else the record of its field values (:func:`record_from_values`),
    built from a copy, so the caller's dict stays as it was (the writer queues a failed span's record as
    its values, and a sink may read them after another one asked for the record)."""
    return record_from_values(dict(item)) if isinstance(item, dict) else item


_M = TypeVar("_M", bound=BaseModel)


def unvalidated(cls: type[_M], values: dict[str, Any]) -> _M:
    """``cls.model_construct(**values)`` for values that name every field in field order, at a tenth of
    its cost.

    ``model_construct`` walks every field looking for aliases and defaults (about 14 µs for a record);
    when the values are complete, what it finally does is set these four attributes. A field added to
    the model later makes the values incomplete, and ``model_construct`` is used again.
    """
    names = _field_names.get(cls)
    if names is None:  # once per model class: reading ``model_fields`` goes through a descriptor
        names = _field_names[cls] = frozenset(cls.model_fields)
    if values.keys() != names:
        return cls.model_construct(**values)
    model = cls.__new__(cls)
    setattr_ = object.__setattr__
    setattr_(model, "__dict__", values)
    setattr_(model, "__pydantic_fields_set__", set(names))
    setattr_(model, "__pydantic_extra__", None)
    setattr_(model, "__pydantic_private__", None)
    return model


_field_names: dict[type[BaseModel], frozenset[str]] = {}


def _fallback(value: Any) -> Any:
    return jsonable(value)


_TEXT_FIELDS: Final = ("exception_stacktrace", "exception_message", "status_description")
"""Fields that are usually the raw error or a slice of it; stored as references to it."""
_MIN_REF_CHARS: Final = 64
_SURROGATE = re.compile("[\ud800-\udfff]")


def _escape_one(match: re.Match[str]) -> str:
    code = ord(match.group(0))
    # U+DC80..U+DCFF is how surrogateescape keeps an undecodable byte: give the byte back as \xNN.
    return f"\\x{code - 0xDC00:02x}" if 0xDC80 <= code <= 0xDCFF else f"\\u{code:04x}"


def escape_surrogates(text: str) -> str:
    """``text`` with every lone surrogate written as an escape (``\\xe9``, ``\\ud800``); valid UTF-8 after.

    >>> escape_surrogates("caf\\udce9.txt")
    'caf\\\\xe9.txt'
    """
    return _SURROGATE.sub(_escape_one, text)


def _escape_deep(value: Any) -> Any:
    if isinstance(value, str):
        return escape_surrogates(value)
    if isinstance(value, dict):
        return {_escape_deep(k): _escape_deep(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_escape_deep(v) for v in value]
    return value


def trajectory_json_schema() -> dict[str, Any]:
    """The JSON Schema of :class:`TrajectoryRecord`, with its name and version in the ``$id``."""
    schema = TrajectoryRecord.model_json_schema()
    schema["$id"] = f"urn:otel-errcompact:{SCHEMA_NAME}:v{SCHEMA_VERSION}"
    return schema
