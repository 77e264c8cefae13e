"""Spans as real instrumentations record them when a real agent framework runs: names, attributes, status.

    python benchmarks/span_shapes.py [--json]

``bench_processor`` times spans of these shapes beside its hand-typed ones, whose two or three attributes are
much thinner than what an instrumentation records. Each framework here runs once, offline, traced by its
OpenInference instrumentation into an SDK ``TracerProvider``; the instrumentor is uninstrumented afterwards.

- *openai-agents*: an ``agents.Agent`` run by ``Runner`` on the SDK's own ``OpenAIResponsesModel``, whose
  real ``AsyncOpenAI`` client talks to a ``MockTransport`` (of ``httpx2``, or ``httpx``: the library that
  client is built on) which answers as the Responses API does (a ``function_call``, then a message; the
  request's instructions and tools echoed, token usage reported), traced by ``OpenAIAgentsInstrumentor``;
- *langgraph*: LangGraph's ``create_react_agent`` on a scripted chat model (langchain-core's
  ``FakeMessagesListChatModel``) that binds its tools and reports its model name and token usage as
  provider chat models do, with a checkpointer and a ``thread_id``, traced by ``LangChainInstrumentor``.

In both, the model asks for one tool, ``lookup_order``, which reads a row from a real in-memory SQLite
database and succeeds, and then answers in prose.

Of each run three spans are kept: the root span (``kind="agent"``; for the Agents SDK that is the trace's
``Agent workflow`` span, which carries only its span kind, and not the agent's own span below it), the last
LLM span (``"llm"``: it carries the conversation so far, tool call and result included, as most of an
agent's model calls do) and the tool span (``"tool"``). A span processor records, for every span, the
attributes it had when it started (what the instrumentation passed to ``start_span``) and every attribute
set on it afterwards, in call order: ``end_attributes`` holds those, each at the place of its last setting,
so a key set at start and set again before the end (OpenInference sets its span kind again in ``end()``) is
in both. Starting a span with ``start_attributes`` and then calling ``set_attributes(end_attributes)`` gives
the recorded span's attributes, in the recorded order, which is checked as each shape is made. Values are
kept as recorded.
"""

from __future__ import annotations

import argparse
import asyncio
import hashlib
import json
import sqlite3
import sys
import time
import warnings
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from functools import cache
from pathlib import Path
from typing import Any

from opentelemetry.context import Context
from opentelemetry.sdk.trace import ReadableSpan, Span, SpanProcessor, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import StatusCode
from opentelemetry.util.types import AttributeValue

ROOT = Path(__file__).resolve().parent.parent

FRAMEWORKS = {
    "openai-agents": "Agents SDK via OpenInference",
    "langgraph": "LangGraph via OpenInference",
}
"""The frameworks :func:`shapes` runs, and how a table names each."""
KINDS = ("agent", "llm", "tool")
"""The spans kept of each run, in this order."""

_OI_KIND = "openinference.span.kind"
_AGENT = "orders-agent"
_INSTRUCTIONS = "Answer questions about orders."
_QUESTION = "What is in order 1?"
_ANSWER = "Order 1 belongs to acme; its total is 12.50."
_THREAD = "thread-orders-1"
_MODEL = "gpt-4o-mini"
_MODEL_SNAPSHOT = "gpt-4o-mini-2024-07-18"


@dataclass(frozen=True)
class SpanShape:
    """One span as an instrumentation recorded it."""

    kind: str
    """``"agent"`` (the root span of the run), ``"llm"`` or ``"tool"``."""
    name: str
    start_attributes: Mapping[str, AttributeValue]
    """The attributes the span had when it started, in their order."""
    end_attributes: Mapping[str, AttributeValue]
    """The attributes set on it after it started, in the order of their last setting."""
    root: bool
    """The recorded span had no parent."""
    status: StatusCode
    """The status code it ended with (the instrumentations set ``OK`` on spans that succeeded)."""

    def attribute_count(self) -> int:
        """Distinct attributes of the ended span."""
        return len({**self.start_attributes, **self.end_attributes})

    def to_json(self) -> dict[str, Any]:
        return {
            "kind": self.kind,
            "name": self.name,
            "start_attributes": [[k, _plain(v)] for k, v in self.start_attributes.items()],
            "end_attributes": [[k, _plain(v)] for k, v in self.end_attributes.items()],
            "root": self.root,
            "status": self.status.name,
        }

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> SpanShape:
        """The inverse of :meth:`to_json`; sequences come back as the tuples the SDK stores."""
        return cls(
            kind=str(data["kind"]),
            name=str(data["name"]),
            start_attributes={str(k): _attribute(v) for k, v in data["start_attributes"]},
            end_attributes={str(k): _attribute(v) for k, v in data["end_attributes"]},
            root=bool(data["root"]),
            status=StatusCode[str(data["status"])],
        )


