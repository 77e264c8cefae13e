"""Generate ``otel-errcompact.json``, the Grafana dashboard for otel-errcompact, from typed code.

    python dashboards/generate.py            # rewrite dashboards/otel-errcompact.json
    python dashboards/generate.py --check    # exit 1 when the committed JSON differs from the code

Built with ``grafana-foundation-sdk`` (pinned to its Grafana 11.6 build), so every field is type-checked by
mypy instead of hand-edited JSON. Every query is run against a real Prometheus scraping a real run in the
test suite (``tests/ops/test_prometheus.py``). All panels use Prometheus: trajectory records and escalation
events are browsed in the trajectory viewer (``otel-errcompact viewer``), linked from the dashboard.

Queries filter on ``service_name``, a label on every series in both supported paths: the collector's
Prometheus exporter (``resource_to_telemetry_conversion``) and a direct scrape of
``OTEL_METRICS_EXPORTER=prometheus`` (which promotes ``service.name``).
"""

from __future__ import annotations

import argparse
import html
import json
import sys
from pathlib import Path
from typing import Any

from grafana_foundation_sdk.builders import dashboard as dash
from grafana_foundation_sdk.builders import prometheus, stat, timeseries
from grafana_foundation_sdk.cog.encoder import JSONEncoder
from grafana_foundation_sdk.models import dashboard as model

OUTPUT = Path(__file__).resolve().parent / "otel-errcompact.json"
UID = "otel-errcompact"
SERVICE = 'service_name=~"$service"'
PROMETHEUS = model.DataSourceRef(type_val="prometheus", uid="${prometheus}")
VIEWER_URL = "http://127.0.0.1:8001"
"""Default of the ``viewer_url`` dashboard constant: where ``otel-errcompact viewer`` listens."""


def _query(expr: str, legend: str = "", ref: str = "A") -> prometheus.Dataquery:
    q = prometheus.Dataquery().expr(expr).ref_id(ref).datasource(PROMETHEUS)
    return q.legend_format(legend) if legend else q


def _stat(title: str, description: str, expr: str, unit: str = "short") -> stat.Panel:
    return (
        stat.Panel()
        .title(title)
        .description(description)
        .datasource(PROMETHEUS)
        .with_target(_query(expr).instant())
        .unit(unit)
        .height(4)
        .span(4)
    )


def _series(title: str, description: str, *targets: tuple[str, str], unit: str = "short") -> timeseries.Panel:
    panel = timeseries.Panel().title(title).description(description).datasource(PROMETHEUS).unit(unit)
    for index, (expr, legend) in enumerate(targets):
        panel = panel.with_target(_query(expr, legend, chr(ord("A") + index)))
    return panel.height(8).span(12)


def _ratio(part: str, whole: str) -> str:
    """``part / whole``, 0 (not missing) where ``whole`` has series and ``part`` none: a tool that never
    failed has no error series at all, and PromQL drops unmatched series from a division."""
    return f"(({part}) or ({whole}) * 0) / (({whole}) > 0)"


def _increase(selector: str, window: str) -> str:
    """The increase of the counters ``selector`` over ``window``, counting the series that appeared in it.

    A series appears with its first count (the SDK exports no 0 for attributes it has not seen), and
    ``increase()`` has no earlier sample to count that step from: a single escalation, or a tool's first
    new class, would read as 0. A series absent ``window`` ago is new, so all of its value is in the window
    (the alert rules count the same way). Every counter panel counts so, in counts per interval rather than
    per-second rates: a tool's first call, a new error type's first failure would otherwise not show."""
    return f"({selector} unless {selector} offset {window}) or increase({selector}[{window}])"


