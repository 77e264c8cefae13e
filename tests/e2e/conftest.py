"""End-to-end fixtures: a real Arize Phoenix OTLP receiver on 127.0.0.1.

Why Phoenix: it is a pip-installable OTLP receiver (HTTP ``/v1/traces`` and gRPC)
that stores spans in sqlite and gives them back over a plain REST API, so tests
can check what actually went over the wire instead of what an in-memory exporter
saw. Install it with ``bash .ci/phoenix-install.sh``. Without it the e2e tests
skip, except under ``CI=true`` where a missing Phoenix is a failure.

How it is started (see ``PhoenixServer.start``): ``python phoenix_launcher.py serve``
(Phoenix's own CLI, ``phoenix serve``, behind a shim that binds gRPC to loopback;
Phoenix itself hard-codes ``[::]`` for gRPC) with a scrubbed environment: every
inherited ``PHOENIX_*``/``OTEL_*`` variable is dropped, ``PHOENIX_HOST=127.0.0.1``,
free ``PHOENIX_PORT``/``PHOENIX_GRPC_PORT``, ``PHOENIX_WORKING_DIR`` and a sqlite
``PHOENIX_SQL_DATABASE_URL`` in a tmp dir, and ``PHOENIX_ALLOW_EXTERNAL_RESOURCES=false``
(master switch: no telemetry pixels, web fonts, WASM download, docs MCP),
``PHOENIX_TELEMETRY_ENABLED=false``, ``PHOENIX_DISABLE_AGENT_ASSISTANT=true``,
``PHOENIX_AGENTS_DISABLE_{BASH,GITHUB,WEB_ACCESS}=true``, ``PHOENIX_ENABLE_MCP_SERVER=false``,
``PHOENIX_ALLOWED_SANDBOX_PROVIDERS=NONE``. Readiness is ``GET /readyz`` == 200,
which uvicorn only answers after the lifespan (database migrations, gRPC server)
has finished: about 10-20 s on a 2-core machine.

Project rule: a span lands in the project named by the ``x-project-name`` HTTP
header if sent, else by the resource attribute ``openinference.project.name``,
else in the project ``default``. Use a unique project per test to isolate them.

Shape of one span from ``GET /v1/projects/{project}/spans`` (body ``{"data": [span, ...],
"next_cursor": str | null}``; 404 "Project with name X not found" until the
project's first span is stored), as Phoenix 20.26.1 returns it::

    {"id": "U3Bhbjox", "name": "execute_tool lookup",
     "context": {"trace_id": "<32 hex>", "span_id": "<16 hex>"},
     "span_kind": "TOOL",            # derived by Phoenix from gen_ai.operation.name
     "parent_id": null,              # parent span_id (16 hex) or null
     "start_time": "2026-11-22T06:11:44.396353+00:00", "end_time": "...",
     "status_code": "ERROR",         # "OK" | "ERROR" | "UNSET"
     "status_message": "lookup failed",
     "attributes": {"gen_ai.operation.name": "execute_tool",   # flat dotted keys
                    "gen_ai.tool.name": "lookup",
                    "tool.name": "lookup"},   # added by Phoenix (OpenInference mapping)
     "events": [{"name": "exception", "timestamp": "...",
                 "attributes": {"exception.type": "KeyError",
                                "exception.message": "'sku-42'",
                                "exception.stacktrace": "Traceback (most recent call last): ...",
                                "exception.escaped": "False"}}]}

Phoenix adds derived attributes, so assert on the keys you sent, never on the
whole ``attributes`` dict. Only OTLP traces are accepted: protobuf over HTTP
(JSON gets 415) and gRPC TraceService; ``POST /v1/logs`` and ``/v1/metrics``
answer 405, so log records cannot be checked through Phoenix.
Resource attributes (``service.name`` ...) are not returned per span.
"""

from __future__ import annotations

import importlib.util
import json
import os
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

_HERE = Path(__file__).resolve().parent
_LAUNCHER = _HERE / "phoenix_launcher.py"
_HOST = "127.0.0.1"
_READY_TIMEOUT_S = 120.0
_STOP_TIMEOUT_S = 20.0

