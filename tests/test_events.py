"""The Factor 9 plain event shape ``{type, message, payload?}``: failures are compacted, successes reset.

Every error message is what a real command printed: ``node`` on a script reading a missing file,
``cat`` on a missing file, ``python`` exiting with a message. The events are built from the real exit
code and the real stderr, the way an agent runner would build them.
"""

from __future__ import annotations

import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from otel_errcompact.events import TOOL_RUN_FINISHED, digest_event, render_events
from otel_errcompact.history import Thresholds
from otel_errcompact.render import BLOCK_CLOSE, BLOCK_OPEN
from tests.realerrors import have, run, write


def _failed_event(
    command: str, returncode: int, stderr: str, *, code: str = "TOOL_EXIT_NON_ZERO"
) -> dict[str, Any]:
    return {
        "type": TOOL_RUN_FINISHED,
        "message": f"Tool failed: {command}",
        "payload": {
            "ok": False,
            "command": command,
            "error": {"code": code, "message": stderr},
            "metrics": {"duration_ms": 912, "exit_code": returncode},
        },
    }


def _ok_event(command: str) -> dict[str, Any]:
    return {
        "type": TOOL_RUN_FINISHED,
        "message": f"Tool finished: {command}",
        "payload": {"ok": True, "command": command, "metrics": {"duration_ms": 12, "exit_code": 0}},
    }


@pytest.fixture(scope="module")
def node_failure(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    if not have("node"):
        pytest.skip("node is not installed")
    folder = tmp_path_factory.mktemp("node")
    write(
        folder,
        "triage.js",
        """
        const fs = require("fs");
        const data = fs.readFileSync("input.json", "utf8");
        console.log(JSON.parse(data));
        """,
    )
    result = run(["node", "triage.js"], cwd=folder)
    assert result.returncode == 1 and "ENOENT" in result.stderr
    return _failed_event("node triage.js", result.returncode, result.stderr)


@pytest.fixture(scope="module")
def cat_failure(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    folder = tmp_path_factory.mktemp("cat")
    result = run(["cat", "missing.txt"], cwd=folder)
    assert result.returncode != 0 and "missing.txt" in result.stderr
    return _failed_event("cat missing.txt", result.returncode, result.stderr)


def test_failed_node_event_is_compacted_from_real_stderr(node_failure: dict[str, Any]) -> None:
    digest = digest_event(node_failure)
    assert digest is not None
    assert "'input.json'" in digest.cause and "ENOENT" in digest.cause
    assert digest.location is not None and digest.location.file.endswith("triage.js")
    assert digest.location.line == 2
    assert digest.status == 1
    assert "node:internal" not in digest.line and "\n" not in digest.line
    assert digest.raw_chars == len(node_failure["payload"]["error"]["message"])


def test_failed_cat_event_keeps_file_name_and_exit_code(cat_failure: dict[str, Any]) -> None:
    digest = digest_event(cat_failure)
    assert digest is not None
    assert "missing.txt" in digest.cause
    assert digest.status == cat_failure["payload"]["metrics"]["exit_code"]
    assert digest.format == "shell"


def test_runner_code_names_the_type_for_unstructured_text(tmp_path: Path) -> None:
    result = run([sys.executable, "-c", "import sys; sys.exit('Cannot read input file')"], cwd=tmp_path)
    assert result.returncode == 1
    event = {
        "type": TOOL_RUN_FINISHED,
        "message": "Tool failed",
        "payload": {"ok": False, "error": {"code": "TOOL_EXIT_NON_ZERO", "message": result.stderr}},
    }
    digest = digest_event(event)
    assert digest is not None
    assert digest.type == "TOOL_EXIT_NON_ZERO"
    assert "Cannot read input file" in digest.cause


def test_events_without_payload_or_of_other_types_carry_no_failure(cat_failure: dict[str, Any]) -> None:
    old_shape = [
        {"type": "RUN_STARTED", "message": "Run started"},
        {"type": TOOL_RUN_FINISHED, "message": "Tool failed: cat missing.txt"},
        {"type": "TOOL_RUN_STARTED", "message": "cat missing.txt", "payload": cat_failure["payload"]},
    ]
    for event in old_shape:
        assert digest_event(event) is None
    assert render_events(old_shape) == ""
    assert render_events([]) == ""


def test_ok_events_reset_the_consecutive_counter(cat_failure: dict[str, Any]) -> None:
    three_in_a_row = [cat_failure, cat_failure, cat_failure]
    escalated = render_events(three_in_a_row)
    assert "Escalated:" in escalated and "3 times in a row" in escalated

    interrupted = [cat_failure, cat_failure, _ok_event("ls"), cat_failure]
    block = render_events(interrupted)
    assert "Escalated:" not in block
    assert "3 tool failure(s), 1 distinct:" in block and "(×3)" in block


def test_mixed_event_list_renders_one_block(
    node_failure: dict[str, Any], cat_failure: dict[str, Any]
) -> None:
    events = [
        {"type": "RUN_STARTED", "message": "Run started"},
        node_failure,
        _ok_event("ls"),
        cat_failure,
        {"type": "ASSISTANT_MESSAGE", "message": "Let me retry"},
        node_failure,
        _ok_event("pwd"),
    ]
    block = render_events(events, thresholds=Thresholds(consecutive=3, budget=None))
    assert block.startswith(BLOCK_OPEN) and block.endswith(BLOCK_CLOSE)
    assert "3 tool failure(s), 2 distinct:" in block
    lines = [line for line in block.splitlines() if line.startswith("  - ")]
    assert len(lines) == 2
    assert "'input.json'" in lines[0] and lines[0].endswith("(×2)")
    assert "missing.txt" in lines[1] and "×" not in lines[1]


@dataclass
class _Error:
    code: str
    message: str


@dataclass
class _Payload:
    ok: bool
    command: str | None = None
    error: _Error | None = None
    metrics: dict[str, int] = field(default_factory=dict)


@dataclass
class _Event:
    type: str
    message: str
    payload: _Payload | None = None


def test_objects_with_attributes_work_like_dicts(cat_failure: dict[str, Any]) -> None:
    p = cat_failure["payload"]
    obj = _Event(
        TOOL_RUN_FINISHED,
        cat_failure["message"],
        _Payload(False, p["command"], _Error(p["error"]["code"], p["error"]["message"]), dict(p["metrics"])),
    )
    from_obj = digest_event(obj)
    from_dict = digest_event(cat_failure)
    assert from_obj is not None and from_dict is not None
    assert from_obj.line == from_dict.line and from_obj.key == from_dict.key
    ok = _Event(TOOL_RUN_FINISHED, "ok", _Payload(True, "ls"))
    assert digest_event(ok) is None
    block = render_events([obj, obj, ok, obj])
    assert "3 tool failure(s), 1 distinct:" in block and "Escalated:" not in block
    assert digest_event(_Event("RUN_STARTED", "hi")) is None
