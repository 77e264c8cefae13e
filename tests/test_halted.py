"""A trace whose run was halted by a breach never ends with a green (OK) root, even when the code that
owns the root sets OK unconditionally, as OpenInference's openai-agents processor does; a breach that
only asks for review changes no status."""

from __future__ import annotations

import json
from collections.abc import Callable

import pytest
from opentelemetry.trace import Status, StatusCode

from otel_errcompact import Thresholds
from tests.conftest import OTel


def parse_config(text: str) -> object:
    return json.loads(text)


@pytest.mark.parametrize(("action", "expected"), [("halt", StatusCode.ERROR), ("human", StatusCode.OK)])
def test_root_status_after_a_breach(make_otel: Callable[..., OTel], action: str, expected: StatusCode) -> None:
    kwargs = {"human_review": lambda _escalation: None} if action == "human" else {}
    otel = make_otel(thresholds=Thresholds(consecutive=3, action=action), **kwargs)  # type: ignore[arg-type]
    tool = otel.ec.tool(parse_config)
    with otel.tracer.start_as_current_span("Agent workflow") as root:
        for _ in range(3):
            assert str(tool("{not json")).startswith("Error: [JSONDecodeError]")
        root.set_status(Status(StatusCode.OK))  # what the instrumentation does when its trace ends
    [ended] = otel.spans("Agent workflow")
    assert ended.status.status_code is expected
    if action == "halt":
        assert "error threshold breached" in (ended.status.description or "")
    assert len([e for e in ended.events if e.name == "errcompact.escalation"]) == 1


def test_a_clean_trace_keeps_its_status(make_otel: Callable[..., OTel]) -> None:
    otel = make_otel(consecutive=3)
    tool = otel.ec.tool(parse_config)
    with otel.tracer.start_as_current_span("Agent workflow") as root:
        assert tool('{"a": 1}') == {"a": 1}
        root.set_status(Status(StatusCode.OK))
    [ended] = otel.spans("Agent workflow")
    assert ended.status.status_code is StatusCode.OK
