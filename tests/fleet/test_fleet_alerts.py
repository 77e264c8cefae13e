"""The fleet rules: promtool unit tests, and the metric names they use are the ones workers emit."""

from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path

import pytest
import yaml
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import InMemoryMetricReader

from otel_errcompact import compact_text
from otel_errcompact.recovery.breaker import BreakerPolicy, CircuitBreakers, fingerprint
from otel_errcompact.recovery.fleet import FleetMetrics, fleet_store
from tests.fleet import workers
from tests.fleet.conftest import free_port

CONFIG = Path(__file__).resolve().parents[2] / "collector-config"


def _emitted() -> dict[str, set[str]]:
    reader = InMemoryMetricReader()
    provider = MeterProvider(metric_readers=[reader])
    metrics = FleetMetrics(provider.get_meter("test"))
    # A worker whose Redis is gone (degraded once) and whose breaker opens and then refuses a call.
    store = fleet_store(f"redis://127.0.0.1:{free_port()}/0", metrics)
    breakers = CircuitBreakers(BreakerPolicy(threshold=3), store)
    breakers.add_refusal_listener(metrics.on_refusal)
    digest = compact_text(workers.real_failure())
    fp = fingerprint(workers.ARGS)
    for _ in range(3):
        breakers.failure(workers.TOOL, digest.key, fp, digest.line)
    assert not breakers.admit(workers.TOOL, fp).allowed
    found: dict[str, set[str]] = {}
    data = reader.get_metrics_data()
    assert data is not None
    for rm in data.resource_metrics:
        for sm in rm.scope_metrics:
            for metric in sm.metrics:
                name = metric.name.replace(".", "_") + "_total"
                found[name] = {k.replace(".", "_") for p in metric.data.data_points for k in (p.attributes or {})}
    provider.shutdown()
    return found


def test_fleet_rules_use_what_workers_emit() -> None:
    emitted = _emitted()
    assert set(emitted) == {"errcompact_breaker_refusals_total", "errcompact_state_degraded_total"}
    rules = yaml.safe_load((CONFIG / "errcompact-fleet-alerts.yml").read_text())
    for rule in rules["groups"][0]["rules"]:
        for metric in re.findall(r"\b(errcompact_[a-z_]+_total)\b", rule["expr"]):
            assert metric in emitted, metric
    assert "gen_ai_tool_name" in emitted["errcompact_breaker_refusals_total"]


@pytest.mark.skipif(shutil.which("promtool") is None, reason="promtool (Debian package prometheus) not installed")
def test_promtool_checks_and_unit_tests_the_fleet_rules() -> None:
    checks = (["check", "rules", "errcompact-fleet-alerts.yml"], ["test", "rules", "errcompact-fleet-alerts.test.yml"])
    for args in checks:
        done = subprocess.run(["promtool", *args], capture_output=True, text=True, cwd=CONFIG)
        assert done.returncode == 0, done.stdout + done.stderr
