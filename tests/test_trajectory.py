"""The trajectory record: versioned schema, id and time normalisation, JSON safety, full fidelity."""

from __future__ import annotations

import json
import math
import os
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import format_span_id, format_trace_id
from pydantic import ValidationError

from otel_errcompact.compactor import compact_text
from otel_errcompact.trajectory import (
    SCHEMA_NAME,
    SCHEMA_VERSION,
    DigestInfo,
    TrajectoryRecord,
    span_id_hex,
    trace_id_hex,
    trajectory_json_schema,
    utc_from_ns,
)
from tests.realerrors import python_error

KEYERROR_APP = """
    import json

    def load_user(payload):
        data = json.loads(payload)
        return data["user_id"]

    def main():
        return load_user('{"name": "ada"}')

    main()
"""


@pytest.fixture(scope="module")
def keyerror_tb(tmp_path_factory: pytest.TempPathFactory) -> str:
    return python_error(tmp_path_factory.mktemp("keyerror"), KEYERROR_APP)


def _failed_tool_span() -> ReadableSpan:
    """A real SDK span (child of an agent span) whose ids and times the record must carry."""
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    tracer = provider.get_tracer("test")
    with tracer.start_as_current_span("invoke_agent"), tracer.start_as_current_span(
        "execute_tool lookup", attributes={"gen_ai.operation.name": "execute_tool",
                                           "gen_ai.tool.name": "lookup"},
    ):
        pass
    spans = [s for s in exporter.get_finished_spans() if s.name == "execute_tool lookup"]
    provider.shutdown()
    return spans[0]


def test_json_carries_schema_name_and_version(keyerror_tb: str) -> None:
    rec = TrajectoryRecord(source="tool", tool_name="lookup", raw_error=keyerror_tb)
    data = json.loads(rec.to_json())
    assert data["schema_name"] == SCHEMA_NAME == "errcompact.trajectory"
    assert data["schema_version"] == SCHEMA_VERSION == 1
    assert len(data["record_id"]) == 32 and int(data["record_id"], 16) >= 0
    assert datetime.fromisoformat(data["recorded_at"]).tzinfo is not None


def test_json_schema_documents_version_and_fields() -> None:
    schema = trajectory_json_schema()
    assert schema["$id"].endswith(":errcompact.trajectory:v1")
    props = schema["properties"]
    assert props["schema_version"]["const"] == 1
    assert props["schema_name"]["const"] == "errcompact.trajectory"
    for field in ("raw_error", "trace_id", "span_id", "tool_call_id", "digest", "count", "escalation"):
        assert field in props and props[field].get("description"), field
    assert "DigestInfo" in schema["$defs"]


def test_other_schema_version_is_rejected(keyerror_tb: str) -> None:
    data = json.loads(TrajectoryRecord(source="tool", raw_error=keyerror_tb).to_json())
    data["schema_version"] = 2
    with pytest.raises(ValidationError):
        TrajectoryRecord.from_json(json.dumps(data))


def test_ids_and_times_from_a_real_sdk_span_are_normalised(keyerror_tb: str) -> None:
    span = _failed_tool_span()
    ctx = span.get_span_context()
    assert ctx is not None and span.parent is not None
    rec = TrajectoryRecord(
        source="span", trace_id=trace_id_hex(ctx.trace_id), span_id=span_id_hex(ctx.span_id),
        parent_span_id=span_id_hex(span.parent.span_id), started_at=utc_from_ns(span.start_time),
        ended_at=utc_from_ns(span.end_time), attributes=dict(span.attributes or {}), raw_error=keyerror_tb,
    )
    # The SDK's raw ints are accepted too (validators), for callers that skip the helpers.
    same = TrajectoryRecord.model_validate({
        "source": "span", "record_id": rec.record_id, "recorded_at": rec.recorded_at,
        "trace_id": ctx.trace_id, "span_id": ctx.span_id, "parent_span_id": span.parent.span_id,
        "started_at": span.start_time, "ended_at": span.end_time, "attributes": span.attributes,
        "raw_error": keyerror_tb,
    })
    assert same == rec
    assert rec.trace_id == format_trace_id(ctx.trace_id) and len(rec.trace_id) == 32
    assert rec.span_id == format_span_id(ctx.span_id) and len(rec.span_id) == 16
    assert rec.parent_span_id == format_span_id(span.parent.span_id)
    assert rec.started_at is not None and rec.ended_at is not None
    assert rec.started_at.tzinfo == UTC
    assert span.start_time is not None and span.end_time is not None
    assert abs(rec.started_at.timestamp() - span.start_time / 1e9) < 1e-5
    assert rec.started_at <= rec.ended_at
    assert rec.attributes["gen_ai.tool.name"] == "lookup"


