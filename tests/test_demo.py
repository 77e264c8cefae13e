"""The README's main job: ``otel-errcompact demo`` on the embedded default, no server."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from otel_errcompact.sinks import TrajectoryStore


def test_demo_runs_escalates_and_keeps_every_raw_error(tmp_path: Path) -> None:
    env = {k: v for k, v in os.environ.items() if not k.startswith("OTEL_")}
    db = tmp_path / "demo.sqlite3"
    run = subprocess.run(
        [sys.executable, "-m", "otel_errcompact.cli", "demo", "--db", str(db)],
        env=env, capture_output=True, text=True, timeout=300,
    )
    assert run.returncode == 0, run.stderr
    out = run.stdout
    assert out.count("[RECENT ERRORS]") == 1 and out.count("[/RECENT ERRORS]") == 1
    assert "HALTED" in out and "ErrorBudgetExceeded" not in run.stderr
    assert "[OperationalError] at demo.py" in out and "no such table: orders (×4)" in out
    assert "[HTTP 429]" in out and "[FileNotFoundError]" in out
    assert "Traceback (most recent call last)" in out  # the raw side of the comparison
    raw_tokens, block_tokens = [
        int(word) for word in out.split("failures: ", 1)[1].split(" (")[0].split() if word.isdigit()
    ]
    assert block_tokens < raw_tokens / 3
    with TrajectoryStore(db) as store:
        rows = [r for r in store.list(limit=50) if r.tool_name != "read_notes"]  # not the recovery part's
        assert len(rows) == 10
        assert sum(r.escalated for r in rows) == 1
        assert all(r.digest_line for r in rows)
        full = store.get(rows[-1].record_id)
        assert full is not None and "Traceback (most recent call last)" in full.raw_error
