"""The dashboard's panels and the alert rules, proven against a real Prometheus scraping a real run.

A child process runs an agent whose tools really fail, with ``OTEL_METRICS_EXPORTER=prometheus`` (the
path where ``service.name`` used to live only on ``target_info``). A real Prometheus (Debian's package)
scrapes it every second on 127.0.0.1 with the shipped alert rules and external labels. Every panel query
of the generated dashboard must return data, with values that match what the agent did, and every alert
rule must evaluate cleanly, the escalation alert firing with its links expanded.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import socket
import subprocess
import sys
import time
import urllib.parse
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "dashboards"))
import generate  # noqa: E402  (dashboards/generate.py: the dashboard as code)

pytestmark = pytest.mark.skipif(shutil.which("prometheus") is None, reason="prometheus (Debian package) not installed")

SERVICE = "ops-agent"


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _get(base: str, path: str, **params: str) -> Any:
    url = f"{base}{path}?{urllib.parse.urlencode(params)}" if params else f"{base}{path}"
    with urllib.request.urlopen(url, timeout=10) as response:
        body = json.load(response)
    assert body["status"] == "success", body
    return body["data"]


def _wait(what: str, check: Any, timeout: float = 90) -> Any:
    deadline = time.monotonic() + timeout
    while True:
        try:
            value = check()
            if value:
                return value
        except OSError:
            pass
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.5)


def _agent(tmp: Path, port: int, *args: str) -> subprocess.Popen[str]:
    env = {
        **os.environ,
        "OTEL_METRICS_EXPORTER": "prometheus",
        "OTEL_EXPORTER_PROMETHEUS_HOST": "127.0.0.1",
        "OTEL_EXPORTER_PROMETHEUS_PORT": str(port),
        "OTEL_ERRCOMPACT_SQLITE_PATH": str(tmp / "trajectories.sqlite3"),
        "PYTHONPATH": str(ROOT),
    }
    for name in ("OTEL_EXPORTER_OTLP_ENDPOINT", "OTEL_EXPORTER_OTLP_METRICS_ENDPOINT"):
        env.pop(name, None)
    child = subprocess.Popen(
        [sys.executable, str(Path(__file__).with_name("workload.py")), *args],
        stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, env=env,
    )
    assert child.stdout is not None
    assert child.stdout.readline().strip() == "ready"
    return child


@pytest.fixture(scope="module")
def scraped(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[str, subprocess.Popen[str]]]:
    """A real Prometheus scraping a real agent on 127.0.0.1, with the shipped rules and external labels: the
    Prometheus's address and the agent (whose standard input asks for calls, see ``workload.py``)."""
    tmp = tmp_path_factory.mktemp("prometheus")
    agent_port, web_port = _free_port(), _free_port()
    agent = _agent(tmp, agent_port)
    shipped = yaml.safe_load((ROOT / "collector-config" / "prometheus.yml").read_text())
    config = {
        "global": {
            "scrape_interval": "1s",
            "evaluation_interval": "1s",
            "external_labels": shipped["global"]["external_labels"],
        },
        "rule_files": [str(ROOT / "collector-config" / "errcompact-alerts.yml")],
        "scrape_configs": [{"job_name": "agent", "static_configs": [{"targets": [f"127.0.0.1:{agent_port}"]}]}],
    }
    (tmp / "prometheus.yml").write_text(yaml.safe_dump(config))
    server = subprocess.Popen(
        [
            "prometheus",
            f"--config.file={tmp / 'prometheus.yml'}",
            f"--storage.tsdb.path={tmp / 'data'}",
            f"--web.listen-address=127.0.0.1:{web_port}",
        ],
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
    )
    base = f"http://127.0.0.1:{web_port}"
    try:
        # Enough scrapes for rate() over a window, with the counters growing all along.
        enough = "count_over_time(errcompact_tool_calls_total[1m]) > 5"
        _wait("tool-call samples", lambda: _get(base, "/api/v1/query", query=enough)["result"])
        yield base, agent
    finally:
        server.terminate()
        agent.communicate(input="", timeout=60)
        server.wait(timeout=30)


@pytest.fixture(scope="module")
def prometheus(scraped: tuple[str, subprocess.Popen[str]]) -> str:
    """The Prometheus's address."""
    return scraped[0]


def _instantiate(expr: str) -> str:
    """The query as Grafana sends it, for the selected service and a 1-minute rate interval."""
    return expr.replace("$service", SERVICE).replace("$__rate_interval", "1m").replace("$__range", "2m")


def test_every_panel_query_returns_data_for_the_service(prometheus: str) -> None:
    board = generate.build()
    queries = generate.panel_queries(board)
    assert len(queries) >= 10
    for title, expr in queries:
        assert "$service" in expr, title
        result = _get(prometheus, "/api/v1/query", query=_instantiate(expr))["result"]
        assert result, f"panel {title!r} has no data: {_instantiate(expr)}"


