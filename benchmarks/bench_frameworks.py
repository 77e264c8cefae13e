"""Tokens of the whole message history at the end of a failing agent run, per framework and wiring.

Run: ``python benchmarks/bench_frameworks.py [--json]`` (needs the packages of
``.ci/integrations-install.sh``; runs offline).

The scenario of the bridge tests: a scripted model asks for ``count_orders`` 6 times (it fails each time
on a missing SQLite table), then ``read_invoice`` 4 times (a missing file), then gives up. The tools
really run and really fail. Measured: the tokens (``o200k_base``, the official rank file shipped by
``bpe-openai``, exact and offline) of what the model was sent on its *last* call, serialised as the API
request's messages (system prompt or instructions included, so the ``[RECENT ERRORS]`` block counts).

Wirings per framework:

- *default*: the framework's own handling of a tool exception (LangGraph: ``handle_tool_errors=True``,
  since its true default re-raises the first error and ends the run; Agents SDK: its default
  ``failure_error_function``; plain loop: ``f"Error: {type}: {message}"``);
- *raw tracebacks*: the whole formatted traceback as the tool result;
- *bridge, no halt*: the documented wiring with the thresholds raised so all 10 calls run (the effect of
  compaction alone);
- *bridge*: the documented wiring with the default thresholds: the run stops at the third failure;
- plain loop only, *compact_messages*: the raw-traceback history compacted after the fact.
"""

from __future__ import annotations

import argparse
import json
import sqlite3
import sys
import tempfile
import warnings
from collections.abc import Callable, Iterator
from contextlib import contextmanager, suppress
from pathlib import Path
from typing import Any

_ROOT = Path(__file__).resolve().parent.parent
if str(_ROOT) not in sys.path:
    sys.path.insert(0, str(_ROOT))

import bpe_openai  # noqa: E402
from opentelemetry.sdk.trace import TracerProvider  # noqa: E402

import otel_errcompact  # noqa: E402
from benchmarks._machine import describe  # noqa: E402
from otel_errcompact import ErrCompact, ErrorBudgetExceeded, Thresholds  # noqa: E402
from tests.integrations.failing_tools import make_read_invoice  # noqa: E402
from tests.integrations.orders import make_count_orders  # noqa: E402
from tests.integrations.plain_loop import LoopRun, payload, raw_traceback, run_loop  # noqa: E402

ENCODING = "o200k_base"
NO_HALT = Thresholds(consecutive=100, budget=None)
BASE = "Answer questions about orders."

_encoding = bpe_openai.get_encoding(ENCODING)


def tokens(messages: list[Any]) -> int:
    """o200k tokens of ``messages`` serialised as a JSON request body would carry them."""
    return len(_encoding.encode(json.dumps(messages, ensure_ascii=False, default=_plain)))


def _plain(value: Any) -> Any:
    dump = getattr(value, "model_dump", None)
    return dump(exclude_none=True) if callable(dump) else str(value)


@contextmanager
def handle(folder: Path, thresholds: Thresholds | None = None) -> Iterator[ErrCompact]:
    """A fresh ``init()`` on its own tracer provider (no exporter) and SQLite store."""
    ec = otel_errcompact.init(
        tracer_provider=TracerProvider(), sqlite_path=folder / "trajectory.sqlite3", thresholds=thresholds
    )
    try:
        yield ec
    finally:
        ec.shutdown()


def fresh_tools(folder: Path) -> dict[str, Callable[..., Any]]:
    db = folder / "shop.sqlite3"
    sqlite3.connect(db).close()
    return {"count_orders": make_count_orders(db), "read_invoice": make_read_invoice(folder)}


# -- LangGraph -------------------------------------------------------------------------------------------


def langgraph_rows(folder: Path) -> dict[str, int]:
    from langchain_core.messages import convert_to_openai_messages
    from langchain_core.tools import tool

    from otel_errcompact.langgraph import LangGraphBridge
    from tests.integrations.langgraph_script import build_agent, invoke, scripted_model

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        from langgraph.prebuilt import ToolNode

    def lc_tools() -> list[Any]:
        return [tool(fn) for fn in fresh_tools(folder).values()]

    def last_input(model: Any) -> int:
        return tokens(convert_to_openai_messages(model.seen[-1]))

    def full_traceback(e: Exception) -> str:
        return raw_traceback(e)

    rows: dict[str, int] = {}
    model = scripted_model()
    invoke(build_agent(ToolNode(lc_tools(), handle_tool_errors=True), model))
    rows["default"] = last_input(model)
    model = scripted_model()
    invoke(build_agent(ToolNode(lc_tools(), handle_tool_errors=full_traceback), model))
    rows["raw tracebacks"] = last_input(model)
    for label, thresholds in (("bridge, no halt", NO_HALT), ("bridge", None)):
        with handle(folder, thresholds) as ec:
            bridge = LangGraphBridge(ec, agent_name="orders-agent")
            model = scripted_model()
            agent = build_agent(bridge.tool_node(lc_tools()), model, pre_model_hook=bridge.pre_model_hook)
            with suppress(ErrorBudgetExceeded):
                invoke(agent)
            rows[label] = last_input(model)
    return rows