def test_hex_ids_are_lowercased_and_bad_ids_rejected() -> None:
    span = _failed_tool_span()
    ctx = span.get_span_context()
    assert ctx is not None
    upper = "0x" + format_trace_id(ctx.trace_id).upper()
    rec = TrajectoryRecord.model_validate({"source": "span", "trace_id": upper, "span_id": 0})
    assert rec.trace_id == format_trace_id(ctx.trace_id)
    assert rec.span_id is None  # 0 is OTel's invalid span id
    with pytest.raises(ValidationError):
        TrajectoryRecord(source="span", trace_id=format_trace_id(ctx.trace_id)[:-1])
    with pytest.raises(ValidationError):
        TrajectoryRecord(source="span", span_id="zz" * 8)


def test_record_is_frozen(keyerror_tb: str) -> None:
    rec = TrajectoryRecord(source="tool", raw_error=keyerror_tb)
    with pytest.raises(ValidationError):
        setattr(rec, "raw_error", "changed")  # noqa: B010 - the assignment itself is under test


def test_digest_info_flattens_a_real_digest(keyerror_tb: str) -> None:
    digest = compact_text(keyerror_tb)
    info = DigestInfo.from_digest(digest)
    assert info.line == digest.line and info.type == digest.type == "KeyError"
    assert info.key == digest.key and info.key_type == digest.key_parts.type
    assert info.key_where == digest.key_parts.where and info.key_message == digest.key_parts.message
    assert "user_id" in info.cause
    if digest.location is not None:
        assert (info.file, info.line_no, info.func) == (
            digest.location.file, digest.location.line, digest.location.func,
        )


def test_amended_keeps_the_id_and_makes_values_jsonable(keyerror_tb: str) -> None:
    raw = TrajectoryRecord(source="tool", raw_error=keyerror_tb)
    digest = compact_text(keyerror_tb)
    amended = raw.amended(digest, count=3, escalation={"reason": "consecutive", "keys": {digest.key}})
    assert amended.record_id == raw.record_id and amended.raw_error == raw.raw_error
    assert amended.digest == DigestInfo.from_digest(digest) and amended.count == 3
    assert amended.escalation == {"reason": "consecutive", "keys": [digest.key]}
    assert TrajectoryRecord.from_json(amended.to_json()) == amended


def test_model_copy_with_odd_values_still_serialises(keyerror_tb: str) -> None:
    """model_copy skips validation; to_json must still not raise in the writer thread."""
    raw = TrajectoryRecord(source="tool", raw_error=keyerror_tb)
    odd = raw.model_copy(update={"digest": DigestInfo.from_digest(compact_text(keyerror_tb)),
                                 "escalation": {"when": datetime.now(UTC), "path": Path("/x")}})
    data = json.loads(odd.to_json())
    assert data["escalation"]["path"] == "/x" and data["digest"]["type"] == "KeyError"
    assert odd.to_dict()["escalation"]["path"] == "/x"


def test_attributes_that_json_cannot_carry_are_stringified(tmp_path: Path) -> None:
    blob = (tmp_path / "blob.bin")
    blob.write_bytes(bytes(range(250, 256)))
    rec = TrajectoryRecord.model_validate({
        "source": "span",
        "attributes": {"path": tmp_path, "data": blob.read_bytes(), "seq": (1, 2), "nan": math.nan,
                       "nested": {"set": {3, 1}}, 7: "int key"},
        "resource": {"service.name": "agent"},
    })
    assert rec.attributes["path"] == str(tmp_path)
    assert rec.attributes["data"] == "\\xfa\\xfb\\xfc\\xfd\\xfe\\xff"
    assert rec.attributes["seq"] == [1, 2] and rec.attributes["nan"] == "nan"
    assert rec.attributes["nested"] == {"set": [1, 3]} and rec.attributes["7"] == "int key"
    json.loads(rec.to_json())


