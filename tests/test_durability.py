"""The audit store keeps every failure the agent saw: ``kill -9``, SIGTERM, bad records, a full queue.

The kill trials run a real agent process (``tests/durability_child.py``: ``init()`` with the default
SQLite store and spool, a tool that really fails) and kill it at random moments. The child fsyncs the
number of each failed call after the call has returned to it; every such number must be in the store
afterwards (after recovery from the spool, for ``kill -9``; straight away, for SIGTERM).
"""

from __future__ import annotations

import os
import random
import re
import signal
import sqlite3
import subprocess
import sys
import threading
import time
import types
from collections.abc import Iterator
from pathlib import Path

import pytest
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import InMemoryMetricReader

from otel_errcompact.sinks import JSONLSink, SQLiteSink, TrajectoryStore, TrajectoryWriter, read_jsonl
from otel_errcompact.sinks.spool import SUFFIX
from otel_errcompact.trajectory import TrajectoryRecord
from tests.atexit_threads import REFUSE_THREADS_AT_EXIT
from tests.conftest import GateSink, env_without_otel, metric_points

ROOT = Path(__file__).resolve().parent.parent
KILL_TRIALS = 25
TERM_TRIALS = 5
_CALL = re.compile(r"item-(\d+)")


class ForkServer:
    """Talks to ``tests/durability_child.py``: one agent child per trial."""

    def __init__(self) -> None:
        env = {**os.environ, "PYTHONPATH": str(ROOT), "OTEL_ERRCOMPACT_ENABLED": "true"}
        env.pop("OTEL_EXPORTER_OTLP_ENDPOINT", None)
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "tests.durability_child"], cwd=ROOT, env=env, text=True,
            stdin=subprocess.PIPE, stdout=subprocess.PIPE,
        )

    def start(self, folder: Path, mode: str = "tool") -> int:
        assert self.proc.stdin is not None and self.proc.stdout is not None
        self.proc.stdin.write(f"run {folder} {mode}\n")
        self.proc.stdin.flush()
        word, pid = self.proc.stdout.readline().split()
        assert word == "pid"
        return int(pid)

    def reap(self) -> int:
        """The waitpid status of the child that just died."""
        assert self.proc.stdout is not None
        word, status = self.proc.stdout.readline().split()
        assert word == "exit"
        return int(status)

    def close(self) -> None:
        assert self.proc.stdin is not None
        self.proc.stdin.close()
        self.proc.wait(30)


@pytest.fixture(scope="module")
def fork_server() -> Iterator[ForkServer]:
    server = ForkServer()
    yield server
    server.close()


def _returned(folder: Path) -> set[int]:
    """Call numbers whose failure had returned to the agent (complete lines of the fsynced file)."""
    path = folder / "returned.txt"
    if not path.exists():
        return set()
    return {int(line) for line in path.read_text().splitlines() if line.strip()}


def _stored(db: Path) -> set[int]:
    with TrajectoryStore(db) as store:
        calls = set()
        for rec in store.records():
            match = _CALL.search(rec.raw_error)
            assert match is not None, rec.raw_error
            calls.add(int(match.group(1)))
        return calls


def _wait_for_failures(folder: Path, at_least: int) -> None:
    deadline = time.monotonic() + 60
    while len(_returned(folder)) < at_least:
        assert time.monotonic() < deadline, "the child never failed a tool"
        time.sleep(0.01)


@pytest.mark.parametrize("mode", ["tool", "span"])
def test_kill_9_at_random_moments_loses_no_failure_the_agent_saw(
    fork_server: ForkServer, tmp_path: Path, mode: str
) -> None:
    """``tool``: the library's tool boundary; ``span``: a failed tool span, digest made after it ended."""
    seed = random.randrange(1 << 30)
    rng = random.Random(seed)
    recovered_trials = 0
    total_returned = 0
    for trial in range(KILL_TRIALS):
        folder = tmp_path / f"kill-{trial}"
        folder.mkdir()
        pid = fork_server.start(folder, mode)
        _wait_for_failures(folder, 5)
        time.sleep(rng.uniform(0.0, 1.0))
        os.kill(pid, signal.SIGKILL)
        status = fork_server.reap()
        assert os.WIFSIGNALED(status) and os.WTERMSIG(status) == signal.SIGKILL

        returned = _returned(folder)
        db = folder / "trajectories.sqlite3"
        spool = folder / "trajectories.sqlite3-spool"
        # What a restarted agent does first: a writer on the same spool replays what the dead one left.
        writer = TrajectoryWriter([SQLiteSink(db)], spool_dir=spool)
        assert writer.force_flush(30)
        writer.shutdown()
        recovered_trials += writer.recovered > 0
        missing = returned - _stored(db)
        assert not missing, f"trial {trial} (seed {seed}): {len(missing)} of {len(returned)} lost"
        assert not list(spool.glob(f"*{SUFFIX}")), "replayed segments are deleted"
        total_returned += len(returned)
    # The trials exercised the spool: in most of them the store alone lacked failures the agent saw.
    assert recovered_trials >= KILL_TRIALS // 2, (recovered_trials, seed)
    assert total_returned > 10 * KILL_TRIALS


