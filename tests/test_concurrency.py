"""Many tools failing at once: exact counts in the history, the store and the metrics; nothing lost."""

from __future__ import annotations

import asyncio
import contextlib
import threading
import time
from collections.abc import Callable
from typing import Any

from otel_errcompact import Thresholds, ToolErrorText
from otel_errcompact.sinks.sqlite import TrajectoryStore
from otel_errcompact.trajectory import TrajectoryRecord
from tests.conftest import OTel, run_threads

THREADS = 16
PER_THREAD = 200
TASKS = 200
NO_ESCALATION = Thresholds(consecutive=1_000_000, budget=None)


def test_threads_failing_at_once_are_counted_exactly(make_otel: Callable[..., OTel]) -> None:
    otel = make_otel(thresholds=NO_ESCALATION, breaker_threshold=0)  # every call must reach the tool
    ec = otel.ec

    @ec.tool
    def lookup(table: dict[str, int], key: str) -> int:
        return table[key]

    @ec.tool
    def parse(text: str) -> int:
        return int(text)

    results: list[Any] = []
    results_lock = threading.Lock()

    def worker(i: int) -> None:
        local = []
        with ec.conversation("shared"):
            for n in range(PER_THREAD):
                local.append(lookup({}, "account_id") if n % 2 == 0 else parse("seven"))
        with ec.conversation(f"own-{i}"):
            for _ in range(PER_THREAD // 4):
                local.append(lookup({}, "account_id"))
        with results_lock:
            results.extend(local)

    assert run_threads(worker, THREADS) == []
    total = THREADS * PER_THREAD + THREADS * (PER_THREAD // 4)
    assert len(results) == total
    assert all(isinstance(r, ToolErrorText) for r in results)

    block = ec.context("shared")
    half = THREADS * PER_THREAD // 2
    assert f"{THREADS * PER_THREAD} tool failure(s), 2 distinct" in block
    assert block.count(f"(×{half})") == 2, block
    for i in range(THREADS):
        assert f"(×{PER_THREAD // 4})" in ec.context(f"own-{i}")
    assert ec.history.escalation("shared") is None

    assert ec.flush(60)
    assert otel.metric_sum("errcompact.errors") == total
    new_classes = sum(
        p.value for p in otel.metric_points("errcompact.errors") if p.attributes["errcompact.new_class"]
    )
    assert new_classes == 2 + THREADS
    ec.shutdown()
    with TrajectoryStore(otel.sqlite_path) as store:
        assert store.count() == total
        ids = {s.record_id for s in store.list(limit=total + 10)}
    assert ids == {r.record_id for r in results}
    assert otel.ec.writer is not None and otel.ec.writer.dropped == 0


def test_asyncio_tasks_failing_at_once(make_otel: Callable[..., OTel]) -> None:
    otel = make_otel(thresholds=NO_ESCALATION, breaker_threshold=0)
    ec = otel.ec

    @ec.tool
    async def fetch(cache: dict[str, bytes], url: str) -> bytes:
        await asyncio.sleep(0.001)
        return cache[url]

    async def main() -> list[Any]:
        with ec.conversation("async-flood"):
            return await asyncio.gather(*(fetch({}, "https://example.invalid/a") for _ in range(TASKS)))

    results = asyncio.run(main())
    assert len(results) == TASKS and all(isinstance(r, ToolErrorText) for r in results)
    counts = sorted(r.outcome.observation.count for r in results if r.outcome is not None)
    assert counts == list(range(1, TASKS + 1))
    assert f"(×{TASKS})" in ec.context("async-flood")
    spans = otel.spans("execute_tool fetch")
    assert len(spans) == TASKS
    # Each task is its own top-level call: no task's span leaked into another as its parent.
    assert len({s.context.trace_id for s in spans if s.context is not None}) == TASKS
    assert ec.flush(60)
    assert otel.metric_sum("errcompact.errors") == TASKS
    ec.shutdown()
    with TrajectoryStore(otel.sqlite_path) as store:
        assert store.count() == TASKS


def test_shutdown_under_load_loses_nothing_that_was_accepted(make_otel: Callable[..., OTel]) -> None:
    otel = make_otel(thresholds=NO_ESCALATION, schedule_delay_s=0.05, breaker_threshold=0)
    ec = otel.ec
    writer = ec.writer
    assert writer is not None

    # Observe every version the writer accepted (serialised so the drop counter can tell).
    accepted_raw: set[str] = set()
    accepted_amended: set[str] = set()
    submitted = 0
    gate = threading.Lock()
    original_submit = writer.submit

    def observing_submit(record: TrajectoryRecord) -> None:
        nonlocal submitted
        with gate:
            submitted += 1
            before = writer.dropped
            original_submit(record)
            if writer.dropped == before:
                (accepted_amended if record.digest is not None else accepted_raw).add(record.record_id)

    original_submit_values = writer.submit_values

    def observing_submit_values(values: dict[str, Any]) -> None:
        # A failed span's record goes to the writer as its field values (the model is built later).
        nonlocal submitted
        with gate:
            submitted += 1
            before = writer.dropped
            record_id, has_digest = values["record_id"], values["digest"] is not None
            original_submit_values(values)
            if writer.dropped == before:
                (accepted_amended if has_digest else accepted_raw).add(record_id)

    writer.submit = observing_submit  # type: ignore[method-assign]
    writer.submit_values = observing_submit_values  # type: ignore[method-assign]

    @ec.tool
    def lookup(key: str) -> int:
        return {"a": 1}[key]

    stop = threading.Event()
    calls = [0] * 8

    def worker(i: int) -> None:
        with ec.conversation(f"load-{i % 3}"):
            while not stop.is_set():
                result = lookup("missing")
                assert isinstance(result, ToolErrorText)
                calls[i] += 1

    runner = threading.Thread(target=lambda: errors.extend(run_threads(worker, len(calls))))
    errors: list[BaseException] = []
    runner.start()
    deadline = time.monotonic() + 10
    while sum(calls) < 400 and time.monotonic() < deadline:
        time.sleep(0.01)
    ec.shutdown()
    time.sleep(0.1)  # the tools keep failing after shutdown: those records are refused, not lost
    stop.set()
    runner.join(60)
    assert errors == []
    assert sum(calls) >= 400

    assert writer.dropped > 0, "no record arrived after shutdown: the test did not test anything"
    assert submitted == sum(calls)  # one submission per failure, digest included
    with TrajectoryStore(otel.sqlite_path) as store:
        stored = {s.record_id: s for s in store.list(limit=10 * sum(calls))}
    assert set(stored) == accepted_raw | accepted_amended
    for record_id in accepted_amended:
        assert stored[record_id].digest_line, record_id


def test_threads_ending_failed_tool_spans_at_once(make_otel: Callable[..., OTel]) -> None:
    """The span-processor path (no boundary): instrumented tools on many threads, one conversation."""
    otel = make_otel(thresholds=NO_ESCALATION)
    tracer = otel.tracer
    per_thread = 100
    attributes = {
        "gen_ai.operation.name": "execute_tool",
        "gen_ai.tool.name": "lookup",
        "gen_ai.conversation.id": "span-flood",
    }

    def worker(i: int) -> None:
        for _ in range(per_thread):
            # The SDK's defaults record the escaping KeyError and set status ERROR.
            with (
                contextlib.suppress(KeyError),
                tracer.start_as_current_span("execute_tool lookup", attributes=attributes),
            ):
                {}["session_id"]

    errors = run_threads(worker, THREADS)
    assert len(errors) == 0
    total = THREADS * per_thread
    assert f"(×{total})" in otel.ec.context("span-flood")
    spans = otel.spans("execute_tool lookup")
    assert len(spans) == total
    assert sorted(s.attributes["errcompact.count"] for s in spans) == list(range(1, total + 1))  # type: ignore[index]
    assert otel.ec.flush(60)
    assert otel.metric_sum("errcompact.errors") == total
    otel.ec.shutdown()
    with TrajectoryStore(otel.sqlite_path) as store:
        assert store.count() == total
