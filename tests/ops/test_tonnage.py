"""Error tonnage on transcripts, OTLP traces and stores produced by real runs.

A real LangGraph ReAct graph (scripted model, a tool that really fails on a missing table) runs twice: once
with a naive error handler that puts the raw traceback into the tool message, once with LangGraph's own
default handler. Its final message lists become OpenAI- and Anthropic-style transcripts; its spans (real SDK,
OpenInference instrumentation) become an OTLP JSON trace file as the collector's file exporter writes it.
"""

from __future__ import annotations

import json
import os
import sqlite3
import subprocess
import sys
import traceback
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("langgraph.prebuilt")
pytest.importorskip("openinference.instrumentation.langchain")

from google.protobuf.json_format import MessageToDict
from langchain_core.language_models.fake_chat_models import FakeMessagesListChatModel
from langchain_core.messages import AIMessage, BaseMessage, HumanMessage, convert_to_openai_messages
from langchain_core.tools import tool
from langgraph.graph import START, MessagesState, StateGraph
from langgraph.prebuilt import ToolNode, tools_condition
from openinference.instrumentation.langchain import LangChainInstrumentor
from opentelemetry.exporter.otlp.proto.common.trace_encoder import encode_spans
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from otel_errcompact.ops import tonnage
from tests.integrations.orders import make_count_orders

CALLS = 5


@pytest.fixture
def db(tmp_path: Path) -> Path:
    """A real, empty SQLite database: the ``orders`` table the tool queries is missing."""
    path = tmp_path / "shop.sqlite3"
    sqlite3.connect(path).close()
    return path


def _run(
    db: Path, handler: bool | Callable[[Exception], str], provider: TracerProvider | None = None
) -> list[BaseMessage]:
    lc_tool = tool(make_count_orders(db))
    model = FakeMessagesListChatModel(responses=[
        *[AIMessage(content="", tool_calls=[{"name": "count_orders", "args": {"customer": "acme"},
                                            "id": f"call_{i}", "type": "tool_call"}]) for i in range(CALLS)],
        AIMessage(content="I could not count the orders."),
    ])

    def call_model(state: MessagesState) -> dict[str, list[BaseMessage]]:
        return {"messages": [model.invoke(state["messages"])]}

    graph = StateGraph(MessagesState)
    graph.add_node("model", call_model)
    graph.add_node("tools", ToolNode([lc_tool], handle_tool_errors=handler))
    graph.add_edge(START, "model")
    graph.add_conditional_edges("model", tools_condition)
    graph.add_edge("tools", "model")
    instrumentor = LangChainInstrumentor()
    if provider is not None:
        instrumentor.instrument(tracer_provider=provider)
    try:
        result = graph.compile().invoke(
            {"messages": [HumanMessage("How many orders does acme have?")]},
            config={"configurable": {"thread_id": "t-1"}},
        )
    finally:
        if provider is not None:
            instrumentor.uninstrument()
    return list(result["messages"])


def _raw_traceback(error: Exception) -> str:
    return "".join(traceback.format_exception(error))


