"""``otel-errcompact demo`` shows the four recoveries in its output and as span events."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from tests.conftest import env_without_otel


def test_demo_shows_each_recovery_and_its_span_events(tmp_path: Path) -> None:
    env = env_without_otel()
    run = subprocess.run(
        [sys.executable, "-m", "otel_errcompact.cli", "demo", "--db", str(tmp_path / "demo.sqlite3")],
        env=env, capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert run.returncode == 0, run.stderr
    out = run.stdout.split("RECOVERY", 1)[1]
    assert "a 429 recovered after its retry-after: retry_wait → completed" in out
    assert "retry_wait: status 429; retry after 0.5s" in out
    assert "compacted once: tool_use → tool_use → tool_use → reactive_compact_retry → completed" in out
    before, after = (int(x.split(" chars")[0]) for x in out.split("before compaction: ")[1].split("after: ")[:2])
    assert after < before
    assert "max_tokens sent: [1024, 2048]" in out
    assert "call 4: refused: circuit open: [FileNotFoundError]" in out and "(×3); retry after" in out
    assert "the half-open probe: ok → closed" in out
    for event in (
        "event errcompact.transition retry_wait",
        "event errcompact.transition reactive_compact_retry",
        "event errcompact.transition max_output_tokens_recovery",
        "event errcompact.breaker closed → open",
        "event errcompact.breaker open → half_open",
        "event errcompact.breaker half_open → closed",
    ):
        assert event in out, event
