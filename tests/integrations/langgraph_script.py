"""The LangGraph side of the framework scenario, shared by the bridge tests and ``bench_frameworks``:
a scripted chat model and a ``create_react_agent`` run on one thread."""

from __future__ import annotations

import warnings
from typing import Any

from langchain_core.language_models.fake_chat_models import FakeMessagesListChatModel
from langchain_core.messages import AIMessage, BaseMessage, HumanMessage
from langgraph.checkpoint.memory import InMemorySaver
from pydantic import Field

from tests.integrations.failing_tools import GIVE_UP, SCRIPT, arguments_for

with warnings.catch_warnings():
    warnings.simplefilter("ignore")
    from langgraph.prebuilt import create_react_agent

AGENT = "orders-agent"
THREAD = "thread-orders-1"
QUESTION = "How many orders does acme have?"


class ScriptedChatModel(FakeMessagesListChatModel):
    """Asks for the tools of a script in turn, then gives up; keeps every input it was sent."""

    seen: list[list[BaseMessage]] = Field(default_factory=list)

    def bind_tools(self, tools: Any, **kwargs: Any) -> Any:
        return self

    def _generate(self, messages: list[BaseMessage], *args: Any, **kwargs: Any) -> Any:
        self.seen.append(list(messages))
        return super()._generate(messages, *args, **kwargs)


def scripted_model(script: tuple[str, ...] = SCRIPT) -> ScriptedChatModel:
    """A model that calls ``script``'s tools one per turn (ids ``call_0`` …), then answers ``GIVE_UP``."""
    calls: list[BaseMessage] = [
        AIMessage(
            content="", tool_calls=[{"name": name, "args": arguments_for(name), "id": f"call_{i}", "type": "tool_call"}]
        )
        for i, name in enumerate(script)
    ]
    return ScriptedChatModel(responses=[*calls, AIMessage(content=GIVE_UP)])


def build_agent(tools: Any, model: ScriptedChatModel, *, stateless: bool = False, **kwargs: Any) -> Any:
    """``create_react_agent`` with an in-memory checkpointer, so a thread's state can be read back;
    ``stateless``: without one (its runs take no ``thread_id``)."""
    checkpointer = None if stateless else InMemorySaver()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # create_react_agent is deprecated in favour of langchain's create_agent
        return create_react_agent(model, tools, name=AGENT, checkpointer=checkpointer, **kwargs)


def invoke(agent: Any, thread: str = THREAD) -> dict[str, Any]:
    config = {"configurable": {"thread_id": thread}}
    return dict(agent.invoke({"messages": [HumanMessage(QUESTION)]}, config=config))


def invoke_stateless(agent: Any) -> dict[str, Any]:
    """One run of a ``stateless`` agent: no ``thread_id``."""
    return dict(agent.invoke({"messages": [HumanMessage(QUESTION)]}))


def history(agent: Any, thread: str = THREAD) -> list[BaseMessage]:
    """The thread's messages as the checkpointer holds them (also after a run that raised)."""
    return list(agent.get_state({"configurable": {"thread_id": thread}}).values["messages"])
