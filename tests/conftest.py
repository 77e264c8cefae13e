"""Shared fixtures: a real OpenTelemetry SDK pipeline with in-memory exporters, wired to ``init()``.

``init()`` keeps its handle in a module global (a second call returns the first handle), so every
fixture here shuts its handle down afterwards; ``ErrCompact.shutdown()`` clears the global. The
providers are fresh per test and never set as the process-wide globals (those can be set only once
per process; tests that need them run a subprocess).

Use ``otel`` for the default settings, or ``make_otel(**init_kwargs)`` for thresholds, hooks, sinks
and settings of a test's own (one handle per test at a time).
"""

from __future__ import annotations

import json
import os
import threading
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
from opentelemetry.sdk._logs import LoggerProvider, ReadableLogRecord
from opentelemetry.sdk._logs.export import InMemoryLogRecordExporter, SimpleLogRecordProcessor
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import InMemoryMetricReader
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor, SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import Tracer

import otel_errcompact
from otel_errcompact import ErrCompact
from otel_errcompact.deferred import DigestThread
from otel_errcompact.sinks.spool import read_segment
from otel_errcompact.sinks.sqlite import TrajectoryStore
from otel_errcompact.trajectory import TrajectoryRecord


@dataclass
class OTel:
    """One test's SDK pipeline and the ``ErrCompact`` handle attached to it."""

    ec: ErrCompact
    tracer_provider: TracerProvider
    span_exporter: InMemorySpanExporter
    logger_provider: LoggerProvider
    log_exporter: InMemoryLogRecordExporter
    meter_provider: MeterProvider
    metric_reader: InMemoryMetricReader
    sqlite_path: Path
    batch: bool = False
    """Spans go to the exporter through a ``BatchSpanProcessor`` (failed spans' digests are then made
    after the span ended, see ``otel_errcompact.deferred``), not a ``SimpleSpanProcessor``."""
    _stores: list[TrajectoryStore] = field(default_factory=list)

    @property
    def tracer(self) -> Tracer:
        return self.tracer_provider.get_tracer("tests.agent")

    def spans(self, name: str | None = None) -> list[ReadableSpan]:
        """Finished spans, optionally only those named ``name``."""
        if self.batch:
            assert self.tracer_provider.force_flush(30_000)
        spans = list(self.span_exporter.get_finished_spans())
        return [s for s in spans if name is None or s.name == name]

    def logs(self, event_name: str | None = None) -> list[ReadableLogRecord]:
        """Exported log records, optionally only those with ``event_name``."""
        self.logger_provider.force_flush()
        records = list(self.log_exporter.get_finished_logs())
        return [r for r in records if event_name is None or r.log_record.event_name == event_name]

    def metric_points(self, name: str) -> list[Any]:
        """Data points of the metric ``name`` (cumulative), empty when it was never recorded."""
        self.ec.flush(30.0)  # error and token counts are recorded on the library's metrics thread
        return metric_points(self.metric_reader, name)

    def metric_sum(self, name: str) -> int:
        """The sum of the metric ``name``'s data points (0 when it was never recorded)."""
        self.ec.flush(30.0)  # as metric_points does
        return metric_sum(self.metric_reader, name)

    def store(self) -> TrajectoryStore:
        """A read-only view of the SQLite trajectory store, after flushing the writer."""
        assert self.ec.flush(30.0), "ec.flush() timed out"
        store = TrajectoryStore(self.sqlite_path)
        self._stores.append(store)
        return store

    def records(self) -> list[TrajectoryRecord]:
        """Every stored trajectory record, oldest first."""
        store = self.store()
        out: list[TrajectoryRecord] = []
        for summary in reversed(store.list(limit=1_000_000)):
            record = store.get(summary.record_id)
            assert record is not None
            out.append(record)
        return out

    def close(self) -> None:
        for store in self._stores:
            store.close()
        self.ec.shutdown()
        self.tracer_provider.shutdown()
        self.logger_provider.shutdown()
        self.meter_provider.shutdown()


