"""``otel-errcompact compact``: the real console script, run as a subprocess on real error output."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tests.realerrors import python_error, run

_APP = """
users = {"alice": 1}


def load_user(user_id):
    return users[user_id]


load_user("user_id")
"""


def _entry_point() -> str | None:
    beside = Path(sys.executable).with_name("otel-errcompact")
    if beside.exists():
        return str(beside)
    return shutil.which("otel-errcompact")


def _commands() -> list[list[str]]:
    cmds = [[sys.executable, "-m", "otel_errcompact.cli"]]
    entry = _entry_point()
    if entry is not None:
        cmds.append([entry])
    return cmds


def _cli(
    cmd: list[str], args: list[str], cwd: Path, stdin: str | None = None
) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [*cmd, *args],
        cwd=cwd,
        input=stdin,
        capture_output=True,
        text=True,
        timeout=60,
        env={**os.environ, "NO_COLOR": "1"},
    )


@pytest.fixture(scope="module")
def traceback_file(tmp_path_factory: pytest.TempPathFactory) -> Path:
    folder = tmp_path_factory.mktemp("cli")
    raw = python_error(folder, _APP, name="app.py")
    path = folder / "traceback.txt"
    path.write_text(raw, encoding="utf-8")
    return path


def _expected_line() -> str:
    line_no = next(i for i, s in enumerate(_APP.lstrip("\n").splitlines(), 1) if "return users" in s)
    return f"[KeyError] at app.py:{line_no} in load_user: 'user_id'"


def test_entry_point_is_installed() -> None:
    assert _entry_point() is not None, "the otel-errcompact console script is not installed"


@pytest.mark.parametrize("cmd", _commands(), ids=lambda c: Path(c[-1]).name)
def test_compact_file(cmd: list[str], traceback_file: Path) -> None:
    result = _cli(cmd, ["compact", str(traceback_file)], traceback_file.parent)
    assert result.returncode == 0, result.stderr
    assert result.stdout == _expected_line() + "\n"
    assert result.stderr == ""


@pytest.mark.parametrize("cmd", _commands(), ids=lambda c: Path(c[-1]).name)
def test_compact_stdin(cmd: list[str], traceback_file: Path) -> None:
    raw = traceback_file.read_text(encoding="utf-8")
    for args in (["compact"], ["compact", "-"]):
        result = _cli(cmd, args, traceback_file.parent, stdin=raw)
        assert result.returncode == 0, result.stderr
        assert result.stdout.strip() == _expected_line()


def test_json_gives_every_field(traceback_file: Path) -> None:
    result = _cli(_commands()[0], ["compact", "--json", str(traceback_file)], traceback_file.parent)
    assert result.returncode == 0, result.stderr
    data = json.loads(result.stdout)
    assert data["type"] == "KeyError"
    assert data["cause"] == "'user_id'"
    assert data["location"]["file"].endswith("app.py")
    assert data["location"]["func"] == "load_user"
    assert isinstance(data["location"]["line"], int)
    assert data["format"] == "python"
    assert data["retryable"] is False
    assert data["raw_chars"] == len(traceback_file.read_text(encoding="utf-8"))
    assert data["line"] == _expected_line()
    assert len(data["key"]) == 16 and data["key"] == data["key_parts"]["hash"]
    assert data["key_parts"]["type"] == "KeyError"
    assert data["key_parts"]["where"] == "app.py:load_user"
    assert "user_id" in data["key_parts"]["message"]
    assert {"status"} <= set(data)


def test_explain_says_type_where_message(traceback_file: Path) -> None:
    result = _cli(_commands()[0], ["compact", "--explain", str(traceback_file)], traceback_file.parent)
    assert result.returncode == 0, result.stderr
    lines = result.stdout.splitlines()
    assert lines[0] == _expected_line()
    text = "\n".join(lines[1:])
    assert "type:" in text and "'KeyError'" in text
    assert "where:" in text and "app.py:load_user" in text and "line numbers ignored" in text
    assert "message:" in text and "user_id" in text


def test_exit_code_and_command_with_real_bash_stderr(tmp_path: Path) -> None:
    failed = run(["bash", "-c", "nosuchcmd --flag"], cwd=tmp_path)
    assert failed.returncode == 127 and "nosuchcmd" in failed.stderr
    for cmd in _commands():
        result = _cli(
            cmd,
            ["compact", "--json", "--exit-code", str(failed.returncode), "--command", "nosuchcmd"],
            tmp_path,
            stdin=failed.stderr,
        )
        assert result.returncode == 0, result.stderr
        data = json.loads(result.stdout)
        assert data["type"] == "CommandNotFound"
        assert "nosuchcmd" in data["cause"]
        assert data["status"] == 127
        assert data["retryable"] is False


def test_missing_file_exits_2_without_traceback(tmp_path: Path) -> None:
    for cmd in _commands():
        result = _cli(cmd, ["compact", "no_such_error_file.txt"], tmp_path)
        assert result.returncode == 2
        assert result.stdout == ""
        assert "no_such_error_file.txt" in result.stderr
        assert "No such file" in result.stderr
        assert "Traceback" not in result.stderr


def test_unknown_kind_is_a_usage_error(traceback_file: Path) -> None:
    result = _cli(_commands()[0], ["compact", "--kind", "cobol", str(traceback_file)], traceback_file.parent)
    assert result.returncode == 2
    assert "invalid choice" in result.stderr and "Traceback" not in result.stderr