def _plain(value: AttributeValue) -> Any:
    return list(value) if isinstance(value, tuple) else value


def _attribute(value: Any) -> AttributeValue:
    return tuple(value) if isinstance(value, list) else value


class _Recorder(SpanProcessor):
    """Keeps every span's attributes as of its start, and each attribute set on it until it ends, in call
    order: the live span's setters are wrapped as it starts (the SDK's ``Span`` takes instance attributes)."""

    def __init__(self) -> None:
        self.started: dict[int, dict[str, AttributeValue]] = {}
        self.set_later: dict[int, list[tuple[str, AttributeValue]]] = {}

    def on_start(self, span: Span, parent_context: Context | None = None) -> None:
        span_id = span.context.span_id
        self.started[span_id] = dict(span.attributes or {})
        calls = self.set_later[span_id] = []
        set_attribute, set_attributes = span.set_attribute, span.set_attributes

        def stored(keys: Iterator[str]) -> None:
            held = span.attributes or {}
            calls.extend((key, held[key]) for key in keys if key in held)

        def one(key: str, value: Any) -> None:
            live = span.is_recording()
            set_attribute(key, value)
            if live:
                stored(iter((key,)))

        def many(attributes: Mapping[str, Any]) -> None:
            live = span.is_recording()
            set_attributes(attributes)
            if live:
                stored(iter(attributes))

        span.set_attribute = one  # type: ignore[method-assign]
        span.set_attributes = many  # type: ignore[method-assign]

    def on_end(self, span: ReadableSpan) -> None:
        return None


def _shape(kind: str, span: ReadableSpan, recorder: _Recorder) -> SpanShape:
    context = span.get_span_context()
    if context is None:
        raise RuntimeError(f"span {span.name!r} has no span context")
    span_id = context.span_id
    start = recorder.started[span_id]
    end: dict[str, AttributeValue] = {}
    for key, value in recorder.set_later[span_id]:
        end.pop(key, None)
        end[key] = value
    replayed = dict(start)
    for key, value in end.items():
        replayed.pop(key, None)
        replayed[key] = value
    recorded = list((span.attributes or {}).items())
    if list(replayed.items()) != recorded:
        raise RuntimeError(f"span {span.name!r}: start and end attributes do not give the recorded ones")
    return SpanShape(kind, span.name, start, end, span.parent is None, span.status.status_code)


def _pick(spans: Sequence[ReadableSpan], recorder: _Recorder) -> list[SpanShape]:
    """The root span, the last LLM span and the tool span that succeeded, of one run."""
    roots = [s for s in spans if s.parent is None]
    llms = [s for s in spans if (s.attributes or {}).get(_OI_KIND) == "LLM"]
    tools = [
        s for s in spans
        if (s.attributes or {}).get(_OI_KIND) == "TOOL" and s.status.status_code is not StatusCode.ERROR
    ]
    if len(roots) != 1 or not llms or len(tools) != 1:
        found = f"{len(roots)} root, {len(llms)} LLM, {len(tools)} tool spans"
        raise RuntimeError(f"expected one root, LLM spans and one tool span that succeeded; found {found}")
    last_llm = max(llms, key=lambda s: s.start_time or 0)
    return [_shape("agent", roots[0], recorder), _shape("llm", last_llm, recorder), _shape("tool", tools[0], recorder)]


@contextmanager
def _traced(instrumentor: Any) -> Iterator[tuple[InMemorySpanExporter, _Recorder]]:
    """A provider that keeps finished spans and records how attributes were set, with ``instrumentor``
    exporting into it until the block ends."""
    provider = TracerProvider()
    recorder = _Recorder()
    exporter = InMemorySpanExporter()
    provider.add_span_processor(recorder)
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    instrumentor.instrument(tracer_provider=provider)
    try:
        yield exporter, recorder
    finally:
        instrumentor.uninstrument()
        provider.shutdown()


def _orders_db() -> sqlite3.Connection:
    db = sqlite3.connect(":memory:", check_same_thread=False)  # the frameworks run sync tools on a worker thread
    db.execute("CREATE TABLE orders (id INTEGER PRIMARY KEY, customer TEXT NOT NULL, total REAL NOT NULL)")
    db.executemany("INSERT INTO orders VALUES (?, ?, ?)", [(1, "acme", 12.5), (2, "globex", 80.0)])
    return db