class GateSink:
    """A trajectory sink that holds the writer thread inside ``write`` until released (a store far too
    slow), so a test can fill the queue deterministically; ``seen`` lists the record ids it took."""

    def __init__(self) -> None:
        self.entered = threading.Event()
        self.release = threading.Event()
        self.seen: list[str] = []

    def write(self, records: Sequence[TrajectoryRecord]) -> None:
        self.entered.set()
        self.release.wait(30)
        self.seen.extend(r.record_id for r in records)

    def close(self) -> None:
        pass


def metrics_by_name(reader: InMemoryMetricReader) -> dict[str, list[Any]]:
    """Every metric ``reader`` collects now, by name, with its data points (a collection runs the
    reader's callbacks: call it once per look)."""
    data = reader.get_metrics_data()
    metrics: dict[str, list[Any]] = {}
    for rm in data.resource_metrics if data is not None else []:
        for sm in rm.scope_metrics:
            for metric in sm.metrics:
                metrics.setdefault(metric.name, []).extend(metric.data.data_points)
    return metrics


class MinuteScrapes:
    """A reader's counters as Prometheus scrapes them, one sample a minute, for promtool's ``input_series``:
    ``_`` (no sample) while a series does not exist yet, since the SDK makes a series at its first count,
    never at zero. ``labels`` are added to every series (the resource's, as a collector promotes them)."""

    def __init__(self, reader: InMemoryMetricReader, **labels: str) -> None:
        self.reader = reader
        self.labels = labels
        self.samples: dict[str, list[str]] = {}
        self.scrapes = 0

    def scrape(self) -> None:
        for name, points in metrics_by_name(self.reader).items():
            for point in points:
                labels = {k.replace(".", "_"): str(v) for k, v in (point.attributes or {}).items()} | self.labels
                text = ",".join(f'{k}="{v}"' for k, v in sorted(labels.items()))
                series = f"{name.replace('.', '_')}_total{{{text}}}"
                self.samples.setdefault(series, ["_"] * self.scrapes).append(str(int(point.value)))
        self.scrapes += 1
        for values in self.samples.values():
            values.extend(["_"] * (self.scrapes - len(values)))

    def input_series(self) -> list[dict[str, str]]:
        return [{"series": name, "values": " ".join(values)} for name, values in self.samples.items()]


def promtool_alert_test(
    folder: Path, rule_file: Path, input_series: list[dict[str, str]], alert_rule_test: list[dict[str, Any]]
) -> None:
    """Run ``promtool test rules`` on one test of ``rule_file``, evaluated once a minute over ``input_series``
    (see :class:`MinuteScrapes`), and fail with promtool's report unless every expectation holds."""
    import subprocess

    import yaml

    suite = {
        "rule_files": [str(rule_file)],
        "evaluation_interval": "1m",
        "tests": [{"interval": "1m", "input_series": input_series, "alert_rule_test": alert_rule_test}],
    }
    (folder / "alerts.test.yml").write_text(yaml.safe_dump(suite))
    done = subprocess.run(["promtool", "test", "rules", "alerts.test.yml"], capture_output=True, text=True, cwd=folder)
    assert done.returncode == 0, done.stdout + done.stderr


def metric_points(reader: InMemoryMetricReader, name: str) -> list[Any]:
    """The data points ``reader`` collects now for the metric ``name``, empty when it was never recorded."""
    return metrics_by_name(reader).get(name, [])


def metric_sum(reader: InMemoryMetricReader, name: str) -> int:
    """The sum of the metric ``name``'s data points that ``reader`` collects now (0 when never recorded)."""
    return int(sum(p.value for p in metric_points(reader, name)))


