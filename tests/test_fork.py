"""Worker processes of an instrumented agent: multiprocessing pools (each start method), as evaluation
harnesses and prefork task queues run agents, with ``init()`` at the agent module's top level (run in the
parent; a fork worker inherits it, a spawn or forkserver worker runs it again as it imports the module).

Each case runs a real script in its own interpreter: the parent fails a tool, a pool of two workers fails
tools in four tasks (no ``flush()`` in them: a worker ends when the pool is done with it), the parent fails
once more and exits. Every failure must be in the store with its digest, no record may be left only in
the spool (each process removes its own segments), and nothing may be logged as an error."""

from __future__ import annotations

import sqlite3
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from otel_errcompact.sinks.spool import read_segment
from tests.conftest import env_without_otel

ROOT = Path(__file__).resolve().parent.parent

AGENT = textwrap.dedent(
    """
    import multiprocessing, os, sys, time
    import otel_errcompact

    DB = sys.argv[2]
    ec = otel_errcompact.init(service_name="fork-test", sqlite_path=DB)

    @ec.tool
    def read_config(path: str) -> str:
        with open(path) as f:
            return f.read()

    def task(n: int) -> int:
        with ec.conversation(f"worker-{n}"):
            for attempt in range(2):
                result = read_config(f"/nonexistent/config-{n}-{attempt}.toml")
                assert str(result).startswith("Error: [FileNotFoundError]"), result
        if sys.argv[3] == "kill" and n == 3:
            os.kill(os.getpid(), 9)  # its calls have returned: their records must survive it
        return os.getpid()

    if __name__ == "__main__":
        with ec.conversation("parent-before"):
            read_config("/nonexistent/parent-before.toml")
        context = multiprocessing.get_context(sys.argv[1])
        with context.Pool(2) as pool:
            if sys.argv[3] == "kill":
                results = [pool.apply_async(task, (n,)) for n in range(4)]
                time.sleep(3)
                pids = [r.get(0) for r in results if r.ready() and r.successful()]
            else:
                pids = pool.map(task, range(4))
        with ec.conversation("parent-after"):
            read_config("/nonexistent/parent-after.toml")
        print("workers", sorted(set(pids)), "parent", os.getpid())
    """
)

EXPECTED = {"parent-before": 1, "parent-after": 1, **{f"worker-{n}": 2 for n in range(4)}}


def _run(tmp_path: Path, start_method: str, ending: str = "exit") -> tuple[subprocess.CompletedProcess[str], Path]:
    script = tmp_path / "agent.py"
    script.write_text(AGENT)
    db = tmp_path / "trajectories.sqlite3"
    env = env_without_otel()
    proc = subprocess.run([sys.executable, str(script), start_method, str(db), ending], cwd=tmp_path, env=env,
                          capture_output=True, text=True, timeout=120, check=False)
    return proc, db


def _stored(db: Path) -> dict[str, list[tuple[str, str | None]]]:
    rows: dict[str, list[tuple[str, str | None]]] = {}
    with sqlite3.connect(db) as conn:
        for conversation, record_id, digest in conn.execute(
            "SELECT conversation_id, record_id, digest_line FROM trajectory ORDER BY conversation_id"
        ):
            rows.setdefault(conversation, []).append((record_id, digest))
    return rows


@pytest.mark.parametrize("start_method", ["fork", "forkserver", "spawn"])
def test_pool_workers_store_every_failure_and_leave_no_spool(tmp_path: Path, start_method: str) -> None:
    proc, db = _run(tmp_path, start_method)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "Traceback" not in proc.stderr and "otel-errcompact:" not in proc.stderr, proc.stderr
    stored = _stored(db)
    assert {c: len(r) for c, r in stored.items()} == EXPECTED, stored
    for conversation, records in stored.items():
        for record_id, digest in records:
            assert digest is not None and digest.startswith("[FileNotFoundError]"), (conversation, record_id)
    # Each process removed its segments at its end. One exception: a worker that the pool's terminate()
    # killed while it was still starting (spawn and forkserver workers import the agent first, and a busy
    # machine lets its sibling do all four tasks meanwhile) leaves the segment it had just opened, empty.
    spool = db.with_name(db.name + "-spool")
    left = sorted(spool.iterdir()) if spool.exists() else []
    assert all(not list(read_segment(segment)) for segment in left), [p.name for p in left]


def test_a_killed_workers_records_are_recovered_at_the_next_start(tmp_path: Path) -> None:
    """``kill -9`` of a forked worker right after its tool calls returned: their records are in spool
    segments of its own (not in the parent's), which no process removes, and the next process that
    opens the store replays them."""
    proc, db = _run(tmp_path, "fork", ending="kill")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    before = {c: len(r) for c, r in _stored(db).items()}
    assert before["parent-before"] == before["parent-after"] == 1, before
    assert before.get("worker-3", 0) < 2, before  # else the kill came too late to test anything
    reopen = subprocess.run(
        [sys.executable, "-c", "import sys, otel_errcompact; otel_errcompact.init(sqlite_path=sys.argv[1]).shutdown()",
         str(db)],
        cwd=tmp_path, env=env_without_otel(),
        capture_output=True, text=True, timeout=60, check=False,
    )
    assert reopen.returncode == 0, reopen.stderr
    assert {c: len(r) for c, r in _stored(db).items()} == EXPECTED
    spool = db.with_name(db.name + "-spool")
    assert not spool.exists() or not list(spool.iterdir())


FORK_WHILE_LOCKED = textwrap.dedent(
    """
    import os, sys, threading
    import otel_errcompact

    ec = otel_errcompact.init(service_name="fork-test", sqlite_path=sys.argv[1])

    @ec.tool
    def lookup(key: str) -> str:
        return {}[key]

    # A thread inside the history's lock at the moment of the fork, as the digest thread is while it counts:
    # a deferred success whose resolution blocks (resolutions run under the lock).
    inside, release = threading.Event(), threading.Event()

    def resolve(_item: object) -> None:
        inside.set()
        release.wait()

    ec.history.defer_success(resolve, None)
    threading.Thread(target=ec.history.apply_successes, daemon=True).start()
    inside.wait(10)

    pid = os.fork()
    if pid == 0:
        with ec.conversation("child"):
            line = str(lookup("user_id"))
            block = ec.context("child")
        ok = ec.flush(timeout_s=10)
        print("child", line, "|", block.count("KeyError"), ok, flush=True)
        ec.shutdown()
        os._exit(0 if ok else 3)
    release.set()
    _, status = os.waitpid(pid, 0)
    print("child-exit", os.waitstatus_to_exitcode(status))
    """
)


def test_a_fork_while_a_thread_holds_the_historys_lock(tmp_path: Path) -> None:
    """The child gets new locks: a lock a thread of the parent held at the fork would otherwise be held in
    the child for good, and its first failed tool call would wait for ever."""
    script = tmp_path / "agent.py"
    script.write_text(FORK_WHILE_LOCKED)
    db = tmp_path / "trajectories.sqlite3"
    env = env_without_otel()
    proc = subprocess.run([sys.executable, "-W", "ignore::DeprecationWarning", str(script), str(db)], cwd=tmp_path,
                          env=env, capture_output=True, text=True, timeout=30, check=False)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "child Error: [KeyError] at agent.py:9 in lookup: 'user_id' | 1 True" in proc.stdout, proc.stdout
    assert "child-exit 0" in proc.stdout, proc.stdout
    [(_, digest)] = _stored(db)["child"]
    assert digest == "[KeyError] at agent.py:9 in lookup: 'user_id'"