def _lookup_order(db: sqlite3.Connection) -> Callable[[int], str]:
    def lookup_order(order_id: int) -> str:
        """Look up an order by its id: customer and total."""
        row = db.execute("SELECT id, customer, total FROM orders WHERE id = ?", (order_id,)).fetchone()
        return json.dumps({"id": row[0], "customer": row[1], "total": row[2]})

    return lookup_order


def _id(prefix: str, seed: str) -> str:
    return f"{prefix}_{hashlib.sha256(seed.encode()).hexdigest()[:48]}"


def _http_library() -> Any:
    """The HTTP library the installed ``openai`` client is built on (``httpx2``, or ``httpx`` before it)."""
    import importlib

    from openai import DefaultAsyncHttpxClient

    return importlib.import_module(DefaultAsyncHttpxClient.__mro__[1].__module__.partition(".")[0])


def _responses_api(request: Any) -> Any:
    """An offline ``POST /v1/responses``: a ``function_call`` for ``lookup_order`` while the input holds no
    tool output yet, then the answer; the body carries the fields the Responses API returns."""
    body = json.loads(request.content)
    items = body["input"] if isinstance(body["input"], list) else []
    answered = any(isinstance(item, dict) and item.get("type") == "function_call_output" for item in items)
    turn = "2" if answered else "1"
    output: dict[str, Any]
    if answered:
        output = {
            "id": _id("msg", turn), "type": "message", "status": "completed", "role": "assistant",
            "content": [{"type": "output_text", "annotations": [], "logprobs": [], "text": _ANSWER}],
        }
        usage = (131, 14)
    else:
        output = {
            "id": _id("fc", turn), "type": "function_call", "status": "completed", "name": "lookup_order",
            "arguments": json.dumps({"order_id": 1}), "call_id": _id("call", turn)[:29],
        }
        usage = (92, 17)
    tools = [{"strict": True, **tool} for tool in body.get("tools", [])]
    response = {
        "id": _id("resp", turn), "object": "response", "created_at": int(time.time()), "status": "completed",
        "background": False, "error": None, "incomplete_details": None, "instructions": body.get("instructions"),
        "max_output_tokens": None, "max_tool_calls": None, "model": _MODEL_SNAPSHOT, "output": [output],
        "parallel_tool_calls": True, "previous_response_id": None, "prompt_cache_key": None,
        "reasoning": {"effort": None, "summary": None}, "safety_identifier": None, "service_tier": "default",
        "store": True, "temperature": 1.0, "text": {"format": {"type": "text"}, "verbosity": "medium"},
        "tool_choice": "auto", "tools": tools, "top_logprobs": 0, "top_p": 1.0, "truncation": "disabled",
        "usage": {
            "input_tokens": usage[0], "input_tokens_details": {"cached_tokens": 0},
            "output_tokens": usage[1], "output_tokens_details": {"reasoning_tokens": 0},
            "total_tokens": sum(usage),
        },
        "user": None, "metadata": {},
    }
    return _http_library().Response(200, json=response, headers={"x-request-id": _id("req", turn)})


def agents_shapes() -> list[SpanShape]:
    """The OpenAI Agents SDK, traced by OpenInference's openai-agents instrumentation."""
    from agents import Agent, Runner, function_tool
    from agents.models.openai_responses import OpenAIResponsesModel
    from openai import AsyncOpenAI, DefaultAsyncHttpxClient
    from openinference.instrumentation.openai_agents import OpenAIAgentsInstrumentor

    db = _orders_db()

    async def run() -> str:
        http = DefaultAsyncHttpxClient(transport=_http_library().MockTransport(_responses_api))
        client = AsyncOpenAI(api_key="sk-offline", base_url="http://api.openai.invalid/v1", http_client=http,
                             max_retries=0)
        try:
            agent = Agent(name=_AGENT, instructions=_INSTRUCTIONS, tools=[function_tool(_lookup_order(db))],
                          model=OpenAIResponsesModel(model=_MODEL, openai_client=client))
            result = await Runner.run(agent, _QUESTION)
            return str(result.final_output)
        finally:
            await client.close()

    try:
        with _traced(OpenAIAgentsInstrumentor()) as (exporter, recorder):
            answer = asyncio.run(run())
        if answer != _ANSWER:
            raise RuntimeError(f"the agent answered {answer!r}")
        return _pick(exporter.get_finished_spans(), recorder)
    finally:
        db.close()


