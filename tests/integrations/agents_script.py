"""The OpenAI Agents SDK side of the framework scenario, shared by the bridge tests and
``bench_frameworks``: a scripted ``Model`` that records what it was sent."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from typing import Any

from agents import (
    AgentOutputSchemaBase,
    Handoff,
    Model,
    ModelResponse,
    ModelSettings,
    ModelTracing,
    Tool,
    TResponseInputItem,
    Usage,
)
from openai.types.responses import ResponseFunctionToolCall, ResponseOutputMessage, ResponseOutputText
from openai.types.responses.response_prompt_param import ResponsePromptParam

from tests.integrations.failing_tools import GIVE_UP, SCRIPT, arguments_for

AGENT = "orders-agent"
INSTRUCTIONS = "Answer questions about orders."


class ScriptedModel(Model):
    """Calls the tools of ``script`` in turn, then answers in prose; keeps the instructions and input of
    every call. ``parallel``: how many calls of the turn's tool one response asks for at once (the
    model's parallel tool calls; ids ``call_<turn>_<i>``)."""

    def __init__(self, script: tuple[str, ...] = SCRIPT, *, parallel: int = 1) -> None:
        self.script = list(script)
        self.parallel = parallel
        self.calls = 0
        self.instructions: list[str | None] = []
        self.inputs: list[str | list[TResponseInputItem]] = []

    async def get_response(
        self,
        system_instructions: str | None,
        input: str | list[TResponseInputItem],
        model_settings: ModelSettings,
        tools: list[Tool],
        output_schema: AgentOutputSchemaBase | None,
        handoffs: list[Handoff],
        tracing: ModelTracing,
        *,
        previous_response_id: str | None,
        conversation_id: str | None,
        prompt: ResponsePromptParam | None,
    ) -> ModelResponse:
        self.instructions.append(system_instructions)
        self.inputs.append(input if isinstance(input, str) else list(input))
        self.calls += 1
        if self.script:
            name = self.script.pop(0)
            n = self.calls
            ids = [f"{n}"] if self.parallel == 1 else [f"{n}_{i}" for i in range(self.parallel)]
            calls = [
                ResponseFunctionToolCall(
                    type="function_call",
                    id=f"fc_{i}",
                    call_id=f"call_{i}",
                    name=name,
                    arguments=json.dumps(arguments_for(name)),
                )
                for i in ids
            ]
            return ModelResponse(output=list(calls), usage=Usage(), response_id=None)
        text = ResponseOutputText(type="output_text", text=GIVE_UP, annotations=[])
        message = ResponseOutputMessage(
            id="msg_final", type="message", role="assistant", status="completed", content=[text]
        )
        return ModelResponse(output=[message], usage=Usage(), response_id=None)

    def stream_response(self, *args: Any, **kwargs: Any) -> AsyncIterator[Any]:
        raise NotImplementedError("the scripted model does not stream")
