"""Produce real error output by running real code and real tools, for tests and benchmarks.

Nothing here types an error by hand: each helper writes a small program into a temporary folder, runs
the real interpreter or compiler on it, and returns what that tool printed.
"""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import sys
import textwrap
import threading
import time
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

__all__ = [
    "Run", "have", "loopback_server", "python_error", "run", "send_body", "stdlib_http_server", "tls_loopback_server",
    "write",
]


@dataclass(frozen=True)
class Run:
    """What a process printed and how it ended."""

    returncode: int
    stdout: str
    stderr: str

    @property
    def output(self) -> str:
        """stdout then stderr, as a terminal would show them."""
        return self.stdout + self.stderr


def have(tool: str) -> bool:
    """True when ``tool`` is on PATH (tests for a missing toolchain skip with a reason)."""
    return shutil.which(tool) is not None


def write(folder: Path, name: str, source: str) -> Path:
    """Write dedented ``source`` to ``folder/name`` (creating sub-folders) and return the path."""
    path = folder / name
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(textwrap.dedent(source).lstrip("\n"), encoding="utf-8")
    return path


def run(cmd: list[str] | str, cwd: Path, *, shell: bool = False, timeout: float = 120,
        env: dict[str, str] | None = None) -> Run:
    """Run a real command and capture its output (never raises on a non-zero exit)."""
    # Plugins installed beside the test tools (e.g. the pytest plugin arize-phoenix brings) would slow
    # every pytest started here by seconds and change nothing in its output.
    merged = {
        **os.environ,
        "NO_COLOR": "1",
        "PYTHONDONTWRITEBYTECODE": "1",
        "PYTEST_DISABLE_PLUGIN_AUTOLOAD": "1",
        **(env or {}),
    }
    proc = subprocess.run(
        cmd, cwd=cwd, shell=shell, capture_output=True, text=True, timeout=timeout, env=merged,
        errors="replace",
    )
    return Run(proc.returncode, proc.stdout, proc.stderr)


def python_error(folder: Path, source: str, *, name: str = "app.py", args: list[str] | None = None,
                 extra_files: dict[str, str] | None = None) -> str:
    """Run ``source`` as a Python script and return the traceback it printed to stderr."""
    for extra_name, extra_source in (extra_files or {}).items():
        write(folder, extra_name, extra_source)
    script = write(folder, name, source)
    result = run([sys.executable, str(script), *(args or [])], cwd=folder)
    assert result.returncode != 0, f"script was expected to fail:\n{result.output}"
    return result.stderr


@contextmanager
def loopback_server(handler: type[BaseHTTPRequestHandler]) -> Iterator[str]:
    """Serve ``handler`` on 127.0.0.1 (a free port) in a daemon thread; yields the base URL."""
    with _serving(ThreadingHTTPServer(("127.0.0.1", 0), handler)) as port:
        yield f"http://127.0.0.1:{port}"


@contextmanager
def tls_loopback_server(folder: Path, handler: type[BaseHTTPRequestHandler] | None = None) -> Iterator[str]:
    """:func:`loopback_server` over TLS, with a certificate for 127.0.0.1 that ``openssl`` signs itself
    into ``folder`` (so clients fail to verify it, as against a misconfigured server); yields the https
    base URL. The default handler answers every GET with an empty 200."""
    import ssl

    key, cert = folder / "key.pem", folder / "cert.pem"
    made = run(["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-keyout", str(key), "-out", str(cert),
                "-days", "2", "-subj", "/CN=127.0.0.1"], cwd=folder)
    assert made.returncode == 0, made.stderr
    httpd = ThreadingHTTPServer(("127.0.0.1", 0), handler or _EmptyOk)
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.load_cert_chain(str(cert), str(key))
    httpd.socket = context.wrap_socket(httpd.socket, server_side=True)
    with _serving(httpd) as port:
        yield f"https://127.0.0.1:{port}"


@contextmanager
def _serving(httpd: ThreadingHTTPServer) -> Iterator[int]:
    thread = threading.Thread(target=httpd.serve_forever, daemon=True)
    thread.start()
    try:
        yield int(httpd.server_address[1])
    finally:
        httpd.shutdown()
        httpd.server_close()


@contextmanager
def stdlib_http_server(folder: Path) -> Iterator[str]:
    """``python -m http.server`` serving ``folder`` on 127.0.0.1, as its own process (its real error pages);
    yields the base URL once the server accepts connections."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = int(sock.getsockname()[1])
    proc = subprocess.Popen([sys.executable, "-m", "http.server", str(port), "--bind", "127.0.0.1"], cwd=folder,
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        for _ in range(100):
            try:
                socket.create_connection(("127.0.0.1", port), timeout=0.2).close()
                break
            except OSError:
                time.sleep(0.05)
        yield f"http://127.0.0.1:{port}"
    finally:
        proc.terminate()
        proc.wait(timeout=10)


class _EmptyOk(BaseHTTPRequestHandler):
    def do_GET(self) -> None:
        self.send_response(200)
        self.end_headers()

    def log_message(self, format: str, *args: object) -> None:
        """Quiet."""


def send_body(
    handler: BaseHTTPRequestHandler,
    status: int,
    data: bytes,
    *,
    content_type: str | None = "application/json",
    headers: Mapping[str, str] | None = None,
) -> None:
    """Answer a request with ``status`` and ``data``: Content-Type, then ``headers``, then Content-Length,
    in the order a client's ``-i`` output shows them."""
    handler.send_response(status)
    if content_type is not None:
        handler.send_header("Content-Type", content_type)
    for name, value in (headers or {}).items():
        handler.send_header(name, value)
    handler.send_header("Content-Length", str(len(data)))
    handler.end_headers()
    handler.wfile.write(data)