def test_raw_error_is_never_truncated(tmp_path: Path) -> None:
    tb = python_error(tmp_path, """
        def explode(n):
            raise RuntimeError("état " * n)
        explode(250_000)
    """)
    assert len(tb.encode("utf-8")) > 1_000_000
    rec = TrajectoryRecord(source="tool", raw_error=tb)
    back = TrajectoryRecord.from_json(rec.to_json())
    assert back.raw_error == tb and back.raw_error.encode() == tb.encode()


def test_binary_raw_error_keeps_every_byte(tmp_path: Path) -> None:
    out = tmp_path / "out.bin"
    out.write_bytes(b"\x89PNG\r\n\x1a\n\xff\xfe error")
    rec = TrajectoryRecord.model_validate({"source": "tool", "raw_error": out.read_bytes()})
    assert rec.raw_error.encode("utf-8", "surrogateescape") == out.read_bytes()
    line = rec.to_storage_line()
    line.decode("utf-8")  # the stored line is valid UTF-8
    stored = TrajectoryRecord.from_storage_json(line)
    assert stored.raw_error.encode("utf-8", "surrogateescape") == out.read_bytes()
    assert TrajectoryRecord.from_json(rec.to_json()) == rec


def test_the_fast_record_of_a_span_failure_equals_the_validated_one(keyerror_tb: str) -> None:
    """The pipeline lays out a span failure's record values on the agent's thread (pipeline._values) and the
    writer builds the record from them without validation; it must hold exactly what the validated
    construction holds, field for field."""
    from otel_errcompact.history import ErrorHistory, Thresholds
    from otel_errcompact.pipeline import Failure, _failure_fields, _prevalidated, _values
    from otel_errcompact.trajectory import record_from_values

    failure = Failure(
        scope="conv-1", raw_error=keyerror_tb, source="span", tool_name="lookup", tool_call_id="call-1",
        tool_arguments='{"id": 7}', conversation_id="conv-1", agent_name="support", trace_id="ab" * 16,
        span_id="cd" * 8, parent_span_id="ef" * 8, span_name="execute_tool lookup",
        status_description="KeyError: 'id'", error_type="KeyError", exception_type="KeyError",
        exception_message="'id'", exception_stacktrace=keyerror_tb,
        started_at=datetime(2026, 1, 2, 3, 4, 5, 6, tzinfo=UTC),
        ended_at=datetime(2026, 1, 2, 3, 4, 6, tzinfo=UTC),
        attributes={"gen_ai.tool.name": "lookup", "n": 3, "list": [1, 2], "blob": b"\xff"},
        resource={"service.name": "svc"},
    )
    assert _prevalidated(failure)
    import dataclasses

    for name in ("scope", "tool_arguments", "exception_stacktrace", "span_name"):  # validated if not text
        assert not _prevalidated(dataclasses.replace(failure, **{name: {"not": "text"}}))
    digest = compact_text(keyerror_tb)
    history = ErrorHistory(Thresholds(consecutive=1))
    observation = history.observe("conv-1", digest)
    assert observation.escalation is not None
    fast = record_from_values(_values(failure, digest, observation))
    validated = TrajectoryRecord(
        record_id=fast.record_id, recorded_at=fast.recorded_at, **_failure_fields(failure),
        attributes=dict(failure.attributes), resource=dict(failure.resource),
        digest=DigestInfo.from_digest(digest), count=observation.count,
        escalation=observation.escalation.to_dict(),
    )
    assert fast.model_dump() == validated.model_dump()
    assert list(fast.model_dump()) == list(TrajectoryRecord.model_fields)
    assert TrajectoryRecord.from_storage_json(fast.to_storage_json()) == validated
    # The pipeline spools the line written from the values (the record itself is built later, on the
    # writer's thread): byte for byte the validated record's line.
    from otel_errcompact.pipeline import _values
    from otel_errcompact.trajectory import record_from_values, storage_line

    values = _values(failure, digest, observation)
    line = storage_line(values)
    rebuilt = TrajectoryRecord(**{**validated.model_dump(), "record_id": values["record_id"],
                                  "recorded_at": values["recorded_at"]})
    assert line == rebuilt.to_storage_line() == (rebuilt.model_dump_json(exclude={"exception_stacktrace"})[:-1]
                                                 + f',"@refs":{{"exception_stacktrace":[0,{len(keyerror_tb)}]}}}}\n'
                                                 ).encode()
    assert record_from_values(values) == rebuilt


