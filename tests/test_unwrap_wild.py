"""The pre-stage's wild-form unwrappers take off only what they recognise.

Each input is real output (a real traceback, real pytest and gcc runs, a real JSON envelope encoded by
``json``), so the checks are the ones that matter: the framing comes off, and text that merely looks
similar (pytest's ``ERROR`` lines, a one-line API envelope, an intact traceback) is left alone.
"""

from __future__ import annotations

import json
import logging
import sys
from pathlib import Path

import pytest

from otel_errcompact.parsers._base import Hints
from otel_errcompact.unwrap import json_escaped, log_prefix, reindent, unwrap
from tests.realerrors import have, python_error, run, write

_SOURCE = """
    def load_user(users, uid):
        return users[uid]

    load_user({}, "user_id")
"""


def test_each_form_comes_back_to_the_raw_traceback(tmp_path: Path) -> None:
    raw = python_error(tmp_path, _SOURCE)
    formatter = logging.Formatter("%(asctime)s %(levelname)s %(name)s: %(message)s")
    logged = "\n".join(formatter.format(logging.LogRecord("w", logging.ERROR, __file__, 0, line, None, None))
                       for line in raw.rstrip("\n").split("\n"))
    assert unwrap(json.dumps(raw), Hints())[0] == raw
    assert unwrap(logged, Hints())[0] == raw.rstrip("\n")
    stripped = "\n".join(line.strip() for line in raw.rstrip("\n").split("\n"))
    restored = unwrap(stripped, Hints())[0]
    assert '  File "' in restored and "\n    return users[uid]" in restored
    assert restored.endswith("\nKeyError: 'user_id'")


def test_intact_text_is_left_alone(tmp_path: Path) -> None:
    raw = python_error(tmp_path, _SOURCE)
    assert reindent.unwrap(raw, Hints()) is None
    assert json_escaped.unwrap(raw, Hints()) is None
    assert log_prefix.unwrap(raw, Hints()) is None
    envelope = json.dumps({"error": {"message": "The model `m` does not exist", "type": "invalid_request_error",
                                     "code": "model_not_found"}})
    assert unwrap(envelope, Hints()) == (envelope, Hints())


def test_pytest_error_lines_are_not_a_log_prefix(tmp_path: Path) -> None:
    write(tmp_path, "test_a.py", "import missing_module_a\n")
    write(tmp_path, "test_b.py", "import missing_module_b\n")
    output = run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", str(tmp_path)], cwd=tmp_path).stdout
    assert "\nERROR " in output  # pytest's short summary: one "ERROR <file>" line per collection error
    assert log_prefix.unwrap(output, Hints()) is None


def test_compiler_output_is_not_a_log_prefix(tmp_path: Path) -> None:
    if not have("gcc"):
        pytest.skip("gcc is not installed")
    write(tmp_path, "calc.c", "int main(void) { return total_count + other_count; }\n")
    result = run(["gcc", "-c", "calc.c"], cwd=tmp_path)
    assert result.returncode != 0
    assert log_prefix.unwrap(result.stderr, Hints()) is None
    assert reindent.unwrap(result.stderr, Hints()) is None


def test_a_message_quoting_escaped_newlines_stays_one_line() -> None:
    try:
        {}["first\nsecond\nthird"]
    except KeyError as exc:
        line = f"{type(exc).__name__}: {exc}"
    assert line.count("\\n") == 2 and "\n" not in line
    assert json_escaped.unwrap(line, Hints()) is None