@pytest.mark.parametrize("mode", ["tool", "span"])
def test_sigterm_writes_every_failure_to_the_store_before_the_process_ends(
    fork_server: ForkServer, tmp_path: Path, mode: str
) -> None:
    rng = random.Random()
    for trial in range(TERM_TRIALS):
        folder = tmp_path / f"term-{trial}"
        folder.mkdir()
        pid = fork_server.start(folder, mode)
        _wait_for_failures(folder, 5)
        time.sleep(rng.uniform(0.0, 0.6))
        os.kill(pid, signal.SIGTERM)
        status = fork_server.reap()
        # The handler chains to the default action: the process still ends "killed by SIGTERM".
        assert os.WIFSIGNALED(status) and os.WTERMSIG(status) == signal.SIGTERM
        returned = _returned(folder)
        db = folder / "trajectories.sqlite3"
        missing = returned - _stored(db)  # read straight away: no recovery step
        assert not missing, f"trial {trial}: {len(missing)} of {len(returned)} lost"
        with TrajectoryStore(db) as store:
            # Shutdown made every deferred digest, but for the one failure the agent's thread may have
            # had in flight as the shutdown began: its raw record is stored, its digest may come late.
            assert sum(rec.digest is None for rec in store.records()) <= 1
        assert not list((folder / "trajectories.sqlite3-spool").glob(f"*{SUFFIX}"))


def _undecodable_name_error(folder: Path) -> str:
    """A real error whose message holds a non-UTF-8 file name as os.listdir returns it (a lone surrogate).

    The code is a tool that checks the CSV files of a folder; the folder holds one empty file whose
    name is not UTF-8 (``caf\\xe9-report.csv``, Latin-1).
    """
    os.close(os.open(os.path.join(os.fsencode(folder), b"caf\xe9-report.csv"), os.O_CREAT | os.O_WRONLY))

    def check_headers(path: Path) -> None:
        for name in os.listdir(path):
            with open(path / name, encoding="utf-8") as fh:
                if not fh.readline():
                    raise ValueError(f"{name}: empty file, expected a header row")

    try:
        check_headers(folder)
    except ValueError as exc:
        text = f"{type(exc).__name__}: {exc}"
        assert "\udce9" in text  # the undecodable byte, kept as a lone surrogate
        return text
    raise AssertionError("the empty file must fail the check")


def _escape_typed_in_an_error() -> str:
    """A real error whose own text holds the four characters ``\\xe9``: ``int()`` of bytes shows their repr."""
    try:
        int(bytes([99, 97, 102, 0xE9]))
    except ValueError as exc:
        text = f"{type(exc).__name__}: {exc}"
        assert "caf\\xe9" in text
        return text
    raise AssertionError("int() of b'caf\\xe9' must fail")


