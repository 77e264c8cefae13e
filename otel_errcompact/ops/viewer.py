"""A local, read-only trajectory viewer: Datasette over the SQLite store, configured for failures.

Why Datasette rather than a web app of our own: it already is the tool people browse SQLite with, with
facets, sorting, filters, a JSON API and read-only SQL, and it opens the store read-only. What this module
adds is configuration only (``metadata``): the table's facets and sort order, and three canned queries,

- **conversations**: each conversation with its failures, distinct classes, escalations and a link to its
  failures;
- **failures**: one conversation's failures in order, each with its digest, count, escalation, the end of
  its raw error (where the exception line is), a link to the full record (the raw error, byte for byte) and
  a link to its trace;
- **escalations**: every breach, newest first.

Trace links come from a URL template with ``{trace_id}`` (``--trace-url`` or ``OTEL_ERRCOMPACT_TRACE_URL``):
Jaeger ``http://localhost:16686/trace/{trace_id}`` (the default), Grafana Tempo
``http://localhost:3000/explore?left={"queries":[{"query":"{trace_id}","queryType":"traceql"}]}``, Phoenix
``http://localhost:6006/projects/<project>/traces/{trace_id}``. It binds 127.0.0.1 unless told otherwise.
"""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

__all__ = ["DATABASE", "DEFAULT_TRACE_URL", "command", "metadata", "serve"]

DEFAULT_TRACE_URL = "http://localhost:16686/trace/{trace_id}"
DATABASE = "trajectories"
"""The name the store is served under (``/trajectories``)."""


def _sql_string(text: str) -> str:
    return "'" + text.replace("'", "''") + "'"


def _link(template: str, column: str) -> str:
    """SQL for the template with the column's value substituted (NULL when the column is NULL)."""
    substituted = f"replace({_sql_string(template)}, '{{trace_id}}', {column})"
    return f"CASE WHEN {column} IS NULL THEN NULL ELSE {substituted} END"


def metadata(base_url: str, trace_url: str = DEFAULT_TRACE_URL) -> dict[str, Any]:
    """Datasette metadata for a store served at ``base_url`` (e.g. ``http://127.0.0.1:8001``)."""
    base = base_url.rstrip("/")
    record_link = f"{_sql_string(f'{base}/{DATABASE}/trajectory/')} || record_id"
    failures_link = (
        f"{_sql_string(f'{base}/{DATABASE}/failures?conversation=')} || coalesce(conversation_id, scope)"
    )
    trace = _link(trace_url, "trace_id")
    return {
        "title": "otel-errcompact trajectories",
        "description": "Every tool failure the agent saw: its digest, count and escalation, the full raw "
        "error, and a link to its trace. Read-only.",
        "databases": {
            DATABASE: {
                "tables": {
                    "trajectory": {
                        "sort_desc": "recorded_at",
                        "facets": ["tool_name", "error_type", "escalated", "scope"],
                        "label_column": "digest_line",
                        "description": "One row per failure; the record column holds the whole record, "
                        "raw error included.",
                    },
                    "errcompact_schema": {"hidden": True},
                },
                "queries": {
                    "conversations": {
                        "title": "Conversations",
                        "hide_sql": True,
                        "description": "Each conversation (or agent run) with its failures; open one to "
                        "see them in order.",
                        "sql": f"""
select coalesce(conversation_id, scope) as conversation,
       count(*) as failures,
       count(distinct key) as classes,
       sum(escalated) as escalations,
       min(recorded_at) as first_failure,
       max(recorded_at) as last_failure,
       {failures_link} as failures_link
from trajectory
group by coalesce(conversation_id, scope)
order by last_failure desc
limit 500""",
                    },
                    "failures": {
                        "title": "Failures of one conversation",
                        "hide_sql": True,
                        "description": "In order, with the digest the agent saw, its (×N) count, the "
                        "escalation if any, the trace and the full record.",
                        "sql": f"""
select recorded_at, tool_name, digest_line as digest, count,
       case escalated when 1 then json_extract(record, '$.escalation.reason') else '' end as escalated,
       substr(json_extract(record, '$.raw_error'), -280) as raw_error_end,
       {trace} as trace_link,
       {record_link} as record_link
from trajectory
where coalesce(conversation_id, scope) = :conversation
order by recorded_at
limit 1000""",
                    },
                    "escalations": {
                        "title": "Escalations",
                        "hide_sql": True,
                        "description": "Every threshold breach, newest first.",
                        "sql": f"""
select recorded_at, coalesce(conversation_id, scope) as conversation, tool_name, digest_line as digest,
       count, json_extract(record, '$.escalation.reason') as reason,
       json_extract(record, '$.escalation.action') as action,
       {trace} as trace_link, {record_link} as record_link
from trajectory
where escalated = 1
order by recorded_at desc
limit 500""",
                    },
                },
            }
        },
    }


def command(db: Path, *, host: str, port: int, metadata_path: Path) -> list[str]:
    """The ``datasette serve`` command line for the store (read-only: Datasette opens files with
    ``mode=ro`` for queries and writes nothing without a write plugin)."""
    return [
        sys.executable, "-m", "datasette", "serve", str(db),
        "--host", host, "--port", str(port),
        "--metadata", str(metadata_path),
        "--setting", "truncate_cells_html", "300",
        "--setting", "default_page_size", "50",
    ]


def serve(
    db: str | os.PathLike[str], *, host: str = "127.0.0.1", port: int = 8001, trace_url: str | None = None
) -> int:
    """Run the viewer until interrupted; returns Datasette's exit code."""
    path = Path(db)
    if not path.is_file():
        raise OSError(f"no trajectory store at {path}")
    if importlib.util.find_spec("datasette") is None:
        raise OSError("the viewer needs Datasette: pip install 'otel-errcompact[ops]'")
    template = trace_url or os.environ.get("OTEL_ERRCOMPACT_TRACE_URL") or DEFAULT_TRACE_URL
    if "{trace_id}" not in template:
        raise OSError(f"the trace URL template needs {{trace_id}}: {template!r}")
    with tempfile.TemporaryDirectory(prefix="errcompact-viewer-") as tmp:
        # Datasette names a database after its file's stem: serve a link named trajectories.db.
        link = Path(tmp) / f"{DATABASE}.db"
        link.symlink_to(path.resolve())
        meta = Path(tmp) / "metadata.json"
        meta.write_text(json.dumps(metadata(f"http://{host}:{port}", template), indent=2), encoding="utf-8")
        print(f"otel-errcompact viewer: http://{host}:{port}/{DATABASE} (read-only; Ctrl+C to stop)", flush=True)
        try:
            return subprocess.call(command(link, host=host, port=port, metadata_path=meta))
        except KeyboardInterrupt:
            return 0
