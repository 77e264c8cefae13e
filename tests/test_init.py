"""``init()``: attaching to the application's providers, settings, idempotence, shutdown."""

from __future__ import annotations

import gc
import json
import re
import subprocess
import sys
import textwrap
import threading
import warnings
import weakref
from collections.abc import Callable
from pathlib import Path

import pytest
from opentelemetry.sdk._logs import LoggerProvider
from opentelemetry.sdk._logs.export import InMemoryLogRecordExporter, SimpleLogRecordProcessor
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import InMemoryMetricReader
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor, SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import Status, StatusCode

import otel_errcompact
from otel_errcompact import ConfigurationError, ToolErrorText
from otel_errcompact.fused import FusedSpanProcessor
from otel_errcompact.history import ErrorHistory, Limits, Thresholds
from otel_errcompact.processor import ErrorCompactionProcessor
from otel_errcompact.recovery.breaker import BreakerPolicy
from otel_errcompact.recovery.retry import RetryPolicy
from otel_errcompact.recovery.state import InMemoryStateStore
from otel_errcompact.sinks.sqlite import TrajectoryStore
from tests.conftest import OTel, env_without_otel, metric_sum


def _fail_a_tool_span(provider: TracerProvider) -> None:
    """A tool span that records a real JSONDecodeError and ends failed."""
    with provider.get_tracer("tests.agent").start_as_current_span(
        "execute_tool lookup", attributes={"gen_ai.operation.name": "execute_tool"}
    ) as span:
        try:
            json.loads("{")
        except ValueError as exc:
            span.record_exception(exc)
            span.set_status(Status(StatusCode.ERROR))


def _processors(otel: OTel) -> int:
    return len(otel.tracer_provider._active_span_processor._span_processors)


GLOBAL_PROVIDER_SCRIPT = """
import json, sys
from opentelemetry import trace
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
import otel_errcompact

app_provider = TracerProvider()
app_exporter = InMemorySpanExporter()
app_provider.add_span_processor(SimpleSpanProcessor(app_exporter))
trace.set_tracer_provider(app_provider)

ec = otel_errcompact.init(service_name="global-test", sqlite_path=sys.argv[1])

@ec.tool
def lookup(key):
    return {"a": 1}[key]

result = lookup("missing")
with trace.get_tracer("app").start_as_current_span("app work"):
    pass
ec.shutdown()
spans = app_exporter.get_finished_spans()
print(json.dumps({
    "same_provider": trace.get_tracer_provider() is app_provider,
    "processors": len(app_provider._active_span_processor._span_processors),
    "result": str(result),
    "spans": [{"name": s.name, "digest": (s.attributes or {}).get("errcompact.digest")} for s in spans],
}))
"""


def test_attaches_to_the_global_sdk_provider_the_app_set(tmp_path: Path) -> None:
    """The global provider can be set once per process, so this runs in a fresh interpreter."""
    db = tmp_path / "global.sqlite3"
    env = env_without_otel()
    proc = subprocess.run(
        [sys.executable, "-c", textwrap.dedent(GLOBAL_PROVIDER_SCRIPT), str(db)],
        capture_output=True, text=True, timeout=120, env=env, check=False,
    )
    assert proc.returncode == 0, proc.stderr
    out = json.loads(proc.stdout.strip().splitlines()[-1])
    assert out["same_provider"] is True
    assert out["processors"] == 2  # the app's exporter pipeline and ours, nothing else
    assert out["result"].startswith("Error: [KeyError]") and "in lookup" in out["result"]
    names = [s["name"] for s in out["spans"]]
    assert names == ["execute_tool lookup", "app work"]
    assert out["spans"][0]["digest"] is not None and out["spans"][0]["digest"] in out["result"]
    with TrajectoryStore(db) as store:
        assert store.count() == 1
        (summary,) = store.list()
        assert summary.tool_name == "lookup"