def test_a_record_with_a_lone_surrogate_is_stored_byte_for_byte_with_its_batch(tmp_path: Path) -> None:
    """The undecodable byte of a file name reads back from SQLite and JSONL as the very text, distinct
    from the same four characters ``\\xe9`` typed in another error: the audit copy is lossless."""
    (tmp_path / "files").mkdir()
    bad_text = _undecodable_name_error(tmp_path / "files")
    typed_text = _escape_typed_in_an_error()
    good = [_real_record(tmp_path, i) for i in range(100)]
    bad = TrajectoryRecord(source="tool", tool_name="read_csv", raw_error=bad_text,
                           exception_message=bad_text, attributes={"path": bad_text})
    typed = TrajectoryRecord(source="tool", tool_name="parse_count", raw_error=typed_text)
    db, jl = tmp_path / "t.db", tmp_path / "t.jsonl"
    writer = TrajectoryWriter([SQLiteSink(db), JSONLSink(jl)], max_batch_size=512,
                              spool_dir=tmp_path / "spool")
    for rec in [*good[:50], bad, typed, *good[50:]]:
        writer.submit(rec)
    assert writer.force_flush(30)  # nothing lost, nothing quarantined
    writer.shutdown()

    with TrajectoryStore(db) as store:
        assert store.count() == 102
        from_sqlite = {r.record_id: r for r in store.records()}
    from_jsonl = {r.record_id: r for r in read_jsonl(jl)}
    assert len(from_jsonl) == 102
    for stored in (from_sqlite, from_jsonl):
        assert stored[bad.record_id] == bad  # the lone surrogate, not an escape of it
        assert stored[bad.record_id].raw_error.encode("utf-8", "surrogateescape").count(b"caf\xe9-report") == 1
        assert stored[typed.record_id].raw_error == typed_text
        assert stored[good[0].record_id] == good[0]
    for line in jl.read_bytes().splitlines():
        line.decode("utf-8")  # every stored line is valid UTF-8


_BEFORE = Path(__file__).resolve().parent / "data" / "before-lossless"
"""Files written by the release before lone surrogates were kept (``make.py`` there says how): the undecodable
byte of a file name, and of a process's stderr, stored as a ``\\xNN`` escape."""


def test_stores_and_spools_written_before_read_as_they_did(tmp_path: Path) -> None:
    """A JSONL file, a SQLite store and a spool segment a killed writer left, all in the earlier format,
    read back as that release read them; new records stored beside them keep their bytes."""
    (tmp_path / "files").mkdir()
    lines = (_BEFORE / "trajectories.jsonl").read_bytes().splitlines(keepends=True)
    expected = {
        "0" * 31 + "1": ("import_notes", "ValueError: unsupported note file caf\\xe9.txt"),
        "0" * 31 + "2": ("parse_count", "ValueError: invalid literal for int() with base 10: b'caf\\xe9'"),
        "0" * 31 + "3": ("run", "caf\\xe9: not found"),
    }

    def check(records: dict[str, TrajectoryRecord]) -> None:
        for record_id, (tool, raw) in expected.items():
            assert (records[record_id].tool_name, records[record_id].raw_error) == (tool, raw)

    check({r.record_id: r for r in read_jsonl(_BEFORE / "trajectories.jsonl")})

    # The store gets the old lines as the old writer stored them (its spool line is the record column),
    # then a spool a killed writer left is replayed into it, beside a new record.
    db = tmp_path / "t.db"
    sink = SQLiteSink(db)
    sink.write_encoded([(TrajectoryRecord.from_storage_json(line), line[:-1].decode()) for line in lines[:2]])
    sink.close()
    spool = tmp_path / "t.db-spool"
    spool.mkdir()
    left = "1700000000000000000-4242-0.spool"
    (spool / left).write_bytes((_BEFORE / left).read_bytes())
    new = TrajectoryRecord(source="tool", tool_name="read_csv", raw_error=_undecodable_name_error(tmp_path / "files"))
    writer = TrajectoryWriter([SQLiteSink(db)], spool_dir=spool)
    writer.submit(new)
    assert writer.force_flush(30)
    writer.shutdown()
    assert writer.recovered == 3
    with TrajectoryStore(db) as store:
        assert store.count() == 4
        records = {r.record_id: r for r in store.records()}
    check(records)
    assert records[new.record_id] == new
    assert not list(spool.glob(f"*{SUFFIX}"))


def _real_record(folder: Path, i: int) -> TrajectoryRecord:
    try:
        {"alpha": 1}[f"customer-{i}"]
    except KeyError as exc:
        import traceback

        tb = "".join(traceback.format_exception(exc))
        return TrajectoryRecord(source="tool", tool_name="lookup", raw_error=tb,
                                exception_stacktrace=tb, exception_type="KeyError",
                                exception_message=str(exc), scope=f"conv-{i % 3}")
    raise AssertionError("unreachable")


