"""``compact_messages`` on message lists holding real errors (tracebacks printed by real Python runs,
a real failed shell command), in the shapes the OpenAI and Anthropic APIs take."""

from __future__ import annotations

import copy
from pathlib import Path

import pytest

from otel_errcompact import compact_messages
from otel_errcompact.messages import is_raw_error
from tests.realerrors import python_error, run

SOURCE = """
import json

def load(path):
    with open(path) as f:
        return json.load(f)

def main():
    return load("settings.json")["api_key"]

main()
"""


@pytest.fixture(scope="module")
def traceback_text(tmp_path_factory: pytest.TempPathFactory) -> str:
    return python_error(tmp_path_factory.mktemp("tb"), SOURCE)


def test_openai_chat_and_responses_shapes(traceback_text: str) -> None:
    messages = [
        {"role": "user", "content": "go"},
        {
            "role": "assistant",
            "content": None,
            "tool_calls": [{"id": "c1", "type": "function", "function": {"name": "load", "arguments": "{}"}}],
        },
        {"role": "tool", "tool_call_id": "c1", "content": traceback_text},
        {"type": "function_call", "call_id": "c2", "name": "load", "arguments": "{}"},
        {"type": "function_call_output", "call_id": "c2", "output": traceback_text},
        {"role": "tool", "tool_call_id": "c3", "content": [{"type": "text", "text": traceback_text}]},
        {"role": "tool", "tool_call_id": "c4", "content": '{"orders": 3, "error_rate": 0.1}'},
    ]
    before = copy.deepcopy(messages)
    out = compact_messages(messages, "openai")
    assert messages == before
    line = "[FileNotFoundError] at app.py:4 in load: [Errno 2] No such file or directory: 'settings.json'"
    assert out[2]["content"] == f"Error: {line}"
    assert out[4]["output"] == f"Error: {line} (×2)"
    assert out[5]["content"] == [{"type": "text", "text": f"Error: {line} (×3)"}]
    assert out[6] == messages[6]  # a successful result is never touched
    assert out[:2] == messages[:2] and out[3] == messages[3]
    assert out[2] is not messages[2] and out[0] is not messages[0]  # copies, not the caller's dicts


def test_anthropic_blocks_keep_their_flag_and_non_text_parts(traceback_text: str, tmp_path: Path) -> None:
    shell = run("cat missing.txt", cwd=tmp_path, shell=True)
    assert shell.returncode == 1
    image = {"type": "image", "source": {"type": "base64", "media_type": "image/png", "data": "iVBORw0KGgo="}}
    messages = [
        {"role": "user", "content": "go"},
        {"role": "assistant", "content": [{"type": "tool_use", "id": "t1", "name": "load", "input": {}}]},
        {
            "role": "user",
            "content": [
                {
                    "type": "tool_result",
                    "tool_use_id": "t1",
                    "is_error": True,
                    "content": [image, {"type": "text", "text": traceback_text}],
                }
            ],
        },
        {"role": "assistant", "content": [{"type": "tool_use", "id": "t2", "name": "sh", "input": {}}]},
        {
            "role": "user",
            "content": [{"type": "tool_result", "tool_use_id": "t2", "is_error": True, "content": shell.stderr}],
        },
    ]
    out = compact_messages(messages, "anthropic")
    first = out[2]["content"][0]
    assert first["is_error"] is True and first["tool_use_id"] == "t1"
    assert first["content"][0]["text"].startswith("Error: [FileNotFoundError] at app.py:4 in load")
    assert first["content"][1] == image
    second = out[4]["content"][0]
    assert second["content"].startswith("Error: [") and "missing.txt" in second["content"]
    assert compact_messages(out, "anthropic") == out


def test_only_errors_are_recognised(traceback_text: str) -> None:
    assert is_raw_error(traceback_text)
    assert not is_raw_error("3 orders found; 0 errors")
    assert not is_raw_error("Error: [KeyError] at app.py:3 in f: 'k' (×2)")  # already a digest
    assert not is_raw_error("")


