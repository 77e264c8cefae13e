"""The README's code as a new user copies it: each Python snippet run as written, its outputs compared with
the README's own text (the digest in a comment, the block printed below a snippet, the ``--explain`` text).

Snippets are read from README.md by the heading they sit under, so an edit to either the README or the code
that makes them disagree fails here.
"""

from __future__ import annotations

import contextlib
import io
import json
import re
import sqlite3
import subprocess
import sys
import traceback
from pathlib import Path

import pytest

from otel_errcompact import ErrorHistory, Thresholds, compact_text
from otel_errcompact.cli import main as cli_main
from tests.conftest import env_without_otel

README = Path(__file__).resolve().parent.parent / "README.md"


def _section(heading: str) -> str:
    """The README's text under ``heading`` (any level), up to the next heading."""
    text = README.read_text(encoding="utf-8")
    found = re.search(rf"^#+ {re.escape(heading)}\n(.*?)(?=^#+ )", text, re.S | re.M)
    assert found, f"no section {heading!r} in README.md"
    return found.group(1)


def _blocks(heading: str, language: str = "") -> list[str]:
    """The fenced blocks of a section, of ``language`` (``""``: those without one, as outputs are shown)."""
    blocks: list[str] = []
    opened: str | None = None
    lines: list[str] = []
    for line in _section(heading).splitlines(keepends=True):
        if not line.startswith("```"):
            lines.append(line)
        elif opened is None:
            opened, lines = line[3:].strip(), []
        else:
            if opened == language:
                blocks.append("".join(lines))
            opened = None
    return blocks


def _failing(path: str, source: str, call: str, **names: object) -> str:
    """The traceback of running ``source`` as the file ``path`` and calling ``call`` in it (with ``names``
    defined): a real error of real code at the file and line the README shows."""
    namespace: dict[str, object] = dict(names)
    exec(compile(source, path, "exec"), namespace)
    try:
        exec(call, namespace)
    except Exception:
        return traceback.format_exc()
    raise AssertionError(f"{call} did not fail")


def _quoted_after(marker: str, line: str) -> str:
    """The double-quoted text after ``marker`` in a snippet's comment."""
    found = re.search(re.escape(marker) + r'\s*"(.*)"', line)
    assert found, line
    return found.group(1)


RUN_AS_APP = """
import json, sys
source = open(sys.argv[1], encoding="utf-8").read()
namespace = {"__name__": "__main__"}
exec(compile(source, "app.py", "exec"), namespace)
print(json.dumps({"result": str(namespace["result"]), "result_type": type(namespace["result"]).__name__,
                  "prompt": namespace["prompt"]}))
"""


def test_the_one_init_call_snippet_runs_as_written_and_returns_the_digest_it_names(tmp_path: Path) -> None:
    """"One init call", copied into ``app.py`` and run in a fresh interpreter with nothing configured: the tool's
    real KeyError comes back as the ToolErrorText its comment shows, and the prompt carries the block."""
    (snippet,) = _blocks("One init call", "python")
    app = tmp_path / "app.py"
    app.write_text(snippet, encoding="utf-8")
    env = env_without_otel()
    env["XDG_DATA_HOME"] = str(tmp_path / "xdg")
    proc = subprocess.run([sys.executable, "-c", RUN_AS_APP, str(app)], env=env, capture_output=True, text=True,
                          timeout=120, check=False)
    assert proc.returncode == 0, proc.stderr
    out = json.loads(proc.stdout.strip().splitlines()[-1])
    (comment,) = [line for line in snippet.splitlines() if "result = " in line]
    assert out["result_type"] == "ToolErrorText"
    assert out["result"] == _quoted_after("ToolErrorText:", comment)
    digest = out["result"].removeprefix("Error: ")
    assert out["prompt"].splitlines()[1:] == [
        "[RECENT ERRORS]", "1 tool failure(s), 1 distinct:", f"  - {digest}",
        "Consider: retry with different input, skip the failing step, or request human help.", "[/RECENT ERRORS]",
    ]


APP = "\n" * 40 + "def load_user(user):\n    return user['user_id']\n"
"""``load_user`` at app.py:41, failing on line 42 as the README's example does."""


def test_the_core_snippet_prints_the_digest_and_the_block_the_readme_shows() -> None:
    """"The core, without OpenTelemetry": with a real traceback of a KeyError at app.py:42, the digest is the
    one its comment names and the block it prints is the README's block, character for character."""
    (snippet,) = _blocks("The core, without OpenTelemetry", "python")
    (shown,) = _blocks("The core, without OpenTelemetry")
    namespace: dict[str, object] = {"raw_traceback": _failing("app.py", APP, "load_user({})")}
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        exec(compile(snippet, "README.md", "exec"), namespace)
    (comment,) = [line for line in snippet.splitlines() if line.startswith("d.line")]
    digest = namespace["d"]
    assert digest.line == _quoted_after("#", comment)  # type: ignore[attr-defined]
    assert out.getvalue() == shown


def test_the_explain_text_is_what_the_cli_prints_for_that_error(tmp_path: Path) -> None:
    """The ``--explain`` text under "The dedup key" is the command's output for the README's own example."""
    (shown,) = _blocks("The dedup key")
    err = tmp_path / "err.txt"
    err.write_text(_failing("app.py", APP, "load_user({})"), encoding="utf-8")
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        assert cli_main(["compact", str(err), "--explain"]) == 0
    line, explained = out.getvalue().split("\n", 1)
    assert line == "[KeyError] at app.py:42 in load_user: 'user_id'"
    assert explained == shown


AGENT = (
    "import sqlite3\n" + "\n" * 6
    + "def read_config():\n    return open('settings.yaml', encoding='utf-8').read()\n" + "\n" * 5
    + "def query_db(conn):\n    return conn.execute('SELECT * FROM orders').fetchall()\n"
)
"""``read_config`` failing at agent.py:9 and ``query_db`` at agent.py:16, as in the README's escalated block."""


def test_the_escalated_block_is_what_the_history_renders(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """"History and escalation": a missing file once, then a missing table three times in a row, with the
    default thresholds, render the README's block (the breaching line marked, its digest not repeated)."""
    (shown,) = _blocks("History and escalation")
    monkeypatch.chdir(tmp_path)  # no settings.yaml here
    history = ErrorHistory(Thresholds())
    history.observe("conv-1", compact_text(_failing("agent.py", AGENT, "read_config()")))
    conn = sqlite3.connect(":memory:")
    for _ in range(3):
        history.observe("conv-1", compact_text(_failing("agent.py", AGENT, "query_db(conn)", conn=conn)))
    assert history.render("conv-1") + "\n" == shown
