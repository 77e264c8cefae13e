"""A local, read-only trajectory viewer: Datasette over the SQLite store, configured for failures.

Why Datasette rather than a web app of our own: it already is the tool people browse SQLite with, with
facets, sorting, filters, a JSON API and read-only SQL, and it opens the store read-only. What this module
adds is configuration only (``metadata``): the table's facets and sort order, and three canned queries,

- **conversations**: each conversation with its failures, distinct classes, escalations and a link to its
  failures (the id percent-encoded in it, so that one holding '#', '&', '+' or a space opens its own);
- **failures**: one conversation's failures in order, each with its digest, count, escalation, the end of
  its raw error (where the exception line is), a link to the full record (the raw error, byte for byte) and
  a link to its trace;
- **escalations**: every breach, newest first.

The links into the viewer are paths, rendered as links by a plugin of its own (``viewer_links``), so that they
open wherever the page was opened from.

Trace links come from a URL template with ``{trace_id}`` (``--trace-url`` or ``OTEL_ERRCOMPACT_TRACE_URL``):
Jaeger ``http://localhost:16686/trace/{trace_id}`` (the default), Grafana Tempo
``http://localhost:3000/explore?left={"queries":[{"query":"{trace_id}","queryType":"traceql"}]}``, Phoenix
``http://localhost:6006/projects/<project>/traces/{trace_id}``. It binds 127.0.0.1 unless told otherwise.
"""

from __future__ import annotations

import contextlib
import importlib.util
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
from pathlib import Path
from types import FrameType
from typing import Any

__all__ = ["DATABASE", "DEFAULT_TRACE_URL", "command", "metadata", "serve"]

DEFAULT_TRACE_URL = "http://localhost:16686/trace/{trace_id}"
DATABASE = "trajectories"
"""The name the store is served under (``/trajectories``)."""
_STOP_TIMEOUT_S = 10.0
"""How long Datasette is given to shut down once told to, before it is killed."""


def _sql_string(text: str) -> str:
    return "'" + text.replace("'", "''") + "'"


_QUERY_ESCAPES = (
    ("%", "%25"),  # first: the escapes that follow add a '%' that must stay one
    ("&", "%26"), ("#", "%23"), ("+", "%2B"),
    (" ", "%20"), ("\t", "%09"), ("\n", "%0A"), ("\r", "%0D"), ("\v", "%0B"), ("\f", "%0C"),
)
"""What a value in a query string must have percent-encoded to arrive whole: '&' ends it, '#' starts the
fragment, '+' reads as a space, '%' starts an escape; and Datasette makes no link of a value holding
whitespace (browsers drop tabs and line breaks from a URL besides)."""


def _query_value(column: str) -> str:
    """SQL for the column's value percent-encoded as a query-string value (SQLite has no function for it);
    every other character arrives as it is (a browser encodes the rest of a URL itself)."""
    sql = column
    for character, escape in _QUERY_ESCAPES:
        literal = _sql_string(character) if character.isprintable() else f"char({ord(character)})"
        sql = f"replace({sql}, {literal}, '{escape}')"
    return sql


def _link(template: str, column: str) -> str:
    """SQL for the template with the column's value substituted (NULL when the column is NULL)."""
    substituted = f"replace({_sql_string(template)}, '{{trace_id}}', {column})"
    return f"CASE WHEN {column} IS NULL THEN NULL ELSE {substituted} END"