def test_a_span_failure_stored_from_its_values_is_the_row_its_record_makes(tmp_path: Path,
                                                                           keyerror_tb: str) -> None:
    """The writer hands a failed span's values and spool line to the SQLite sink without building the
    record (``write_values``), and to a sink that needs records, the record built once: every store
    holds what the record's own path stores, column for column."""
    import sqlite3

    from otel_errcompact.history import ErrorHistory, Thresholds
    from otel_errcompact.pipeline import Failure, _values
    from otel_errcompact.sinks import JSONLSink, SQLiteSink, TrajectoryWriter
    from otel_errcompact.trajectory import record_from_values, storage_line

    failure = Failure(
        scope="conv-1", raw_error=keyerror_tb, source="span", tool_name="lookup", conversation_id="conv-1",
        trace_id="ab" * 16, span_id="cd" * 8, span_name="execute_tool lookup", exception_type="KeyError",
        exception_message="'id'", exception_stacktrace=keyerror_tb, status_description="KeyError: 'id'",
        started_at=datetime(2026, 1, 2, 3, 4, 5, 6, tzinfo=UTC), attributes={"n": 3},
    )
    digest = compact_text(keyerror_tb)
    observation = ErrorHistory(Thresholds(consecutive=1)).observe("conv-1", digest)
    values = _values(failure, digest, observation)
    no_digest = {**_values(failure, None, None), "exception_type": None}
    items = [(v, storage_line(v)) for v in (values, no_digest)]
    assert all(line is not None for _, line in items)

    by_values, by_records = SQLiteSink(tmp_path / "values.db"), SQLiteSink(tmp_path / "records.db")
    by_values.write_values([(v, line[:-1].decode()) for v, line in items])  # type: ignore[index]
    by_records.write([record_from_values(dict(v)) for v, _ in items])
    by_values.close()
    by_records.close()

    def rows(path: Path) -> list[tuple[object, ...]]:
        with sqlite3.connect(path) as conn:
            return conn.execute("SELECT * FROM trajectory ORDER BY id").fetchall()

    assert rows(tmp_path / "values.db") == rows(tmp_path / "records.db")
    assert len(rows(tmp_path / "values.db")) == 2

    # Through the writer, beside a sink that takes records: both get every record.
    writer = TrajectoryWriter([SQLiteSink(tmp_path / "w.db"), JSONLSink(tmp_path / "w.jsonl")],
                              spool_dir=tmp_path / "spool")
    writer.submit_values(_values(failure, digest, observation))
    assert writer.force_flush(10)
    writer.shutdown()
    stored = rows(tmp_path / "w.db")
    assert len(stored) == 1 and stored[0][10] == digest.key and stored[0][11] == digest.line
    lines = (tmp_path / "w.jsonl").read_text().splitlines()
    assert len(lines) == 1 and stored[0][-1] == lines[0]


