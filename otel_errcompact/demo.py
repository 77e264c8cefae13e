"""``otel-errcompact demo``: a scripted agent loop whose tools really fail, with and without compaction.

No model and no network beyond 127.0.0.1: the "agent" is a fixed plan of tool calls that retries the way
a model stuck on a problem does. The tools fail for real — a missing file, a missing SQLite table, a
local HTTP server answering 429 and 500 with the JSON bodies model APIs send, a subprocess that exits
non-zero — and each goes through the tool boundary of :func:`otel_errcompact.init`. At the end the demo
prints the raw error text the agent would have appended next to the block it gets instead, with real
token counts, the escalation that stopped the loop, and where the trajectories went.

The demo never writes into the user's real trajectory store by accident: unless ``--db`` or
``OTEL_ERRCOMPACT_SQLITE_PATH`` names a file, its records go to a new temporary file, which is kept after
the run (so ``trajectories list`` can read it) and printed.
"""

from __future__ import annotations

import functools
import json
import os
import shutil
import sqlite3
import subprocess
import sys
import tempfile
import textwrap
import threading
import urllib.error
import urllib.request
import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

from opentelemetry import trace

from otel_errcompact.api import ErrCompact, init
from otel_errcompact.boundary import ToolErrorText
from otel_errcompact.config import setting_origin
from otel_errcompact.demo_recovery import run_recovery_demo
from otel_errcompact.exceptions import ErrorBudgetExceeded
from otel_errcompact.recovery.breaker import BreakerPolicy
from otel_errcompact.tokens import count_tokens

__all__ = ["run_demo"]

_BREAKER_COOLDOWN_S = 1.0

_RATE_LIMIT_BODY: dict[str, Any] = {
    "error": {
        "message": "Rate limit reached for gpt-4o in organization org-demo on tokens per min (TPM): "
        "Limit 30000, Used 29750, Requested 1622. Please try again in 2.744s.",
        "type": "tokens",
        "param": None,
        "code": "rate_limit_exceeded",
    }
}
_OVERLOADED_BODY: dict[str, Any] = {
    "type": "error",
    "error": {"type": "api_error", "message": "Internal server error"},
    "request_id": "req_011CX8Zb7cW2FQkYfRnzKx3D",
}


class _ApiHandler(BaseHTTPRequestHandler):
    """A local stand-in for a model API that is rate limiting (429) and failing (500)."""

    def do_POST(self) -> None:
        length = int(self.headers.get("Content-Length") or 0)
        self.rfile.read(length)
        body: dict[str, Any]
        if self.path.startswith("/v1/chat/completions"):
            status, body, extra = 429, _RATE_LIMIT_BODY, {"Retry-After": "3", "x-request-id": uuid.uuid4().hex}
        else:
            status, body, extra = 500, _OVERLOADED_BODY, {"request-id": uuid.uuid4().hex}
        payload = json.dumps(body).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(payload)))
        for name, value in extra.items():
            self.send_header(name, value)
        self.end_headers()
        self.wfile.write(payload)

    def log_message(self, format: str, *args: Any) -> None:
        return