def test_bad_input_gives_a_bounded_clear_result(traceback_text: str) -> None:
    with pytest.raises(ValueError, match="format must be"):
        compact_messages([], "gemini")  # type: ignore[arg-type]
    odd = ["not a message", None, {"role": "tool", "tool_call_id": "x", "content": None}]
    assert compact_messages(odd, "openai") == odd
    huge = {"role": "tool", "tool_call_id": "x", "content": traceback_text * 2000}
    [out] = compact_messages([huge], "openai")
    assert out["content"].startswith("Error: [FileNotFoundError]") and len(out["content"]) < 400


PARSE_QUANTITY = """
import sys

def parse_quantity(text):
    return int(text)

parse_quantity(sys.argv[1])
"""


def test_a_grown_history_continues_a_class_called_with_other_values(tmp_path: Path) -> None:
    """The model retries with a new value each time: one class (the value is data, masked in the key),
    whose digest lines differ by that value. A history compacted once and grown since continues the
    class's count, as a raw history compacted whole does."""
    errors = [python_error(tmp_path, PARSE_QUANTITY, args=[value]) for value in ("ten", "10 pcs", "a dozen")]

    def tool(i: int, text: str) -> dict[str, str]:
        return {"role": "tool", "tool_call_id": f"c{i}", "content": text}

    whole = compact_messages([tool(i, text) for i, text in enumerate(errors)], "openai")
    assert [m["content"][-5:] for m in whole] == ["'ten'", " (×2)", " (×3)"]
    grown = [*compact_messages([tool(i, text) for i, text in enumerate(errors[:2])], "openai"), tool(2, errors[2])]
    assert compact_messages(grown, "openai") == whole


def test_langchain_tool_messages_are_compacted_in_copies(traceback_text: str, tmp_path: Path) -> None:
    """A LangChain message list (a plain LangChain loop, a LangGraph state's messages): each ``ToolMessage``
    holding a raw error is compacted in a copy, with its id, tool-call id and status; a ``status="error"``
    result is an error whatever its text, as Anthropic's ``is_error``; other messages are left as they are."""
    messages_module = pytest.importorskip("langchain_core.messages")
    ai, human, tool_message = messages_module.AIMessage, messages_module.HumanMessage, messages_module.ToolMessage
    shell = run("cat missing.txt", cwd=tmp_path, shell=True)
    image = {"type": "image_url", "image_url": {"url": "data:image/png;base64,iVBORw0KGgo="}}
    messages = [
        human("go"),
        ai("", tool_calls=[{"id": "c1", "name": "load", "args": {}}, {"id": "c2", "name": "load", "args": {}}]),
        tool_message(traceback_text, tool_call_id="c1", status="error"),
        tool_message([{"type": "text", "text": traceback_text}, image], tool_call_id="c2"),
        ai("", tool_calls=[{"id": "c3", "name": "sh", "args": {}}, {"id": "c4", "name": "sh", "args": {}}]),
        tool_message(shell.stderr, tool_call_id="c3", status="error"),
        tool_message("3 orders", tool_call_id="c4"),
    ]
    before = [m.model_copy(deep=True) for m in messages]
    out = compact_messages(messages, "openai")
    assert messages == before
    line = "[FileNotFoundError] at app.py:4 in load: [Errno 2] No such file or directory: 'settings.json'"
    assert (out[2].content, out[2].tool_call_id, out[2].status) == (f"Error: {line}", "c1", "error")
    assert out[3].content == [{"type": "text", "text": f"Error: {line} (×2)"}, image]
    assert out[5].content.startswith("Error: [") and "missing.txt" in out[5].content
    assert out[6] == messages[6] and out[:2] == messages[:2] and out[4] == messages[4]
    assert out[2] is not messages[2]
    assert compact_messages(out, "anthropic") == out