# -- OpenAI Agents SDK -------------------------------------------------------------------------------------


def agents_rows(folder: Path) -> dict[str, int]:
    from agents import Agent, RunConfig, Runner, function_tool, set_tracing_disabled

    from otel_errcompact.openai_agents import AgentsBridge
    from tests.integrations.agents_script import INSTRUCTIONS, ScriptedModel

    set_tracing_disabled(True)  # nothing to export to; the SDK's own trace is kept in-process

    def last_input(model: ScriptedModel) -> int:
        last = model.inputs[-1]
        items = [{"role": "user", "content": last}] if isinstance(last, str) else list(last)
        return tokens([{"role": "system", "content": model.instructions[-1] or ""}, *items])

    def full_traceback(_ctx: Any, e: Exception) -> str:
        return raw_traceback(e)

    def run(agent: Any) -> None:
        Runner.run_sync(agent, "How many orders does acme have?", max_turns=20, run_config=RunConfig(group_id="b"))

    rows: dict[str, int] = {}
    for label, make in (
        ("default", lambda fn: function_tool(fn)),
        ("raw tracebacks", lambda fn: function_tool(fn, failure_error_function=full_traceback)),
    ):
        model = ScriptedModel()
        run(
            Agent(
                name="orders-agent",
                instructions=INSTRUCTIONS,
                model=model,
                tools=[make(f) for f in fresh_tools(folder).values()],
            )
        )
        rows[label] = last_input(model)
    for label, thresholds in (("bridge, no halt", NO_HALT), ("bridge", None)):
        with handle(folder, thresholds) as ec:
            bridge = AgentsBridge(ec)
            model = ScriptedModel()
            tools = [bridge.function_tool(f) for f in fresh_tools(folder).values()]
            agent = Agent(name="orders-agent", instructions=bridge.instructions(INSTRUCTIONS), model=model, tools=tools)
            with suppress(ErrorBudgetExceeded):
                run(agent)
            rows[label] = last_input(model)
    return rows


# -- a plain loop ---------------------------------------------------------------------------------------------


def plain_rows(folder: Path, fmt: Any) -> dict[str, int]:
    def short(e: Exception) -> str:
        return f"Error: {type(e).__name__}: {e}"

    rows: dict[str, int] = {}
    rows["default"] = tokens(payload(run_loop(fresh_tools(folder), fmt, on_error=short)))
    raw = run_loop(fresh_tools(folder), fmt)
    rows["raw tracebacks"] = tokens(payload(raw))
    for label, thresholds in (("bridge, no halt", NO_HALT), ("bridge", None)):
        with handle(folder, thresholds) as ec:
            wrapped = {name: ec.tool(fn) for name, fn in fresh_tools(folder).items()}
            run = LoopRun()
            with ec.conversation(f"plain-{label}"):
                try:
                    run_loop(
                        wrapped, fmt, before_step=ec.check, system=lambda: f"{BASE}\n\n{ec.context()}".rstrip(), run=run
                    )
                except ErrorBudgetExceeded:
                    run.messages.pop()  # the step that was refused never reached a model
            rows[label] = tokens(payload(run))
    compacted = LoopRun(otel_errcompact.compact_messages(raw.messages, fmt), raw.systems)
    rows["compact_messages"] = tokens(payload(compacted))
    return rows


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0] if __doc__ else None)
    parser.add_argument("--json", action="store_true", help="print the table as JSON")
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp)
        table = {
            "LangGraph (create_react_agent)": langgraph_rows(folder),
            "OpenAI Agents SDK": agents_rows(folder),
            "plain loop, OpenAI messages": plain_rows(folder, "openai"),
            "plain loop, Anthropic messages": plain_rows(folder, "anthropic"),
        }
    if args.json:
        print(json.dumps({"machine": describe(), "encoding": ENCODING, "tokens": table}, indent=2))
        return 0
    print(f"# tokens ({ENCODING}) of the last model input, 6 + 4 failing tool calls — {describe()}")
    columns = ["default", "raw tracebacks", "bridge, no halt", "bridge", "compact_messages"]
    print(f"{'framework':32} " + " ".join(f"{c:>17}" for c in columns) + f" {'no halt vs raw':>15}")
    for name, rows in table.items():
        cells = " ".join(f"{rows[c]:>17,}" if c in rows else f"{'—':>17}" for c in columns)
        saving = 1 - rows["bridge, no halt"] / rows["raw tracebacks"]
        print(f"{name:32} {cells} {saving:>14.1%}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