def langgraph_shapes() -> list[SpanShape]:
    """LangGraph's prebuilt ReAct agent, traced by OpenInference's LangChain instrumentation."""
    from langchain_core.language_models.fake_chat_models import FakeMessagesListChatModel
    from langchain_core.messages import AIMessage, HumanMessage
    from langchain_core.tools import tool
    from langchain_core.utils.function_calling import convert_to_openai_tool
    from langgraph.checkpoint.memory import InMemorySaver
    from openinference.instrumentation.langchain import LangChainInstrumentor

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # create_react_agent is deprecated in favour of langchain's create_agent
        from langgraph.prebuilt import create_react_agent

    class ChatScripted(FakeMessagesListChatModel):
        """Answers from a script; binds tools as provider chat models do, so they reach the call's
        invocation parameters."""

        model: str = _MODEL

        def bind_tools(self, tools: Any, **kwargs: Any) -> Any:
            return self.bind(tools=[convert_to_openai_tool(t) for t in tools], **kwargs)

    def reply(turn: int, content: str, tool_calls: list[Any], usage: tuple[int, int]) -> AIMessage:
        return AIMessage(
            content=content,
            tool_calls=tool_calls,
            id=_id("chatcmpl", str(turn))[:38],
            response_metadata={"model_name": _MODEL_SNAPSHOT, "finish_reason": "tool_calls" if tool_calls else "stop"},
            usage_metadata={"input_tokens": usage[0], "output_tokens": usage[1], "total_tokens": sum(usage)},
        )

    call = {"name": "lookup_order", "args": {"order_id": 1}, "id": _id("call", "1")[:29], "type": "tool_call"}
    model = ChatScripted(responses=[reply(1, "", [call], (92, 17)), reply(2, _ANSWER, [], (131, 14))])
    db = _orders_db()
    try:
        with _traced(LangChainInstrumentor()) as (exporter, recorder):
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                agent = create_react_agent(model, [tool(_lookup_order(db))], name=_AGENT, prompt=_INSTRUCTIONS,
                                           checkpointer=InMemorySaver())
            result = agent.invoke({"messages": [HumanMessage(_QUESTION)]},
                                  config={"configurable": {"thread_id": _THREAD}})
        answer = result["messages"][-1].content
        if answer != _ANSWER:
            raise RuntimeError(f"the agent answered {answer!r}")
        return _pick(exporter.get_finished_spans(), recorder)
    finally:
        db.close()


@cache
def shapes() -> dict[str, list[SpanShape]]:
    """Per framework (the keys of :data:`FRAMEWORKS`), its root, LLM and tool span, in :data:`KINDS` order.

    Runs the frameworks in this process, once; their packages stay imported. Raises
    ``ModuleNotFoundError`` when a framework or its instrumentation is not installed."""
    return {"openai-agents": agents_shapes(), "langgraph": langgraph_shapes()}


def shapes_in_child(timeout: float = 300) -> dict[str, list[SpanShape]]:
    """:func:`shapes`, run by a child Python process: the frameworks are never imported into this one.
    Raises ``RuntimeError`` with the child's error output when it fails."""
    import subprocess

    done = subprocess.run(
        [sys.executable, str(Path(__file__).resolve()), "--json"],
        capture_output=True, text=True, timeout=timeout, cwd=ROOT,
    )
    if done.returncode != 0:
        raise RuntimeError(f"building the span shapes failed:\n{done.stderr.strip()}")
    data = json.loads(done.stdout)
    return {framework: [SpanShape.from_json(s) for s in found] for framework, found in data.items()}


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--json", action="store_true", help="print the shapes as JSON")
    args = parser.parse_args(argv)
    found = shapes()
    if args.json:
        print(json.dumps({fw: [s.to_json() for s in spans] for fw, spans in found.items()}))
        return 0
    for framework, spans in found.items():
        print(f"{framework} ({FRAMEWORKS[framework]})")
        for s in spans:
            where = "root" if s.root else "child"
            print(f"  {s.kind:<5} {s.name!r}: {s.attribute_count()} attributes ({len(s.start_attributes)} at start, "
                  f"{len(s.end_attributes)} set before end), {where}, status {s.status.name}")
            for key, value in s.start_attributes.items():
                print(f"      start  {key} = {_short(value)}")
            for key, value in s.end_attributes.items():
                print(f"      end    {key} = {_short(value)}")
    return 0


def _short(value: AttributeValue, width: int = 90) -> str:
    text = repr(value)
    return text if len(text) <= width else f"{text[:width]}… ({len(text)} chars)"


if __name__ == "__main__":
    raise SystemExit(main())