def test_a_record_amended_from_its_raw_line_is_the_line_its_values_make(tmp_path: Path, keyerror_tb: str) -> None:
    """The digest thread makes a deferred failure's amended line from the raw line the agent's thread
    spooled (``amended_line``), instead of encoding the raw error again: byte for byte what
    ``storage_line`` makes of the amended values, for a traceback (whose stack trace is a slice of the raw
    error, so the line ends in ``"@refs"``), a one-line error (no refs), an escalation, and attributes
    that hold the compactor's own field names as ``null``."""
    from otel_errcompact.history import ErrorHistory, Thresholds
    from otel_errcompact.pipeline import Failure, _amended, _values
    from otel_errcompact.trajectory import amended_line, storage_line

    try:
        open(tmp_path / "missing-report.csv", encoding="utf-8").close()
    except OSError as exc:
        one_line = f"{type(exc).__name__}: {exc}"
    nested_nulls = {"n": 3, "digest": None, "count": None, "escalation": None}
    history = ErrorHistory(Thresholds(consecutive=2))
    cases = [
        (keyerror_tb, {"n": 3}, {"service.name": "svc"}),
        (one_line, {"n": 3}, {}),
        (one_line, nested_nulls, nested_nulls),  # the second of its class in the scope: escalates
    ]
    escalated = 0
    for raw, attributes, resource in cases:
        failure = Failure(scope="conv-1", raw_error=raw, source="span", tool_name="lookup",
                          exception_stacktrace=raw if raw is keyerror_tb else None,
                          attributes=attributes, resource=resource)
        raw_values = _values(failure, None, None)
        raw_line = storage_line(raw_values)
        assert raw_line is not None
        digest = compact_text(raw)
        observation = history.observe("conv-1", digest)
        escalated += observation.escalation is not None
        amended = _amended(raw_values, digest, observation)
        spliced = amended_line(raw_line, amended)
        assert spliced is not None and spliced == storage_line(amended)
        record = TrajectoryRecord.from_storage_json(spliced)
        assert record.digest is not None and record.digest.key == digest.key
        assert record.raw_error == raw and record.attributes == attributes
        # An amended line has no nulls left to replace (the nested ones are not the record's own).
        assert amended_line(spliced, amended) is None
    assert escalated == 1


def test_a_failed_span_record_with_a_lone_surrogate_is_spooled_whole(tmp_path: Path) -> None:
    """The values path writes a lone surrogate as its JSON escape: the spool line is valid UTF-8, and the
    stored record holds the undecodable byte, not an escape that reads like typed text."""
    from otel_errcompact.sinks import SQLiteSink, TrajectoryStore, TrajectoryWriter
    from otel_errcompact.trajectory import storage_line

    folder = tmp_path / "in"
    folder.mkdir()
    with open(os.path.join(os.fsencode(folder), b"caf\xe9.txt"), "w"):
        pass
    (name,) = os.listdir(folder)  # a non-UTF-8 name, as Python keeps it: a lone surrogate
    raw = f"ValueError: cannot parse {name}"
    values = TrajectoryRecord(source="span", raw_error=raw, scope="s", tool_name=f"read {name}").model_dump()
    line = storage_line(values)
    assert line is not None
    line.decode("utf-8")
    writer = TrajectoryWriter([SQLiteSink(tmp_path / "t.db")], spool_dir=tmp_path / "spool")
    assert writer.submit_values(dict(values)) == line
    assert writer.force_flush(10)
    writer.shutdown()
    with TrajectoryStore(tmp_path / "t.db") as store:
        (stored,) = list(store.records())
        (row,) = store.list()
    assert stored.raw_error == raw and stored.tool_name == f"read {name}"
    assert row.tool_name == "read caf\\xe9.txt"  # the listed column is text SQLite can hold: escaped


