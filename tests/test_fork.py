"""Worker processes of an instrumented agent: multiprocessing pools (each start method), as evaluation
harnesses and prefork task queues run agents, with ``init()`` at the agent module's top level (run in the
parent; a fork worker inherits it, a spawn or forkserver worker runs it again as it imports the module).

Each case runs a real script in its own interpreter: the parent fails a tool, a pool of two workers fails
tools in four tasks (no ``flush()`` in them: a worker ends when the pool is done with it), the parent fails
once more and exits. Every failure must be in the store with its digest, no record may be left only in
the spool (each process removes its own segments), and nothing may be logged as an error.

The other cases fork at the worst moment for a thread of the parent: while it holds a lock a tool call takes,
while it serialises a record, while it appends to the JSONL file, and while it flushes to an OTLP endpoint that
never answers; the child must go on at once."""

from __future__ import annotations

import json
import sqlite3
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from otel_errcompact.sinks.spool import read_segment
from otel_errcompact.trajectory import TrajectoryRecord
from tests.conftest import env_without_otel

ROOT = Path(__file__).resolve().parent.parent

AGENT = textwrap.dedent(
    """
    import multiprocessing, os, sys, time
    import otel_errcompact

    DB = sys.argv[2]
    ec = otel_errcompact.init(service_name="fork-test", sqlite_path=DB,
                              redact_at_rest=os.environ.get("FORK_TEST_AT_REST") == "1")

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


def run_pool_agent(
    tmp_path: Path, start_method: str, ending: str = "exit", *, at_rest: bool = False
) -> tuple[subprocess.CompletedProcess[str], Path]:
    script = tmp_path / "agent.py"
    script.write_text(AGENT)
    db = tmp_path / "trajectories.sqlite3"
    env = {**env_without_otel(), "FORK_TEST_AT_REST": "1" if at_rest else "0"}
    proc = subprocess.run([sys.executable, str(script), start_method, str(db), ending], cwd=tmp_path, env=env,
                          capture_output=True, text=True, timeout=120, check=False)
    return proc, db


def stored_rows(db: Path) -> dict[str, list[tuple[str, str | None]]]:
    rows: dict[str, list[tuple[str, str | None]]] = {}
    with sqlite3.connect(db) as conn:
        for conversation, record_id, digest in conn.execute(
            "SELECT conversation_id, record_id, digest_line FROM trajectory ORDER BY conversation_id"
        ):
            rows.setdefault(conversation, []).append((record_id, digest))
    return rows


@pytest.mark.parametrize("start_method", ["fork", "forkserver", "spawn"])
def test_pool_workers_store_every_failure_and_leave_no_spool(tmp_path: Path, start_method: str) -> None:
    proc, db = run_pool_agent(tmp_path, start_method)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "Traceback" not in proc.stderr and "otel-errcompact:" not in proc.stderr, proc.stderr
    stored = stored_rows(db)
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


def test_fork_workers_store_every_failure_with_redaction_at_rest(tmp_path: Path) -> None:
    """With ``redact_at_rest`` the store's sink is wrapped: the wrapper must hand the fork on to it, or a
    worker writes through the parent's connection and stores nothing."""
    proc, db = run_pool_agent(tmp_path, "fork", at_rest=True)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "Traceback" not in proc.stderr and "otel-errcompact:" not in proc.stderr, proc.stderr
    assert {c: len(r) for c, r in stored_rows(db).items()} == EXPECTED


def test_a_killed_workers_records_are_recovered_at_the_next_start(tmp_path: Path) -> None:
    """``kill -9`` of a forked worker right after its tool calls returned: their records are in spool
    segments of its own (not in the parent's), which no process removes, and the next process that
    opens the store replays them."""
    proc, db = run_pool_agent(tmp_path, "fork", ending="kill")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    before = {c: len(r) for c, r in stored_rows(db).items()}
    assert before["parent-before"] == before["parent-after"] == 1, before
    assert before.get("worker-3", 0) < 2, before  # else the kill came too late to test anything
    reopen = subprocess.run(
        [sys.executable, "-c", "import sys, otel_errcompact; otel_errcompact.init(sqlite_path=sys.argv[1]).shutdown()",
         str(db)],
        cwd=tmp_path, env=env_without_otel(),
        capture_output=True, text=True, timeout=60, check=False,
    )
    assert reopen.returncode == 0, reopen.stderr
    assert {c: len(r) for c, r in stored_rows(db).items()} == EXPECTED
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
    db = tmp_path / "trajectories.sqlite3"
    proc = _run_forking(tmp_path, FORK_WHILE_LOCKED, str(db))
    _assert_the_child_failed_and_stored(proc, db, "| 1 True")


def _run_forking(tmp_path: Path, source: str, *args: str) -> subprocess.CompletedProcess[str]:
    """Run ``source`` as a script that forks (Python 3.12+ warns about forking a threaded process)."""
    script = tmp_path / "agent.py"
    script.write_text(source)
    proc = subprocess.run([sys.executable, "-W", "ignore::DeprecationWarning", str(script), *args], cwd=tmp_path,
                          env=env_without_otel(), capture_output=True, text=True, timeout=60, check=False)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    return proc


def _assert_the_child_failed_and_stored(proc: subprocess.CompletedProcess[str], db: Path, then: str) -> None:
    assert f"child Error: [KeyError] at agent.py:9 in lookup: 'user_id' {then}" in proc.stdout, proc.stdout
    assert "child-exit 0" in proc.stdout, proc.stdout
    [(_, digest)] = stored_rows(db)["child"]
    assert digest == "[KeyError] at agent.py:9 in lookup: 'user_id'"


CHILD_FAILS_A_TOOL = textwrap.dedent(
    """
    pid = os.fork()
    if pid == 0:
        with ec.conversation("child"):
            line = str(lookup("user_id"))
        ok = ec.flush(timeout_s=10)
        print("child", line, ok, flush=True)
        ec.shutdown()
        os._exit(0 if ok else 3)
    _, status = os.waitpid(pid, 0)
    print("child-exit", os.waitstatus_to_exitcode(status))
    """
)
"""The end of a script whose ``lookup`` tool (line 9) fails: a forked child fails it once and flushes; the
parent waits for the child."""


FORK_WHILE_HELD = textwrap.dedent(
    """
    import os, sys, threading
    import otel_errcompact

    ec = otel_errcompact.init(service_name="fork-test", sqlite_path=sys.argv[1])

    @ec.tool
    def lookup(key: str) -> str:
        return {}[key]

    with ec.conversation("parent"):
        lookup("warm-up")  # the tool boundary and its recovery state are in use before the fork
    # A thread of the parent inside the lock at the moment of the fork.
    lock = eval(sys.argv[2])
    inside, release = threading.Event(), threading.Event()

    def hold() -> None:
        with lock:
            inside.set()
            release.wait()

    threading.Thread(target=hold, daemon=True).start()
    inside.wait(10)
    """
) + CHILD_FAILS_A_TOOL + "release.set()\n"


@pytest.mark.parametrize(
    "lock",
    [
        "ec.boundary.breakers.store._lock",  # the circuit breakers' state, asked before every tool call
        "ec.boundary.aborts._lock",  # the abort registry, which tracks every running tool call
    ],
)
def test_a_fork_while_a_thread_holds_a_lock_of_the_tool_boundary(tmp_path: Path, lock: str) -> None:
    """Each lock a tool call takes is new in the child: one that a thread of the parent held at the fork
    would otherwise make the child's first tool call wait for ever."""
    db = tmp_path / "trajectories.sqlite3"
    proc = _run_forking(tmp_path, FORK_WHILE_HELD, str(db), lock)
    _assert_the_child_failed_and_stored(proc, db, "True")


JSONL_APPENDED_ACROSS_FORKS = textwrap.dedent(
    """
    import json, os, sys, threading, time, traceback
    from otel_errcompact.sinks import JSONLSink
    from otel_errcompact.trajectory import TrajectoryRecord

    def record(conversation: str, key: str) -> TrajectoryRecord:
        try:
            {}[key]
        except KeyError as exc:
            stack, message = traceback.format_exc(), str(exc)
        return TrajectoryRecord.model_validate(dict(
            source="span", tool_name="lookup", conversation_id=conversation, exception_type="KeyError",
            exception_message=message, exception_stacktrace=stack, raw_error=stack))

    sink = JSONLSink(sys.argv[1])
    batch = [record("parent", f"user-{n}") for n in range(8)]
    stop = threading.Event()

    def append() -> None:  # as the parent's writer thread does, batch after batch
        while not stop.is_set():
            sink.write(batch)

    thread = threading.Thread(target=append)
    thread.start()
    children = []
    for n in range(int(sys.argv[2])):
        pid = os.fork()
        if pid == 0:
            sink.after_fork_in_child()  # what the writer's rebuild does with each of its sinks
            sink.write([record(f"child-{n}", f"order-{n}")])
            os._exit(0)
        children.append(pid)
    deadline, hung = time.monotonic() + 10, 0
    for pid in children:
        while not os.waitpid(pid, os.WNOHANG)[0]:
            if time.monotonic() > deadline:
                hung += 1
                os.kill(pid, 9)
                os.waitpid(pid, 0)
                break
            time.sleep(0.005)
    stop.set()
    thread.join()
    sink.close()
    print(json.dumps({"hung": hung}))
    """
)


def test_a_jsonl_file_shared_across_forks_takes_every_process_lines_whole(tmp_path: Path) -> None:
    """Parent and children append to one JSONL file: a child forked while the parent's thread was in the
    middle of a write appends its own line, and no line is torn, copied twice or lost."""
    path = tmp_path / "trajectories.jsonl"
    children = 20
    proc = _run_forking(tmp_path, JSONL_APPENDED_ACROSS_FORKS, str(path), str(children))
    assert json.loads(proc.stdout.splitlines()[-1]) == {"hung": 0}
    conversations: dict[str, int] = {}
    for line in path.read_bytes().splitlines():
        record = TrajectoryRecord.from_storage_json(line)  # raises on a torn line
        conversations[record.conversation_id or ""] = conversations.get(record.conversation_id or "", 0) + 1
    assert {c: n for c, n in conversations.items() if c != "parent"} == {f"child-{n}": 1 for n in range(children)}
    assert conversations["parent"] % 8 == 0  # whole batches only


FORK_WHILE_SERIALISING = textwrap.dedent(
    """
    import os, sys, threading, time, traceback
    from otel_errcompact import trajectory

    try:
        {}["user_id"]
    except KeyError as exc:
        stack, message = traceback.format_exc(), str(exc)
    record = trajectory.TrajectoryRecord.model_validate(dict(
        source="span", tool_name="lookup", exception_type="KeyError", exception_message=message,
        exception_stacktrace=stack, raw_error=stack))
    # A thread of the library inside a serialisation at the moment of the fork (the writer storing a record).
    inside, released = threading.Event(), threading.Event()

    def serialise() -> None:
        with trajectory._serializing:
            inside.set()
            time.sleep(0.3)
            released.set()

    threading.Thread(target=serialise).start()
    inside.wait(10)
    pid = os.fork()
    if pid == 0:
        line = record.to_storage_line()  # the child's first serialisation
        os._exit(0 if b"KeyError: 'user_id'" in line else 3)
    print("waited", released.is_set())
    _, status = os.waitpid(pid, 0)
    print("child-exit", os.waitstatus_to_exitcode(status))
    """
)


def test_a_fork_waits_for_a_serialisation_in_progress(tmp_path: Path) -> None:
    """pydantic-core's ``to_json`` is not safe to fork inside (a child forked while another thread was in
    it could hang in its own first one): ``fork()`` waits until no thread of the library is serialising,
    and the child serialises at once."""
    proc = _run_forking(tmp_path, FORK_WHILE_SERIALISING)
    assert proc.stdout.split() == ["waited", "True", "child-exit", "0"], proc.stdout + proc.stderr


FORK_WHILE_FLUSHING_OTLP = textwrap.dedent(
    """
    import os, socket, sys, threading, time
    from opentelemetry.exporter.otlp.proto.http._log_exporter import OTLPLogExporter
    from opentelemetry.sdk._logs import LoggerProvider
    from opentelemetry.sdk._logs.export import BatchLogRecordProcessor
    from otel_errcompact.sinks import OTLPLogSink

    silent = socket.socket()  # completes TCP handshakes and never answers: the parent's export hangs
    silent.bind(("127.0.0.1", 0))
    silent.listen(64)
    exporter = OTLPLogExporter(endpoint=f"http://127.0.0.1:{silent.getsockname()[1]}/v1/logs", timeout=30)
    provider = LoggerProvider()
    provider.add_log_record_processor(BatchLogRecordProcessor(exporter))
    provider.get_logger("agent").emit(body="a record for the parent's flush to export")
    sink = OTLPLogSink(provider, flush_timeout_s=5)
    # The parent's flush, under way at the fork: its export waits for the silent endpoint.
    threading.Thread(target=sink.flush, daemon=True).start()
    time.sleep(0.5)

    pid = os.fork()
    if pid == 0:
        started = time.monotonic()
        sink.flush()  # nothing to export here: returns at once unless it waits for the parent's flush
        print("child flushed in", round(time.monotonic() - started, 1), "s", flush=True)
        os._exit(0)
    _, status = os.waitpid(pid, 0)
    print("child-exit", os.waitstatus_to_exitcode(status), flush=True)
    os._exit(0)  # without waiting at exit for the export the silent endpoint holds
    """
)


def test_a_fork_while_the_otlp_log_sink_flushes(tmp_path: Path) -> None:
    """The OTLP log sink's flush is bounded by a call on a helper thread; the parent's, under way at the fork,
    runs on no thread in the child, whose flushes must not wait out their timeout for it."""
    proc = _run_forking(tmp_path, FORK_WHILE_FLUSHING_OTLP)
    assert "child-exit 0" in proc.stdout, proc.stdout + proc.stderr
    seconds = float(proc.stdout.split("child flushed in ")[1].split()[0])
    assert seconds < 2.5, proc.stdout  # the flush's timeout is 5 s: it waited for the parent's flush


FORK_WITH_A_SINK_THAT_CANNOT_REBUILD = textwrap.dedent(
    """
    import os, sys, otel_errcompact
    class Unforkable:  # a sink of the user's own whose rebuild in the child fails
        write = flush = close = lambda self, *records: None
        def after_fork_in_child(self): raise OSError("cannot reopen the socket")
    ec = otel_errcompact.init(service_name="fork-test", sqlite_path=sys.argv[1], sinks=[Unforkable()])
    @ec.tool
    def lookup(key: str) -> str:
        return {}[key]
    """
) + CHILD_FAILS_A_TOOL


def test_a_sink_that_cannot_be_rebuilt_in_the_child_leaves_the_others_working(tmp_path: Path) -> None:
    """The writer rebuilds each sink in a forked child; one whose rebuild raises is logged, and the child's
    records still reach the other sinks."""
    db = tmp_path / "trajectories.sqlite3"
    proc = _run_forking(tmp_path, FORK_WITH_A_SINK_THAT_CANNOT_REBUILD, str(db))
    _assert_the_child_failed_and_stored(proc, db, "True")
    assert "could not rebuild" in proc.stderr and "cannot reopen the socket" in proc.stderr, proc.stderr


FORK_BEFORE_THE_DIGEST = textwrap.dedent(
    """
    import logging, os, sys
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import BatchSpanProcessor
    from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
    import otel_errcompact

    warnings = []
    handler = logging.Handler()
    handler.emit = lambda record: warnings.append(record.getMessage())
    logging.getLogger("otel_errcompact").addHandler(handler)
    provider = TracerProvider()
    exporter = InMemorySpanExporter()
    provider.add_span_processor(BatchSpanProcessor(exporter, schedule_delay_millis=60000))
    ec = otel_errcompact.init(service_name="fork-test", sqlite_path=sys.argv[1], tracer_provider=provider)
    tracer = provider.get_tracer("agent")
    try:
        with tracer.start_as_current_span("execute_tool lookup", attributes={"gen_ai.operation.name": "execute_tool"}):
            {}["user_id"]
    except KeyError:
        pass
    pid = os.fork()  # at once: the digest thread has not made the failure's digest yet
    if pid == 0:
        with tracer.start_as_current_span("chat model", attributes={"gen_ai.operation.name": "chat"}):
            pass
        provider.force_flush()
        print("child", [s.name for s in exporter.get_finished_spans()], warnings, flush=True)
        os._exit(0)
    _, status = os.waitpid(pid, 0)
    print("child-exit", os.waitstatus_to_exitcode(status))
    ec.shutdown()
    """
)


FORK_AFTER_SUCCESSFUL_CALLS = textwrap.dedent(
    """
    import os, sys
    from opentelemetry.sdk.metrics import MeterProvider
    from opentelemetry.sdk.metrics.export import InMemoryMetricReader
    from opentelemetry.sdk.trace import TracerProvider
    import otel_errcompact

    reader = InMemoryMetricReader()
    ec = otel_errcompact.init(service_name="fork-test", sqlite_path=sys.argv[1], tracer_provider=TracerProvider(),
                              meter_provider=MeterProvider(metric_readers=[reader]), breaker_threshold=0)

    @ec.tool
    def echo(x: int) -> int:
        return x

    def ok_calls() -> int:
        ec.flush()
        return sum(point.value for rm in reader.get_metrics_data().resource_metrics for sm in rm.scope_metrics
                   for m in sm.metrics if m.name == "errcompact.tool.calls" for point in m.data.data_points
                   if point.attributes["errcompact.outcome"] == "ok")

    with ec.conversation("parent"):
        for i in range(5):
            echo(i)  # queued for errcompact.tool.calls, not counted yet
    pid = os.fork()
    if pid == 0:
        with ec.conversation("child"):
            echo(0)
        print("child ok", ok_calls(), flush=True)
        os._exit(0)
    os.waitpid(pid, 0)
    print("parent ok", ok_calls(), flush=True)
    """
)


def test_a_fork_before_a_failures_digest_leaves_the_childs_exports_unblocked(tmp_path: Path) -> None:
    """A failure whose digest the parent's digest thread had not made at the fork is the parent's: the
    child's exports do not wait for it (they waited the whole export timeout, every time, with a warning)."""
    proc = _run_forking(tmp_path, FORK_BEFORE_THE_DIGEST, str(tmp_path / "trajectories.sqlite3"))
    assert "child ['chat model'] []" in proc.stdout, proc.stdout + proc.stderr
    assert "child-exit 0" in proc.stdout


def test_a_child_counts_its_own_successful_calls_not_the_parents_queued_ones(tmp_path: Path) -> None:
    """Successful calls are queued and counted into ``errcompact.tool.calls`` later; those queued at the fork
    are the parent's, which counts them. The child, which made one call, counts one."""
    proc = _run_forking(tmp_path, FORK_AFTER_SUCCESSFUL_CALLS, str(tmp_path / "trajectories.sqlite3"))
    assert proc.stdout.splitlines() == ["child ok 1", "parent ok 5"], proc.stdout + proc.stderr


FORK_BEFORE_THE_DIGEST_THREAD_COUNTS = textwrap.dedent(
    """
    import os, sys, threading
    from opentelemetry.sdk.metrics import MeterProvider
    from opentelemetry.sdk.metrics.export import InMemoryMetricReader
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import BatchSpanProcessor
    from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
    from opentelemetry.trace import StatusCode
    import otel_errcompact

    provider = TracerProvider()
    provider.add_span_processor(BatchSpanProcessor(InMemorySpanExporter()))
    reader = InMemoryMetricReader()
    ec = otel_errcompact.init(service_name="fork-test", sqlite_path=sys.argv[1], tracer_provider=provider,
                              meter_provider=MeterProvider(metric_readers=[reader]), consecutive=3, budget=None,
                              breaker_threshold=0)
    tracer = provider.get_tracer("agent")

    def tool_span(conversation: str, key: str | None) -> None:  # a framework's execute_tool span
        with tracer.start_as_current_span("execute_tool lookup", attributes={
                "gen_ai.operation.name": "execute_tool", "gen_ai.tool.name": "lookup",
                "gen_ai.conversation.id": conversation}) as span:
            if key is not None:
                try:
                    {}[key]
                except KeyError as exc:
                    span.record_exception(exc)
                    span.set_status(StatusCode.ERROR)

    def calls() -> dict[str, int]:
        ec.flush()
        return {point.attributes["errcompact.outcome"]: point.value for rm in reader.get_metrics_data().resource_metrics
                for sm in rm.scope_metrics for m in sm.metrics if m.name == "errcompact.tool.calls"
                for point in m.data.data_points}

    def header(conversation: str) -> str:  # the block's first line under [RECENT ERRORS]
        return (ec.context(conversation).splitlines() + ["(no block)"] * 2)[1]

    def halted(conversation: str) -> bool:
        try:
            ec.check(conversation)
        except otel_errcompact.ErrorBudgetExceeded:
            return True
        return False

    # The digest thread busy at the fork: a thread inside the history's lock (a success being resolved),
    # so the failures below are still queued, not counted, when the process forks.
    inside, release = threading.Event(), threading.Event()
    ec.history.defer_success(lambda _item: inside.set() or release.wait(), None)
    threading.Thread(target=ec.history.apply_successes, daemon=True).start()
    inside.wait(10)
    for key in ["user_id"] * 3:
        tool_span("stuck", key)  # the same error three times in a row: a breach
    for key in ["user_id", "user_id", None, "user_id"]:
        tool_span("recovering", key)  # a success between: one in a row

    pid = os.fork()
    if pid == 0:
        print("child", header("stuck"), halted("stuck"), flush=True)
        tool_span("recovering", "user_id")
        print("child", halted("recovering"), calls(), flush=True)
        ec.shutdown()
        os._exit(0)
    release.set()
    os.waitpid(pid, 0)
    print("parent", header("stuck"), halted("stuck"), halted("recovering"), calls(), flush=True)
    """
)


def test_a_child_forked_before_queued_failures_are_counted_counts_them_once(tmp_path: Path) -> None:
    """A failed span is counted a few milliseconds after it ends, by the digest thread. A worker forked
    meanwhile starts from a copy of the parent's history, those failures and the successes between them
    included: a breach the parent halts on halts the worker too, and a success resets the worker's
    count as it does the parent's. What else the parent does for them (store the records, count them in
    the metrics) is done once, by the parent."""
    db = tmp_path / "trajectories.sqlite3"
    proc = _run_forking(tmp_path, FORK_BEFORE_THE_DIGEST_THREAD_COUNTS, str(db))
    assert proc.stdout.splitlines() == [
        "child 3 tool failure(s), 1 distinct: True",
        "child False {'error': 1}",
        "parent 3 tool failure(s), 1 distinct: True False {'ok': 1, 'error': 6}",
    ], proc.stdout + proc.stderr
    assert {conversation: len(rows) for conversation, rows in stored_rows(db).items()} == {"stuck": 3, "recovering": 4}