def metadata(trace_url: str = DEFAULT_TRACE_URL) -> dict[str, Any]:
    """Datasette metadata for the store. The links into the viewer are paths (``/trajectories/...``), which
    the ``viewer_links`` plugin renders: they open wherever the page was opened from, where an address built
    from the bound host and port (``0.0.0.0``, port 0, a proxy's) would not."""
    record_link = f"{_sql_string(f'/{DATABASE}/trajectory/')} || id"  # Datasette's row URL: the key
    failures_link = (  # percent-encoded: a '#', '&' or '+' in the id would open another conversation
        f"{_sql_string(f'/{DATABASE}/failures?conversation=')} || "
        f"{_query_value('coalesce(conversation_id, scope)')}"
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
                        "sort_desc": "id",  # insertion order, i.e. time; the key, so no sort of the table
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


def command(db: Path, *, host: str, port: int, metadata_path: Path, plugins_dir: Path) -> list[str]:
    """The ``datasette serve`` command line for the store (read-only: Datasette opens files with
    ``mode=ro`` for queries and writes nothing without a write plugin; ``plugins_dir`` holds the
    ``viewer_links`` plugin alone)."""
    return [
        sys.executable, "-m", "datasette", "serve", str(db),
        "--host", host, "--port", str(port),
        "--metadata", str(metadata_path),
        "--plugins-dir", str(plugins_dir),
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
        meta.write_text(json.dumps(metadata(template), indent=2), encoding="utf-8")
        plugins = Path(tmp) / "plugins"
        plugins.mkdir()
        shutil.copyfile(Path(__file__).with_name("viewer_links.py"), plugins / "viewer_links.py")
        print(f"otel-errcompact viewer: {_address(host, port)} (read-only; Ctrl+C to stop)", flush=True)
        return _run_until_stopped(command(link, host=host, port=port, metadata_path=meta, plugins_dir=plugins))


_EVERY_INTERFACE = frozenset({"0.0.0.0", "::", ""})


def _address(host: str, port: int) -> str:
    """Where to open the viewer, as far as the viewer knows it: no browser opens ``0.0.0.0`` or port 0 (the
    system picks one, which Datasette prints as it starts)."""
    if port == 0 or host in _EVERY_INTERFACE:
        return f"/{DATABASE} on the address Datasette prints below"
    return f"http://{'[' + host + ']' if ':' in host else host}:{port}/{DATABASE}"


def _run_until_stopped(args: list[str]) -> int:
    """Run Datasette as a child that stops with the viewer; its exit code: 0 when the viewer was told
    to stop (Ctrl+C, SIGTERM, SIGHUP), 128 + the signal's number when something else killed Datasette
    by a signal, as a shell reports it.

    Ctrl+C reaches both processes (the terminal signals the whole process group), but a process manager,
    ``kill`` or a closed terminal signals the viewer alone: with the default handlers the viewer would
    die at once and leave Datasette serving the store on its port, orphaned, and its temporary folder
    behind. So SIGTERM and SIGHUP are passed on to Datasette, which shuts down on them, and the viewer
    waits for it; whatever ends the wait otherwise stops the child too. The handlers are installed only
    on the main thread (elsewhere Python refuses them) and restored afterwards."""
    told: list[int] = []
    child: subprocess.Popen[bytes] | None = None  # until it is started

    def forward(signum: int, _frame: FrameType | None) -> None:
        told.append(signum)
        if child is not None:
            with contextlib.suppress(ProcessLookupError):
                child.send_signal(signum)

    # Installed before the child starts: a signal that arrives while it starts is passed on to it as
    # soon as it exists, instead of killing the viewer with the child half started and left behind.
    previous: dict[int, Any] = {}
    if threading.current_thread() is threading.main_thread():
        for name in ("SIGTERM", "SIGHUP"):  # no SIGHUP on Windows
            number = getattr(signal, name, None)
            if number is not None:
                previous[number] = signal.signal(number, forward)
    try:
        if told:  # told to stop before anything started
            return 0
        child = subprocess.Popen(args)
        if told:  # told to stop while it started, before it could be told itself (twice at worst: harmless)
            with contextlib.suppress(ProcessLookupError):
                child.send_signal(told[0])
        code = child.wait()
        return 0 if told else code if code >= 0 else 128 - code
    except KeyboardInterrupt:  # Datasette had it too: it is given time to stop, then stopped below
        if child is not None:
            with contextlib.suppress(subprocess.TimeoutExpired):
                child.wait(timeout=_STOP_TIMEOUT_S)
        return 0
    finally:
        for number, handler in previous.items():
            signal.signal(number, handler)
        if child is not None and child.poll() is None:
            child.terminate()
            try:
                child.wait(timeout=_STOP_TIMEOUT_S)
            except subprocess.TimeoutExpired:
                child.kill()
                child.wait()