def build() -> dict[str, Any]:
    """The dashboard as Grafana's JSON model."""
    calls = f"errcompact_tool_calls_total{{{SERVICE}}}"
    failed = f'errcompact_tool_calls_total{{{SERVICE},errcompact_outcome="error"}}'
    escalations = f"errcompact_escalations_total{{{SERVICE}}}"
    new_classes = f"errcompact_classes_new_total{{{SERVICE}}}"
    errors = f"errcompact_errors_total{{{SERVICE}}}"
    tokens_raw = f"errcompact_tokens_raw_total{{{SERVICE}}}"
    tokens_compact = f"errcompact_tokens_compact_total{{{SERVICE}}}"
    builder = (
        dash.Dashboard("otel-errcompact: agent tool errors")
        .uid(UID)
        .tags(["otel-errcompact", "agents", "opentelemetry"])
        .time("now-6h", "now")
        .refresh("30s")
        .editable()
        .with_variable(dash.DatasourceVariable("prometheus").label("Prometheus").type("prometheus"))
        .with_variable(
            dash.QueryVariable("service")
            .label("Service")
            .datasource(PROMETHEUS)
            .query("label_values(errcompact_tool_calls_total, service_name)")
            .include_all(True)
            .all_value(".*")
            .multi(True)
        )
        .with_variable(
            dash.ConstantVariable("viewer_url").value(VIEWER_URL).description("Where the trajectory viewer listens")
        )
        .link(
            dash.DashboardLink("Trajectory viewer (raw errors, digests, trace links)")
            .type(model.DashboardLinkType.LINK)
            .url("${viewer_url}")
            .target_blank(True)
        )
        .with_row(dash.Row("Overview"))
        .with_panel(
            _stat(
                "Escalations",
                "Error-threshold breaches (halts or human reviews) in the selected range.",
                f"sum({_increase(escalations, '$__range')})",
            )
        )
        .with_panel(
            _stat(
                "Tool error ratio",
                "Failed tool calls / all tool calls in the selected range.",
                _ratio(f"sum({_increase(failed, '$__range')})", f"sum({_increase(calls, '$__range')})"),
                unit="percentunit",
            )
        )
        .with_panel(
            _stat(
                "Tool calls",
                "Tool calls seen (every tool span once), successful and failed.",
                f"sum({_increase(calls, '$__range')})",
            )
        )
        .with_panel(
            _stat(
                "New error classes",
                "Distinct failures first seen by a worker in the range (a class seen again in another "
                "conversation is not new).",
                f"sum({_increase(new_classes, '$__range')})",
            )
        )
        .with_panel(
            _stat(
                "Error tokens saved",
                "1 - digest tokens / tokens the agent would have received (the framework's own error text "
                "where known, else the raw error: see errcompact_basis).",
                "1 - "
                + _ratio(
                    f"sum({_increase(tokens_compact, '$__range')})",
                    f"sum({_increase(tokens_raw, '$__range')})",
                ),
                unit="percentunit",
            )
        )
        .with_row(dash.Row("Tools"))
        .with_panel(
            _series(
                "Tool error ratio by tool",
                "Share of each tool's calls that failed.",
                (
                    _ratio(
                        f"sum by (gen_ai_tool_name) ({_increase(failed, '$__rate_interval')})",
                        f"sum by (gen_ai_tool_name) ({_increase(calls, '$__rate_interval')})",
                    ),
                    "{{gen_ai_tool_name}}",
                ),
                unit="percentunit",
            )
        )
        .with_panel(
            _series(
                "Tool calls by tool and outcome",
                "Calls per interval.",
                (
                    f"sum by (gen_ai_tool_name, errcompact_outcome) ({_increase(calls, '$__rate_interval')})",
                    "{{gen_ai_tool_name}} {{errcompact_outcome}}",
                ),
            )
        )
        .with_panel(
            _series(
                "Tool failures by tool and error type",
                "Failures per interval.",
                (
                    f"sum by (gen_ai_tool_name, error_type) ({_increase(errors, '$__rate_interval')})",
                    "{{gen_ai_tool_name}} {{error_type}}",
                ),
            )
        )
        .with_panel(
            _series(
                "Escalations by tool and reason",
                "Breaches per interval, by tool, reason (consecutive/budget) and action (halt/human).",
                (
                    "sum by (gen_ai_tool_name, errcompact_reason, errcompact_action) "
                    f"({_increase(escalations, '$__rate_interval')})",
                    "{{gen_ai_tool_name}} {{errcompact_reason}} {{errcompact_action}}",
                ),
            )
        )
        .with_row(dash.Row("Classes and tokens"))
        .with_panel(
            _series(
                "New error classes by tool",
                "First sightings of a dedup key per worker; a spike means many distinct failures.",
                (
                    f"sum by (gen_ai_tool_name) ({_increase(new_classes, '$__rate_interval')})",
                    "{{gen_ai_tool_name}}",
                ),
            )
        )
        .with_panel(
            _series(
                "Error tokens: what the agent would have received vs digests",
                "Tokens per interval, by basis (model_text: the framework's own error text; raw_error: the full "
                "raw error, an upper bound).",
                (
                    f"sum by (errcompact_basis) ({_increase(tokens_raw, '$__rate_interval')})",
                    "without otel-errcompact ({{errcompact_basis}})",
                ),
                (
                    f"sum by (errcompact_basis) ({_increase(tokens_compact, '$__rate_interval')})",
                    "digests ({{errcompact_basis}})",
                ),
            )
        )
    )
    encoded: dict[str, Any] = json.loads(json.dumps(builder.build(), cls=JSONEncoder, sort_keys=True))
    return encoded


def panel_queries(board: dict[str, Any]) -> list[tuple[str, str]]:
    """``(panel title, expr)`` for every query of every panel, rows included."""
    found: list[tuple[str, str]] = []
    for panel in board.get("panels", []):
        for inner in [panel, *panel.get("panels", [])]:
            for target in inner.get("targets", []):
                if target.get("expr"):
                    found.append((str(inner.get("title", "")), str(target["expr"])))
    return found


def panel_list_html(board: dict[str, Any]) -> str:
    """The panel list as a small HTML page (title, type, query): what the README's picture shows."""
    rows = "".join(
        f"<tr><td>{html.escape(str(p.get('type')))}</td><td>{html.escape(str(p.get('title')))}</td>"
        f"<td><code>{'<br>'.join(html.escape(t['expr']) for t in p.get('targets', []))}</code></td></tr>"
        for p in board.get("panels", [])
    )
    return (
        f"<html><head><meta charset='utf-8'><title>{html.escape(board['title'])}</title><style>"
        "body{font-family:sans-serif;font-size:13px;margin:16px}td,th{border-bottom:1px solid #ddd;"
        "padding:4px 8px;vertical-align:top;text-align:left}code{font-size:11px}</style></head><body>"
        f"<h3>{html.escape(board['title'])} — panels (dashboards/otel-errcompact.json)</h3>"
        f"<table><tr><th>type</th><th>title</th><th>PromQL</th></tr>{rows}</table></body></html>"
    )


def render() -> str:
    return json.dumps(build(), indent=2, sort_keys=True) + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true", help="fail when the committed JSON is out of date")
    parser.add_argument("--panel-list", type=Path, help="also write the panel list as HTML to this file")
    args = parser.parse_args(argv)
    if args.panel_list:
        args.panel_list.write_text(panel_list_html(build()), encoding="utf-8")
    text = render()
    if args.check:
        if OUTPUT.read_text(encoding="utf-8") != text:
            print(f"{OUTPUT} is out of date: run python dashboards/generate.py", file=sys.stderr)
            return 1
        return 0
    OUTPUT.write_text(text, encoding="utf-8")
    print(f"wrote {OUTPUT} ({len(panel_queries(build()))} queries)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
