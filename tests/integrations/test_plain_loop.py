"""A plain agent loop (no framework) in the OpenAI and Anthropic message shapes, with tools that really
fail: the live wiring (``@ec.tool``, ``ec.check()`` before each step, the block in the system prompt)
and ``ec.compact_messages`` on a raw-traceback history the library never saw.

Compacted histories are validated against the SDKs' own request types (``openai`` and ``anthropic``
``MessageParam`` definitions), and tool-call / tool-result pairing is checked as both APIs require it.
"""

from __future__ import annotations

import copy
import itertools
import re
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from tests.integrations import require

require("openai", "anthropic")

from anthropic.types import MessageParam  # noqa: E402
from openai.types.chat import ChatCompletionMessageParam  # noqa: E402
from opentelemetry.trace import StatusCode  # noqa: E402
from pydantic import TypeAdapter  # noqa: E402

from otel_errcompact import ErrCompact, ErrorBudgetExceeded, compact_messages  # noqa: E402
from tests.conftest import OTel  # noqa: E402
from tests.integrations.failing_tools import SCRIPT, make_read_invoice  # noqa: E402
from tests.integrations.orders import TOOL_FILE, failing_line, make_count_orders  # noqa: E402
from tests.integrations.plain_loop import Format, LoopRun, run_loop  # noqa: E402

AGENT = "orders-agent"
FORMATS: tuple[Format, ...] = ("openai", "anthropic")
BASE = "Answer questions about orders."


def raw_tools(db: Path, folder: Path) -> dict[str, Callable[..., Any]]:
    return {"count_orders": make_count_orders(db), "read_invoice": make_read_invoice(folder)}


def tool_results(messages: list[dict[str, Any]], fmt: Format) -> list[str]:
    """The text of every tool result, in order."""
    if fmt == "openai":
        return [str(m["content"]) for m in messages if m.get("role") == "tool"]
    out = []
    for m in messages:
        if m.get("role") == "user" and isinstance(m["content"], list):
            out.extend(str(b["content"]) for b in m["content"] if b.get("type") == "tool_result")
    return out


def assert_valid(messages: list[dict[str, Any]], fmt: Format) -> None:
    """Valid request messages for the API, with every tool call answered by its result, in order."""
    if fmt == "openai":
        TypeAdapter(list[ChatCompletionMessageParam]).validate_python(messages)
        for i, m in enumerate(messages):
            for call in m.get("tool_calls") or ():
                assert messages[i + 1] == {**messages[i + 1], "role": "tool", "tool_call_id": call["id"]}
    else:
        TypeAdapter(list[MessageParam]).validate_python(messages)
        roles = [m["role"] for m in messages]
        assert all(a != b for a, b in itertools.pairwise(roles))  # Anthropic alternates roles
        for i, m in enumerate(messages):
            uses = [b["id"] for b in m["content"] if isinstance(m["content"], list) and b.get("type") == "tool_use"]
            if uses:
                answered = [b["tool_use_id"] for b in messages[i + 1]["content"] if b.get("type") == "tool_result"]
                assert answered == uses


def where(db: Path) -> str:
    return f"{TOOL_FILE}:{failing_line(make_count_orders(db))} in count_orders: no such table: orders"


def bridged_run(otel: OTel, ec: ErrCompact, tools: dict[str, Callable[..., Any]], fmt: Format, conv: str) -> LoopRun:
    """The documented wiring, inside an ``invoke_agent`` span of the application."""
    wrapped = {name: ec.tool(fn) for name, fn in tools.items()}
    run = LoopRun()
    attrs = {"gen_ai.operation.name": "invoke_agent", "gen_ai.agent.name": AGENT}
    with otel.tracer.start_as_current_span(f"invoke_agent {AGENT}", attributes=attrs), ec.conversation(conv):
        run_loop(
            wrapped,
            fmt,
            before_step=ec.check,
            system=lambda: f"{BASE}\n\n{ec.context()}".rstrip(),
            run=run,
        )
    return run


