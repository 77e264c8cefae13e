"""The boundary never raises into the host, and the processor's memory and metric series stay bounded.

Hostile objects reach ``@ec.tool`` from agent frameworks and from the model's own arguments: exceptions
whose ``__str__`` raises, arguments whose ``__repr__`` raises, values JSON cannot encode, recursive and
absurdly deep structures, results whose attributes explode. The contract is "the tool's result or a
compact error, never anything else". Agent and root spans that are started and never ended must not pin
memory forever, and tool names chosen at run time must not multiply metric series without bound.
"""

from __future__ import annotations

import asyncio
import json
import os
import socket
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from google.protobuf.json_format import MessageToDict
from opentelemetry.exporter.otlp.proto.common.trace_encoder import encode_spans
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import Status, StatusCode

from otel_errcompact import ToolErrorText
from otel_errcompact.history import ErrorHistory, Thresholds
from otel_errcompact.pipeline import ErrorPipeline
from otel_errcompact.processor import ANCHOR_SWEEP_EVERY, MAX_ANCHOR_TRACES, ErrorCompactionProcessor
from otel_errcompact.telemetry import MAX_TOOL_NAMES, OVERFLOW
from tests.conftest import OTel


class ExplodingStr(Exception):
    def __str__(self) -> str:
        raise IndexError("str() of this exception fails")


class ExplodingText(str):
    """A ``str`` subclass whose own ``__str__`` fails (what formatting it again calls)."""

    def __str__(self) -> str:
        raise LookupError("str() of this text fails")


class SubclassMessage(Exception):
    """An exception whose ``__str__`` returns a ``str`` subclass rather than a plain ``str``."""

    def __str__(self) -> str:
        return ExplodingText("quota exhausted for tenant acme")


class ExplodingRepr:
    def __repr__(self) -> str:
        raise RuntimeError("repr() of this argument fails")

    def __str__(self) -> str:
        raise RuntimeError("str() of this argument fails")


class ExplodingResult:
    """A tool result whose every attribute look-up fails (a broken proxy object)."""

    def __getattr__(self, name: str) -> Any:
        raise ValueError(f"no {name} here")


def _deep(levels: int) -> list[Any]:
    root: list[Any] = []
    node = root
    for _ in range(levels):
        child: list[Any] = []
        node.append(child)
        node = child
    return root


def _span(otel: OTel, name: str) -> Any:
    spans = otel.spans(name)
    assert spans, f"no span {name}"
    return spans[-1]


def test_exception_whose_str_raises_becomes_a_compact_error(otel: OTel) -> None:
    @otel.ec.tool
    def fragile() -> str:
        raise ExplodingStr()

    returned = fragile()
    assert isinstance(returned, ToolErrorText)
    assert "ExplodingStr" in returned
    span = _span(otel, "execute_tool fragile")
    assert span.status.description and "ExplodingStr" in span.status.description
    (event,) = [e for e in span.events if e.name == "exception"]
    assert "str() failed" in str(event.attributes["exception.message"])  # type: ignore[index]
    assert "in fragile" in str(event.attributes["exception.stacktrace"])  # type: ignore[index]
    assert "ExplodingStr" in otel.records()[0].raw_error


def test_exception_whose_str_returns_a_str_subclass_becomes_a_compact_error(otel: OTel) -> None:
    @otel.ec.tool
    def metered() -> str:
        raise SubclassMessage()

    returned = metered()
    assert isinstance(returned, ToolErrorText)
    assert "[SubclassMessage] at test_hostile.py" in returned
    span = _span(otel, "execute_tool metered")
    assert span.status.description == "SubclassMessage: quota exhausted for tenant acme"
    (record,) = otel.records()
    assert record.exception_message == "quota exhausted for tenant acme"


