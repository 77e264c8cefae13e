"""The collector pipeline, Prometheus alert rules and Grafana dashboard shipped with the project.

They reference metric names and labels the library emits; these tests derive those names from a real
pipeline run (real SDK MeterProvider + InMemoryMetricReader) so a renamed instrument or attribute breaks
the build instead of silently breaking a user's alerting.
"""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import InMemoryMetricReader

from otel_errcompact.history import ErrorHistory, Thresholds
from otel_errcompact.pipeline import ErrorPipeline, Failure
from otel_errcompact.telemetry import ErrorMetrics
from tests.conftest import MinuteScrapes, metrics_by_name, promtool_alert_test
from tests.realerrors import python_error

ROOT = Path(__file__).resolve().parent.parent
CONFIG = ROOT / "collector-config"
DASHBOARD = ROOT / "dashboards" / "otel-errcompact.json"
sys.path.insert(0, str(ROOT / "dashboards"))
import generate  # noqa: E402  (dashboards/generate.py: the dashboard as code)


def _prometheus_name(name: str, unit_suffix: str = "_total") -> str:
    return name.replace(".", "_") + unit_suffix


def _metered_pipeline(consecutive: int) -> tuple[InMemoryMetricReader, MeterProvider, ErrorMetrics, ErrorPipeline]:
    """A pipeline whose failures, successes and escalations are counted by the library's metrics, read by
    ``reader``."""
    reader = InMemoryMetricReader()
    provider = MeterProvider(metric_readers=[reader])
    metrics = ErrorMetrics(provider.get_meter("test"))
    pipeline = ErrorPipeline(ErrorHistory(Thresholds(consecutive=consecutive)))
    pipeline.add_failure_listener(metrics.on_failure)
    pipeline.add_success_listener(metrics.on_success)
    pipeline.add_escalation_listener(metrics.on_escalation)
    return reader, provider, metrics, pipeline


@pytest.fixture(scope="module")
def emitted(tmp_path_factory: pytest.TempPathFactory) -> tuple[set[str], set[str]]:
    """(metric names, label names) as a Prometheus exporter would write what the library emits."""
    folder = tmp_path_factory.mktemp("ops")
    raw = python_error(folder, "import sqlite3\nsqlite3.connect(':memory:').execute('SELECT * FROM orders')\n")
    reader, provider, metrics, pipeline = _metered_pipeline(consecutive=2)
    pipeline.succeeded("s", "query_db")
    for _ in range(2):
        pipeline.handle(Failure(scope="s", raw_error=raw, tool_name="query_db"))
    assert metrics.flush(30)
    names: set[str] = set()
    labels: set[str] = {"service_name"}  # resource attribute, promoted by the collector config
    for name, points in metrics_by_name(reader).items():
        names.add(_prometheus_name(name))
        for point in points:
            labels.update(key.replace(".", "_") for key in point.attributes)
    provider.shutdown()
    metrics.shutdown()
    return names, labels


def _exprs_and_labels(expr: str) -> tuple[set[str], set[str]]:
    metrics = set(re.findall(r"\b(errcompact_[a-z_]+_total)\b", expr))
    labels = set(re.findall(r"by \(([^)]*)\)", expr))
    label_names = {name.strip() for group in labels for name in group.split(",")}
    label_names |= set(re.findall(r"\{([a-z_]+)\s*=", expr))
    label_names |= set(re.findall(r",\s*([a-z_]+)\s*=", expr))
    return metrics, label_names


def test_alert_rules_use_only_emitted_metrics_and_labels(emitted: tuple[set[str], set[str]]) -> None:
    names, labels = emitted
    rules = yaml.safe_load((CONFIG / "errcompact-alerts.yml").read_text())
    exprs = [rule["expr"] for group in rules["groups"] for rule in group["rules"]]
    assert exprs
    for expr in exprs:
        used_metrics, used_labels = _exprs_and_labels(expr)
        assert used_metrics <= names, (expr, names)
        assert used_labels <= labels, (expr, labels)