def test_a_full_queue_applies_backpressure_then_drops_counts_and_tells(tmp_path: Path) -> None:
    gate = GateSink()
    writer = TrajectoryWriter([gate], max_queue_size=4, max_batch_size=4, schedule_delay_s=0.01,
                              max_block_s=5.0)
    first = _real_record(tmp_path, 0)
    writer.submit(first)
    assert gate.entered.wait(10)  # the worker is stuck writing the first record
    queued = [_real_record(tmp_path, i) for i in range(1, 5)]
    for rec in queued:
        writer.submit(rec)

    # Backpressure: the fifth submission waits for room instead of being dropped...
    late = _real_record(tmp_path, 5)
    done = threading.Event()
    def submit_late() -> None:
        writer.submit(late)
        done.set()

    submitter = threading.Thread(target=submit_late)
    submitter.start()
    assert not done.wait(0.3), "submit returned although the queue was full"
    gate.release.set()  # ...and is accepted once the store catches up
    assert done.wait(10)
    submitter.join()
    assert writer.force_flush(10)
    assert writer.dropped == 0
    assert gate.seen == [r.record_id for r in [first, *queued, late]]
    writer.shutdown()

    # When the store does not catch up within max_block_s, the record is dropped, counted and reported.
    gate2 = GateSink()
    writer2 = TrajectoryWriter([gate2], max_queue_size=2, max_batch_size=2, schedule_delay_s=0.01,
                               max_block_s=0.2)
    reader = InMemoryMetricReader()
    writer2.register_metrics(MeterProvider(metric_readers=[reader]).get_meter("test"))
    writer2.submit(first)
    assert gate2.entered.wait(10)
    writer2.submit(queued[0])
    writer2.submit(queued[1])
    writer2.submit(queued[2])  # full for 0.2 s: dropped
    assert writer2.dropped == 1
    gate2.release.set()
    assert not writer2.force_flush(10)  # truthful: one record did not make it
    assert gate2.seen == [first.record_id, queued[0].record_id, queued[1].record_id]
    writer2.shutdown()
    assert [p.value for p in metric_points(reader, "errcompact.trajectory.dropped")] == [1]


def test_flush_is_true_only_when_everything_submitted_is_stored(tmp_path: Path) -> None:
    db = tmp_path / "t.db"
    writer = TrajectoryWriter([SQLiteSink(db)], spool_dir=tmp_path / "spool")
    for i in range(20):
        writer.submit(_real_record(tmp_path, i))
    assert writer.force_flush(10)
    writer.shutdown()
    writer.submit(_real_record(tmp_path, 99))  # after shutdown: dropped
    assert not writer.force_flush(1)
    assert writer.dropped == 1
    with TrajectoryStore(db) as store:
        assert store.count() == 20


def test_a_ten_megabyte_error_is_stored_once(tmp_path: Path) -> None:
    from tests.realerrors import python_error

    tb = python_error(tmp_path, """
        def load(blob):
            raise ValueError("payload rejected: " + blob)

        load("0123456789abcdef" * 655_360)
    """)
    assert len(tb) > 10_000_000
    message = tb.strip().splitlines()[-1].partition(": ")[2]
    rec = TrajectoryRecord(source="span", raw_error=tb, exception_stacktrace=tb, exception_type="ValueError",
                           exception_message=message, status_description=f"ValueError: {message}")
    db = tmp_path / "t.db"
    writer = TrajectoryWriter([SQLiteSink(db)], spool_dir=tmp_path / "spool")
    writer.submit(rec)
    assert writer.force_flush(30)
    rec = rec.model_copy(update={"count": 2})  # a second version, written in a later batch
    writer.submit(rec)
    writer.shutdown()
    # One copy of the text (10.5 MB), not four, nor one per version; the WAL is checkpointed and
    # truncated on close.
    size = db.stat().st_size + sum(p.stat().st_size for p in tmp_path.glob("t.db-*"))
    assert size < 1.2 * len(tb), size
    with TrajectoryStore(db) as store:
        assert store.get(rec.record_id) == rec


def test_a_version_1_store_is_upgraded_in_place(tmp_path: Path) -> None:
    """A file written by the previous release (its code taken from git history) is migrated."""
    try:
        old_source = subprocess.run(
            ["git", "show", "cb045c2:otel_errcompact/sinks/sqlite.py"], cwd=ROOT, check=True,
            capture_output=True, text=True,
        ).stdout
    except (OSError, subprocess.CalledProcessError):
        pytest.skip("the previous release's sqlite.py is not in this checkout's history")
    old = types.ModuleType("otel_errcompact_v1_sqlite")
    sys.modules[old.__name__] = old  # dataclasses look their module up while the class is built
    try:
        exec(compile(old_source, "v1/sqlite.py", "exec"), old.__dict__)
    finally:
        del sys.modules[old.__name__]
    old_sink = old.SQLiteSink
    db = tmp_path / "old.db"
    records = [_real_record(tmp_path, i) for i in range(30)]
    sink = old_sink(db)
    sink.write(records)
    sink.close()

    with pytest.raises(RuntimeError, match=r"older otel-errcompact.*upgraded"):
        TrajectoryStore(db)
    SQLiteSink(db).close()
    with TrajectoryStore(db) as store:
        assert store.count() == 30
        assert [r.record_id for r in store.records()] == [r.record_id for r in records]
        assert store.get(records[7].record_id) == records[7]
    with sqlite3.connect(db) as conn:
        indexes = {r[0] for r in conn.execute("SELECT name FROM sqlite_master WHERE type = 'index'")
                   if not r[0].startswith("sqlite_autoindex")}
    assert indexes == {"trajectory_conversation", "trajectory_key", "trajectory_trace", "trajectory_escalated"}