def run_threads(target: Callable[[int], None], n: int) -> list[BaseException]:
    """Run ``target(0)`` … ``target(n - 1)`` on ``n`` threads released at once; the exceptions they
    raised (an assertion inside a thread fails the test only through this list)."""
    errors: list[BaseException] = []
    start = threading.Barrier(n)

    def body(i: int) -> None:
        try:
            start.wait()
            target(i)
        except BaseException as exc:
            errors.append(exc)

    threads = [threading.Thread(target=body, args=(i,)) for i in range(n)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(120)
    assert not any(t.is_alive() for t in threads)
    return errors


def env_without_otel() -> dict[str, str]:
    """This process's environment without its ``OTEL_*`` variables, for a child process that must see only
    what its test sets: a developer's exporter endpoint or sampler would change what the child does."""
    return {k: v for k, v in os.environ.items() if not k.upper().startswith("OTEL_")}


@pytest.fixture
def make_otel(tmp_path: Path) -> Iterator[Callable[..., OTel]]:
    """Factory: ``make_otel(**init_kwargs)`` builds fresh SDK providers and calls ``init()`` with them.
    ``batch=True``: spans are exported by a ``BatchSpanProcessor``, every ``export_delay_ms`` (the SDK's
    default, 5 s) unless flushed."""
    made: list[OTel] = []

    def build(*, batch: bool = False, export_delay_ms: float = 5000, **init_kwargs: Any) -> OTel:
        current = otel_errcompact.instance()
        assert current is None, "an ErrCompact handle from another test is still alive"
        tracer_provider = TracerProvider()
        span_exporter = InMemorySpanExporter()
        tracer_provider.add_span_processor(
            BatchSpanProcessor(span_exporter, schedule_delay_millis=export_delay_ms)
            if batch
            else SimpleSpanProcessor(span_exporter)
        )
        logger_provider = LoggerProvider()
        log_exporter = InMemoryLogRecordExporter()
        logger_provider.add_log_record_processor(SimpleLogRecordProcessor(log_exporter))
        metric_reader = InMemoryMetricReader()
        meter_provider = MeterProvider(metric_readers=[metric_reader])
        sqlite_path = init_kwargs.pop("sqlite_path", tmp_path / "t.sqlite3")
        ec = otel_errcompact.init(
            tracer_provider=tracer_provider,
            logger_provider=logger_provider,
            meter_provider=meter_provider,
            sqlite_path=sqlite_path,
            **init_kwargs,
        )
        handle = OTel(
            ec=ec,
            tracer_provider=tracer_provider,
            span_exporter=span_exporter,
            logger_provider=logger_provider,
            log_exporter=log_exporter,
            meter_provider=meter_provider,
            metric_reader=metric_reader,
            sqlite_path=Path(sqlite_path),
            batch=batch,
        )
        made.append(handle)
        return handle

    try:
        yield build
    finally:
        for handle in made:
            handle.close()
        assert otel_errcompact.instance() is None


@pytest.fixture
def otel(make_otel: Callable[..., OTel]) -> OTel:
    """The default pipeline: real SDK providers, in-memory exporters, SQLite in ``tmp_path``."""
    return make_otel()


def answer_from_fork(work: Callable[[], Any]) -> Any:
    """``work()`` run in a process forked from this one, its JSON-able answer read back; asserts that the
    forked process exited cleanly (POSIX only)."""
    read, write = os.pipe()
    child = os.fork()
    if child == 0:  # pragma: no cover - runs in the forked child
        code = 1
        try:
            os.write(write, json.dumps(work()).encode())
            code = 0
        finally:
            os._exit(code)
    os.close(write)
    with os.fdopen(read, "rb") as reply:
        answer = json.loads(reply.read() or b"null")
    _, status = os.waitpid(child, 0)
    assert os.waitstatus_to_exitcode(status) == 0
    return answer


@pytest.fixture
def held(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """The digest thread never wakes: deferred failures wait for a reader, an export or a flush."""
    monkeypatch.setattr(DigestThread, "wake", lambda self: None)
    yield


def spooled_lines(otel: OTel) -> list[bytes]:
    """Every line in the writer's spool, oldest first (records not yet stored, or not yet deleted)."""
    writer = otel.ec.writer
    assert writer is not None and writer.spool_dir is not None
    return [line for path in sorted(writer.spool_dir.iterdir()) for chunk in read_segment(path) for line in chunk]