def test_a_key_crossing_the_status_descriptions_cut_leaves_nothing_on_the_span(otel: OTel) -> None:
    """A long error quoting an API key where the status description (1,024 characters, head and tail) is
    cut: no part of the key is exported, while the trajectory record keeps the whole text."""
    key = "sk-proj-" + "Zq7x9K2mP4w" * 5
    settings = {"region": "eu-west-1"}

    @otel.ec.tool
    def read_setting(name: str) -> str:
        return settings[name]

    # The description keeps the last 768 characters of "KeyError: '<name>'": they begin 20 characters into the key.
    after = "s" * (768 - (len(key) - 20) - 2)
    with otel.ec.conversation("c-long"):
        assert isinstance(read_setting(f"{'n' * 2000} {key} {after}"), ToolErrorText)
    description = _span(otel, "execute_tool read_setting").status.description
    assert description.startswith("KeyError: 'nnn") and description.endswith("'")
    assert not any(key[i:i + 6] in description for i in range(8, len(key) - 5))
    (record,) = otel.records()
    assert key in record.raw_error


def _folder_with_a_name_not_utf8(folder: Path) -> Path:
    """A real folder holding a file whose name is not UTF-8 (``caf\\xe9.txt``): ``os.listdir`` gives the
    undecodable byte as a lone surrogate."""
    folder.mkdir()
    with open(os.fsencode(folder) + b"/caf\xe9.txt", "wb"):
        pass
    return folder


def test_a_file_name_that_is_not_utf8_reaches_the_prompt_as_escapes(otel: OTel, tmp_path: Path) -> None:
    @otel.ec.tool
    def import_notes(folder: str) -> int:
        for name in os.listdir(folder):
            if not name.endswith(".md"):
                raise ValueError(f"unsupported note file {name}")
        return 0

    with otel.ec.conversation("c-files"):
        returned = import_notes(str(_folder_with_a_name_not_utf8(tmp_path / "inbox")))
        block = otel.ec.context("c-files")
    assert isinstance(returned, ToolErrorText)
    digest = str(_span(otel, "execute_tool import_notes").attributes["errcompact.digest"])  # type: ignore[index]
    for text in (returned, block, digest):
        text.encode("utf-8")  # what a model client and a span exporter do with it
        assert "unsupported note file caf\\xe9.txt" in text
    (record,) = otel.records()
    # The audit copy keeps the undecodable byte itself (a lone surrogate), not the prompt's escape of it.
    assert "unsupported note file caf\udce9.txt" in record.raw_error
    assert record.raw_error.encode("utf-8", "surrogateescape").endswith(b"unsupported note file caf\xe9.txt\n")


def test_a_tool_span_naming_a_file_that_is_not_utf8_is_exported(
    make_otel: Callable[..., OTel], tmp_path: Path
) -> None:
    otel = make_otel(capture_arguments=True)
    folder = _folder_with_a_name_not_utf8(tmp_path / "inbox")

    @otel.ec.tool
    def import_notes(names: list[str]) -> int:
        for name in names:
            if not name.endswith(".md"):
                raise ValueError(f"unsupported note file {name}")
        return 0

    with otel.tracer.start_as_current_span("invoke_agent notes"):
        assert isinstance(import_notes(os.listdir(folder)), ToolErrorText)
    request = encode_spans(otel.spans())  # what the OTLP exporters send: one request for the batch
    resource_spans = MessageToDict(request)["resourceSpans"]
    spans = {s["name"]: s for rs in resource_spans for scope in rs["scopeSpans"] for s in scope["spans"]}
    assert set(spans) == {"invoke_agent notes", "execute_tool import_notes"}
    tool = spans["execute_tool import_notes"]
    assert tool["status"]["message"] == "ValueError: unsupported note file caf\\xe9.txt"
    (event,) = [e for e in tool["events"] if e["name"] == "exception"]
    texts = {a["key"]: a["value"]["stringValue"] for a in event["attributes"]}
    assert texts["exception.message"] == "unsupported note file caf\\xe9.txt"
    assert texts["exception.stacktrace"].endswith("ValueError: unsupported note file caf\\xe9.txt\n")
    arguments = [a for a in tool["attributes"] if a["key"] == "gen_ai.tool.call.arguments"]
    assert [a["value"]["stringValue"] for a in arguments] == ['{"names": ["caf\\xe9.txt"]}']
    (record,) = otel.records()
    assert record.exception_message == "unsupported note file caf\udce9.txt"  # the audit copy: the byte


