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
from tests.conftest import MinuteScrapes, promtool_alert_test
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


class _Worker:
    """One worker's fleet counters, scraped once a minute (see :class:`MinuteScrapes`)."""

    def __init__(self, instance: str) -> None:
        self.reader = InMemoryMetricReader()
        self.provider = MeterProvider(metric_readers=[self.reader])
        self.metrics = FleetMetrics(self.provider.get_meter("test"))
        self.scrapes = MinuteScrapes(self.reader, service_name="support-agent", instance=instance)
        self.scrape = self.scrapes.scrape

    def lose_redis(self) -> None:
        store = fleet_store(f"redis://127.0.0.1:{free_port()}/0", self.metrics)
        store.breaker_admit(workers.TOOL, fingerprint(workers.ARGS), 0.0)

    def refuse(self, calls: int) -> None:
        breakers = CircuitBreakers(BreakerPolicy(threshold=3))
        breakers.add_refusal_listener(self.metrics.on_refusal)
        digest = compact_text(workers.real_failure())
        fp = fingerprint(workers.ARGS)
        for _ in range(3):
            breakers.failure(workers.TOOL, digest.key, fp, digest.line)
        for _ in range(calls):
            assert not breakers.admit(workers.TOOL, fp).allowed


@pytest.mark.skipif(shutil.which("promtool") is None, reason="promtool (Debian package prometheus) not installed")
def test_the_fleet_alerts_fire_on_the_first_outage_and_the_first_refusals_of_workers(tmp_path: Path) -> None:
    """A worker's counter appears at 1 (its first outage, its first refused calls), not at 0: the rules count
    that first appearance as an increase, or a worker's first outage would never be alerted on, nor a worker
    whose breaker refused a burst of calls and then none."""
    fleet = [_Worker(f"w{i}:9464") for i in (1, 2, 3)]
    events = {1: lambda: fleet[1].refuse(2), 2: lambda: (fleet[0].lose_redis(), fleet[0].refuse(4)),
              3: lambda: fleet[2].refuse(1)}  # fmt: skip
    for minute in range(6):
        if minute in events:
            events[minute]()
        for worker in fleet:
            worker.scrape()
    series = [series for worker in fleet for series in worker.scrapes.input_series()]
    assert len(series) == 4 and all(s["values"].startswith("_") for s in series)
    promtool_alert_test(tmp_path, CONFIG / "errcompact-fleet-alerts.yml", series, [
        {"eval_time": "5m", "alertname": "AgentToolBreakerOpenAcrossFleet", "exp_alerts": [{
            "exp_labels": {"severity": "warning", "service_name": "support-agent",
                           "gen_ai_tool_name": workers.TOOL},
            "exp_annotations": {
                "summary": f"Tool {workers.TOOL} of support-agent is cut off by its circuit breaker "
                           "in 3 workers",
                "description": "Calls are refused fleet-wide: the tool or its dependency is down. The breaker "
                               "lets one probe through after its cooldown and closes on success.",
                "runbook_url": "#agenttoolbreakeropenacrossfleet",
            },
        }]},
        {"eval_time": "5m", "alertname": "AgentSharedStateDegraded", "exp_alerts": [{
            "exp_labels": {"severity": "info", "service_name": "support-agent"},
            "exp_annotations": {
                "summary": "Workers of support-agent lost the shared Redis state",
                "description": "1 fallback(s) to per-process breakers and pacing in 10m; each worker goes "
                               "back to Redis on its own when it answers.",
                "runbook_url": "#agentsharedstatedegraded",
            },
        }]},
    ])  # fmt: skip
    for worker in fleet:
        worker.provider.shutdown()

