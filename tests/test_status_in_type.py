"""HTTP status codes and exit codes live in the digest's type, also for Python exceptions through
``@ec.tool``: real subprocesses that exit non-zero and real HTTP clients against a loopback server."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from http.server import BaseHTTPRequestHandler
from pathlib import Path
from typing import Any

from tests.conftest import env_without_otel
from tests.realerrors import loopback_server, send_body

AGENT = textwrap.dedent(
    """
    import json, subprocess, sys, urllib.request
    import httpx, requests
    import otel_errcompact

    base = sys.argv[2]
    ec = otel_errcompact.init(sqlite_path=sys.argv[1], consecutive=99, budget="none")

    @ec.tool
    def run(code):
        subprocess.run(["bash", "-c", f"exit {code}"], check=True)

    @ec.tool
    def fetch_urllib(status):
        return urllib.request.urlopen(f"{base}/{status}", timeout=10).read()

    @ec.tool
    def fetch_httpx(status):
        return httpx.get(f"{base}/{status}", timeout=10).raise_for_status()

    @ec.tool
    def fetch_requests(status):
        return requests.get(f"{base}/{status}", timeout=10).raise_for_status()

    @ec.tool
    def plain(key):
        return {}[key]

    @ec.tool
    def detached(code):
        try:
            subprocess.run(["bash", "-c", f"exit {code}"], check=True)
        except subprocess.CalledProcessError:
            raise ValueError("config has no 'target' entry") from None

    out = {}
    with ec.conversation("conv-codes"):
        for name, tool, arg in [("exit1", run, 1), ("exit2", run, 2), ("urllib500", fetch_urllib, 500),
                                ("urllib503", fetch_urllib, 503), ("httpx500", fetch_httpx, 500),
                                ("httpx502", fetch_httpx, 502), ("requests404", fetch_requests, 404),
                                ("plain", plain, "k"), ("detached3", detached, 3), ("detached4", detached, 4)]:
            result = tool(arg)
            digest = result.outcome.digest
            out[name] = {"text": str(result), "key": digest.key, "status": digest.status,
                         "class": digest.error_class}
    print(json.dumps(out))
    ec.shutdown()
    """
)


class _Status(BaseHTTPRequestHandler):
    """Answers ``GET /<code>`` with that status and a short body."""

    def do_GET(self) -> None:
        code = int(self.path.strip("/"))
        send_body(self, code, b"upstream failed\n", content_type=None)

    def log_message(self, format: str, *args: Any) -> None:
        return


def _run_agent(tmp_path: Path) -> dict[str, Any]:
    """Run ``AGENT`` against a loopback server; what each of its tool calls returned, by name."""
    with loopback_server(_Status) as base:
        proc = subprocess.run(
            [sys.executable, "-c", AGENT, str(tmp_path / "t.sqlite3"), base],
            env=env_without_otel(), capture_output=True, text=True, timeout=120, check=False,
        )
    assert proc.returncode == 0, proc.stderr
    out: dict[str, Any] = json.loads(proc.stdout.strip().splitlines()[-1])
    return out


def test_codes_are_part_of_the_type_and_the_key(tmp_path: Path) -> None:
    out = _run_agent(tmp_path)
    assert out["exit1"]["text"].startswith("Error: [CalledProcessError exit 1] at <string>:")
    assert out["exit2"]["text"].startswith("Error: [CalledProcessError exit 2] at <string>:")
    assert out["urllib500"]["text"].startswith("Error: [HTTPError 500] at <string>:")
    assert out["urllib503"]["text"].startswith("Error: [HTTPError 503] at <string>:")
    assert out["httpx500"]["text"].startswith("Error: [HTTPStatusError 500] at <string>:")
    assert out["httpx502"]["text"].startswith("Error: [HTTPStatusError 502] at <string>:")
    assert out["requests404"]["text"].startswith("Error: [HTTPError 404] at <string>:")
    assert out["plain"]["text"].startswith("Error: [KeyError] at <string>:")
    assert [out[k]["status"] for k in ("exit1", "urllib503", "httpx502", "plain")] == [1, 503, 502, None]
    # Masking numbers in the message can no longer merge different codes into one class.
    pairs = [("exit1", "exit2"), ("urllib500", "urllib503"), ("httpx500", "httpx502")]
    assert all(out[a]["key"] != out[b]["key"] for a, b in pairs)
    # A 5xx is worth repeating, as the HTTP parser's own digests say; a 404 is not.
    assert [out[k]["class"] for k in ("urllib500", "urllib503", "httpx502", "requests404")] == [
        "transient", "transient", "transient", "permanent"]


def test_a_code_from_a_detached_exception_is_not_the_failures(tmp_path: Path) -> None:
    """``raise … from None`` detaches the exception handled: its exit code is not this failure's, and the
    same error from the same line stays one class whatever the detached command exited with."""
    out = _run_agent(tmp_path)
    assert out["detached3"]["text"].startswith("Error: [ValueError] at <string>:"), out["detached3"]["text"]
    assert out["detached3"]["status"] is None
    assert out["detached3"]["key"] == out["detached4"]["key"]


def test_the_trajectory_record_keeps_the_code_and_the_raw_error(tmp_path: Path) -> None:
    from otel_errcompact.sinks import TrajectoryStore

    env = env_without_otel()
    db = tmp_path / "t.sqlite3"
    with loopback_server(_Status) as base:
        proc = subprocess.run([sys.executable, "-c", AGENT, str(db), base], env=env, capture_output=True,
                              text=True, timeout=120, check=False)
    assert proc.returncode == 0, proc.stderr
    with TrajectoryStore(db) as store:
        rows = {r.digest_line.split("]")[0] + "]": r for r in store.list(limit=20) if r.digest_line}
        record = store.get(rows["[CalledProcessError exit 2]"].record_id)
    assert record is not None and record.digest is not None
    assert record.attributes.get("process.exit.code") == 2
    assert "returned non-zero exit status 2." in record.raw_error  # the audit copy is untouched
    assert record.digest.type == "CalledProcessError exit 2"