# Everything Phoenix could reach out for on its own is switched off: the test
# machine has no internet, and a receiver under test must not phone home.
_QUIET_OFFLINE_ENV = {
    "PHOENIX_ALLOW_EXTERNAL_RESOURCES": "false",
    "PHOENIX_TELEMETRY_ENABLED": "false",
    "PHOENIX_DISABLE_AGENT_ASSISTANT": "true",
    "PHOENIX_AGENTS_DISABLE_BASH": "true",
    "PHOENIX_AGENTS_DISABLE_GITHUB": "true",
    "PHOENIX_AGENTS_DISABLE_WEB_ACCESS": "true",
    "PHOENIX_ENABLE_MCP_SERVER": "false",
    "PHOENIX_ALLOWED_SANDBOX_PROVIDERS": "NONE",
    "PHOENIX_LOGGING_LEVEL": "warning",
    "PHOENIX_LOG_MIGRATIONS": "false",
}


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Mark every test under tests/e2e as ``e2e`` so ``-m "not e2e"`` skips them all."""
    for item in items:
        if _HERE in Path(str(item.path)).resolve().parents:
            item.add_marker(pytest.mark.e2e)


def _free_port() -> int:
    """Ask the kernel for a free loopback port (released at once; reused by Phoenix)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind((_HOST, 0))
        port: int = sock.getsockname()[1]
        return port


def _phoenix_installed() -> bool:
    """True when Phoenix's server CLI is installed (not just any ``phoenix`` package).

    Looks for the file instead of importing: ``import phoenix`` pulls in pandas,
    pyarrow and more (tens of seconds on a loaded 2-core machine), and the server
    runs in its own process anyway.
    """
    spec = importlib.util.find_spec("phoenix")
    if spec is None or not spec.submodule_search_locations:
        return False
    return any((Path(root) / "server" / "main.py").is_file() for root in spec.submodule_search_locations)


def _get_json(url: str, timeout_s: float = 5.0) -> tuple[int, Any]:
    """GET ``url``; return (status, parsed JSON or None). Never raises on HTTP errors."""
    request = urllib.request.Request(url, headers={"Accept": "application/json"})
    try:
        with urllib.request.urlopen(request, timeout=timeout_s) as response:
            status: int = response.status
            body = response.read()
    except urllib.error.HTTPError as exc:
        return exc.code, None
    try:
        return status, json.loads(body) if body else None
    except ValueError:
        return status, None


