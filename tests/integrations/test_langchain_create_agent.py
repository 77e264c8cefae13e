"""``LangGraphBridge.middleware()`` with langchain's ``create_agent`` (langchain 1.x): the same scenario
as the LangGraph bridge tests, wired as middleware, traced by OpenInference's LangChain instrumentation."""

from __future__ import annotations

import sqlite3
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.integrations import instrumented, require

require("langchain.agents", "langgraph", "openinference.instrumentation.langchain")

from langchain.agents import create_agent  # noqa: E402
from langchain_core.messages import HumanMessage, SystemMessage, ToolMessage  # noqa: E402
from langchain_core.tools import tool  # noqa: E402
from langgraph.checkpoint.memory import InMemorySaver  # noqa: E402
from openinference.instrumentation.langchain import LangChainInstrumentor  # noqa: E402

from otel_errcompact import ErrorBudgetExceeded, Thresholds  # noqa: E402
from otel_errcompact.langgraph import LangGraphBridge  # noqa: E402
from tests.conftest import OTel  # noqa: E402
from tests.integrations.failing_tools import GIVE_UP, SCRIPT, make_read_invoice  # noqa: E402
from tests.integrations.langgraph_script import AGENT, QUESTION, THREAD, scripted_model  # noqa: E402
from tests.integrations.orders import make_count_orders  # noqa: E402

SYSTEM = "Answer questions about orders."
CONFIG = {"configurable": {"thread_id": THREAD}}


@pytest.fixture
def traced(make_otel: Callable[..., OTel]) -> Iterator[Callable[..., OTel]]:
    yield from instrumented(make_otel, LangChainInstrumentor())


@pytest.fixture
def tools(db: Path, tmp_path: Path) -> list[Any]:
    return [tool(make_count_orders(db)), tool(make_read_invoice(tmp_path))]


def agent_with(tools: list[Any], model: Any, middleware: list[Any]) -> Any:
    return create_agent(
        model, tools, system_prompt=SYSTEM, middleware=middleware, checkpointer=InMemorySaver(), name=AGENT
    )


def test_the_middleware_halts_at_the_threshold(traced: Callable[..., OTel], tools: list[Any]) -> None:
    otel = traced(consecutive=3)
    bridge = LangGraphBridge(otel.ec, agent_name=AGENT)
    model = scripted_model()
    agent = agent_with(tools, model, [bridge.middleware()])
    with pytest.raises(ErrorBudgetExceeded) as raised:
        agent.invoke({"messages": [HumanMessage(QUESTION)]}, config=CONFIG)
    assert raised.value.escalation.scope == THREAD and raised.value.escalation.count == 3
    assert len(model.seen) == 3
    messages = agent.get_state(CONFIG).values["messages"]
    fed_back = [m for m in messages if isinstance(m, ToolMessage)]
    assert [m.status for m in fed_back] == ["error", "error"]
    assert str(fed_back[1].content).startswith("Error: [OperationalError] at ") and str(fed_back[1].content).endswith(
        "in count_orders: no such table: orders (×2)"
    )
    records = otel.records()
    assert [(r.scope, r.agent_name, r.tool_call_id, r.count) for r in records] == [
        (THREAD, AGENT, f"call_{i}", i + 1) for i in range(3)
    ]
    [root] = [s for s in otel.spans() if s.parent is None]
    ours = otel.spans("execute_tool count_orders")
    assert len(ours) == 3 and all(s.context.trace_id == root.context.trace_id for s in ours)
    assert len([e for e in root.events if e.name == "errcompact.escalation"]) == 1


def test_the_block_rides_on_the_system_prompt_of_each_call(traced: Callable[..., OTel], tools: list[Any]) -> None:
    otel = traced(thresholds=Thresholds(consecutive=20, budget=None))
    bridge = LangGraphBridge(otel.ec, agent_name=AGENT)
    model = scripted_model()
    result = agent_with(tools, model, [bridge.middleware()]).invoke(
        {"messages": [HumanMessage(QUESTION)]}, config=CONFIG
    )
    assert result["messages"][-1].content == GIVE_UP
    assert len(model.seen) == len(SCRIPT) + 1
    for i, sent in enumerate(model.seen):
        systems = [m for m in sent if isinstance(m, SystemMessage)]
        assert len(systems) == 1 and str(systems[0].content).startswith(SYSTEM)
        assert str(systems[0].content).count("[RECENT ERRORS]") == (0 if i == 0 else 1)
    last = str(next(m for m in model.seen[-1] if isinstance(m, SystemMessage)).content)
    assert "no such table: orders (×6)" in last and "(×4)" in last
    assert not [m for m in result["messages"] if isinstance(m, SystemMessage)]


def test_runs_without_a_thread_are_scoped_by_their_trace(traced: Callable[..., OTel], tools: list[Any]) -> None:
    """A stateless agent (no checkpointer, no ``thread_id``): a halted run does not stop the next one, and
    the block of each model call is the one of its own run."""
    otel = traced(consecutive=3)
    bridge = LangGraphBridge(otel.ec, agent_name=AGENT)

    def stateless(model: Any) -> Any:
        return create_agent(model, tools, system_prompt=SYSTEM, middleware=[bridge.middleware()], name=AGENT)

    with pytest.raises(ErrorBudgetExceeded) as raised:
        stateless(scripted_model()).invoke({"messages": [HumanMessage(QUESTION)]})
    [first_root] = [s for s in otel.spans() if s.parent is None]
    assert raised.value.escalation.scope == f"trace:{first_root.context.trace_id:032x}"

    model = scripted_model(("count_orders",))
    result = stateless(model).invoke({"messages": [HumanMessage(QUESTION)]})
    assert result["messages"][-1].content == GIVE_UP and len(model.seen) == 2
    assert "[RECENT ERRORS]" not in str(model.seen[0][0].content)
    assert "\n1 tool failure(s)" in str(model.seen[1][0].content)


def test_create_agent_without_the_middleware_raises_the_first_tool_error(
    traced: Callable[..., OTel], tools: list[Any]
) -> None:
    traced(consecutive=3)
    model = scripted_model()
    with pytest.raises(sqlite3.OperationalError, match="no such table: orders"):
        agent_with(tools, model, []).invoke({"messages": [HumanMessage(QUESTION)]}, config=CONFIG)
    assert len(model.seen) == 1