def test_two_live_writers_on_one_spool_never_replay_each_other(tmp_path: Path) -> None:
    spool = tmp_path / "spool"
    first = TrajectoryWriter([SQLiteSink(tmp_path / "a.db")], spool_dir=spool)
    records = [_real_record(tmp_path, i) for i in range(10)]
    for rec in records:
        first.submit(rec)
    assert list(spool.glob(f"*{SUFFIX}"))  # the first writer's open segment
    second = TrajectoryWriter([SQLiteSink(tmp_path / "b.db")], spool_dir=spool)
    assert second.force_flush(10)
    assert second.recovered == 0  # the segment is locked by a live writer
    second.shutdown()
    assert first.force_flush(10)
    first.shutdown()
    with TrajectoryStore(tmp_path / "a.db") as store:
        assert store.count() == 10
    with TrajectoryStore(tmp_path / "b.db") as store:
        assert store.count() == 0


HOST_WITH_HANDLER = """
import os, signal, sys, otel_errcompact
from otel_errcompact import ToolErrorText
seen = []
signal.signal(signal.SIGTERM, lambda signum, frame: seen.append(signum))
ec = otel_errcompact.init("host", sqlite_path=sys.argv[1], otlp_logs=False)

@ec.tool
def lookup(key):
    return {}[key]

assert isinstance(lookup("k"), ToolErrorText)
os.kill(os.getpid(), signal.SIGTERM)
assert seen == [signal.SIGTERM], seen  # the host's handler ran, and the process lives on
ec.shutdown()
print("host handler kept")
"""


