"""How long ``flush()`` and process exit take when the OTLP endpoint is alive, refused, or silent.

Run from the repository root::

    python benchmarks/bench_shutdown.py [ROUNDS]

Each round starts one fresh agent process per endpoint kind, interleaved so that machine load hits all
kinds alike: a loopback OTLP/HTTP receiver answering 200, a closed 127.0.0.1 port, and a port that accepts
TCP connections and never answers. The agent fails three tools through ``@ec.tool``, calls
``ec.flush(timeout_s=1)`` and exits (the atexit ``shutdown()``), with ``OTEL_ERRCOMPACT_SHUTDOWN_TIMEOUT_S=2``.
Reported per kind: the ``flush`` call as the agent timed it, and the wall time from the start of
``flush`` until the process has ended (flush + shutdown at exit + interpreter teardown), median and p99
over the rounds (with few rounds, p99 is the slowest run).
"""

from __future__ import annotations

import json
import os
import socket
import statistics
import subprocess
import sys
import tempfile
import textwrap
import time
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager, contextmanager
from http.server import BaseHTTPRequestHandler
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from benchmarks._machine import describe
from tests.realerrors import loopback_server

SHUTDOWN_TIMEOUT_S = 2.0
FLUSH_TIMEOUT_S = 1.0

AGENT = textwrap.dedent(
    """
    import json, sys, time
    import otel_errcompact

    ec = otel_errcompact.init(service_name="bench-shutdown")

    @ec.tool
    def lookup(key):
        return {"a": 1}[key]

    with ec.conversation("conv-bench"):
        for i in range(3):
            lookup(f"k{i}")
    flush_started, t0 = time.time(), time.monotonic()
    ok = ec.flush(timeout_s=float(sys.argv[1]))
    print(json.dumps({"flush_started": flush_started, "flush_s": time.monotonic() - t0, "flushed": ok}),
          flush=True)
    """
)


class _Receiver(BaseHTTPRequestHandler):
    """An OTLP/HTTP receiver that accepts every export (200, empty body)."""

    def do_POST(self) -> None:
        self.rfile.read(int(self.headers.get("Content-Length") or 0))
        self.send_response(200)
        self.send_header("Content-Type", "application/x-protobuf")
        self.send_header("Content-Length", "0")
        self.end_headers()

    def log_message(self, format: str, *args: Any) -> None:
        return


@contextmanager
def _live() -> Iterator[str]:
    with loopback_server(_Receiver) as url:
        yield url


@contextmanager
def _closed() -> Iterator[str]:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    yield f"http://127.0.0.1:{port}"


@contextmanager
def _silent() -> Iterator[str]:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        s.listen(64)
        yield f"http://127.0.0.1:{s.getsockname()[1]}"


KINDS: dict[str, Callable[[], AbstractContextManager[str]]] = {
    "live receiver": _live,
    "closed port": _closed,
    "silent port": _silent,
}


def _one(endpoint: str, db: Path) -> tuple[float, float, bool]:
    env = {k: v for k, v in os.environ.items() if not k.upper().startswith("OTEL_")}
    env.update(
        OTEL_EXPORTER_OTLP_ENDPOINT=endpoint,
        OTEL_ERRCOMPACT_SHUTDOWN_TIMEOUT_S=str(SHUTDOWN_TIMEOUT_S),
        OTEL_ERRCOMPACT_SQLITE_PATH=str(db),
    )
    proc = subprocess.run([sys.executable, "-c", AGENT, str(FLUSH_TIMEOUT_S)], env=env, capture_output=True,
                          text=True, timeout=300, check=False)
    ended = time.time()
    if proc.returncode != 0:
        raise SystemExit(f"agent failed:\n{proc.stderr}")
    out = json.loads(proc.stdout.strip().splitlines()[-1])
    return float(out["flush_s"]), ended - float(out["flush_started"]), bool(out["flushed"])


def _p99(values: list[float]) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(0.99 * (len(ordered) - 1)))]


def main() -> None:
    rounds = int(sys.argv[1]) if len(sys.argv) > 1 else 5
    flush: dict[str, list[float]] = {k: [] for k in KINDS}
    after: dict[str, list[float]] = {k: [] for k in KINDS}
    flushed: dict[str, list[bool]] = {k: [] for k in KINDS}
    with tempfile.TemporaryDirectory() as tmp:
        for r in range(rounds):
            for kind, make in KINDS.items():
                with make() as endpoint:
                    f, a, ok = _one(endpoint, Path(tmp) / f"{r}-{kind.replace(' ', '-')}.sqlite3")
                flush[kind].append(f)
                after[kind].append(a)
                flushed[kind].append(ok)
    print(f"{describe()}; {rounds} rounds, kinds interleaved; OTEL_ERRCOMPACT_SHUTDOWN_TIMEOUT_S="
          f"{SHUTDOWN_TIMEOUT_S:g}, flush(timeout_s={FLUSH_TIMEOUT_S:g})")
    print(f"{'endpoint':<15} {'flush median':>12} {'flush p99':>10} {'flush+exit median':>18} "
          f"{'flush+exit p99':>15} {'flush ok':>9}")
    for kind in KINDS:
        print(f"{kind:<15} {statistics.median(flush[kind]):>11.2f}s {_p99(flush[kind]):>9.2f}s "
              f"{statistics.median(after[kind]):>17.2f}s {_p99(after[kind]):>14.2f}s "
              f"{sum(flushed[kind]):>5}/{rounds}")


if __name__ == "__main__":
    main()