def test_env_settings_are_honoured(monkeypatch: pytest.MonkeyPatch, make_otel: Callable[..., OTel]) -> None:
    monkeypatch.setenv("OTEL_ERRCOMPACT_CONSECUTIVE", "2")
    monkeypatch.setenv("OTEL_ERRCOMPACT_BUDGET", "none")
    monkeypatch.setenv("OTEL_ERRCOMPACT_ON_TOOL_ERROR", "raise")
    otel = make_otel()
    assert otel.ec.settings.consecutive == 2
    assert otel.ec.settings.budget is None
    assert otel.ec.history.thresholds.consecutive == 2

    @otel.ec.tool
    def lookup(key: str) -> int:
        return {"a": 1}[key]

    with otel.ec.conversation("conv-env"):
        for _ in range(2):
            with pytest.raises(KeyError):
                lookup("b")
    escalation = otel.ec.history.escalation("conv-env")
    assert escalation is not None and escalation.threshold == 2 and escalation.count == 2


def test_arguments_win_over_the_environment(monkeypatch: pytest.MonkeyPatch,
                                            make_otel: Callable[..., OTel]) -> None:
    monkeypatch.setenv("OTEL_ERRCOMPACT_CONSECUTIVE", "2")
    otel = make_otel(consecutive=5)
    assert otel.ec.history.thresholds.consecutive == 5


