"""The library's own threads never take SIGTERM or SIGINT (see ``otel_errcompact._signalmask``).

The kernel hands a signal sent to a process to any thread that does not block it, and Python runs the
handler only when the main thread next runs Python code. A multiprocessing pool worker with ``init()``
at its module's top waits for its next task in a queue's lock; the pool's ``terminate()`` sends it
SIGTERM, and if that SIGTERM lands on the digest thread or the trajectory writer, the worker neither runs
the library's flush nor dies: the pool, and the program, hang. Each case here runs a real agent in its
own interpreter and reads every thread's signal mask from ``/proc``."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from tests.conftest import env_without_otel
from tests.test_fork import EXPECTED, run_pool_agent, stored_rows

pytestmark = pytest.mark.skipif(not Path("/proc/self/task").is_dir(), reason="reads thread masks from /proc")

MASKS = textwrap.dedent(
    """
    import json, sys, threading, time
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import BatchSpanProcessor
    from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
    import otel_errcompact
    from otel_errcompact import _compacting_process

    def blocked(path):
        for line in open(path):
            if line.startswith("SigBlk:"):
                return int(line.split()[1], 16)

    provider = TracerProvider()
    provider.add_span_processor(BatchSpanProcessor(InMemorySpanExporter()))
    child = sys.argv[2] == "child"
    ec = otel_errcompact.init(tracer_provider=provider, sqlite_path=sys.argv[1], compaction_process=child)

    @ec.tool
    def read_config(path: str) -> str:
        with open(path) as f:
            return f.read()

    tool = {"gen_ai.operation.name": "execute_tool", "gen_ai.tool.name": "load"}
    for attempt in range(3):
        read_config(f"/nonexistent/config-{attempt}.toml")  # through the tool boundary
        try:  # a failed tool span as instrumentations record it: its digest is made on the digest thread
            with provider.get_tracer("t").start_as_current_span("execute_tool load", attributes=tool):
                open(f"/nonexistent/data-{attempt}.json")
        except FileNotFoundError:
            pass
    deadline = time.monotonic() + 30
    while child and _compacting_process.shared().pid is None and time.monotonic() < deadline:
        time.sleep(0.01)
    ec.flush()
    masks = {t.name: blocked(f"/proc/self/task/{t.native_id}/status") for t in threading.enumerate()}
    try:  # /proc/<pid>/task/<tid>/children needs a kernel built with CONFIG_PROC_CHILDREN
        tasks = [f"/proc/self/task/{t.native_id}" for t in threading.enumerate()]
        children = [int(pid) for task in tasks for pid in open(f"{task}/children").read().split()]
        masks.update({f"child {pid}": blocked(f"/proc/{pid}/status") for pid in children})
    except FileNotFoundError:
        masks["no children file"] = 0
    print(json.dumps(masks))
    ec.shutdown()
    """
)


def _masks(tmp_path: Path, compaction: str) -> dict[str, int]:
    done = subprocess.run(
        [sys.executable, "-c", MASKS, str(tmp_path / "t.sqlite3"), compaction],
        cwd=tmp_path, env=env_without_otel(), capture_output=True, text=True, timeout=120, check=False,
    )
    assert done.returncode == 0, done.stderr
    masks: dict[str, int] = json.loads(done.stdout.strip().splitlines()[-1])
    return masks


def _blocks(mask: int, signum: int) -> bool:
    return bool(mask >> (signum - 1) & 1)


@pytest.mark.parametrize("compaction", ["in place", "child"])
def test_library_threads_block_sigterm_and_sigint_and_the_main_thread_does_not(
    tmp_path: Path, compaction: str
) -> None:
    masks = _masks(tmp_path, compaction)
    library = {name: mask for name, mask in masks.items() if name.startswith(("otel-errcompact", "otel_errcompact"))}
    assert {"otel-errcompact-digests", "otel_errcompact.TrajectoryWriter"} <= set(library), masks
    for name, mask in library.items():
        assert _blocks(mask, signal.SIGTERM) and _blocks(mask, signal.SIGINT), (name, hex(mask))
    # Starting them set the mask on the main thread for an instant only.
    main = masks["MainThread"]
    assert not _blocks(main, signal.SIGTERM) and not _blocks(main, signal.SIGINT), hex(main)


def test_helper_processes_started_from_a_library_thread_clear_the_mask(tmp_path: Path) -> None:
    """The compacting process is started from the digest thread, whose mask it inherits across exec: it
    must clear it, or a SIGTERM sent to it would wait, pending, for ever."""
    masks = _masks(tmp_path, "child")
    if "no children file" in masks:
        pytest.skip("this kernel does not list a thread's child processes in /proc")
    children = {name: mask for name, mask in masks.items() if name.startswith("child ")}
    assert children, masks  # the compacting process, at least
    for name, mask in children.items():
        assert not _blocks(mask, signal.SIGTERM) and not _blocks(mask, signal.SIGINT), (name, hex(mask))


def test_a_fork_pool_terminated_while_its_workers_wait_ends(tmp_path: Path) -> None:
    """Five pools in a row (``tests/test_fork.py``'s agent), each terminated on leaving its ``with`` block:
    the SIGTERM every worker gets while it waits in the queue's lock ends it (a hang fails the run by its
    timeout), and every failure is stored."""
    for run in range(5):
        folder = tmp_path / f"run-{run}"
        folder.mkdir()
        proc, db = run_pool_agent(folder, "fork")
        assert proc.returncode == 0, (run, proc.stdout, proc.stderr)
        assert {c: len(r) for c, r in stored_rows(db).items()} == EXPECTED, run