def _anthropic(openai_messages: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The same conversation in Anthropic's shape: tool_use blocks and tool_result blocks with is_error."""
    out: list[dict[str, Any]] = []
    for m in openai_messages:
        if m["role"] == "assistant":
            blocks: list[dict[str, Any]] = [{"type": "text", "text": m["content"]}] if m.get("content") else []
            blocks += [{"type": "tool_use", "id": c["id"], "name": c["function"]["name"],
                        "input": json.loads(c["function"]["arguments"])} for c in m.get("tool_calls", [])]
            out.append({"role": "assistant", "content": blocks})
        elif m["role"] == "tool":
            out.append({"role": "user", "content": [{"type": "tool_result", "tool_use_id": m["tool_call_id"],
                                                     "content": m["content"], "is_error": True}]})
        else:
            out.append({"role": m["role"], "content": m["content"]})
    return out


def test_raw_traceback_transcripts_call_compaction_mandatory(db: Path, tmp_path: Path) -> None:
    messages = convert_to_openai_messages(_run(db, _raw_traceback))
    openai_file = tmp_path / "openai.json"
    openai_file.write_text(json.dumps(messages))
    anthropic_file = tmp_path / "anthropic.jsonl"
    anthropic_file.write_text("\n".join(json.dumps(m) for m in _anthropic(messages)))

    for path in (openai_file, anthropic_file):
        result = tonnage.report([tonnage.load(path)])
        assert len(result.sources[0].errors) == CALLS
        assert result.fraction is not None and result.fraction > 0.25, result.render()
        assert result.verdict.startswith("mandatory")
        assert [row.count for row in result.recurring] == [CALLS]
        assert "no such table: orders" in result.recurring[0].line
        assert 0 < result.compacted_tokens < result.error_tokens / 3


def test_the_framework_default_handler_leaves_less_to_save(db: Path, tmp_path: Path) -> None:
    raw_file = _write(tmp_path / "raw.json", convert_to_openai_messages(_run(db, _raw_traceback)))
    default_file = _write(tmp_path / "default.json", convert_to_openai_messages(_run(db, True)))
    raw = tonnage.report([tonnage.load(raw_file)])
    default = tonnage.report([tonnage.load(default_file)])
    assert len(default.sources[0].errors) == CALLS
    assert default.fraction is not None and raw.fraction is not None
    assert default.fraction < raw.fraction
    assert default.saved_tokens < raw.saved_tokens


def _write(path: Path, data: Any) -> Path:
    path.write_text(json.dumps(data))
    return path


def test_otlp_trace_file_counts_failed_tool_spans(db: Path, tmp_path: Path) -> None:
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    _run(db, True, provider)
    spans = exporter.get_finished_spans()
    request = MessageToDict(encode_spans(spans))
    trace_file = tmp_path / "traces.jsonl"
    trace_file.write_text(json.dumps(request) + "\n")
    result = tonnage.report([tonnage.load(trace_file)])
    assert result.sources[0].kind == "otlp-traces"
    assert len(result.sources[0].errors) == CALLS
    assert result.recurring and result.recurring[0].count == CALLS
    # The scripted model reports no token usage: the share of context is honestly unknown.
    assert result.fraction is None and result.verdict.startswith("unknown")


def test_cli_reads_a_store_and_a_transcript_and_writes_the_plot(db: Path, tmp_path: Path) -> None:
    transcript = _write(tmp_path / "t.json", convert_to_openai_messages(_run(db, _raw_traceback)))
    store = tmp_path / "store.sqlite3"
    env = {k: v for k, v in os.environ.items() if not k.startswith("OTEL_EXPORTER_OTLP")}
    cli = [sys.executable, "-m", "otel_errcompact.cli"]
    demo = subprocess.run([*cli, "demo", "--db", str(store)], capture_output=True, text=True, env=env, timeout=300)
    assert demo.returncode == 0, demo.stderr
    png = tmp_path / "tonnage.png"
    done = subprocess.run([*cli, "tonnage", str(transcript), str(store), "--plot", str(png)],
                          capture_output=True, text=True, env=env, timeout=300)
    assert done.returncode == 0, done.stderr
    assert "verdict:" in done.stdout and "store" in done.stdout and "transcript" in done.stdout
    # The store knows no context size, so the combined share is unknown; --json says so too.
    assert "unknown" in done.stdout
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and png.stat().st_size > 5_000
    as_json = subprocess.run([*cli, "tonnage", str(transcript), "--json", "--no-plot"],
                             capture_output=True, text=True, env=env, timeout=300)
    data = json.loads(as_json.stdout)
    assert data["verdict"].startswith("mandatory") and data["classes"][0]["count"] == CALLS


def test_unreadable_input_is_a_clear_error(tmp_path: Path) -> None:
    junk = tmp_path / "junk.bin"
    junk.write_bytes(b"\x00\x01not json at all")
    done = subprocess.run([sys.executable, "-m", "otel_errcompact.cli", "tonnage", str(junk)],
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 2
    assert "not a trajectory store, OTLP JSON traces or a JSON/JSONL transcript" in done.stderr
    assert "Traceback" not in done.stderr


def _other_database(path: Path) -> None:
    """A SQLite database of another application: no trajectory table."""
    with sqlite3.connect(path) as conn:
        conn.execute("CREATE TABLE orders (id INTEGER PRIMARY KEY, total REAL)")
    conn.close()


def _newer_layout(path: Path) -> None:
    """A trajectory store whose table layout a later release wrote."""
    from otel_errcompact.sinks import SQLiteSink

    SQLiteSink(path).close()
    with sqlite3.connect(path) as conn:
        conn.execute("UPDATE errcompact_schema SET version = version + 1 WHERE component = 'trajectory'")
    conn.close()


@pytest.mark.parametrize("make", [_other_database, _newer_layout], ids=["other-database", "newer-layout"])
def test_a_store_this_release_cannot_read_is_a_clear_error(tmp_path: Path, make: Callable[[Path], None]) -> None:
    path = tmp_path / "store.sqlite3"
    make(path)
    done = subprocess.run([sys.executable, "-m", "otel_errcompact.cli", "tonnage", str(path), "--no-plot"],
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 2, done.stderr
    assert done.stderr.startswith(f"otel-errcompact: {path}: not a readable trajectory store ("), done.stderr
    assert "Traceback" not in done.stderr and len(done.stderr.splitlines()) == 1, done.stderr