def test_span_attributes_are_made_json_able_once_as_the_record_would_make_them() -> None:
    """The processor's copy of a span's attributes is already what ``jsonable`` makes of them, so the
    pipeline takes it as it is; a copy with a key that is not a string is left for it to convert."""
    from otel_errcompact.capture import MAX_ATTRIBUTE_CHARS as _MAX_ATTRIBUTE_CHARS
    from otel_errcompact.capture import jsonable_attributes
    from otel_errcompact.pipeline import JsonableAttributes
    from otel_errcompact.trajectory import jsonable

    class Name(str):
        pass

    attrs: dict[str, Any] = {
        "text": "x" * (_MAX_ATTRIBUTE_CHARS + 5), "short": "ok", "n": 3, "flag": True, "none": None,
        "ratio": 0.5, "nan": math.nan, "inf": -math.inf, "tags": ("a", "b"), "floats": (1.0, math.nan),
        "blob": b"\xff\x00", "path": Path("/tmp/x"), "sub": Name("long" * 20_000), "nested": {"k": (1, 2)},
    }
    copy = jsonable_attributes(attrs, JsonableAttributes)
    assert type(copy) is JsonableAttributes
    expected = jsonable({k: (v[:_MAX_ATTRIBUTE_CHARS] if isinstance(v, str) else v) for k, v in attrs.items()})
    assert copy == expected
    assert json.loads(json.dumps(copy)) == expected  # no NaN, bytes or tuples left
    assert "text" in attrs and len(attrs["text"]) == _MAX_ATTRIBUTE_CHARS + 5  # the span's own dict is untouched
    odd = jsonable_attributes({1: "one"}, JsonableAttributes)  # type: ignore[dict-item]
    assert type(odd) is dict and jsonable(odd) == {"1": "one"}
    # The record takes the copy as a plain dict (what pydantic-core serialises on its fast path).
    from otel_errcompact.pipeline import Failure, _values

    values = _values(Failure(scope="s", raw_error="boom", source="span", attributes=copy), None, None)
    assert type(values["attributes"]) is dict and values["attributes"] == expected


def test_the_fast_failure_constructor_builds_the_dataclass_itself() -> None:
    import dataclasses

    from otel_errcompact.pipeline import Failure, new_failure

    fields: dict[str, Any] = {f.name: None for f in dataclasses.fields(Failure)}
    fields.update(scope="s", raw_error="boom", source="span", attributes={"a": 1}, resource={})
    fast = new_failure(**fields)
    assert type(fast) is Failure and fast == Failure(**fields)
    with pytest.raises(dataclasses.FrozenInstanceError):
        fast.scope = "other"  # type: ignore[misc]
    del fields["model_text"]
    with pytest.raises(TypeError):  # no silent default for a field left out
        new_failure(**fields)


def test_records_of_real_errors_are_written_as_pydantic_core_writes_them() -> None:
    """Storage lines are made by orjson (``_dumps``): for the record of every real error of the agent-error
    corpus (tracebacks, compiler, shell, HTTP bodies, non-ASCII and control characters among them), with a
    digest, a count, an escalation, attributes and times of each kind a record holds, the bytes are
    pydantic-core's, and the line reads back as the record."""
    from pydantic_core import to_json

    from benchmarks.bench_agent_errors import load
    from otel_errcompact.history import ErrorHistory, Thresholds
    from otel_errcompact.trajectory import _dumps, _fallback

    entries, _ = load(None)
    assert len(entries) > 1000
    history = ErrorHistory(Thresholds(consecutive=2))
    for n, entry in enumerate(entries):
        text = entry["text"]
        digest = compact_text(text, exit_code=entry.get("exit_code"), command=entry.get("command"))
        observation = history.observe(entry["family"], digest)
        last = text.strip().splitlines()[-1] if text.strip() else text
        record = TrajectoryRecord(
            source="span", raw_error=text, exception_stacktrace=text, exception_message=last,
            status_description=last, tool_name=entry["format"], conversation_id=entry["family"],
            started_at=datetime(2026, 1, 2, 3, 4, 5, n % 2 * 250_000, tzinfo=UTC),
            attributes={"command": entry.get("command"), "exit_code": entry.get("exit_code"), "ratio": n / 7,
                        "big": 2**63 - n, "tags": [entry["family"], entry["id"]], "ok": n % 2 == 0},
            digest=DigestInfo.from_digest(digest), count=observation.count,
            escalation=observation.escalation.to_dict() if observation.escalation else None,
        )
        values = {**record.__dict__, "digest": record.digest.__dict__ if record.digest else None}
        assert _dumps(values) == to_json(values, inf_nan_mode="strings", fallback=_fallback), entry["id"]
        assert TrajectoryRecord.from_storage_json(record.to_storage_line()) == record, entry["id"]
