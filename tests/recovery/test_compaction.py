"""Reactive compaction on both message formats, with real tracebacks as tool results."""

from __future__ import annotations

import ipaddress
import subprocess
import sys
from pathlib import Path
from typing import Any

from otel_errcompact.recovery.compaction import compact_messages
from tests.realerrors import python_error

APP = """
import json

def load(text):
    return json.loads(text)

load('{"user": ')
"""


def _anthropic(tb: str, n: int) -> list[dict[str, Any]]:
    messages: list[dict[str, Any]] = [{"role": "user", "content": "fix it"}]
    for i in range(n):
        messages.append({"role": "assistant", "content": [
            {"type": "text", "text": f"attempt {i}: let me run the loader again " * 5},
            {"type": "tool_use", "id": f"toolu_{i}", "name": "run", "input": {}},
        ]})  # fmt: skip
        messages.append({"role": "user", "content": [
            {"type": "tool_result", "tool_use_id": f"toolu_{i}", "content": tb, "is_error": True},
        ]})  # fmt: skip
    return messages


def test_anthropic_old_errors_become_counted_digests_and_old_text_is_summarised(tmp_path: Path) -> None:
    tb = python_error(tmp_path, APP)
    messages = _anthropic(tb, 4)
    out = compact_messages(messages, keep_recent=1, summarizer=lambda text: "(summary)")
    assert messages == _anthropic(tb, 4)  # the input is left alone
    results = [b for m in out if isinstance(m["content"], list) for b in m["content"] if b["type"] == "tool_result"]
    assert [r["tool_use_id"] for r in results] == ["toolu_0", "toolu_1", "toolu_2", "toolu_3"]
    suffixes = ("(char 9)", "(×2)", "(×3)")
    assert all(r["content"].endswith(end) for r, end in zip(results[:3], suffixes, strict=True))
    assert all(r["content"].startswith("[JSONDecodeError] at app.py") for r in results[:3])
    assert results[3]["content"] == tb and all(r["is_error"] for r in results)
    texts = [b["text"] for m in out if m["role"] == "assistant" for b in m["content"] if b["type"] == "text"]
    assert texts[:3] == ["(summary)"] * 3 and texts[3].startswith("attempt 3")
    assert len(str(out)) < len(str(messages)) / 2


def test_the_summariser_gets_older_assistant_text_redacted(tmp_path: Path) -> None:
    """An assistant quoting the error a tool returned, a connection URL with its password in it: the
    summariser (a hosted model, usually) gets the text redacted as the compactor's summariser does."""
    password = "S3cr3tPassw0rd!x"
    error = python_error(tmp_path, f"int('postgres://admin:{password}@db.internal/prod')\n")
    (quoted,) = [line for line in error.splitlines() if line.startswith("ValueError:")]
    assert password in quoted
    messages: list[dict[str, Any]] = [{"role": "user", "content": "count the orders"}]
    for i in range(3):
        messages.append({"role": "assistant", "content": [
            {"type": "text", "text": f"The tool said {quoted}; I will pass the count instead."},
            {"type": "tool_use", "id": f"toolu_{i}", "name": "run", "input": {}},
        ]})  # fmt: skip
        messages.append({"role": "user", "content": [
            {"type": "tool_result", "tool_use_id": f"toolu_{i}", "content": error, "is_error": True},
        ]})  # fmt: skip
    asked: list[str] = []
    out = compact_messages(messages, keep_recent=1, summarizer=lambda text: asked.append(text) or "(summary)")
    assert len(asked) == 2 and all("db.internal/prod" in text for text in asked)
    assert not any(password in text for text in asked)
    assert password not in str(out[:4])


def test_openai_successful_results_are_kept_or_cut_never_dropped(tmp_path: Path) -> None:
    long_ok = "row\n" * 2000
    messages: list[dict[str, Any]] = [{"role": "user", "content": "x"}]
    for i, content in enumerate([long_ok, "short and fine", python_error(tmp_path, APP)]):
        messages.append({"role": "assistant", "content": None, "tool_calls": [
            {"id": f"call_{i}", "type": "function", "function": {"name": "run", "arguments": "{}"}}]})  # fmt: skip
        messages.append({"role": "tool", "tool_call_id": f"call_{i}", "content": content})
    out = compact_messages(messages, keep_recent=0, max_result_chars=100)
    tool = [m["content"] for m in out if m["role"] == "tool"]
    assert tool[0].endswith("[7900 chars compacted]") and tool[1] == "short and fine"
    assert tool[2].startswith("[JSONDecodeError] at app.py:") and " in load: Expecting value" in tool[2]
    assert len(out) == len(messages)


def test_successful_results_that_name_errors_are_not_read_as_errors(tmp_path: Path) -> None:
    """A source file whose docstrings list what it raises (``ValueError: if …``) and a build log whose lines
    begin with a bracketed level (``[INFO] …``) are successful results: cut, not replaced by a digest."""
    source = Path(ipaddress.__file__).read_text(encoding="utf-8")
    script = tmp_path / "build.py"
    script.write_text(
        "import logging\n"
        "logging.basicConfig(format='[%(levelname)s] %(message)s', level=logging.INFO)\n"
        "for n in range(200):\n"
        "    logging.info('compiled module %d of 200', n + 1)\n"
        "logging.info('build OK')\n",
        encoding="utf-8",
    )
    log = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, check=True).stderr
    assert log.startswith("[INFO] compiled module 1 of 200") and "ValueError: if the *address*" in source
    messages: list[dict[str, Any]] = [{"role": "user", "content": "x"}]
    for i, content in enumerate([source, log]):
        messages.append({"role": "assistant", "content": None, "tool_calls": [
            {"id": f"call_{i}", "type": "function", "function": {"name": "run", "arguments": "{}"}}]})  # fmt: skip
        messages.append({"role": "tool", "tool_call_id": f"call_{i}", "content": content})
    out = compact_messages(messages, keep_recent=0, max_result_chars=300)
    tool = [m["content"] for m in out if m["role"] == "tool"]
    assert tool[0] == f"{source[:300]}… [{len(source) - 300} chars compacted]"
    assert tool[1] == f"{log[:300]}… [{len(log) - 300} chars compacted]"
