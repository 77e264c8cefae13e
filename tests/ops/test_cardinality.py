"""A flood of unique errors must not become a flood of metric series."""

from __future__ import annotations

import traceback

from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import InMemoryMetricReader

from otel_errcompact.history import ErrorHistory, Limits, Thresholds
from otel_errcompact.pipeline import ErrorPipeline, Failure
from otel_errcompact.telemetry import MAX_ERROR_TYPES, ErrorMetrics
from tests.conftest import metrics_by_name


def _raw(index: int) -> str:
    # A real exception of one of 300 distinct types, each with a message of its own.
    error_type = type(f"Fault{index % 300}Error", (RuntimeError,), {})
    try:
        raise error_type(f"record {index} rejected by upstream shard s{index}")
    except RuntimeError as exc:
        return "".join(traceback.format_exception(exc))


def test_unique_errors_keep_series_bounded_and_count_each_new_class_once() -> None:
    reader = InMemoryMetricReader()
    provider = MeterProvider(metric_readers=[reader])
    metrics = ErrorMetrics(provider.get_meter("test"))
    pipeline = ErrorPipeline(ErrorHistory(Thresholds(consecutive=1000, budget=None), Limits(max_scopes=100)))
    pipeline.add_failure_listener(metrics.on_failure)
    pipeline.add_success_listener(metrics.on_success)
    failures = 3000
    keys: set[str] = set()
    for index in range(failures):
        outcome = pipeline.handle(Failure(scope=f"conv-{index % 500}", raw_error=_raw(index), tool_name="ingest"))
        keys.add(outcome.digest.key)
        pipeline.succeeded(f"conv-{index % 500}", "ingest")
    # The same failures again, in other conversations: not new classes any more.
    for index in range(200):
        pipeline.handle(Failure(scope="late", raw_error=_raw(index), tool_name="ingest"))
    assert metrics.flush(60)
    points = {name: [(dict(p.attributes or {}), p.value) for p in metric]
              for name, metric in metrics_by_name(reader).items()}
    provider.shutdown()
    metrics.shutdown()

    # error.type is capped (the rest reported as "other"); messages and keys never become labels.
    assert len(points["errcompact.errors"]) <= 2 * (MAX_ERROR_TYPES + 1)
    assert len(points["errcompact.classes.new"]) <= MAX_ERROR_TYPES + 1
    assert any(attrs["error.type"] == "other" for attrs, _ in points["errcompact.classes.new"])
    assert {k for attrs, _ in points["errcompact.errors"] for k in attrs} == {
        "gen_ai.tool.name", "error.type", "errcompact.error_type", "errcompact.new_class"
    }
    # Each distinct class is new once, whichever conversation saw it first; the 200 repeats are not.
    assert len(keys) >= MAX_ERROR_TYPES * 2
    assert sum(value for _, value in points["errcompact.classes.new"]) == len(keys)
    calls = {attrs["errcompact.outcome"]: value for attrs, value in points["errcompact.tool.calls"]}
    assert calls == {"error": failures + 200, "ok": failures}
