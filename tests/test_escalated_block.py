"""After a breach, the ``[RECENT ERRORS]`` block marks the listed line that escalated instead of quoting
its digest a second time: an agent run in a fresh interpreter, as a user runs one."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from pathlib import Path

from otel_errcompact import compact_text, count_tokens
from otel_errcompact.history import ErrorHistory, Limits, Thresholds
from otel_errcompact.render import BLOCK_CLOSE, BLOCK_OPEN
from tests.conftest import env_without_otel

AGENT = textwrap.dedent(
    """
    import json, sqlite3, sys
    import otel_errcompact

    ec = otel_errcompact.init(sqlite_path=sys.argv[1], consecutive=int(sys.argv[4]), budget=sys.argv[2],
                              action=sys.argv[3], human_review=lambda escalation: None)

    @ec.tool
    def read_config(path):
        with open(path) as fh:
            return fh.read()

    @ec.tool
    def query_db(sql):
        with sqlite3.connect(":memory:") as conn:
            return conn.execute(sql).fetchall()

    with ec.conversation("conv-block"):
        read_config("settings.yaml")
        for status in ("open", "pending", "closed"):
            query_db(f"SELECT id FROM orders WHERE status = '{status}'")
        print(json.dumps({"block": ec.context("conv-block")}))
    ec.shutdown()
    """
)


def _block(tmp_path: Path, budget: str, action: str = "halt", consecutive: int = 3) -> str:
    env = env_without_otel()
    proc = subprocess.run(
        [sys.executable, "-c", AGENT, str(tmp_path / "t.sqlite3"), budget, action, str(consecutive)],
        cwd=tmp_path, env=env, capture_output=True, text=True, timeout=120, check=False,
    )
    assert proc.returncode == 0, proc.stderr
    block: str = json.loads(proc.stdout.strip().splitlines()[-1])["block"]
    return block


def test_the_escalated_line_is_marked_not_repeated(tmp_path: Path) -> None:
    block = _block(tmp_path, "none")
    lines = block.splitlines()
    assert lines[0] == BLOCK_OPEN and lines[-1] == BLOCK_CLOSE
    assert lines[1] == "4 tool failure(s), 2 distinct:"
    assert lines[2].startswith("  - [FileNotFoundError]") and "Escalated" not in lines[2]
    assert lines[3].startswith("  - [OperationalError]")
    assert lines[3].endswith("no such table: orders (×3) ← Escalated: 3 times in a row (threshold 3)")
    assert block.count("no such table: orders") == 1  # the digest appears once
    assert lines[4].startswith("Stop retrying the failing step")
    assert len(lines) == 6


def test_a_budget_breach_names_its_reason(tmp_path: Path) -> None:
    # Human review: the agent goes on, the block tells why. The consecutive threshold is out of reach here,
    # so the budget breach is the one standing (a later stuck loop would replace it).
    block = _block(tmp_path, "2", "human", consecutive=10)
    assert "(×1)" not in block
    marked = [line for line in block.splitlines() if "← Escalated:" in line]
    assert marked == [line for line in block.splitlines() if "no such table" in line]
    assert marked[0].endswith("← Escalated: 2 failures in this run (budget 2)")


def test_a_breach_whose_line_is_not_listed_is_quoted_once(tmp_path: Path) -> None:
    """When the class that breached is folded out of the block, the sentence names it instead."""
    # Distinct names, not numbered ones: a number standing alone is a data value and would not split a class.
    names = ("alpha", "beta", "gamma", "delta")
    raws = [
        subprocess.run([sys.executable, "-c", f"{{}}['key_{name}']"], capture_output=True, text=True).stderr
        for name in names
    ]
    h = ErrorHistory(Thresholds(consecutive=2, budget=None), Limits(max_lines=2))
    h.observe("s", compact_text(raws[0]))
    h.observe("s", compact_text(raws[0]))  # breach on key_alpha
    for raw in raws[1:]:
        h.observe("s", compact_text(raw))
    block = h.render("s")
    assert "'key_alpha'" in block and block.count("'key_alpha'") == 1
    assert "Escalated: error threshold breached" in block and "← Escalated" not in block


def test_marking_costs_fewer_tokens_than_quoting(tmp_path: Path) -> None:
    block = _block(tmp_path, "none")
    line = next(line for line in block.splitlines() if "← Escalated" in line)
    digest = line.split("  - ", 1)[1].split(" (×", 1)[0]
    quoted = block.replace(
        " ← Escalated: 3 times in a row (threshold 3)", ""
    ).replace(
        "Stop retrying",
        f"Escalated: error threshold breached: the same error 3 times in a row (threshold 3): {digest}; "
        "halting\nStop retrying",
    )
    assert count_tokens(block) < count_tokens(quoted)