def test_dashboard_queries_use_only_emitted_metrics_and_labels(emitted: tuple[set[str], set[str]]) -> None:
    names, labels = emitted
    dashboard = json.loads(DASHBOARD.read_text())
    assert {panel["datasource"]["type"] for panel in dashboard["panels"] if "datasource" in panel} == {"prometheus"}
    prom_exprs = [expr for _title, expr in generate.panel_queries(dashboard)]
    assert len(prom_exprs) >= 10
    for expr in prom_exprs:
        used_metrics, used_labels = _exprs_and_labels(expr)
        assert used_metrics, expr
        assert used_metrics <= names, (expr, names)
        assert used_labels <= labels, (expr, labels)


def test_committed_dashboard_is_what_the_code_generates() -> None:
    assert generate.main(["--check"]) == 0, "run: python dashboards/generate.py"


def test_dashboard_code_type_checks() -> None:
    # The foundation SDK's builders are typed (typing.Self needs 3.11): mypy checks every field we set.
    result = subprocess.run(
        [sys.executable, "-m", "mypy", "--strict", "--python-version", "3.11", "--no-incremental",
         str(ROOT / "dashboards" / "generate.py")],
        capture_output=True, text=True, cwd=ROOT,
    )
    assert result.returncode == 0, result.stdout + result.stderr


def test_collector_pipeline_wires_every_signal() -> None:
    config = yaml.safe_load((CONFIG / "otel-collector.yaml").read_text())
    pipelines = config["service"]["pipelines"]
    assert set(pipelines) == {"traces", "logs", "metrics"}
    for pipeline in pipelines.values():
        assert pipeline["receivers"] == ["otlp"]
        assert set(pipeline["processors"]) <= set(config["processors"])
        assert set(pipeline["exporters"]) <= set(config["exporters"])


@pytest.mark.skipif(shutil.which("promtool") is None, reason="promtool (Debian package prometheus) not installed")
def test_promtool_checks_and_unit_tests_the_alert_rules() -> None:
    check = subprocess.run(
        ["promtool", "check", "rules", str(CONFIG / "errcompact-alerts.yml")], capture_output=True, text=True
    )
    assert check.returncode == 0, check.stdout + check.stderr
    test = subprocess.run(
        ["promtool", "test", "rules", str(CONFIG / "errcompact-alerts.test.yml")], capture_output=True, text=True
    )
    assert test.returncode == 0, test.stdout + test.stderr


def _missing_module(name: str) -> str:
    """The real traceback of importing a module that does not exist."""
    import importlib
    import traceback

    try:
        importlib.import_module(name)
    except ModuleNotFoundError:
        return traceback.format_exc()
    raise AssertionError(f"{name} imported")


@pytest.mark.skipif(shutil.which("promtool") is None, reason="promtool (Debian package prometheus) not installed")
def test_a_workers_first_escalation_and_first_burst_of_classes_fire_their_alerts(tmp_path: Path) -> None:
    """A worker's escalation counter appears at 1 and its new-class counter at its first count, never at 0:
    the rules take that first appearance as an increase, or a worker's first breach, the one that matters,
    would never be alerted on."""
    import itertools

    reader, provider, metrics, pipeline = _metered_pipeline(consecutive=3)
    scrapes = MinuteScrapes(reader, service_name="support-agent")
    scrapes.scrape()
    names = ["".join(letters) for letters in itertools.product("qxz", "qxz", "jkvw", "jkvwy")][:60]
    for n, name in enumerate(names):
        pipeline.handle(Failure(scope=f"c{n}", raw_error=_missing_module(f"plug_{name}"), tool_name="load_plugin"))
    raw = _missing_module("plug_absent")
    for _ in range(3):
        pipeline.handle(Failure(scope="looping", raw_error=raw, tool_name="load_plugin"))
    assert metrics.flush(30)
    for _ in range(9):
        scrapes.scrape()
    provider.shutdown()
    metrics.shutdown()
    series = scrapes.input_series()
    escalations = [s for s in series if s["series"].startswith("errcompact_escalations_total")]
    assert len(escalations) == 1 and escalations[0]["values"].split()[:2] == ["_", "1"]
    promtool_alert_test(tmp_path, CONFIG / "errcompact-alerts.yml", series, [
        {"eval_time": "2m", "alertname": "AgentErrorEscalation", "exp_alerts": [{
            "exp_labels": {"severity": "warning", "service_name": "support-agent",
                           "gen_ai_tool_name": "load_plugin", "errcompact_reason": "consecutive",
                           "errcompact_action": "halt"},
            "exp_annotations": {
                "summary": "Agent support-agent breached its error threshold on tool load_plugin",
                "description": "1 escalation(s) in 5m, reason consecutive, action halt. The trajectory "
                               "records hold the raw errors.",
                "runbook_url": "#agenterrorescalation",
                "dashboard_url": "/d/otel-errcompact?var-service=support-agent",
            },
        }]},
        {"eval_time": "9m", "alertname": "AgentErrorEscalation", "exp_alerts": []},
        {"eval_time": "2m", "alertname": "AgentErrorClassesExploding", "exp_alerts": [{
            "exp_labels": {"severity": "info", "service_name": "support-agent"},
            "exp_annotations": {
                "summary": "support-agent saw more than 50 new error classes in 15m",
                "description": "Many distinct failures: dedup cannot help; check the trajectory store for "
                               "a systemic fault.",
                "runbook_url": "#agenterrorclassesexploding",
                "dashboard_url": "/d/otel-errcompact?var-service=support-agent",
            },
        }]},
    ])  # fmt: skip
