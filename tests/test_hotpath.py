"""The agent-thread hot path: the structured fast path, parser choice by markers, bounded token
counting that runs only when a metric reader will see it, one trajectory submission per failure, ids
without system calls, and visible history eviction.

Every error here is produced by running real code or real tools; speed is measured in
``benchmarks/bench_processor.py``, not asserted.
"""

from __future__ import annotations

import json
import linecache
import logging
import multiprocessing
import subprocess
import sys
import threading
import traceback
from collections.abc import Callable, Sequence
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import InMemoryMetricReader
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.trace import Status, StatusCode

import otel_errcompact
from otel_errcompact._worker import BackgroundQueue
from otel_errcompact.compactor import Compactor
from otel_errcompact.history import ErrorHistory, Limits, Thresholds
from otel_errcompact.parsers import PARSERS, Hints, Parsed, Parser
from otel_errcompact.pipeline import ErrorPipeline, Failure
from otel_errcompact.sinks import TrajectoryWriter
from otel_errcompact.structured import parse_exception
from otel_errcompact.telemetry import ErrorMetrics, metrics_are_read
from otel_errcompact.tokens import MAX_COUNTED_CHARS, background_counter, count_tokens, exact
from otel_errcompact.trajectory import TrajectoryRecord, new_record_id
from tests.conftest import OTel, metric_points, metric_sum
from tests.deeperrors import deep_app, deep_exception
from tests.realerrors import have, python_error

ROOT = Path(__file__).resolve().parent.parent


# -- real exceptions, as the SDK's record_exception describes them ---------------------------------------


def _fields(exc: BaseException) -> tuple[str, str, str]:
    """``(exception.type, exception.message, exception.stacktrace)`` exactly as the OTel SDK sets them."""
    module, qualname = type(exc).__module__, type(exc).__qualname__
    etype = f"{module}.{qualname}" if module and module != "builtins" else qualname
    return etype, str(exc), "".join(traceback.format_exception(exc))


def _raised(source: str, folder: Path, name: str) -> BaseException:
    """Run ``source`` (a module defining ``main()``) from a real file and return what it raised."""
    path = folder / f"{name}.py"
    path.write_text(source, encoding="utf-8")
    namespace: dict[str, Any] = {"__name__": name, "__file__": str(path)}
    exec(compile(source, str(path), "exec"), namespace)
    try:
        namespace["main"]()
    except BaseException as exc:
        return exc
    raise AssertionError(f"{name}.main() did not raise")


_SHAPES = {
    "chained": "def load(c):\n    return c['db']\n\ndef main():\n    try:\n        load({})\n"
    "    except KeyError as exc:\n        raise RuntimeError('config load failed') from exc\n",
    "during_handling": "def main():\n    try:\n        {}['k']\n    except KeyError:\n        1 / 0\n",
    "group": "def main():\n    raise ExceptionGroup('batch failed', [ValueError('bad id 7'), KeyError('sku')])\n",
    "syntax": "def main():\n    compile('def f(:\\n    pass\\n', 'gen.py', 'exec')\n",
    "note": "def main():\n    e = ValueError('bad amount 12')\n    e.add_note('while pricing order 12')\n"
    "    raise e\n",
    "multiline": "def main():\n    raise ValueError('first line\\nsecond line')\n",
    "empty": "def main():\n    raise KeyError()\n",
    "pydantic": "from pydantic import BaseModel\n\nclass Order(BaseModel):\n    qty: int\n\n"
    "def main():\n    Order(qty='many')\n",
    "library_only": "import json\n\ndef main():\n    json.loads('{')\n",
}


@pytest.fixture(scope="module")
def app(tmp_path_factory: pytest.TempPathFactory) -> ModuleType:
    return deep_app(tmp_path_factory.mktemp("deep"))


def test_structured_fields_give_the_same_digest_as_the_text(app: ModuleType, tmp_path: Path) -> None:
    text_only = Compactor(digest_cache_size=0)
    structured = Compactor(digest_cache_size=0)
    plain = [deep_exception(app, order) for order in range(25)]
    shapes = {name: _raised(source, tmp_path, f"shape_{name}") for name, source in _SHAPES.items()}
    for exc in [*plain, *shapes.values()]:
        etype, message, stack = _fields(exc)
        assert structured.compact(stack, exception_type=etype, exception_message=message) == text_only.compact(
            stack
        ), stack
    # The fast path is really taken for plain tracebacks, and declines every shape the full parser owns.
    for exc in plain:
        assert parse_exception(_fields(exc)[2], *_fields(exc)[:2]) is not None
    for name in ("chained", "during_handling", "group", "syntax", "note", "multiline", "empty", "pydantic"):
        etype, message, stack = _fields(shapes[name])
        assert parse_exception(stack, etype, message) is None, name