@pytest.mark.parametrize("capture", [True, False])
def test_argument_whose_repr_raises_does_not_stop_the_tool(
    capture: bool, make_otel: Callable[..., OTel]
) -> None:
    otel = make_otel(capture_arguments=capture)

    @otel.ec.tool
    def echo(value: Any, n: int) -> int:
        return n * 2

    assert echo(ExplodingRepr(), 21) == 42
    attributes = dict(_span(otel, "execute_tool echo").attributes or {})
    if capture:
        assert "repr() failed" in str(attributes["gen_ai.tool.call.arguments"])
    else:
        assert "gen_ai.tool.call.arguments" not in attributes


def test_unencodable_recursive_and_deep_arguments(make_otel: Callable[..., OTel]) -> None:
    otel = make_otel(capture_arguments=True)
    looped: list[Any] = []
    looped.append(looped)
    cyclic: dict[str, Any] = {"name": "cfg"}
    cyclic["self"] = cyclic
    sock = socket.socket()
    try:
        values: list[Any] = [
            object(), {1, 2, 3}, b"\xff\xfe", sock, threading.Lock(), looped, cyclic, _deep(100_000),
            {("tuple", "key"): 1}, float("nan"), ExplodingRepr(), [ExplodingRepr()],
        ]

        @otel.ec.tool
        def inspect_value(value: Any) -> str:
            return "seen"

        @otel.ec.tool
        def fail_with(value: Any) -> str:
            raise ValueError("rejected")

        for value in values:
            assert inspect_value(value) == "seen"
            assert isinstance(fail_with(value), ToolErrorText)
    finally:
        sock.close()
    for span in otel.spans("execute_tool inspect_value"):
        arguments = str((span.attributes or {})["gen_ai.tool.call.arguments"])
        assert 0 < len(arguments) <= 65_536
    records = otel.records()
    assert len(records) == len(values)
    assert "{'name': 'cfg', 'self': {...}}" in str(records[6].tool_arguments)  # the repr marks the loop
    json.dumps([r.to_dict() for r in records])  # every record stays storable


def test_result_whose_attributes_explode_is_returned_as_is(otel: OTel) -> None:
    result = ExplodingResult()

    @otel.ec.tool
    def proxy() -> ExplodingResult:
        return result

    assert proxy() is result


def test_async_tool_with_hostile_values(make_otel: Callable[..., OTel]) -> None:
    otel = make_otel(capture_arguments=True)

    @otel.ec.tool
    async def fetch(value: Any) -> str:
        await asyncio.sleep(0)
        raise ExplodingStr()

    returned = asyncio.run(fetch(ExplodingRepr()))
    assert isinstance(returned, ToolErrorText) and "ExplodingStr" in returned


# --- the anchor map --------------------------------------------------------------------------------------


def test_abandoned_root_spans_are_bounded_and_a_live_agent_still_gets_its_escalation(otel: OTel) -> None:
    processor = otel.ec.processor
    assert processor is not None
    abandoned = 3 * MAX_ANCHOR_TRACES
    for i in range(abandoned):
        otel.tracer.start_span(f"invoke_agent run-{i}", attributes={"gen_ai.operation.name": "invoke_agent"})
    assert len(processor._anchors) <= MAX_ANCHOR_TRACES
    assert len(processor._anchor_spans) <= MAX_ANCHOR_TRACES
    assert processor.evicted_anchors >= abandoned - MAX_ANCHOR_TRACES

    @otel.ec.tool
    def lookup(key: str) -> int:
        return {"a": 1}[key]

    with otel.tracer.start_as_current_span(
        "invoke_agent live", attributes={"gen_ai.operation.name": "invoke_agent"}
    ):
        for _ in range(3):
            lookup("missing")
    live = _span(otel, "invoke_agent live")
    assert [e.name for e in live.events] == ["errcompact.escalation"]