@pytest.mark.parametrize("fmt", FORMATS)
def test_the_loop_stops_at_the_threshold(make_otel: Callable[..., OTel], db: Path, tmp_path: Path, fmt: Format) -> None:
    otel = make_otel(consecutive=3)
    run = LoopRun()
    with pytest.raises(ErrorBudgetExceeded) as raised:
        wrapped = {name: otel.ec.tool(fn) for name, fn in raw_tools(db, tmp_path).items()}
        attrs = {"gen_ai.operation.name": "invoke_agent", "gen_ai.agent.name": AGENT}
        with otel.tracer.start_as_current_span(f"invoke_agent {AGENT}", attributes=attrs), otel.ec.conversation("c-1"):
            run_loop(wrapped, fmt, before_step=otel.ec.check, system=lambda: BASE + otel.ec.context(), run=run)
    assert raised.value.escalation.scope == "c-1" and raised.value.escalation.count == 3
    assert run.model_calls == 3  # the fourth step was refused before the model was called

    results = tool_results(run.messages, fmt)
    assert results[0].startswith("Error: [OperationalError] at ") and results[0].endswith(where(db))
    assert results[1].endswith(f"{where(db)} (×2)")
    assert results[2].endswith(f"{where(db)} (×3) — error threshold breached: stop retrying this step.")
    assert_valid(run.messages, fmt)

    records = otel.records()
    assert [(r.scope, r.agent_name, r.count) for r in records] == [("c-1", AGENT, i) for i in (1, 2, 3)]
    [agent_span] = otel.spans(f"invoke_agent {AGENT}")
    ours = otel.spans("execute_tool count_orders")
    assert len(ours) == 3
    assert all(s.parent is not None and s.parent.span_id == agent_span.context.span_id for s in ours)
    assert len([e for e in agent_span.events if e.name == "errcompact.escalation"]) == 1
    assert agent_span.status.status_code is StatusCode.ERROR


def test_conversations_are_separate_scopes(make_otel: Callable[..., OTel], db: Path, tmp_path: Path) -> None:
    otel = make_otel(consecutive=3)
    tools = raw_tools(db, tmp_path)
    with pytest.raises(ErrorBudgetExceeded):
        bridged_run(otel, otel.ec, tools, "openai", "conv-a")
    wrapped = {name: otel.ec.tool(fn) for name, fn in tools.items()}
    with otel.ec.conversation("conv-b"):
        run = run_loop(wrapped, "openai", before_step=otel.ec.check, script=("count_orders",))
    assert run.model_calls == 2
    assert otel.ec.context("conv-b").count("(×") == 0 and "(×3)" in otel.ec.context("conv-a")


@pytest.mark.parametrize("fmt", FORMATS)
def test_a_raw_traceback_history_compacts_to_digests_with_exact_counts(db: Path, tmp_path: Path, fmt: Format) -> None:
    run = run_loop(raw_tools(db, tmp_path), fmt)  # no library involved while it ran
    raw = run.messages
    before = copy.deepcopy(raw)
    assert all(r.startswith("Traceback (most recent call last):") for r in tool_results(raw, fmt))

    out = compact_messages(raw, format=fmt)
    assert raw == before  # the input is untouched
    results = tool_results(out, fmt)
    assert len(results) == len(SCRIPT)
    assert results[0] == f"Error: [OperationalError] at {results[0].split(' at ', 1)[1].split(TOOL_FILE)[0]}{where(db)}"
    counts = [int(m.group(1)) if (m := re.search(r" \(×(\d+)\)$", r)) else 1 for r in results]
    assert counts == [1, 2, 3, 4, 5, 6, 1, 2, 3, 4]
    assert all(r.startswith("Error: [FileNotFoundError]") and "in read_invoice" in r for r in results[6:])
    assert_valid(out, fmt)
    # Everything but the error results is as it was.
    assert [m["role"] for m in out] == [m["role"] for m in raw]
    assert [m for m in out if m not in [x for x in out if _is_tool_result(x, fmt)]] == [
        m for m in raw if not _is_tool_result(m, fmt)
    ]

    # Idempotent, and a history that grew since continues its counts.
    assert compact_messages(out, format=fmt) == out
    more = run_loop(raw_tools(db, tmp_path), fmt, script=("count_orders",)).messages
    grown = compact_messages([*out, *more], format=fmt)
    assert tool_results(grown, fmt)[-1].endswith(f"{where(db)} (×7)")


def _is_tool_result(message: dict[str, Any], fmt: Format) -> bool:
    if fmt == "openai":
        return message.get("role") == "tool"
    content = message.get("content")
    return isinstance(content, list) and any(b.get("type") == "tool_result" for b in content)