def test_panel_values_match_what_the_agent_did(prometheus: str) -> None:
    def value(expr: str) -> float:
        result = _get(prometheus, "/api/v1/query", query=_instantiate(expr))["result"]
        return float(result[0]["value"][1])

    by_title = {title: expr for title, expr in generate.panel_queries(generate.build())}
    # Per conversation: lookup ok, load_user fails, query_db fails 3 times, then the halt (no call).
    assert value(by_title["Tool error ratio"]) == pytest.approx(0.8, abs=0.05)
    ratios = {
        r["metric"]["gen_ai_tool_name"]: float(r["value"][1])
        for r in _get(prometheus, "/api/v1/query", query=_instantiate(by_title["Tool error ratio by tool"]))["result"]
    }
    assert ratios == {"lookup": 0.0, "load_user": 1.0, "query_db": 1.0}
    assert value(by_title["Escalations"]) > 0
    assert 0.0 < value(by_title["Error tokens saved"]) < 1.0


def test_the_service_variable_lists_the_service(prometheus: str) -> None:
    # Grafana's label_values(metric, label) is the label-values API with a match[] selector.
    query = next(v["query"] for v in generate.build()["templating"]["list"] if v["name"] == "service")
    metric, label = re.fullmatch(r"label_values\((\w+), (\w+)\)", query).groups()  # type: ignore[union-attr]
    values = _get(prometheus, f"/api/v1/label/{label}/values", **{"match[]": metric})
    assert values == [SERVICE]


def test_alert_rules_evaluate_and_the_escalation_alert_fires_with_its_links(prometheus: str) -> None:
    groups = _get(prometheus, "/api/v1/rules")["groups"]
    rules = {rule["name"]: rule for group in groups for rule in group["rules"]}
    assert set(rules) == {"AgentErrorEscalation", "AgentToolErrorRatioHigh", "AgentErrorClassesExploding"}
    assert all(rule["health"] == "ok" for rule in rules.values()), rules

    def firing() -> list[dict[str, Any]]:
        alerts = _get(prometheus, "/api/v1/alerts")["alerts"]
        return [a for a in alerts if a["labels"]["alertname"] == "AgentErrorEscalation" and a["state"] == "firing"]

    alert = _wait("AgentErrorEscalation firing", firing)[0]
    assert alert["labels"]["service_name"] == SERVICE
    assert alert["labels"]["gen_ai_tool_name"] == "query_db"
    assert alert["annotations"]["summary"] == f"Agent {SERVICE} breached its error threshold on tool query_db"
    assert alert["annotations"]["runbook_url"] == "https://wiki.example.com/otel-errcompact/RUNBOOK.md#agenterrorescalation"
    assert alert["annotations"]["dashboard_url"] == f"http://grafana:3000/d/otel-errcompact?var-service={SERVICE}"
    # The ratio rule's expression already holds for query_db (it waits out its `for: 10m` as pending).
    ratio = _get(prometheus, "/api/v1/query", query=rules["AgentToolErrorRatioHigh"]["query"])["result"]
    assert {r["metric"]["gen_ai_tool_name"] for r in ratio} == {"load_user", "query_db"}


def test_the_panels_count_a_new_series_first_failure(scraped: tuple[str, subprocess.Popen[str]]) -> None:
    """A tool's first call, failing with an error type not seen before, makes new series that appear with
    their first count (1): the time-series panels show that failure and call, and the tool's error ratio
    (a rate over the interval read them as no increase at all, and the ratio as no calls)."""
    base, agent = scraped
    assert agent.stdin is not None
    agent.stdin.write("parse_date\n")
    agent.stdin.flush()
    failures = f'errcompact_errors_total{{service_name="{SERVICE}",gen_ai_tool_name="parse_date"}}'
    _wait("the new series scraped twice",
          lambda: _get(base, "/api/v1/query", query=f"count_over_time({failures}[1m]) >= 2")["result"])

    def by_labels(title: str, *labels: str) -> dict[tuple[str, ...], float]:
        expr = dict(generate.panel_queries(generate.build()))[title]
        result = _get(base, "/api/v1/query", query=_instantiate(expr))["result"]
        return {tuple(r["metric"].get(label, "") for label in labels): float(r["value"][1]) for r in result}

    failed = by_labels("Tool failures by tool and error type", "gen_ai_tool_name", "error_type")
    assert {error_type: n for (tool, error_type), n in failed.items() if tool == "parse_date"} == {"ValueError": 1}
    calls = by_labels("Tool calls by tool and outcome", "gen_ai_tool_name", "errcompact_outcome")
    assert {outcome: n for (tool, outcome), n in calls.items() if tool == "parse_date"} == {"error": 1}
    assert by_labels("Tool error ratio by tool", "gen_ai_tool_name").get(("parse_date",)) == 1.0