@dataclass
class PhoenixServer:
    """A running Phoenix process and the addresses to reach it.

    ``otlp_http_endpoint`` is a base URL for ``OTEL_EXPORTER_OTLP_ENDPOINT`` (the
    SDK appends ``/v1/traces``); pass ``f"{otlp_http_endpoint}/v1/traces"`` when
    constructing ``OTLPSpanExporter(endpoint=...)`` directly. ``grpc_endpoint`` is
    ``http://127.0.0.1:PORT`` for the gRPC exporter (use ``insecure=True``).
    """

    base_url: str
    otlp_http_endpoint: str
    grpc_endpoint: str
    workdir: Path
    log_path: Path
    process: subprocess.Popen[bytes] = field(repr=False)
    startup_s: float = 0.0

    def log_text(self) -> str:
        """The server's combined stdout/stderr so far (for failure messages)."""
        try:
            return self.log_path.read_text(encoding="utf-8", errors="replace")
        except OSError:
            return ""

    def _fetch_all_spans(self, project: str) -> list[dict[str, Any]] | None:
        """All spans of ``project`` following cursors; None while the project does not exist."""
        quoted = urllib.parse.quote(project, safe="")
        spans: list[dict[str, Any]] = []
        cursor: str | None = None
        while True:
            query = {"limit": "1000"}
            if cursor:
                query["cursor"] = cursor
            url = f"{self.base_url}/v1/projects/{quoted}/spans?{urllib.parse.urlencode(query)}"
            status, payload = _get_json(url)
            if status == 404:
                return None
            if status != 200 or not isinstance(payload, dict):
                raise AssertionError(f"GET {url} answered {status}: {payload!r}")
            spans.extend(payload.get("data") or [])
            cursor = payload.get("next_cursor")
            if not cursor:
                return spans

    def spans(self, project: str, *, timeout_s: float = 30, min_count: int = 1) -> list[dict[str, Any]]:
        """Poll until ``project`` holds at least ``min_count`` spans and return them all.

        Phoenix ingests asynchronously (a background bulk inserter), so an exporter's
        successful flush does not mean the span is queryable yet: polling is needed.
        Raises AssertionError with the server log tail when the spans never arrive.
        """
        deadline = time.monotonic() + timeout_s
        seen: list[dict[str, Any]] | None = None
        while True:
            if self.process.poll() is not None:
                raise AssertionError(
                    f"Phoenix exited with {self.process.returncode}; log:\n{self.log_text()[-4000:]}"
                )
            seen = self._fetch_all_spans(project)
            if seen is not None and len(seen) >= min_count:
                return seen
            if time.monotonic() >= deadline:
                count = "no such project" if seen is None else f"{len(seen)} span(s)"
                raise AssertionError(
                    f"expected >= {min_count} span(s) in project {project!r} within {timeout_s}s, "
                    f"got {count}; server log tail:\n{self.log_text()[-4000:]}"
                )
            time.sleep(0.25)

    @classmethod
    def start(cls, workdir: Path) -> PhoenixServer:
        """Start Phoenix on free loopback ports and wait for ``/readyz``; fail with the log."""
        workdir.mkdir(parents=True, exist_ok=True)
        tmpdir = workdir / "tmp"
        tmpdir.mkdir(exist_ok=True)
        http_port, grpc_port = _free_port(), _free_port()
        env = {k: v for k, v in os.environ.items() if not k.startswith(("PHOENIX_", "OTEL_"))}
        env.update(_QUIET_OFFLINE_ENV)
        env.update(
            {
                "PHOENIX_HOST": _HOST,
                "PHOENIX_PORT": str(http_port),
                "PHOENIX_GRPC_PORT": str(grpc_port),
                "PHOENIX_WORKING_DIR": str(workdir),
                "PHOENIX_SQL_DATABASE_URL": f"sqlite:///{workdir / 'phoenix.db'}",
                # Phoenix writes its pid file under tempfile.gettempdir(); keep it in the tmp dir.
                "TMPDIR": str(tmpdir),
                "PYTHONUNBUFFERED": "1",
            }
        )
        log_path = workdir / "phoenix.log"
        base_url = f"http://{_HOST}:{http_port}"
        started = time.monotonic()
        with log_path.open("wb") as log:
            process = subprocess.Popen(
                [sys.executable, str(_LAUNCHER), "serve"],
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
                env=env,
                cwd=str(workdir),
                start_new_session=True,
            )
        server = cls(
            base_url=base_url,
            otlp_http_endpoint=base_url,
            grpc_endpoint=f"http://{_HOST}:{grpc_port}",
            workdir=workdir,
            log_path=log_path,
            process=process,
        )
        deadline = started + _READY_TIMEOUT_S
        while True:
            if process.poll() is not None:
                pytest.fail(
                    f"Phoenix exited with {process.returncode} during startup; log:\n{server.log_text()}",
                    pytrace=False,
                )
            try:
                status, _ = _get_json(f"{base_url}/readyz", timeout_s=2.0)
            except (OSError, urllib.error.URLError):
                status = 0
            if status == 200:
                server.startup_s = time.monotonic() - started
                return server
            if time.monotonic() >= deadline:
                server.stop()
                pytest.fail(
                    f"Phoenix not ready on {base_url} after {_READY_TIMEOUT_S:.0f}s; log:\n"
                    f"{server.log_text()}",
                    pytrace=False,
                )
            time.sleep(0.25)

    def stop(self) -> None:
        """SIGTERM (uvicorn shuts down gRPC and the DB cleanly), SIGKILL if it hangs."""
        if self.process.poll() is not None:
            return
        self.process.send_signal(signal.SIGTERM)
        try:
            self.process.wait(timeout=_STOP_TIMEOUT_S)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait(timeout=_STOP_TIMEOUT_S)


@pytest.fixture(scope="session")
def phoenix(tmp_path_factory: pytest.TempPathFactory) -> Iterator[PhoenixServer]:
    """A Phoenix receiver shared by the whole session; skipped (or failed on CI) if not installed."""
    if not _phoenix_installed():
        reason = "arize-phoenix is not installed (run: bash .ci/phoenix-install.sh)"
        if os.environ.get("CI", "").strip().lower() in ("true", "1", "yes"):
            pytest.fail(f"{reason}; CI must install it", pytrace=False)
        pytest.skip(reason)
    server = PhoenixServer.start(tmp_path_factory.mktemp("phoenix"))
    print(f"\nPhoenix ready at {server.base_url} (gRPC {server.grpc_endpoint}) in {server.startup_s:.1f}s")
    try:
        yield server
    finally:
        server.stop()
