"""A dead OTLP endpoint must not stall ``flush()``, ``shutdown()`` or process exit beyond the timeout.

Run as a user would: a fresh interpreter with ``OTEL_EXPORTER_OTLP_ENDPOINT`` pointing at a closed port on
127.0.0.1, or at a port that accepts TCP connections and never answers, and
``OTEL_ERRCOMPACT_SHUTDOWN_TIMEOUT_S=2``. Before the fix this took 22 s (closed port) and 57 s (silent
port). The bounds below are that timeout plus generous margins for a loaded machine; they measure a
bound on behaviour, not speed.

Python 3.12 and later start no thread once the interpreter shuts down, ``atexit`` callbacks included. Each
exit is run both ways: as this interpreter allows it, and with thread starts refused from the moment the
library's exit shutdown begins, as Python 3.12+ refuses them (an ``atexit`` callback registered after
``init()``, so run before its shutdown, makes ``threading`` raise the error those versions raise).
"""

from __future__ import annotations

import json
import socket
import subprocess
import sys
import textwrap
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

from otel_errcompact.sinks import TrajectoryStore
from tests.atexit_threads import REFUSE_THREADS_AT_EXIT
from tests.conftest import env_without_otel

SHUTDOWN_TIMEOUT_S = 2.0
FLUSH_TIMEOUT_S = 1.0
MARGIN_S = 5.0

AGENT = textwrap.dedent(
    """
    import json, sys, time
    import otel_errcompact
    from otel_errcompact.sinks import TrajectoryStore

    ec = otel_errcompact.init(service_name="dead-endpoint")
    if sys.argv[2] == "refused":
        refuse_threads_at_exit()

    @ec.tool
    def lookup(key):
        return {"a": 1}[key]

    with ec.conversation("conv-dead"):
        for i in range(3):
            lookup(f"k{i}")
    before_flush = time.monotonic()
    flushed = ec.flush(timeout_s=float(sys.argv[1]))
    after_flush = time.monotonic()
    with TrajectoryStore(ec.sqlite_path) as store:
        stored = store.count()
    # The OTLP exports are still retrying in the background; new failures reach SQLite regardless.
    with ec.conversation("conv-dead-2"):
        for i in range(3):
            lookup(f"later{i}")
    later = 0
    deadline = time.monotonic() + 5
    while later < 6 and time.monotonic() < deadline:
        time.sleep(0.05)
        with TrajectoryStore(ec.sqlite_path) as store:
            later = store.count()
    print(json.dumps({"flush_s": after_flush - before_flush,
                      "flushed": flushed, "stored_after_flush": stored, "stored_later": later,
                      "exit_started": time.time()}), flush=True)
    # exit: the atexit shutdown must hold OTEL_ERRCOMPACT_SHUTDOWN_TIMEOUT_S
    """
)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@contextmanager
def _closed_port() -> Iterator[int]:
    yield _free_port()  # nothing listens: connections are refused


@contextmanager
def _silent_port() -> Iterator[int]:
    """A socket that completes TCP handshakes (the kernel's backlog) and never reads or answers."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        s.listen(64)
        yield int(s.getsockname()[1])


@pytest.mark.parametrize("threads_at_exit", ["allowed", "refused"])
@pytest.mark.parametrize("endpoint", [_closed_port, _silent_port], ids=["closed-port", "silent-port"])
def test_flush_shutdown_and_exit_hold_the_timeout(tmp_path: Path, endpoint: object, threads_at_exit: str) -> None:
    db = tmp_path / "trajectories.sqlite3"
    with endpoint() as port:  # type: ignore[operator]
        env = env_without_otel()
        env.update(
            OTEL_EXPORTER_OTLP_ENDPOINT=f"http://127.0.0.1:{port}",
            OTEL_ERRCOMPACT_SHUTDOWN_TIMEOUT_S=str(SHUTDOWN_TIMEOUT_S),
            OTEL_ERRCOMPACT_SQLITE_PATH=str(db),
        )
        proc = subprocess.run(
            [sys.executable, "-c", REFUSE_THREADS_AT_EXIT + AGENT, str(FLUSH_TIMEOUT_S), threads_at_exit],
            env=env, capture_output=True, text=True, timeout=120, check=False,
        )
        ended = time.time()
    assert proc.returncode == 0, proc.stderr
    out = json.loads(proc.stdout.strip().splitlines()[-1])
    # flush(timeout_s=1) returns within its timeout, reporting that not everything was exported ...
    assert out["flush_s"] < FLUSH_TIMEOUT_S + MARGIN_S / 2, out
    assert out["flushed"] is False
    # ... while the trajectory store got every record: the OTLP sink did not hold the writer back.
    assert out["stored_after_flush"] == 3
    assert out["stored_later"] == 6  # without a flush: the writer thread was not held by the OTLP sink
    # Shutdown at exit holds OTEL_ERRCOMPACT_SHUTDOWN_TIMEOUT_S across every provider and sink.
    exit_s = ended - out["exit_started"]
    assert exit_s < SHUTDOWN_TIMEOUT_S + MARGIN_S, (exit_s, proc.stderr[-2000:])
    assert "did not shut down within OTEL_ERRCOMPACT_SHUTDOWN_TIMEOUT_S=2s" in proc.stderr
    assert "Traceback" not in proc.stderr
    with TrajectoryStore(db) as store:
        assert store.count() == 6