@contextmanager
def _api_server() -> Iterator[str]:
    server = ThreadingHTTPServer(("127.0.0.1", 0), _ApiHandler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()


class CommandFailed(RuntimeError):
    """A shell command exited non-zero. Like ``CalledProcessError`` it carries ``returncode``, which the
    tool boundary lifts into the digest's type (``[CommandFailed exit 127]``)."""

    def __init__(self, message: str, returncode: int) -> None:
        super().__init__(message)
        self.returncode = returncode


@dataclass
class _Step:
    tool: str
    call: Callable[[], Any]


def _tools(ec: ErrCompact, workdir: Path, api: str, raw_errors: list[str]) -> dict[str, Callable[..., Any]]:
    """The agent's tools, wrapped by the boundary; each also keeps the raw error it produced."""
    import traceback

    def keep_raw(fn: Callable[..., Any]) -> Callable[..., Any]:
        # What an uninstrumented agent would have appended to its context: the raw traceback or body.
        @functools.wraps(fn)
        def inner(*args: Any, **kwargs: Any) -> Any:
            try:
                result = fn(*args, **kwargs)
            except Exception as exc:
                raw_errors.append("".join(traceback.format_exception(type(exc), exc, exc.__traceback__)))
                raise
            if isinstance(result, dict) and result.get("isError"):
                raw_errors.append("\n".join(part["text"] for part in result["content"]))
            return result

        return inner

    def read_config(path: str) -> dict[str, Any]:
        with open(workdir / path, encoding="utf-8") as fh:
            return dict(line.split("=", 1) for line in fh.read().splitlines() if "=" in line)

    def query_db(sql: str) -> list[tuple[Any, ...]]:
        with sqlite3.connect(workdir / "shop.db") as conn:
            return conn.execute(sql).fetchall()

    def call_model(route: str, prompt: str) -> Any:
        request = urllib.request.Request(
            f"{api}{route}",
            data=json.dumps({"model": "gpt-4o", "messages": [{"role": "user", "content": prompt}]}).encode(),
            headers={"Content-Type": "application/json", "Authorization": "Bearer sk-demo-" + "x" * 40},
            method="POST",
        )
        try:
            with urllib.request.urlopen(request, timeout=5) as response:
                return json.loads(response.read())
        except urllib.error.HTTPError as err:
            if err.code >= 500:
                raise
            # Rate limits come back as data, the way MCP tools report errors (isError).
            headers = "".join(f"{k}: {v}\n" for k, v in err.headers.items())
            text = f"HTTP/1.1 {err.code} {err.reason}\n{headers}\n{err.read().decode()}"
            return {"isError": True, "content": [{"type": "text", "text": text}]}

    def run_command(command: str) -> str:
        proc = subprocess.run(["bash", "-c", command], capture_output=True, text=True, timeout=30)
        if proc.returncode != 0:
            telling = (proc.stderr.strip().splitlines() or ["(no output)"])[-1]
            raise CommandFailed(f"exit status {proc.returncode}: {telling}\ncommand: {command}\n{proc.stderr}",
                                proc.returncode)
        return proc.stdout

    return {
        fn.__name__: ec.tool(keep_raw(fn))
        for fn in (read_config, query_db, call_model, run_command)
    }


def _plan(tools: dict[str, Callable[..., Any]]) -> list[_Step]:
    """A model stuck on a schema problem: it keeps going back to the same failing query."""
    t = tools
    return [
        _Step("read_config", lambda: t["read_config"]("settings.yaml")),
        _Step("read_config", lambda: t["read_config"]("settings.yaml")),
        _Step("read_config", lambda: t["read_config"]("settings.example.yaml")),
        _Step("query_db", lambda: t["query_db"]("SELECT id, total FROM orders WHERE status = 'open'")),
        _Step("call_model", lambda: t["call_model"]("/v1/chat/completions", "summarise the open orders")),
        _Step("call_model", lambda: t["call_model"]("/v1/chat/completions", "summarise the open orders")),
        _Step("call_model", lambda: t["call_model"]("/v1/messages", "summarise the open orders")),
        _Step("run_command", lambda: t["run_command"]("sqlite3-migrate --apply schema.sql")),
        _Step("query_db", lambda: t["query_db"]("SELECT id, total FROM orders WHERE status = 'open'")),
        _Step("query_db", lambda: t["query_db"]("SELECT id, total FROM orders WHERE status = 'pending'")),
        _Step("query_db", lambda: t["query_db"]("SELECT id, total FROM orders")),
        _Step("query_db", lambda: t["query_db"]("SELECT * FROM orders LIMIT 1")),
    ]


def _columns(left: str, right: str, width: int) -> str:
    half = (width - 3) // 2
    lwrap = [seg for line in left.splitlines() for seg in (textwrap.wrap(line, half) or [""])]
    rwrap = [seg for line in right.splitlines() for seg in (textwrap.wrap(line, half) or [""])]
    rows = max(len(lwrap), len(rwrap))
    lwrap += [""] * (rows - len(lwrap))
    rwrap += [""] * (rows - len(rwrap))
    return "\n".join(f"{a:<{half}} │ {b}" for a, b in zip(lwrap, rwrap, strict=True))


def run_demo(*, sqlite_path: Path | None = None, out: Any = None, max_raw_lines: int = 40) -> int:
    """Run the demo and print its report; returns the process exit code (0)."""
    out = out or sys.stdout
    width = max(80, min(shutil.get_terminal_size((120, 40)).columns, 160))
    settings: dict[str, Any] = {}
    temporary = sqlite_path is None and setting_origin("sqlite_path").startswith("the default")
    if temporary:
        sqlite_path = Path(tempfile.mkdtemp(prefix="otel-errcompact-demo-")) / "trajectories.sqlite3"
    if sqlite_path is not None:
        settings["sqlite_path"] = sqlite_path
    ec = None
    try:
        ec = init(
            service_name=os.environ.get("OTEL_SERVICE_NAME") or "errcompact-demo",
            breaker=BreakerPolicy(threshold=3, cooldown_s=_BREAKER_COOLDOWN_S),  # short, so the demo can wait it out
            **settings,
        )
    finally:  # a bad setting, or switched off: the temporary store's folder would be left behind, empty
        if temporary and sqlite_path is not None and (ec is None or not ec.settings.enabled):
            shutil.rmtree(sqlite_path.parent, ignore_errors=True)
    if not ec.settings.enabled:  # switched off: nothing would be compacted, and the demo's failures raise
        print("otel-errcompact: the library is switched off (OTEL_ERRCOMPACT_ENABLED=false), so there is "
              "nothing to show; unset the variable to run the demo", file=sys.stderr)
        return 2
    conversation_id = f"demo-{uuid.uuid4().hex[:8]}"
    raw_errors: list[str] = []

    def say(text: str = "") -> None:
        print(text, file=out)

    with tempfile.TemporaryDirectory(prefix="errcompact-demo-") as tmp, _api_server() as api:
        workdir = Path(tmp)
        (workdir / "settings.example.yaml").write_text("db=shop.db\nregion=eu-west-1\n", encoding="utf-8")
        sqlite3.connect(workdir / "shop.db").close()  # an empty database: the orders table is missing
        tools = _tools(ec, workdir, api, raw_errors)
        say(f"otel-errcompact demo — conversation {conversation_id}, thresholds: {ec.history.thresholds}")
        say("")
        tracer = trace.get_tracer("otel_errcompact.demo")
        agent_span = tracer.start_as_current_span(
            "invoke_agent demo-agent",
            attributes={
                "gen_ai.operation.name": "invoke_agent",
                "gen_ai.agent.name": "demo-agent",
                "gen_ai.conversation.id": conversation_id,
            },
        )
        with ec.conversation(conversation_id), agent_span:
            for number, step in enumerate(_plan(tools), start=1):
                before = len(raw_errors)
                try:
                    result = step.call()
                except ErrorBudgetExceeded as stop:
                    say(f"step {number:>2}  {step.tool:<12} HALTED  {stop}")
                    break
                if isinstance(result, ToolErrorText):
                    raw_tokens = count_tokens(raw_errors[-1]) if len(raw_errors) > before else 0
                    say(f"step {number:>2}  {step.tool:<12} failed  raw {raw_tokens:>4} tokens → {result}")
                else:
                    say(f"step {number:>2}  {step.tool:<12} ok")
        block = ec.context(conversation_id)
        ec.flush()

    raw_text = "\n".join(raw_errors)
    raw_tokens, block_tokens = count_tokens(raw_text), count_tokens(block)
    saved = 100.0 * (1 - block_tokens / raw_tokens) if raw_tokens else 0.0
    raw_lines = raw_text.splitlines()
    shown_raw = "\n".join(raw_lines[:max_raw_lines])
    if len(raw_lines) > max_raw_lines:
        shown_raw += f"\n… {len(raw_lines) - max_raw_lines} more lines"
    say("")
    say(_columns(
        f"WITHOUT otel-errcompact: raw errors appended ({raw_tokens} tokens)",
        f"WITH otel-errcompact: the block in the next prompt ({block_tokens} tokens)",
        width,
    ))
    say("─" * width)
    say(_columns(shown_raw, block, width))
    say("─" * width)
    say(f"{len(raw_errors)} failures: {raw_tokens} tokens of raw error text → {block_tokens} tokens "
        f"({saved:.1f}% fewer; o200k_base BPE).")
    endpoint = os.environ.get("OTEL_EXPORTER_OTLP_ENDPOINT") or os.environ.get("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT")
    escalation = ec.history.escalation(conversation_id)
    if escalation is not None:
        say(f"Escalation: {escalation.reason} — {escalation.count} (threshold {escalation.threshold}), "
            f"action {escalation.action}: {escalation.digest}")
        if endpoint:
            say("  recorded as span event and log event `errcompact.escalation`, and counted in "
                "`errcompact.escalations`.")
        else:
            say("  recorded as span event `errcompact.escalation` on the agent span; set "
                "OTEL_EXPORTER_OTLP_ENDPOINT to export it with the log event and metrics.")
    where = ec.sqlite_path
    if where is not None:
        say(f"Trajectories (full raw errors): {where}")
        if temporary:
            say("  (a temporary store for this demo; pass --db PATH or set OTEL_ERRCOMPACT_SQLITE_PATH to "
                "choose the file)")
        say(f"  see them: otel-errcompact trajectories list --db {where} --conversation {conversation_id}")
    else:
        say("Trajectories: the SQLite store is off (OTEL_ERRCOMPACT_SQLITE_PATH is empty).")
    if endpoint:
        say(f"  and exported over OTLP to {endpoint} (traces, logs, metrics).")
    run_recovery_demo(ec, say, cooldown_s=_BREAKER_COOLDOWN_S)
    ec.shutdown()
    return 0