def test_structured_fields_disagreeing_with_the_text_fall_back_to_parsing(app: ModuleType) -> None:
    etype, _message, stack = _fields(deep_exception(app, 3))
    # A message that is not the traceback's (a wrapper re-describing the error) must not be trusted.
    assert parse_exception(stack, etype, "something else") is None
    assert parse_exception(stack, "KeyError", _fields(deep_exception(app, 3))[1]) is None


def test_failed_span_digest_uses_the_fields_and_matches_the_text_digest(otel: OTel, app: ModuleType) -> None:
    tracer = otel.tracer_provider.get_tracer("t")
    exc = deep_exception(app, 41)
    with tracer.start_as_current_span(
        "execute_tool lookup", attributes={"gen_ai.operation.name": "execute_tool", "gen_ai.tool.name": "lookup"},
        record_exception=False, set_status_on_exception=False,
    ) as span:
        span.record_exception(exc)
        span.set_status(Status(StatusCode.ERROR, str(exc)))
    (finished,) = otel.span_exporter.get_finished_spans()
    stack = finished.events[0].attributes["exception.stacktrace"]  # type: ignore[index]
    assert finished.attributes["errcompact.digest"] == Compactor(digest_cache_size=0).compact(stack).line
    assert "codec.py:" in str(finished.attributes["errcompact.digest"])


# -- parser choice by markers ----------------------------------------------------------------------------


def _every_parser() -> tuple[tuple[str, Parser], ...]:
    """The default parsers, each behind a wrapper defined here (no MARKERS), so every one is tried."""

    def wrap(parser: Parser) -> Parser:
        def always(text: str, hints: Hints) -> Parsed | None:
            return parser(text, hints)

        return always

    return tuple((kind, wrap(parser)) for kind, parser in PARSERS)


@pytest.fixture(scope="module")
def corpus(tmp_path_factory: pytest.TempPathFactory) -> list[Any]:
    sys.path.insert(0, str(ROOT))
    from benchmarks.corpus import build_corpus

    return build_corpus(tmp_path_factory.mktemp("corpus"))


def test_marker_dispatch_gives_the_digests_of_trying_every_parser(
    corpus: list[Any], app: ModuleType, tmp_path: Path
) -> None:
    dispatched = Compactor(digest_cache_size=0)
    tried_all = Compactor(_every_parser(), digest_cache_size=0)
    cases: list[tuple[str, int | None, str | None, str | None]] = [
        (s.raw, s.exit_code, s.command, s.kind) for s in corpus
    ]
    cases += [(_fields(deep_exception(app, order))[2], None, None, None) for order in range(10)]
    cases += [(python_error(tmp_path, "import missing_module_xyz\n"), 1, "python app.py", None)]
    cases += [(python_error(tmp_path, "print({}['k'])\n", name="k.py"), None, None, None)]
    cases += [(s.raw, None, None, None) for s in corpus]  # the same texts without their hints
    assert len(cases) > 60
    for raw, exit_code, command, kind in cases:
        expected = tried_all.compact(raw, exit_code=exit_code, command=command, kind=kind)
        assert dispatched.compact(raw, exit_code=exit_code, command=command, kind=kind) == expected, raw[:300]


def test_markers_really_skip_parsers(app: ModuleType) -> None:
    compactor = Compactor()
    stack = _fields(deep_exception(app, 2))[2]
    kinds = [PARSERS[i][0] for i in compactor._candidates(stack, Hints())]
    assert "python" in kinds
    assert not {"pytest", "jvm", "node", "go", "mypy", "tsc"} & set(kinds)
    # An exit code makes every parser a candidate: the shell parser recognises text by it alone.
    assert len(compactor._candidates(stack, Hints(exit_code=2))) == len(PARSERS)


def test_long_texts_are_cached_by_content(tmp_path: Path) -> None:
    compactor = Compactor()
    body = python_error(tmp_path, "raise SystemExit('x' * 40_000 + ' disk full')\n")
    big = body + "\n" * 2  # over 16 KB
    assert len(big) > 16_384
    first = compactor.compact(big)
    again = compactor.compact("".join([big]))  # an equal text in a new string object
    assert again is first
    assert compactor.compact(big + "more") is not first


# -- token counting ----------------------------------------------------------------------------------------


@pytest.mark.timeout(60)  # a hang guard against super-linear tokenising; speed is measured in benchmarks/
@pytest.mark.parametrize(
    ("text", "low", "high"),
    [
        ("x" * 100_000, 1_000, 100_000),
        ("#" * 30_000, 100, 30_000),
        ("abc def " * 1_310_720, 1_000_000, 5_000_000),
        ("\udcff lone surrogate from os.listdir " * 1000, 1_000, 40_000),
    ],
    ids=["100k-x", "30k-hash", "10MB", "surrogates"],
)
def test_token_counting_is_bounded_on_hostile_input(text: str, low: int, high: int) -> None:
    assert low <= count_tokens(text) <= high