def test_env_sqlite_path(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    db = tmp_path / "from-env.sqlite3"
    monkeypatch.setenv("OTEL_ERRCOMPACT_SQLITE_PATH", str(db))
    ec = otel_errcompact.init(tracer_provider=TracerProvider(), meter_provider=MeterProvider())
    try:
        assert ec.sqlite_path == db
        ec.record_error("".join(_real_traceback()), scope="conv-env-path")
    finally:
        ec.shutdown()
    with TrajectoryStore(db) as store:
        assert store.count() == 1


def _real_traceback() -> list[str]:
    import traceback

    try:
        json.loads("{")
    except ValueError as exc:
        return traceback.format_exception(exc)
    raise AssertionError("json.loads was expected to fail")


@pytest.mark.parametrize(
    ("variable", "value", "named"),
    [
        ("OTEL_ERRCOMPACT_CONSECUTIVE", "three", "consecutive"),
        ("OTEL_ERRCOMPACT_CONSECUTIVE", "0", "consecutive"),
        ("OTEL_ERRCOMPACT_ACTION", "explode", "action"),
        ("OTEL_ERRCOMPACT_SCHEDULE_DELAY_S", "-1", "schedule_delay_s"),
        ("OTEL_ERRCOMPACT_REDIS_URL", "localhost:6379", "redis_url"),  # no scheme: redis-py refuses it
    ],
)
def test_a_bad_env_value_raises_configuration_error_naming_it(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, variable: str, value: str, named: str
) -> None:
    monkeypatch.setenv(variable, value)
    with pytest.raises(ConfigurationError) as info:
        otel_errcompact.init(sqlite_path=tmp_path / "x.sqlite3")
    assert f"{variable}={value!r}: expected" in str(info.value)
    assert named.upper() in str(info.value)
    assert isinstance(info.value, ValueError)
    assert otel_errcompact.instance() is None


def test_a_bad_argument_raises_configuration_error_naming_it(tmp_path: Path) -> None:
    with pytest.raises(ConfigurationError, match="consecutve"):
        otel_errcompact.init(sqlite_path=tmp_path / "x.sqlite3", consecutve=3)
    with pytest.raises(ConfigurationError, match="max_chars"):
        otel_errcompact.init(sqlite_path=tmp_path / "x.sqlite3", max_chars=10)
    assert otel_errcompact.instance() is None


@pytest.mark.parametrize(("keyword", "value"), [("consecutive", True), ("breaker_threshold", False),
                                                 ("idle_seconds", True)])
def test_a_boolean_for_a_number_raises_configuration_error_naming_it(
    tmp_path: Path, keyword: str, value: bool
) -> None:
    """``True`` and ``False`` are not counts or seconds, though Python calls them 1 and 0: ``consecutive=True``
    would halt every run at its first failure."""
    with pytest.raises(ConfigurationError) as info:
        otel_errcompact.init(sqlite_path=tmp_path / "x.sqlite3", **{keyword: value})
    assert keyword in str(info.value) and "not a boolean" in str(info.value)
    assert otel_errcompact.instance() is None


@pytest.mark.parametrize(
    ("keyword", "value", "expected"),
    [
        ("thresholds", 5, "a Thresholds"),
        ("limits", {"max_lines": 4}, "a Limits"),
        ("retry", 3, "a RetryPolicy"),
        ("breaker", 3, "a BreakerPolicy"),
        ("state_store", "redis://127.0.0.1:6379/0", "a RecoveryStateStore"),
        ("human_review", "page-the-oncall", "a function"),
        ("tool_predicate", True, "a function"),
        ("sinks", [Path("audit.jsonl")], "a list of TrajectorySink"),
        ("sinks", None, "a list of TrajectorySink"),
        ("compactor", "llm", "a Compactor"),
        ("service_name", 42, "a string"),
        ("meter_provider", "prometheus", "an OpenTelemetry MeterProvider"),
    ],
)
def test_an_argument_of_the_wrong_kind_fails_init_before_anything_is_attached(
    tmp_path: Path, keyword: str, value: object, expected: str
) -> None:
    """Each object argument is used only later, most of them in a tool call or on a background thread
    (``retry=3`` made every failing call's digest the library's own AttributeError): ``init()`` refuses
    it at once, naming the keyword, with nothing attached or started."""
    provider = TracerProvider()
    threads = {t.name for t in threading.enumerate()}
    with pytest.raises(ConfigurationError) as info:
        otel_errcompact.init(tracer_provider=provider, sqlite_path=tmp_path / "x.sqlite3", **{keyword: value})
    assert f"{keyword}={value!r}: expected {expected}" in str(info.value)
    assert isinstance(info.value, ValueError)
    assert otel_errcompact.instance() is None
    assert len(provider._active_span_processor._span_processors) == 0
    assert {t.name for t in threading.enumerate()} - threads == set()
    assert not (tmp_path / "x.sqlite3").exists()


@pytest.mark.parametrize("url", ["localhost:6379", "redis://127.0.0.1:port/0", "redis://127.0.0.1/0?socket_timeout=soon"])
def test_a_bad_redis_url_fails_init_before_anything_is_attached(tmp_path: Path, url: str) -> None:
    """The URL is read when the settings are: init() fails with nothing attached or started, and the
    corrected call is the one that sees the provider's failed tool spans."""
    provider = TracerProvider()
    exporter = InMemorySpanExporter()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    threads = {t.name for t in threading.enumerate()}
    with pytest.raises(ConfigurationError, match=rf"redis_url={re.escape(repr(url))}: expected"):
        otel_errcompact.init(tracer_provider=provider, sqlite_path=tmp_path / "refused.sqlite3", redis_url=url)
    assert otel_errcompact.instance() is None
    assert len(provider._active_span_processor._span_processors) == 1
    assert {t.name for t in threading.enumerate()} - threads == set()

    db = tmp_path / "fixed.sqlite3"
    ec = otel_errcompact.init(tracer_provider=provider, sqlite_path=db)
    try:
        _fail_a_tool_span(provider)
        assert "[JSONDecodeError]" in ec.context("default")
        assert ec.flush()
        with TrajectoryStore(db) as store:
            assert store.count() == 1
        (ended,) = exporter.get_finished_spans()
        assert ended.attributes is not None and ended.attributes["errcompact.count"] == 1
    finally:
        ec.shutdown()


def test_a_setting_a_thresholds_or_limits_object_holds_is_named_when_it_asks_for_another_value(
    monkeypatch: pytest.MonkeyPatch, make_otel: Callable[..., OTel]
) -> None:
    """``thresholds=`` / ``limits=`` hold each of their settings, defaults included: an operator's variable
    or a keyword for one of them that asks for another value cannot take effect, and says so (one that
    agrees is quiet)."""
    monkeypatch.setenv("OTEL_ERRCOMPACT_ACTION", "human")
    with pytest.warns(otel_errcompact.ConfigurationWarning) as caught:
        otel = make_otel(thresholds=Thresholds(consecutive=5), consecutive=5, budget=2,
                         limits=Limits(max_lines=4), max_lines=4, max_classes=3)
    (message,) = [str(w.message) for w in caught if issubclass(w.category, otel_errcompact.ConfigurationWarning)]
    assert "OTEL_ERRCOMPACT_ACTION='human' (the thresholds= given has action='halt')" in message
    assert "budget=2 (the thresholds= given has budget=20)" in message
    assert "max_classes=3 (the limits= given has max_classes=32)" in message
    assert "consecutive" not in message and "max_lines" not in message
    assert otel.ec.history.thresholds == Thresholds(consecutive=5)  # the object's, as the warning says

    @otel.ec.tool
    def lookup(key: str) -> int:
        return {"a": 1}[key]

    with otel.ec.conversation("conv-thresholds"):
        results = [lookup("b") for _ in range(5)]
        assert [r.escalated for r in results] == [False, False, False, False, True]  # type: ignore[attr-defined]
        with pytest.raises(otel_errcompact.ErrorBudgetExceeded):
            otel.ec.check()


def test_init_is_idempotent(otel: OTel) -> None:
    before = _processors(otel)
    with pytest.warns(otel_errcompact.ConfigurationWarning, match=r"consecutive: 3 → 9"):
        again = otel_errcompact.init(tracer_provider=otel.tracer_provider, consecutive=9)
    assert again is otel.ec
    assert otel_errcompact.instance() is otel.ec
    assert _processors(otel) == before
    assert otel.ec.history.thresholds.consecutive == 3


def test_a_second_init_names_differing_recovery_settings(make_otel: Callable[..., OTel]) -> None:
    store = InMemoryStateStore()
    otel = make_otel(breaker=BreakerPolicy(5, 10.0), retry=RetryPolicy(attempts=3), state_store=store)
    same = {"tracer_provider": otel.tracer_provider, "logger_provider": otel.logger_provider,
            "meter_provider": otel.meter_provider, "sqlite_path": otel.sqlite_path}
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # the same recovery arguments again: quiet
        again = otel_errcompact.init(**same, breaker=BreakerPolicy(5, 10.0), retry=RetryPolicy(attempts=3),
                                     state_store=store)
    assert again is otel.ec
    other_store = InMemoryStateStore()
    with pytest.warns(otel_errcompact.ConfigurationWarning) as caught:
        otel_errcompact.init(**same, breaker=BreakerPolicy(10, 5.0), retry=RetryPolicy(attempts=5),
                             state_store=other_store)
    (message,) = [str(w.message) for w in caught]
    assert ("breaker: BreakerPolicy(threshold=5, cooldown_s=10.0) → BreakerPolicy(threshold=10, cooldown_s=5.0)"
            in message)
    assert f"retry: {RetryPolicy(attempts=3)!r} → {RetryPolicy(attempts=5)!r}" in message
    assert f"state_store: {store!r} → {other_store!r}" in message
    # the first ones stay in force
    assert otel.ec.boundary.breakers is not None and otel.ec.boundary.breakers.policy == BreakerPolicy(5, 10.0)
    assert otel.ec.boundary.retry.attempts == 3


def test_shutdown_twice_is_fine_and_clears_the_instance(make_otel: Callable[..., OTel]) -> None:
    first = make_otel()
    first.ec.shutdown()
    first.ec.shutdown()
    assert otel_errcompact.instance() is None
    second = make_otel()
    assert second.ec is not first.ec
    assert otel_errcompact.instance() is second.ec


def test_shutdown_flushes_every_record_submitted_just_before(make_otel: Callable[..., OTel]) -> None:
    # A long schedule delay: only shutdown can have written these.
    otel = make_otel(schedule_delay_s=60.0)

    @otel.ec.tool
    def lookup(key: str) -> int:
        return {"a": 1}[key]

    results = []
    for i in range(50):
        with otel.ec.conversation(f"conv-{i % 5}"):
            results.append(lookup(f"k{i}"))
    assert all(isinstance(r, ToolErrorText) for r in results)
    otel.ec.shutdown()
    with TrajectoryStore(otel.sqlite_path) as store:
        assert store.count() == 50
        ids = {s.record_id for s in store.list(limit=100)}
        assert ids == {r.record_id for r in results}
        assert all(s.digest_line for s in store.list(limit=100))


def test_disabled_is_inert(make_otel: Callable[..., OTel]) -> None:
    otel = make_otel(enabled=False)
    before = _processors(otel)
    assert before == 1  # only the test's own exporter: nothing attached

    def lookup(key: str) -> int:
        return {"a": 1}[key]

    assert otel.ec.tool(lookup) is lookup  # unwrapped: it raises as the bare function does
    with pytest.raises(KeyError), otel.ec.tool_call("lookup"):
        lookup("z")
    assert otel.ec.context("default") == ""
    assert otel.ec.sqlite_path is None
    assert not otel.sqlite_path.exists()
    assert otel.spans() == []
    assert otel.metric_points("errcompact.errors") == []


def test_init_after_shutdown_on_the_same_provider_sees_span_failures(otel: OTel, tmp_path: Path) -> None:
    """An app (or a notebook) that shuts down and initialises again on its own provider: the SDK
    cannot remove a span processor, so the first handle's must stand aside."""

    def fail_once() -> None:
        _fail_a_tool_span(otel.tracer_provider)

    fail_once()
    assert "[JSONDecodeError]" in otel.ec.context("default")
    otel.ec.shutdown()

    db = tmp_path / "second.sqlite3"
    second = otel_errcompact.init(
        tracer_provider=otel.tracer_provider, logger_provider=otel.logger_provider,
        meter_provider=otel.meter_provider, sqlite_path=db,
    )
    try:
        fail_once()
        assert "[JSONDecodeError]" in second.context("default")
        assert second.flush()
        with TrajectoryStore(db) as store:
            assert store.count() == 1
        spans = otel.spans("execute_tool lookup")
        assert spans[-1].attributes["errcompact.count"] == 1  # type: ignore[index]
    finally:
        second.shutdown()


@pytest.mark.parametrize("meter", ["sdk", "global proxy"])
def test_init_shutdown_cycles_on_one_provider_keep_nothing_of_the_shut_down_handles(tmp_path: Path, meter: str) -> None:
    """An app that initialises again and again (a reload, a job each) on its providers: the SDK cannot
    remove a processor or an instrument, so each new handle takes over what the last one left there,
    and a shut-down handle is not kept alive by anything the providers hold."""
    tracer_provider = TracerProvider()
    span_exporter = InMemorySpanExporter()
    tracer_provider.add_span_processor(BatchSpanProcessor(span_exporter))
    logger_provider = LoggerProvider()
    logger_provider.add_log_record_processor(SimpleLogRecordProcessor(InMemoryLogRecordExporter()))
    reader = InMemoryMetricReader()
    meter_provider = MeterProvider(metric_readers=[reader]) if meter == "sdk" else None
    histories: list[weakref.ref[ErrorHistory]] = []
    for i in range(20):
        ec = otel_errcompact.init(tracer_provider=tracer_provider, logger_provider=logger_provider,
                                  meter_provider=meter_provider, sqlite_path=tmp_path / f"{i}.sqlite3")
        try:
            lookup = ec.tool(name="lookup")(lambda key: {"a": 1}[key])
            with ec.conversation(f"conv-{i}"):
                for _ in range(i % 3 + 1):
                    assert str(lookup("b")).startswith("Error: [KeyError]")
            assert ec.flush()
            assert ec.writer is not None
            if meter_provider is not None:  # the counters read this handle's writer, not the first one's
                assert metric_sum(reader, "errcompact.trajectory.written") == ec.writer.written
            histories.append(weakref.ref(ec.history))
        finally:
            ec.shutdown()
        del ec, lookup
    gc.collect()
    assert [ref for ref in histories if ref() is not None] == []
    # One entry: the exporter's batch processor fused with ours (see otel_errcompact.fused), never a second one.
    (entry,) = tracer_provider._active_span_processor._span_processors
    assert isinstance(entry, FusedSpanProcessor)
    assert type(entry.batch) is BatchSpanProcessor and type(entry.processor) is ErrorCompactionProcessor
    assert len(logger_provider._multi_log_record_processor._log_record_processors) == 2

    # The processor taken over works as a new one: the next handle counts a failed span once.
    db = tmp_path / "last.sqlite3"
    ec = otel_errcompact.init(tracer_provider=tracer_provider, logger_provider=logger_provider,
                              meter_provider=meter_provider, sqlite_path=db)
    try:
        _fail_a_tool_span(tracer_provider)
        assert "[JSONDecodeError]" in ec.context("default")
        assert ec.flush() and tracer_provider.force_flush()
        with TrajectoryStore(db) as store:
            assert store.count() == 1
        ended = span_exporter.get_finished_spans()[-1]
        assert ended.attributes is not None and ended.attributes["errcompact.count"] == 1
    finally:
        ec.shutdown()
        tracer_provider.shutdown()


def test_a_shut_down_handles_tools_never_feed_the_next_handle(otel: OTel, tmp_path: Path) -> None:
    """The next init() on the provider takes over the span processor; a tool wrapped by the shut-down
    handle still describes its failures to its own pipeline, not to the new handle's history."""
    old_lookup = otel.ec.tool(name="lookup")(lambda key: {"a": 1}[key])
    otel.ec.shutdown()
    second = otel_errcompact.init(
        tracer_provider=otel.tracer_provider, logger_provider=otel.logger_provider,
        meter_provider=otel.meter_provider, sqlite_path=tmp_path / "second.sqlite3",
    )
    try:
        assert second.processor is otel.ec.processor  # taken over, not one more
        with second.conversation("conv-second"):
            assert str(old_lookup("b")).startswith("Error: [KeyError]")
        assert second.context("conv-second") == ""
        assert second.flush()
        with TrajectoryStore(tmp_path / "second.sqlite3") as store:
            assert store.count() == 0
    finally:
        second.shutdown()


def test_a_second_init_compares_thresholds_with_those_in_force(make_otel: Callable[..., OTel]) -> None:
    """A second ``init()`` asking for a threshold by keyword is compared with the threshold in force, which
    a ``thresholds=`` object of the first call decided: another value is named with the one in force, the
    same value is quiet."""
    otel = make_otel(thresholds=Thresholds(consecutive=2))
    same = {"tracer_provider": otel.tracer_provider, "logger_provider": otel.logger_provider,
            "meter_provider": otel.meter_provider, "sqlite_path": otel.sqlite_path}
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # what is in force: quiet
        assert otel_errcompact.init(**same, consecutive=2) is otel.ec
    with pytest.warns(otel_errcompact.ConfigurationWarning) as caught:
        otel_errcompact.init(**same, consecutive=3, max_lines=8)
    (message,) = [str(w.message) for w in caught]
    assert "consecutive: 2 → 3" in message and "max_lines" not in message

    @otel.ec.tool
    def lookup(key: str) -> int:
        return {"a": 1}[key]

    with otel.ec.conversation("conv-first-thresholds"):
        assert [r.escalated for r in (lookup("b"), lookup("b"))] == [False, True]  # type: ignore[attr-defined]