def _heading_anchor(heading: str) -> str:
    """The anchor a Markdown renderer (GitHub's) gives a heading: lower case, punctuation dropped, spaces
    to hyphens."""
    return re.sub(r"[^\w\- ]", "", heading.strip().lower()).replace(" ", "-")


@pytest.mark.parametrize("rules", ["errcompact-alerts.yml", "errcompact-fleet-alerts.yml"])
def test_every_alert_links_to_its_own_runbook_section(rules: str) -> None:
    runbook = (CONFIG / "RUNBOOK.md").read_text(encoding="utf-8")
    anchors = {_heading_anchor(line.lstrip("#")) for line in runbook.splitlines() if line.startswith("## ")}
    alerts = [rule for group in yaml.safe_load((CONFIG / rules).read_text())["groups"]
              for rule in group["rules"] if "alert" in rule]
    assert alerts
    for alert in alerts:
        url = alert["annotations"]["runbook_url"]
        assert url.startswith("{{ $externalLabels.errcompact_runbook_url }}#"), url
        anchor = url.partition("#")[2]
        assert anchor == _heading_anchor(alert["alert"]), (alert["alert"], url)
        assert anchor in anchors, f"{alert['alert']}: RUNBOOK.md has no section #{anchor}"


@pytest.mark.skipif(shutil.which("promtool") is None, reason="promtool (Debian package prometheus) not installed")
def test_dashboard_counts_a_single_escalation_and_a_first_new_class(tmp_path: Path) -> None:
    """A counter series appears with its first count (the SDK exports no 0 for attributes it has not seen):
    one escalation, or a tool's first new class, is a series born at 1. The panels count it (promtool runs
    their queries over such series, with the selected range 10m and a rate interval of 2m)."""
    by_title = dict(generate.panel_queries(generate.build()))
    tool = 'gen_ai_tool_name="query_db"'
    escalation = f'{{service_name="ops-agent",{tool},errcompact_reason="consecutive",errcompact_action="halt"}}'
    new_class = f'{{service_name="ops-agent",{tool},error_type="OperationalError"}}'

    def query(title: str) -> str:
        expr = by_title[title].replace("$service", ".*").replace("$__range", "10m")
        return expr.replace("$__rate_interval", "2m")

    cases = [
        ("Escalations", "5m", "{}"),
        ("New error classes", "5m", "{}"),
        ("Escalations by tool and reason", "3m", escalation.replace('service_name="ops-agent",', "")),
        ("New error classes by tool", "3m", f"{{{tool}}}"),
    ]
    suite = {
        "evaluation_interval": "1m",
        "tests": [{
            "interval": "1m",
            "input_series": [  # absent, then born at 1 at 2m
                {"series": f"errcompact_escalations_total{escalation}", "values": "_ _ 1x10"},
                {"series": f"errcompact_classes_new_total{new_class}", "values": "_ _ 1x10"},
            ],
            "promql_expr_test": [
                {"expr": query(title), "eval_time": at, "exp_samples": [{"labels": labels, "value": 1}]}
                for title, at, labels in cases
            ],
        }],
    }
    path = tmp_path / "dashboard.test.yml"
    path.write_text(yaml.safe_dump(suite))
    result = subprocess.run(["promtool", "test", "rules", str(path)], capture_output=True, text=True)
    assert result.returncode == 0, result.stdout + result.stderr