def test_a_host_sigterm_handler_is_left_alone(tmp_path: Path) -> None:
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    env.pop("OTEL_EXPORTER_OTLP_ENDPOINT", None)
    done = subprocess.run([sys.executable, "-c", HOST_WITH_HANDLER, str(tmp_path / "t.db")], env=env,
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert "host handler kept" in done.stdout
    with TrajectoryStore(tmp_path / "t.db") as store:
        assert store.count() == 1


SIGTERM_INSIDE_THE_WRITER_LOCK = """
import os, signal, sys, time, otel_errcompact
from otel_errcompact import ToolErrorText
ec = otel_errcompact.init("host", sqlite_path=sys.argv[1], otlp_logs=False)

@ec.tool
def lookup(key):
    return {}[key]

assert isinstance(lookup("k"), ToolErrorText)
# SIGTERM arriving while the main thread is inside the writer's queue lock (as it is, briefly, in every
# failed tool call): the handler runs on this thread, inside the lock.
with ec.writer._cond:
    os.kill(os.getpid(), signal.SIGTERM)
    time.sleep(0.2)
time.sleep(60)
print("not ended")
"""


def test_sigterm_inside_the_writers_lock_still_ends_the_process(tmp_path: Path) -> None:
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    env.pop("OTEL_EXPORTER_OTLP_ENDPOINT", None)
    done = subprocess.run([sys.executable, "-c", SIGTERM_INSIDE_THE_WRITER_LOCK, str(tmp_path / "t.db")],
                          env=env, capture_output=True, text=True, timeout=120)
    assert done.returncode == -signal.SIGTERM, (done.returncode, done.stdout, done.stderr)
    with TrajectoryStore(tmp_path / "t.db") as store:
        assert store.count() == 1


SIGTERM_AFTER_A_SHUTDOWN_OFF_THE_MAIN_THREAD = """
import os, signal, sys, threading, otel_errcompact
from otel_errcompact import ToolErrorText

first = otel_errcompact.init("host", sqlite_path=sys.argv[1], otlp_logs=False)
stopper = threading.Thread(target=first.shutdown)  # off the main thread, as the review hook runs
stopper.start()
stopper.join()
ec = otel_errcompact.init("host", sqlite_path=sys.argv[2], otlp_logs=False, schedule_delay_s=30)

@ec.tool
def lookup(key):
    return {}[key]

assert isinstance(lookup("k"), ToolErrorText)
os.kill(os.getpid(), signal.SIGTERM)  # the record is queued, not yet written: the handler must flush it
threading.Event().wait(60)
print("not ended")
"""


def test_sigterm_flushes_the_live_handle_after_a_shutdown_off_the_main_thread(tmp_path: Path) -> None:
    """A handle shut down off the main thread cannot remove the SIGTERM handler, and the next ``init()``
    leaves it installed: on SIGTERM it flushes the handle live then, whose queued record is stored."""
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    env.pop("OTEL_EXPORTER_OTLP_ENDPOINT", None)
    done = subprocess.run(
        [sys.executable, "-c", SIGTERM_AFTER_A_SHUTDOWN_OFF_THE_MAIN_THREAD, str(tmp_path / "first.db"),
         str(tmp_path / "second.db")], env=env, capture_output=True, text=True, timeout=120,
    )
    assert done.returncode == -signal.SIGTERM, (done.returncode, done.stdout, done.stderr)
    with TrajectoryStore(tmp_path / "second.db") as store:
        assert store.count() == 1


def test_a_spool_that_cannot_be_created_leaves_the_store_working(tmp_path: Path,
                                                                 caplog: pytest.LogCaptureFixture) -> None:
    blocker = tmp_path / "t.db-spool"
    blocker.write_text("a file where the spool folder would go")
    with caplog.at_level("WARNING", logger="otel_errcompact"):
        writer = TrajectoryWriter([SQLiteSink(tmp_path / "t.db")], spool_dir=blocker)
    assert writer.spool_dir is None and "no spool at" in caplog.text
    writer.submit(_real_record(tmp_path, 1))
    assert writer.force_flush(10)
    writer.shutdown()
    with TrajectoryStore(tmp_path / "t.db") as store:
        assert store.count() == 1


SIGTERM_DURING_EXIT = """
import atexit, os, signal, sys, threading, time
import otel_errcompact

exiting = threading.Event()


class SignallingSink:
    '''A second sink that sends its process SIGTERM at its first write during the exit, as a pool's
    terminate() does to a worker that is already ending.'''
    sent = False

    def write(self, records):
        if exiting.is_set() and not SignallingSink.sent:
            SignallingSink.sent = True
            os.kill(os.getpid(), signal.SIGTERM)
            time.sleep(0.2)  # the main thread, waiting for the drain, takes the signal meanwhile

    def close(self):
        print("drained, sigterm sent:", SignallingSink.sent, flush=True)


ec = otel_errcompact.init(service_name="exit", sqlite_path=sys.argv[1], sinks=[SignallingSink()])
if sys.argv[2] == "refused":
    refuse_threads_at_exit()
atexit.register(exiting.set)  # runs before the library's shutdown (last registered, first run)


@ec.tool
def lookup(key: str) -> str:
    return {}[key]


with ec.conversation("exit"):
    lookup("user_id")
"""


@pytest.mark.parametrize("threads_at_exit", ["allowed", "refused"])
def test_sigterm_during_the_exit_shutdown_lets_it_finish(tmp_path: Path, threads_at_exit: str) -> None:
    """SIGTERM arriving while the exit's shutdown drains the queue: the drain finishes and the record is
    stored. From Python 3.12 the SIGTERM handler cannot start its thread then (recreated by refusing
    thread starts at exit, ``tests/atexit_threads.py``): it must not raise into the shutdown it interrupted."""
    db = tmp_path / "store.sqlite3"
    env = env_without_otel()
    proc = subprocess.run(
        [sys.executable, "-c", REFUSE_THREADS_AT_EXIT + SIGTERM_DURING_EXIT, str(db), threads_at_exit],
        capture_output=True, text=True, timeout=60, env=env, check=False,
    )
    assert "drained, sigterm sent: True" in proc.stdout, proc.stdout + proc.stderr
    assert "Traceback" not in proc.stderr and "Exception ignored" not in proc.stderr, proc.stderr
    assert proc.returncode in (0, -signal.SIGTERM), proc.returncode
    assert TrajectoryStore(db).count() == 1
    spool = db.with_name(db.name + "-spool")
    assert not spool.exists() or not list(spool.iterdir())
