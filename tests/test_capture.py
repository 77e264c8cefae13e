"""A failed span's record, captured on the agent's thread and laid out off it (``otel_errcompact.capture``).

Behind the SDK's ``BatchSpanProcessor`` the agent's thread spools a failed tool span's capture; the
record is laid out later, by the digest thread, by the writer, or after a crash by the replay of the
spool. These tests hold the digest thread back (the ``held`` fixture), read what the spool holds before
the writer takes it, and compare it with the record stored. Every failure is a real exception from real
code, through the real SDK.
"""

from __future__ import annotations

import math
from collections.abc import Callable

from otel_errcompact.capture import FailureCapture, is_capture_line, record_of_spool_line
from tests.conftest import OTel, spooled_lines
from tests.test_processor import GENAI_TOOL, agent, failing_tool_span, lookup_user

_DIGESTED = {"digest", "count", "escalation"}


def test_the_spooled_capture_replays_to_the_record_stored(make_otel: Callable[..., OTel], held: None) -> None:
    """What a killed process leaves in the spool is the record the store would have held: the same fields,
    laid out from the capture by the replay (the conversation and agent found on the agent span, a tuple
    attribute, a long message and status description stored as pieces of the traceback, once)."""
    otel = make_otel(batch=True, schedule_delay_s=60)
    key = "customer-" + "7" * 90  # a long message: a piece of the traceback, spooled once
    attributes = {**GENAI_TOOL, "tags": ("read", "users"), "attempt": 2, "ratio": 0.5}
    with agent(otel.tracer, "c-capture"):
        failing_tool_span(otel.tracer, lookup_user, ({"u-1": "ann"}, key), attributes=attributes)
    (line,) = spooled_lines(otel)
    assert is_capture_line(line)
    assert line.count(key.encode()) == 1  # the message and status description are [start, end] into the traceback
    replayed, text = record_of_spool_line(line)
    (stored,) = otel.records()
    assert stored.digest is not None and replayed.digest is None
    assert replayed.model_dump(exclude=_DIGESTED) == stored.model_dump(exclude=_DIGESTED)
    assert replayed.conversation_id == "c-capture" and replayed.agent_name == "support"
    assert replayed.exception_message == repr(key) and key in (replayed.status_description or "")
    assert replayed.attributes["tags"] == ["read", "users"]
    assert text == replayed.to_storage_json()


def test_a_float_attribute_that_is_not_finite_replays_as_null(make_otel: Callable[..., OTel], held: None) -> None:
    """The one value a capture's line does not keep as the record does (see ``FailureCapture.line``)."""
    otel = make_otel(batch=True, schedule_delay_s=60)
    with agent(otel.tracer, "c-nan"):
        failing_tool_span(otel.tracer, attributes={**GENAI_TOOL, "score": math.nan})
    (line,) = spooled_lines(otel)
    replayed, _ = record_of_spool_line(line)
    (stored,) = otel.records()
    assert stored.attributes["score"] == "nan"
    assert replayed.attributes["score"] is None


def _arguments_span(otel: OTel) -> None:
    with agent(otel.tracer, "c-args"):
        failing_tool_span(
            otel.tracer,
            attributes={**GENAI_TOOL, "gen_ai.tool.call.id": "call-7", "gen_ai.tool.call.arguments": '{"pin": "4417"}'},
        )


def test_arguments_not_captured_never_reach_the_spool(make_otel: Callable[..., OTel], held: None) -> None:
    otel = make_otel(batch=True, schedule_delay_s=60, capture_arguments=False)
    _arguments_span(otel)
    (line,) = spooled_lines(otel)
    assert b"4417" not in line and b"call-7" in line
    (stored,) = otel.records()
    assert stored.tool_arguments is None and "gen_ai.tool.call.arguments" not in stored.attributes
    assert stored.tool_call_id == "call-7"


def test_arguments_captured_are_spooled_and_recorded(make_otel: Callable[..., OTel], held: None) -> None:
    otel = make_otel(batch=True, schedule_delay_s=60, capture_arguments=True)
    _arguments_span(otel)
    (line,) = spooled_lines(otel)
    replayed, _ = record_of_spool_line(line)
    (stored,) = otel.records()
    assert stored.tool_arguments == '{"pin": "4417"}' == replayed.tool_arguments
    assert stored.attributes["gen_ai.tool.call.arguments"] == '{"pin": "4417"}'


def test_a_capture_orjson_cannot_write_is_spooled_as_its_record(make_otel: Callable[..., OTel], held: None) -> None:
    """An int attribute past 64 bits (the SDK keeps any int): the capture has no line, and the record is laid
    out on the agent's thread and spooled as it is stored, so the call still returns with it durable."""
    otel = make_otel(batch=True, schedule_delay_s=60)
    big = 2**70 + 1
    with agent(otel.tracer, "c-big"):
        failing_tool_span(otel.tracer, attributes={**GENAI_TOOL, "rows": big})
    (line,) = spooled_lines(otel)
    assert not is_capture_line(line)
    replayed, _ = record_of_spool_line(line)
    (stored,) = otel.records()
    assert replayed.attributes["rows"] == big == stored.attributes["rows"]
    assert replayed.model_dump(exclude=_DIGESTED) == stored.model_dump(exclude=_DIGESTED)


def test_a_torn_or_foreign_capture_line_is_refused() -> None:
    """The replay skips what it cannot read (counted as unreadable): a capture cut by a crash, or a line
    marked as a capture that is not one, raises here rather than making a wrong record."""
    capture = FailureCapture(
        "01a250b1f27729ccb573000000000000", 1_796_651_193_759_104_124, "s", None, None, None, None, None,
        "execute_tool lookup", "KeyError: 'k'", ("KeyError", "'k'", "Traceback ...\nKeyError: 'k'\n"), None,
        1_796_651_193_759_104_124, {"gen_ai.tool.name": "lookup"}, False, {},
    )
    line = capture.line()
    assert line is not None and is_capture_line(line)
    record, _ = record_of_spool_line(line)
    assert record.raw_error == "Traceback ...\nKeyError: 'k'\n" and record.tool_name == "lookup"
    for bad in (line[: len(line) // 2], b'{"@capture":2}\n', b'{"@capture":1,"record_id":"x"}\n'):
        try:
            record_of_spool_line(bad)
        except Exception:
            continue
        raise AssertionError(f"read a record from {bad!r}")
