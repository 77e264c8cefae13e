"""The README's main job: ``otel-errcompact demo`` on the embedded default, no server."""

from __future__ import annotations

import subprocess
import sys
import tempfile
from collections.abc import Callable
from pathlib import Path

import pytest

from otel_errcompact import BreakerPolicy
from otel_errcompact.demo_recovery import run_recovery_demo
from otel_errcompact.sinks import TrajectoryStore
from tests.conftest import OTel, env_without_otel


def test_demo_runs_escalates_and_keeps_every_raw_error(tmp_path: Path) -> None:
    env = env_without_otel()
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


def test_recovery_demo_leaves_no_folder_behind(
    make_otel: Callable[..., OTel], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    pytest.importorskip("openai")
    private = tmp_path / "tmp"
    private.mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(private))
    otel = make_otel(breaker=BreakerPolicy(threshold=3, cooldown_s=0.2))
    lines: list[str] = []
    seen_during: list[list[str]] = []

    def say(text: str) -> None:
        lines.append(text)
        if text.lstrip().startswith("call 1:"):  # the breaker part reads its notes from the folder
            seen_during.append(sorted(p.name for p in private.glob("errcompact-recovery-*")))

    run_recovery_demo(otel.ec, say, cooldown_s=0.2)
    assert len(seen_during) == 1 and len(seen_during[0]) == 1, lines  # the folder was made in the private TMPDIR
    assert any("next call: 'all good\\n'" in line for line in lines), lines  # the notes were written and read back
    assert list(private.glob("errcompact-recovery-*")) == []
