"""A fork server for the durability trials: an agent process that fails tools until it is killed.

Importing OpenTelemetry and the library takes most of a second; 25 ``kill -9`` trials paying that each
would dominate the suite. So this process imports once, then forks one child per trial on request. It
reads ``run DIR`` (or ``run DIR span``) lines on stdin and answers ``pid N`` when the child is running,
then ``exit STATUS`` (the raw ``waitpid`` status) when it has died.

Each child is an ordinary agent: ``init()`` with the default store and spool in ``DIR``, and a tool
that really fails (a ``KeyError`` raised by real code) in a loop paced by 0.5 ms. After each failed call has
*returned* to the agent, the child appends the call number to ``DIR/returned.txt`` and fsyncs it: that
file is the list of failures the agent saw, which the store must hold after the child is killed.

With ``span``, the tool is not wrapped by the library: it runs inside an instrumented tool span (the SDK
records the exception and ends the span as it propagates), as a framework's instrumentation runs it, and
the span processor records it, its digest made after the span ended (``init()``'s own provider allows
that: see ``otel_errcompact.deferred``).
"""

from __future__ import annotations

import os
import signal
import sys
import time
from pathlib import Path

from opentelemetry import trace

import otel_errcompact
from otel_errcompact import Thresholds, ToolErrorText


def _init(folder: Path) -> otel_errcompact.ErrCompact:
    """``init()`` with the default store and spool in ``folder``, and no escalation."""
    return otel_errcompact.init(
        "durability-child",
        sqlite_path=folder / "trajectories.sqlite3",
        otlp_logs=False,
        thresholds=Thresholds(consecutive=10**9, budget=None),
    )


def agent(folder: Path) -> None:
    ec = _init(folder)
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


def span_agent(folder: Path) -> None:
    ec = _init(folder)
    if ec.processor is None or ec.processor._gate is None:
        raise SystemExit("expected failed spans' digests to be made after the span ends")
    tracer = trace.get_tracer("durability-child")
    inventory = {"item-0": 1}
    tool = {"gen_ai.operation.name": "execute_tool", "gen_ai.tool.name": "lookup"}
    agent = {"gen_ai.operation.name": "invoke_agent", "gen_ai.conversation.id": f"trial-{folder.name}"}
    returned = os.open(folder / "returned.txt", os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
    n = 1
    with tracer.start_as_current_span("invoke_agent trial", attributes=agent):
        while True:
            try:
                with tracer.start_as_current_span("execute_tool lookup", attributes=tool):
                    inventory[f"item-{n}"]  # KeyError for every n but 0
            except KeyError:
                pass
            else:
                raise SystemExit(f"expected item-{n} to be missing")
            os.write(returned, f"{n}\n".encode())
            os.fsync(returned)
            n += 1
            time.sleep(0.0005)


def main() -> None:
    # The trials need the default SIGTERM action whatever the test runner inherited (a background job
    # may start with signals ignored, and dispositions survive exec).
    signal.signal(signal.SIGTERM, signal.SIG_DFL)
    for line in sys.stdin:
        command, _, argument = line.strip().partition(" ")
        if command != "run":
            continue
        folder, _, mode = argument.partition(" ")
        pid = os.fork()
        if pid == 0:
            try:
                (span_agent if mode == "span" else agent)(Path(folder))
            finally:
                os._exit(70)
        print(f"pid {pid}", flush=True)
        _, status = os.waitpid(pid, 0)
        print(f"exit {status}", flush=True)


if __name__ == "__main__":
    main()