def test_token_counts_are_exact_o200k(tmp_path: Path) -> None:
    tiktoken = pytest.importorskip("tiktoken")
    import base64
    import gzip

    import bpe_openai  # type: ignore[import-untyped]

    assert exact()
    ranks: dict[bytes, int] = {}
    with gzip.open(Path(bpe_openai.__file__).parent / "data" / "o200k_base.tiktoken.gz", "rb") as f:
        for line in f:
            if line.strip():
                token, rank = line.split()
                ranks[base64.b64decode(token)] = int(rank)
    pattern = bpe_openai.get_encoding("o200k_base")._pat_str
    reference = tiktoken.Encoding("o200k_ref", pat_str=pattern, mergeable_ranks=ranks, special_tokens={})
    raw = python_error(tmp_path, "import json\njson.loads('{\"a\": [1, 2,')\n")
    assert count_tokens(raw) == len(reference.encode(raw))
    # Beyond the exact head the count is extrapolated, close to the true count.
    long = raw * (2 * MAX_COUNTED_CHARS // len(raw) + 1)
    assert abs(count_tokens(long) - len(reference.encode(long))) <= 0.02 * len(reference.encode(long))


@pytest.mark.timeout(60)
@pytest.mark.parametrize("encoding", ["o200k_base", "cl100k_base"])
def test_background_counter_counts_what_count_tokens_counts(tmp_path: Path, encoding: str) -> None:
    count = background_counter(encoding)
    texts = [
        python_error(tmp_path, "import json\njson.loads('{\"a\": [1, 2,')\n"),
        Path(otel_errcompact.__file__).read_text(encoding="utf-8"),
        "caf\udce9.txt: no such file",  # a lone surrogate, as os.listdir returns it
        "x" * 100_000,  # beyond the counted head: extrapolated the same way
        "",
    ]
    assert count(texts) == [count_tokens(text, encoding) for text in texts]


def test_token_metrics_sum_every_failure_of_a_batch(tmp_path: Path) -> None:
    reader = InMemoryMetricReader()
    metrics = ErrorMetrics(MeterProvider(metric_readers=[reader]).get_meter("t"))
    pipeline = ErrorPipeline(ErrorHistory(Thresholds(consecutive=10**6, budget=None)))
    pipeline.add_failure_listener(metrics.on_failure)
    pipeline.add_success_listener(metrics.on_success)
    raws = [python_error(tmp_path, f"raise KeyError('k{i}')\n") for i in range(3)]
    lines = []
    for i in range(300):
        outcome = pipeline.handle(Failure(scope=f"s{i % 7}", raw_error=raws[i % 3], tool_name=f"tool{i % 2}"))
        lines.append(outcome.digest.line)
        pipeline.succeeded("s", "tool0")
    assert metrics.flush(60)
    metrics.shutdown(60)
    # One tokenizer pass per batch and attribute set: exact within a token per text at the joins.
    exact_sum = 100 * sum(count_tokens(r) for r in raws)
    assert abs(metric_sum(reader, "errcompact.tokens.raw") - exact_sum) <= 0.01 * exact_sum
    # Each digest line counted once per batch, times the failures that repeat it: exact.
    assert len(set(lines)) == 3
    assert metric_sum(reader, "errcompact.tokens.compact") == sum(count_tokens(line) for line in lines)
    sums: dict[tuple[str, str], int] = {}
    for point in metric_points(reader, "errcompact.tool.calls"):
        attrs = point.attributes or {}
        key = (str(attrs["gen_ai.tool.name"]), str(attrs["errcompact.outcome"]))
        sums[key] = sums.get(key, 0) + int(point.value)
    assert sums == {("tool0", "error"): 150, ("tool1", "error"): 150, ("tool0", "ok"): 300}


def _token_threads() -> list[threading.Thread]:
    return [t for t in threading.enumerate() if t.name == "otel-errcompact-tokens" and t.is_alive()]


def test_token_counting_off_without_a_metric_reader(tmp_path: Path) -> None:
    assert not metrics_are_read(MeterProvider())
    assert metrics_are_read(MeterProvider(metric_readers=[InMemoryMetricReader()]))
    from opentelemetry.metrics import NoOpMeterProvider

    assert not metrics_are_read(NoOpMeterProvider())
    before = len(_token_threads())
    ec = otel_errcompact.init(
        tracer_provider=TracerProvider(), meter_provider=MeterProvider(), sqlite_path=tmp_path / "a.db"
    )
    try:
        assert ec._metrics is not None and not ec._metrics.counts_tokens
        assert len(_token_threads()) == before
        ec.record_error(python_error(tmp_path, "{}['k']\n"), scope="s")
        assert ec.flush(30)
    finally:
        ec.shutdown()
    reader = InMemoryMetricReader()
    ec = otel_errcompact.init(
        tracer_provider=TracerProvider(), meter_provider=MeterProvider(metric_readers=[reader]),
        sqlite_path=tmp_path / "b.db",
    )
    try:
        assert ec._metrics is not None and ec._metrics.counts_tokens
        ec.record_error(python_error(tmp_path, "{}['k']\n"), scope="s")
        assert ec.flush(30)
        assert metric_sum(reader, "errcompact.tokens.raw") > 10
    finally:
        ec.shutdown()


@pytest.mark.timeout(120)  # a hang guard: huge errors must not stall token metrics or shutdown
def test_huge_errors_in_token_metrics_are_bounded(tmp_path: Path) -> None:
    reader = InMemoryMetricReader()
    metrics = ErrorMetrics(MeterProvider(metric_readers=[reader]).get_meter("t"))
    pipeline = ErrorPipeline(ErrorHistory(Thresholds(consecutive=10**6, budget=None)))
    pipeline.add_failure_listener(metrics.on_failure)
    ten_mb = python_error(tmp_path, "raise ValueError('#' * 10_000_000)\n")
    for _ in range(5):
        pipeline.handle(Failure(scope="s", raw_error=ten_mb, tool_name="t"))
    pipeline.handle(Failure(scope="s", raw_error="#" * 30_000, tool_name="t"))
    assert metrics.flush(60)
    metrics.shutdown(60)
    # extrapolated from each head, not dropped
    assert metric_sum(reader, "errcompact.tokens.raw") > 5 * 10_000_000 // 64


def test_token_queue_is_bounded_by_size_not_only_count() -> None:
    release = threading.Event()
    handled: list[str] = []

    def slow(item: str) -> None:
        release.wait(30)
        handled.append(item)

    queue: BackgroundQueue[str] = BackgroundQueue("t-bounded", slow, max_size=1000, cost=len, max_cost=1_000_000)
    try:
        queue.submit("first")  # the worker takes it and blocks
        accepted = sum(queue.submit("y" * 300_000) for _ in range(10))
        assert accepted == 3  # 3 × 300k fit in 1M characters; item count alone would have taken all ten
        assert queue.dropped == 7
    finally:
        release.set()
        assert queue.flush(30)
        queue.shutdown(30)
    assert len(handled) == 4


# -- one submission per failure, ids -----------------------------------------------------------------------


class _CollectingSink:
    """A trajectory sink that keeps what it is given (as the SDK's in-memory exporters do)."""

    def __init__(self) -> None:
        self.records: list[TrajectoryRecord] = []

    def write(self, records: Sequence[TrajectoryRecord]) -> None:
        self.records.extend(records)

    def close(self) -> None:
        return None


def test_one_submission_per_failure(app: ModuleType) -> None:
    sink = _CollectingSink()
    # Batches of one: the writer cannot coalesce, so a second submission would show as a second write.
    writer = TrajectoryWriter([sink], max_batch_size=1, schedule_delay_s=0.01)
    pipeline = ErrorPipeline(ErrorHistory(), writer)
    outcomes = []
    for order in range(20):
        etype, message, stack = _fields(deep_exception(app, order))
        outcomes.append(pipeline.handle(Failure(scope=f"c{order // 5}", raw_error=stack, exception_type=etype,
                                                exception_message=message, exception_stacktrace=stack)))
    assert writer.force_flush(30)
    writer.shutdown(30)
    assert [r.record_id for r in sink.records] == [o.record_id for o in outcomes]
    for record, outcome in zip(sink.records, outcomes, strict=True):
        assert record.digest is not None and record.digest.line == outcome.digest.line
        assert record.count == outcome.observation.count
        assert record.raw_error.startswith("Traceback (most recent call last):")
        json.loads(record.to_json())


class _BrokenCompactor(Compactor):
    """A compactor with a bug: the record must still carry the raw error."""

    def compact(self, raw: str | bytes | None, **kwargs: Any) -> Any:  # type: ignore[override]
        raise RuntimeError("compactor bug")


def test_raw_error_is_submitted_even_when_compaction_fails(app: ModuleType) -> None:
    sink = _CollectingSink()
    writer = TrajectoryWriter([sink], schedule_delay_s=0.01)
    pipeline = ErrorPipeline(ErrorHistory(), writer, compactor=_BrokenCompactor())
    stack = _fields(deep_exception(app, 5))[2]
    with pytest.raises(RuntimeError, match="compactor bug"):
        pipeline.handle(Failure(scope="s", raw_error=stack))
    assert writer.force_flush(30)
    writer.shutdown(30)
    (record,) = sink.records
    assert record.raw_error == stack and record.digest is None


def _child_id(queue: Any) -> None:
    queue.put(new_record_id())


def test_record_ids_are_unique_time_ordered_and_differ_after_fork() -> None:
    ids: list[list[str]] = [[] for _ in range(4)]

    def make(out: list[str]) -> None:
        out.extend(new_record_id() for _ in range(5000))

    threads = [threading.Thread(target=make, args=(out,)) for out in ids]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    flat = [i for out in ids for i in out]
    assert len(set(flat)) == len(flat) == 20_000
    assert all(len(i) == 32 and int(i, 16) >= 0 for i in flat)
    for out in ids:
        assert out == sorted(out)  # one thread's ids sort in creation order
    if sys.platform.startswith("linux"):
        ctx = multiprocessing.get_context("fork")
        queue = ctx.Queue()
        child = ctx.Process(target=_child_id, args=(queue,))
        child.start()
        child_id = queue.get(timeout=30)
        child.join(30)
        assert child_id[12:20] != flat[0][12:20]  # the per-process prefix is drawn again in the child


# -- history eviction ---------------------------------------------------------------------------------------


def test_eviction_at_the_scope_cap_is_logged_once_and_counted(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    raw = python_error(tmp_path, "{}['k']\n")
    reader = InMemoryMetricReader()
    ec = otel_errcompact.init(
        tracer_provider=TracerProvider(), meter_provider=MeterProvider(metric_readers=[reader]),
        sqlite_path=tmp_path / "e.db", limits=Limits(max_scopes=3),
    )
    try:
        with caplog.at_level(logging.WARNING, logger="otel_errcompact"):
            for n in range(7):
                ec.record_error(raw, scope=f"conversation-{n}")
        assert ec.history.evicted_at_cap == 4
        assert ec.history.scopes() == ["conversation-4", "conversation-5", "conversation-6"]
        warnings = [r for r in caplog.records if "max_scopes" in r.getMessage()]
        assert len(warnings) == 1
        assert [p.value for p in metric_points(reader, "errcompact.history.evictions")] == [4]
    finally:
        ec.shutdown()


def test_metrics_worker_is_not_woken_for_every_item() -> None:
    """Waking the worker per item hands it the GIL in the middle of the agent's work; it wakes per batch."""
    handled: list[int] = []
    queue: BackgroundQueue[int] = BackgroundQueue("t-batched", handled.append, wake_every=256, max_delay_s=30.0)
    try:
        for n in range(10):
            queue.submit(n)
        threading.Event().wait(0.3)
        assert handled == []  # ten items wait for a batch (or the delay)
        assert queue.flush(30)
        assert handled == list(range(10))
        for n in range(256):
            queue.submit(n)
        deadline = threading.Event()
        for _ in range(300):
            if len(handled) == 266:
                break
            deadline.wait(0.1)
        assert len(handled) == 266  # a full batch wakes it without a flush
    finally:
        queue.shutdown(30)



def test_an_item_submitted_with_wake_is_handled_before_its_batch_is_full() -> None:
    """``wake=True`` is for work that must not wait for the batch or the delay: the history handing its
    queued successes to the metrics thread, which must take them before the agent's thread has to."""
    handled: list[int] = []
    arrived = threading.Event()

    def handle(item: int) -> None:
        handled.append(item)
        if item == 99:
            arrived.set()

    queue: BackgroundQueue[int] = BackgroundQueue("t-woken", handle, wake_every=256, max_delay_s=60.0)
    try:
        queue.submit(1)
        queue.submit(99, wake=True)
        assert arrived.wait(20)  # not after the 60 s delay
        assert handled == [1, 99]  # the items waiting before it go in the same batch, in order
        queue.submit(2)
        threading.Event().wait(0.3)
        assert handled == [1, 99]  # the wake-up was for that batch only
    finally:
        queue.shutdown(30)

# -- a plain traceback skips the unwrappers and parsers that provably decline it ----------------------------

# Failing lines whose source or message carries what a skipped step looks for: each must go the whole way
# (or be shown to be declined) and get the digest trying every parser gives.
_HOSTILE_LINES = (
    "raise ValueError('app.py:12:5: F821 undefined name x')",
    "raise KeyError('see = FAILURES = and 3 failed')",
    "raise RuntimeError('Cell In[3], line 5')",
    "raise LookupError('<output>gone</output>')",
    "raise OSError('Exit code 2; DO NOT re-run the same command')",
    "raise ValueError('proposed edit has introduced new syntax error')",
    "x = '- E999 IndentationError'; raise ValueError(x)",
    "x = 'C:\\\\Users\\\\me\\\\app.py'; raise FileNotFoundError(x)",
    "x = '[Current working directory: /repo]'; raise KeyError(x)",
    "raise TimeoutError('upstream host:5432 error')",
    "raise KeyError('2 failed, 1 error in 3.5s')",
    "x = 'Traceback (most recent call last):\\\\n  File \"w.py\", line 1, in f\\\\n    g()\\\\nKeyError: 1\\\\n' * 6; "
    "raise RuntimeError(x)",
)


def test_plain_traceback_skips_only_what_declines_it(app: ModuleType, tmp_path: Path) -> None:
    from otel_errcompact.parsers import ipython, linter, pytest_report, unittest_report
    from otel_errcompact.structured import parse_first
    from otel_errcompact.unwrap import UNWRAPPERS

    plain = [_fields(deep_exception(app, order)) for order in range(10)]
    for _, _, stack in plain:
        assert parse_first(stack) is not None
        # What the skip relies on, on real text: every unwrapper and every parser ahead of python declines.
        assert all(step(stack, Hints()) is None for _, step in UNWRAPPERS)
        for parser in (pytest_report.parse, unittest_report.parse, linter.parse, ipython.parse):
            assert parser(stack, Hints()) is None
    default = Compactor(digest_cache_size=0)
    tried_all = Compactor(_every_parser(), digest_cache_size=0)
    hostile = [
        _fields(_raised(f"def main():\n    {line}\n", tmp_path, f"hostile_{i}"))
        for i, line in enumerate(_HOSTILE_LINES)
    ]
    taken = 0
    for etype, message, stack in [*plain, *hostile]:
        taken += parse_first(stack) is not None
        assert default.compact(stack) == tried_all.compact(stack), stack
        assert default.compact(stack, exception_type=etype, exception_message=message) == tried_all.compact(
            stack, exception_type=etype, exception_message=message
        ), stack
    assert taken < len(plain) + len(hostile)  # some hostile texts were really sent the whole way


def _stack_under(name: str, source: str) -> str:
    """The traceback of what ``main()`` in ``source`` raised, compiled under the file name ``name`` (a
    Windows path, as a traceback shows it there), its lines served from linecache as for a real file."""
    linecache.cache[name] = (len(source), None, source.splitlines(True), name)
    try:
        namespace: dict[str, Any] = {"__name__": "app"}
        exec(compile(source, name, "exec"), namespace)
        try:
            namespace["main"]()
        except BaseException as exc:
            return _fields(exc)[2]
    finally:
        linecache.cache.pop(name, None)
    raise AssertionError(f"{name}: main() did not raise")


def test_code_that_says_error_and_windows_paths_still_take_the_shortcut(tmp_path: Path) -> None:
    """Source lines that say `` error`` or `` failed`` (``except OSError as error:``, ``errors.fail()``)
    and a Windows path's backslashes are in plain tracebacks all the time; neither makes pytest or the
    JSON unwrapper take the text, so neither may send it the whole way. The digest stays the walk's."""
    from otel_errcompact.structured import parse_first

    sources = {
        "says_error": "def main():\n    error = KeyError('sku-7')\n    raise error\n",
        "says_failed": "def check(order, failed):\n    return {}[order]\n\ndef main():\n"
        "    return check('order-3', failed=None)\n",
        "handled_error": "def main():\n    try:\n        open('/nonexistent/conf.toml')\n    except OSError as error:\n"
        "        raise LookupError('no config: ' + error.strerror) from None\n",
    }
    posix = [_fields(_raised(source, tmp_path, name))[2] for name, source in sources.items()]
    windows = [_stack_under(rf"C:\Users\dev\shop\{name}.py", source) for name, source in sources.items()]
    default = Compactor(digest_cache_size=0)
    tried_all = Compactor(_every_parser(), digest_cache_size=0)
    for stack in posix + windows:
        assert " error" in stack or " failed" in stack, stack  # the source lines are shown
        assert parse_first(stack) is not None, stack
        assert default.compact(stack) == tried_all.compact(stack), stack
    assert all('File "C:\\Users\\dev\\shop\\' in stack for stack in windows)


def test_a_plain_traceback_uncovered_by_unwrapping_gets_the_walks_answer(app: ModuleType, tmp_path: Path) -> None:
    """After unwrapping, a plain traceback takes the shortcut too; its digest must be the one the walk over
    every parser gives, for the forms agents see (JSON-escaped, inside a JSON report, log-prefixed)."""
    import json
    import logging

    from otel_errcompact.structured import parse_first
    from otel_errcompact.unwrap import unwrap

    formatter = logging.Formatter("%(asctime)s %(levelname)s [%(name)s] %(message)s")

    def logged(text: str) -> str:
        return "\n".join(formatter.format(logging.LogRecord("worker", logging.ERROR, __file__, 0, line, None, None))
                         for line in text.rstrip("\n").split("\n")) + "\n"

    stacks = [_fields(deep_exception(app, order))[2] for order in range(10)]
    stacks += [_fields(_raised(f"def main():\n    {line}\n", tmp_path, f"wrapped_{i}"))[2]
               for i, line in enumerate(_HOSTILE_LINES)]
    default = Compactor(digest_cache_size=0)
    tried_all = Compactor(_every_parser(), digest_cache_size=0)
    uncovered = 0
    for stack in stacks:
        for form in (json.dumps(stack), json.dumps({"ok": False, "error": stack}), logged(stack)):
            inner, _hints = unwrap(form, Hints())
            uncovered += inner != form and parse_first(inner) is not None
            assert default.compact(form) == tried_all.compact(form), form
    assert uncovered >= 20  # the shortcut was really taken after unwrapping


def test_the_benchmarks_hook_timer_sees_each_failed_tool_span_once_and_restores_the_hooks(
    make_otel: Callable[..., OTel], app: ModuleType, tmp_path: Path
) -> None:
    """``bench_processor.py --hooks`` splits a failed span's added cost into the processor's own share and
    the rest: its timer must count every failed tool span once (not the agent spans around them), time
    the processor's real work, and leave the processor as it found it."""
    from benchmarks.bench_processor import _Errors, _failed, _hook_times

    otel = make_otel(batch=True)
    processor = otel.ec.processor
    errors = _Errors(app, tmp_path)
    stats = _hook_times(otel.ec, _failed(errors, one_line=False), otel.tracer, 0, 2, 7)

    assert stats["n"] == 14  # 2 blocks of 7 failed tool spans; their invoke_agent roots are left out
    assert stats["median_us"] > 0
    assert not {"on_start", "_on_ending", "on_end"} & set(vars(processor))  # the class's hooks again
    (entry,) = otel.tracer_provider._active_span_processor._span_processors  # fused with the batch processor
    assert entry.on_start == processor.on_start and entry._on_ending == processor._on_ending  # restored
    assert otel.store().count() == 14  # the timed hooks did the processor's real work
    failed = otel.spans("execute_tool lookup_order")
    assert len(failed) == 14 and all((s.attributes or {}).get("errcompact.key") for s in failed)


def test_the_benchmarks_round_by_round_figure_pairs_each_round_and_ignores_a_drift_both_sides_share() -> None:
    """``bench_processor.py``'s "by round" figure is the median of each round's plugin-minus-bare
    difference: a machine that slows down in the middle of a run moves both sides of a round alike, so the
    figure keeps what the plugin adds, where the pooled medians (the table's "added") lean to whichever side
    ran more of its spans in the fast rounds."""
    from benchmarks.bench_processor import _paired

    # Rounds 4-6 ran at a third of the speed; the plugin always adds 10 µs to its round's bare median.
    bare = [100.0, 102.0, 101.0, 300.0, 303.0, 299.0, 100.0]
    per_round = {"bare": bare, "plugin": [b + 10.0 for b in bare]}

    paired = _paired(per_round, "plugin")

    assert paired["rounds"] == 7
    assert paired["median_us"] == pytest.approx(10.0)
    assert paired["q1_us"] == pytest.approx(10.0) and paired["q3_us"] == pytest.approx(10.0)
    assert paired["median_share"] == pytest.approx(10.0 / 102.0)
    assert _paired({"bare": [], "plugin": []}, "plugin") == {}


@pytest.mark.parametrize("raised", [False, True], ids=["premade", "raised"])
def test_the_throughput_benchmarks_threads_each_end_a_failed_tool_span_the_plugin_digests(
    make_otel: Callable[..., OTel], app: ModuleType, tmp_path: Path, raised: bool
) -> None:
    """``bench_processor.py``'s throughput, both ways: every call is a failed tool span that the plugin
    stores and digests, whether the span records an exception made before the timing or the tool
    raises inside the span and the SDK's own context manager records it."""
    from benchmarks.bench_processor import _Errors, _threaded

    otel = make_otel(batch=True)
    rate = _threaded(otel.tracer, _Errors(app, tmp_path), 0, 2, 5, raised=raised)

    assert rate > 0
    assert otel.ec.flush(30)
    failed = otel.spans("execute_tool lookup_order")
    assert len(failed) == 10
    assert all(s.status.status_code is StatusCode.ERROR for s in failed)
    assert all([e.name for e in s.events] == ["exception"] for s in failed)
    assert all((s.attributes or {}).get("errcompact.key") for s in failed)
    assert otel.store().count() == 10
    assert len({(s.attributes or {})["errcompact.key"] for s in failed}) == 5  # the application's five failure kinds



# Each kind's measured reduce, then the flush after it and the next kind's warm-up, as bench_instructions.py's
# child lays them out: a loop of ``n`` iterations per call, and a large sum where nothing is measured.
_KINDS_UNDER_CALLGRIND = """
import functools

def spin(n):
    def step(_, i):
        for _ in range(n):
            pass
    return step

for n in (10, 1000):
    for _ in range(3):
        spin(n)(None, 0)  # the warm-up: a plain loop, not counted
    functools.reduce(spin(n), range(20), None)
    sum(range(100_000))  # the flush after the spans and the next kind's warm-up: not counted
"""


@pytest.mark.skipif(not have("valgrind"), reason="valgrind is not installed")
def test_the_instruction_benchmark_reads_each_kinds_reduce_and_nothing_around_it(tmp_path: Path) -> None:
    """``bench_instructions.py`` takes each kind's count from callgrind's numbered dump files: the part
    of the reduce, not the flush after it nor the next kind's warm-up (each far larger here)."""
    from benchmarks.bench_instructions import count_kinds

    script = tmp_path / "kinds.py"
    script.write_text(_KINDS_UNDER_CALLGRIND, encoding="utf-8")
    counts = count_kinds([str(script)], tmp_path / "out", ("small", "large"))

    iterations = 20 * (1000 - 10)  # what the large kind loops more than the small one
    assert counts["large"] - counts["small"] > 10 * iterations  # a Python loop iteration is over 10 instructions
    assert counts["small"] < 10 * iterations  # not a part holding one of the 100,000-step sums
    with pytest.raises(RuntimeError, match="parts"):  # a layout that does not match is refused
        count_kinds([str(script)], tmp_path / "again", ("small", "large", "missing"))


_HAND_OFF_ONLY = """
import json, sys
from pathlib import Path
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import Status, StatusCode
from benchmarks.bench_ceiling import _drop_at_hand_off, _store_no_rows
from otel_errcompact import init
from otel_errcompact.sinks.sqlite import TrajectoryStore
from otel_errcompact.sinks.writer import TrajectoryWriter
from tests.deeperrors import deep_app, deep_exception

scratch = Path(sys.argv[1])
if sys.argv[2] in ("cut", "spooled"):
    _drop_at_hand_off()
if sys.argv[2] == "spooled":
    _store_no_rows()
spooled = []
enqueue = TrajectoryWriter._enqueue
def counted(self, record, line, **kwargs):
    spooled.append(line is not None)
    return enqueue(self, record, line, **kwargs)
TrajectoryWriter._enqueue = counted
exporter = InMemorySpanExporter()
provider = TracerProvider()
provider.add_span_processor(BatchSpanProcessor(exporter))
ec = init("cut", tracer_provider=provider, sqlite_path=scratch / "t.db", schedule_delay_s=60)  # the flush writes
tracer = provider.get_tracer("cut")
app = deep_app(scratch / "app")
with tracer.start_as_current_span("invoke_agent support",
                                  attributes={"gen_ai.operation.name": "invoke_agent", "gen_ai.conversation.id": "c1"}):
    for order in range(3):
        exc = deep_exception(app, order)
        with tracer.start_as_current_span("execute_tool lookup_order", record_exception=False,
                                          attributes={"gen_ai.operation.name": "execute_tool"}) as span:
            span.record_exception(exc)
            span.set_status(Status(StatusCode.ERROR, str(exc)))
assert ec.flush(30)
provider.force_flush()
records = TrajectoryStore(scratch / "t.db").list(limit=100)
tools = [s for s in exporter.get_finished_spans() if s.name.startswith("execute_tool")]
print(json.dumps({
    "spooled": sum(spooled),
    "dropped": ec.pipeline.writer.dropped,
    "stored": len(records),
    "digested": sum(1 for r in records if r.key),
    "keyed_spans": sum(1 for s in tools if "errcompact.key" in (s.attributes or {})),
    "context": ec.context("c1"),
}))
ec.shutdown()
"""


@pytest.mark.parametrize("cut", ["cut", "spooled", "whole"])
def test_the_ceiling_benchmarks_hand_off_cut_stores_raw_records_and_makes_no_digest(cut: str, tmp_path: Path) -> None:
    """``bench_ceiling.py``'s "hand-off only" cuts are floors only if they do what the README says: every
    failure's raw record is still spooled and stored, and no digest is made, counted or shown; in the
    "spooled only" cut every raw record is spooled and taken by the writer, none dropped, and no row is
    written. Run in a child, since the cut replaces methods for its whole process; the uncut run is the
    control."""
    root = Path(__file__).resolve().parent.parent
    out = subprocess.run([sys.executable, "-c", _HAND_OFF_ONLY, str(tmp_path), cut], cwd=root,
                         capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    seen = json.loads(out.stdout.strip().splitlines()[-1])
    assert seen["dropped"] == 0
    assert seen["stored"] == (0 if cut == "spooled" else 3)
    assert seen["spooled"] == 3  # one line per failure, uncut too: the digest goes to the queued raw record
    if cut in ("cut", "spooled"):
        assert seen["digested"] == 0 and seen["keyed_spans"] == 0 and seen["context"] == ""
    else:
        assert seen["digested"] == 3 and seen["keyed_spans"] == 3 and "[RECENT ERRORS]" in seen["context"]


class _CountingQueue(BackgroundQueue[int]):
    """A background queue that counts how often its worker asks whether it has something to do."""

    asked = 0

    def _due(self) -> bool:
        self.asked += 1
        return super()._due()


def test_a_flush_that_waits_does_not_leave_the_worker_spinning() -> None:
    """After handling the batch a flush waits for, the worker must sleep, not go round its loop while the
    flushing thread waits for the GIL to return: that burnt a core for up to a switch interval per flush
    (and, with threads run one at a time, kept a flush from returning for minutes)."""
    handled: list[int] = []
    queue = _CountingQueue("t-spin", handled.append, wake_every=256, max_delay_s=60.0)
    try:
        threading.Event().wait(0.2)
        queue.asked = 0
        for n in range(20):
            queue.submit(n)
            assert queue.flush(30)
        assert handled == list(range(20))
        assert queue.asked < 200  # a few per flush; the spin asked thousands of times
    finally:
        queue.shutdown(30)
