"""flake8, ruff and eslint reports from real runs: rule code, message and file:line survive."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from otel_errcompact.compactor import compact_text
from otel_errcompact.digest import Digest
from tests.realerrors import have, run, write

FLAKE8 = ["flake8", "--isolated", "--select=F821,F401,E999,E111"]


def _lint(folder: Path, cmd: list[str]) -> Digest:
    result = run(cmd, cwd=folder)
    assert result.returncode != 0, result.output
    return compact_text(result.output, exit_code=result.returncode, command=" ".join(cmd))


@pytest.mark.skipif(not have("flake8"), reason="flake8 is not installed")
def test_flake8_undefined_name_keeps_code_name_and_position(tmp_path: Path) -> None:
    write(tmp_path, "app.py", "import os\n\n\ndef load():\n    return usr.name\n")
    d = _lint(tmp_path, [*FLAKE8, "app.py"])
    # The undefined name outranks the unused import reported above it.
    assert d.line == "[F821] at app.py:5: undefined name 'usr' (+1 more)"
    write(tmp_path, "app.py", "\n\n\n\n\n\ndef load():\n    return usr.name\n")
    moved = _lint(tmp_path, [*FLAKE8, "app.py"])
    assert moved.key == d.key  # the line moved and the unused import went away: same class
    write(tmp_path, "app.py", "def load():\n    return cfg.name\n")
    assert _lint(tmp_path, [*FLAKE8, "app.py"]).key != d.key


@pytest.mark.skipif(not have("flake8"), reason="flake8 is not installed")
def test_flake8_syntax_error_wins(tmp_path: Path) -> None:
    write(tmp_path, "views.py", "import sys\ntotal = (1 + 2))\n")
    d = _lint(tmp_path, [*FLAKE8, "views.py"])
    assert d.type == "E999" and d.cause.startswith("SyntaxError: unmatched ')'")
    assert d.location is not None and d.location.file == "views.py"


@pytest.mark.skipif(not have("ruff"), reason="ruff is not installed")
@pytest.mark.parametrize("fmt", [[], ["--output-format=concise"]])
def test_ruff_full_and_concise_agree(tmp_path: Path, fmt: list[str]) -> None:
    write(tmp_path, "app.py", "def load():\n    return usr.name\n")
    d = _lint(tmp_path, ["ruff", "check", "--no-cache", "--isolated", "--select=F", *fmt, "app.py"])
    assert d.type == "F821" and "`usr`" in d.cause
    assert d.location is not None and (d.location.file, d.location.line) == ("app.py", 2)


_LOCAL_ESLINT = Path(__file__).resolve().parents[2] / ".cache" / "eslint" / "node_modules" / ".bin" / "eslint"


def _eslint() -> str | None:
    """The pinned eslint from ``.ci/eslint-install.sh``, else one on PATH."""
    return str(_LOCAL_ESLINT) if _LOCAL_ESLINT.exists() else shutil.which("eslint")


@pytest.mark.skipif(_eslint() is None, reason="eslint is not installed")
def test_eslint_stylish(tmp_path: Path) -> None:
    write(tmp_path, "client.js", "export function go() { return fetchUser(1); }\n")
    cmd = [str(_eslint()), "--no-eslintrc", "--env", "es2022", "--parser-options", "ecmaVersion:2022",
           "--parser-options", "sourceType:module", "--rule", '{"no-undef": "error"}', "client.js"]
    d = _lint(tmp_path, cmd)
    assert d.type == "no-undef" and d.cause == "'fetchUser' is not defined"
    assert d.location is not None and d.location.file.endswith("client.js")


# SWE-agent's windowed edit tool reverts an edit that flake8 rejects and answers with this template
# (its _LINT_ERROR_TEMPLATE); the error list holds flake8's diagnostics as "- CODE message".
LINT_GATE = """Your proposed edit has introduced new syntax error(s). Please read this error message carefully \
and then retry editing the file.

ERRORS:

{errors}

This is how your edit would have looked if applied
------------------------------------------------
[File: {path} ({total} lines total)]
{window}
------------------------------------------------

This is the original code before your edit
------------------------------------------------
[File: {path} ({total} lines total)]
{window}
------------------------------------------------

Your changes have NOT been applied. Please fix your edit command and try again.
DO NOT re-run the same failed edit command. Running it again will lead to the same error.
"""


@pytest.mark.skipif(not have("flake8"), reason="flake8 is not installed")
def test_lint_gate_template_keeps_the_diagnostic_and_the_file(tmp_path: Path) -> None:
    keys = {}
    for name, body in (("usr", "def load():\n    return usr.name\n"), ("cfg", "def load():\n    return cfg.name\n"),
                       ("indent", "def load():\n    x = 1\n      return x\n")):
        path = write(tmp_path, "app.py", body)
        result = run(["flake8", "--isolated", "--select=F821,F822,F831,E111,E112,E113,E999,E902", str(path)],
                     cwd=tmp_path)
        assert result.returncode == 1
        errors = "\n".join("- " + line.split(": ", 1)[1] for line in result.stdout.splitlines())
        window = "\n".join(f"{n}:{text}" for n, text in enumerate(body.splitlines(), 1))
        framed = LINT_GATE.format(errors=errors, path=path, total=len(body.splitlines()), window=window)
        d = compact_text(framed)
        code, message = result.stdout.splitlines()[0].split(": ", 1)[1].split(" ", 1)
        assert (d.type, d.format) == (code, "linter"), d.line
        assert message in d.cause and "app.py" in d.line
        assert "NOT been applied" not in d.line and "would have looked" not in d.line
        keys[name] = d.key
    assert len(set(keys.values())) == 3
