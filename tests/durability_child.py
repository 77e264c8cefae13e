"""A fork server for the durability trials: an agent process that fails tools until it is killed.

Importing OpenTelemetry and the library takes most of a second; 25 ``kill -9`` trials paying that each
would dominate the suite. So this process imports once, then forks one child per trial on request. It
reads ``run DIR`` lines on stdin and answers ``pid N`` when the child is running, then ``exit STATUS``
(the raw ``waitpid`` status) when it has died.

Each child is an ordinary agent: ``init()`` with the default store and spool in ``DIR``, and a tool
that really fails (a ``KeyError`` raised by real code) in a loop paced by 0.5 ms. After each failed call has
*returned* to the agent, the child appends the call number to ``DIR/returned.txt`` and fsyncs it: that
file is the list of failures the agent saw, which the store must hold after the child is killed.
"""

from __future__ import annotations

import os
import signal
import sys
import time
from pathlib import Path

import otel_errcompact
from otel_errcompact import Thresholds, ToolErrorText


def agent(folder: Path) -> None:
    ec = otel_errcompact.init(
        "durability-child",
        sqlite_path=folder / "trajectories.sqlite3",
        otlp_logs=False,
        thresholds=Thresholds(consecutive=10**9, budget=None),
    )
    inventory = {"item-0": 1}

    @ec.tool
    def lookup(n: int) -> int:
        return inventory[f"item-{n}"]  # KeyError for every n but 0

    returned = os.open(folder / "returned.txt", os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
    n = 1
    with ec.conversation(f"trial-{folder.name}"):
        while True:
            result = lookup(n)
            if not isinstance(result, ToolErrorText):
                raise SystemExit(f"expected a digest, got {result!r}")
            os.write(returned, f"{n}\n".encode())
            os.fsync(returned)
            n += 1
            time.sleep(0.0005)  # paced a little, like an agent between tool calls


def main() -> None:
    # The trials need the default SIGTERM action whatever the test runner inherited (a background job
    # may start with signals ignored, and dispositions survive exec).
    signal.signal(signal.SIGTERM, signal.SIG_DFL)
    for line in sys.stdin:
        command, _, argument = line.strip().partition(" ")
        if command != "run":
            continue
        pid = os.fork()
        if pid == 0:
            try:
                agent(Path(argument))
            finally:
                os._exit(70)
        print(f"pid {pid}", flush=True)
        _, status = os.waitpid(pid, 0)
        print(f"exit {status}", flush=True)


if __name__ == "__main__":
    main()