def test_anchors_idle_too_long_are_forgotten(monkeypatch: pytest.MonkeyPatch) -> None:
    # The processor's clock, advanced by hand: idleness, not the machine's speed, decides.
    from otel_errcompact import processor as processor_module

    now = [1000.0]
    monkeypatch.setattr(processor_module, "_monotonic", lambda: now[0])
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    processor = ErrorCompactionProcessor(
        ErrorPipeline(ErrorHistory(Thresholds(consecutive=2))), max_anchor_traces=10_000, anchor_idle_s=0.05
    )
    provider.add_span_processor(processor)
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    tracer = provider.get_tracer("tests")
    try:
        for i in range(500):
            tracer.start_span(f"root-{i}")
        processor.anchor_conversation(0)  # a look-up registers the anchors started so far, at this time
        assert len(processor._anchors) == 500
        now[0] += 0.1
        # Idleness is swept in batches (starting a root span takes no lock): within one batch of
        # registrations the idle traces are gone, the fresh ones stay.
        late = []
        while processor.evicted_anchors < 500 and len(late) < ANCHOR_SWEEP_EVERY:
            late.append(tracer.start_span(f"root-late-{len(late)}"))
        assert processor.evicted_anchors == 500
        assert len(processor._anchors) == len(late)
    finally:
        provider.shutdown()


def test_a_failure_looking_up_anchors_sweeps_idle_ones(monkeypatch: pytest.MonkeyPatch) -> None:
    from otel_errcompact import processor as processor_module

    now = [1000.0]
    monkeypatch.setattr(processor_module, "_monotonic", lambda: now[0])
    provider = TracerProvider()
    processor = ErrorCompactionProcessor(
        ErrorPipeline(ErrorHistory(Thresholds(consecutive=2))), max_anchor_traces=10_000, anchor_idle_s=0.05
    )
    provider.add_span_processor(processor)
    tracer = provider.get_tracer("tests")
    try:
        for i in range(10):
            tracer.start_span(f"root-{i}")
        processor.anchor_conversation(0)  # registered by a look-up at this time, then idle
        now[0] += 0.1
        with tracer.start_as_current_span("invoke_agent live", attributes={"gen_ai.operation.name": "invoke_agent"}):
            with tracer.start_as_current_span(
                "execute_tool lookup", attributes={"gen_ai.operation.name": "execute_tool"}
            ) as tool:
                try:
                    {"a": 1}["missing"]
                except KeyError as exc:
                    tool.record_exception(exc)
                    tool.set_status(Status(StatusCode.ERROR, "KeyError"))
            assert processor.evicted_anchors == 10
            assert len(processor._anchors) == 1
    finally:
        provider.shutdown()


def test_ended_spans_leave_nothing_behind(otel: OTel) -> None:
    processor = otel.ec.processor
    assert processor is not None
    for i in range(1000):
        with otel.tracer.start_as_current_span(f"root-{i}"):
            pass
    assert not processor._anchors and not processor._anchor_touched and not processor._anchor_spans
    assert processor.evicted_anchors == 0


# --- metric cardinality ---------------------------------------------------------------------------------


def test_five_thousand_tool_names_give_bounded_series(otel: OTel, caplog: pytest.LogCaptureFixture) -> None:
    try:
        {"a": 1}["missing"]
    except KeyError as exc:
        import traceback

        raw = "".join(traceback.format_exception(exc))
    names = 5000
    for i in range(names):
        otel.ec.record_error(raw, scope=f"s{i % 50}", tool_name=f"generated_tool_{i}")
    assert otel.ec.flush(60)
    points = otel.metric_points("errcompact.errors")
    tools = {p.attributes["gen_ai.tool.name"] for p in points}
    assert OVERFLOW in tools
    assert len(tools) == MAX_TOOL_NAMES + 1
    assert sum(p.value for p in points) == names
    overflow = sum(p.value for p in points if p.attributes["gen_ai.tool.name"] == OVERFLOW)
    assert overflow == names - MAX_TOOL_NAMES
    assert "more than 128 distinct tool names" in caplog.text  # the bound says when it bites
