"""A plain agent loop with no framework, in the OpenAI (Chat Completions) or Anthropic (Messages) shape,
shared by the tests and ``bench_frameworks``.

The "model" is scripted: turn ``i`` asks for ``SCRIPT[i]`` with a tool-call id, then it gives up. The
tools are called for real; what goes back into the messages is up to the caller's ``on_error``: the raw
traceback (what such loops usually append), or nothing to do when the tool is wrapped by ``@ec.tool``
(which returns the digest instead of raising). ``before_step`` runs before each model call (where a loop
calls ``ec.check()``) and ``system`` is rebuilt for each call (where the ``[RECENT ERRORS]`` block goes).
"""

from __future__ import annotations

import json
import traceback
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, Literal

from tests.integrations.failing_tools import GIVE_UP, SCRIPT, arguments_for

Format = Literal["openai", "anthropic"]
QUESTION = "How many orders does acme have?"


def raw_traceback(exc: BaseException) -> str:
    """What a naive loop puts in the tool result: the whole formatted traceback."""
    return "".join(traceback.format_exception(type(exc), exc, exc.__traceback__))


@dataclass
class LoopRun:
    """The messages at the end, and the system prompt each model call was sent."""

    messages: list[dict[str, Any]] = field(default_factory=list)
    systems: list[str] = field(default_factory=list)

    @property
    def model_calls(self) -> int:
        return len(self.systems)


def assistant_turn(i: int, fmt: Format, script: tuple[str, ...]) -> dict[str, Any]:
    """The scripted model's answer on turn ``i``."""
    if i >= len(script):
        return {"role": "assistant", "content": GIVE_UP}
    name = script[i]
    if fmt == "openai":
        call = {
            "id": f"call_{i}",
            "type": "function",
            "function": {"name": name, "arguments": json.dumps(arguments_for(name))},
        }
        return {"role": "assistant", "content": None, "tool_calls": [call]}
    block = {"type": "tool_use", "id": f"toolu_{i}", "name": name, "input": arguments_for(name)}
    return {"role": "assistant", "content": [block]}


def run_loop(
    tools: Mapping[str, Callable[..., Any]],
    fmt: Format,
    *,
    on_error: Callable[[Exception], str] = raw_traceback,
    before_step: Callable[[], None] = lambda: None,
    system: Callable[[], str] = lambda: "Answer questions about orders.",
    script: tuple[str, ...] = SCRIPT,
    run: LoopRun | None = None,
) -> LoopRun:
    """Run the loop to its end (or until ``before_step`` raises; ``run`` then holds what was done)."""
    run = run if run is not None else LoopRun()
    run.messages.append({"role": "user", "content": QUESTION})
    for i in range(len(script) + 1):
        before_step()
        run.systems.append(system())
        turn = assistant_turn(i, fmt, script)
        run.messages.append(turn)
        if i >= len(script):
            break
        name = script[i]
        failed = False
        try:
            result = tools[name](**arguments_for(name))
            text = str(result)
            failed = text.startswith("Error: ")
        except Exception as exc:
            text, failed = on_error(exc), True
        if fmt == "openai":
            run.messages.append({"role": "tool", "tool_call_id": f"call_{i}", "content": text})
        else:
            block: dict[str, Any] = {"type": "tool_result", "tool_use_id": f"toolu_{i}", "content": text}
            if failed:
                block["is_error"] = True
            run.messages.append({"role": "user", "content": [block]})
    return run


def payload(run: LoopRun) -> list[dict[str, Any]]:
    """What the last model call was sent, as one list: the system prompt first, then the messages."""
    return [{"role": "system", "content": run.systems[-1] if run.systems else ""}, *run.messages]
