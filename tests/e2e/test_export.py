"""End to end over the wire: what init() sends to a real OTLP receiver (Arize Phoenix on 127.0.0.1).

Two paths a user takes: the demo as a separate process configured only by the standard OTEL_* variables,
and an application that owns its TracerProvider (OTLP/HTTP exporter) and adds ``init()`` to it. In both,
failed tool spans must arrive with the digest attributes and the escalation event on the agent span,
while the full raw errors stay in the local trajectory store.
"""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
import uuid
from pathlib import Path

import pytest
from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor
from opentelemetry.trace import Status, StatusCode

import otel_errcompact
from otel_errcompact.sinks import TrajectoryStore
from tests.atexit_threads import REFUSE_THREADS_AT_EXIT
from tests.e2e.conftest import PhoenixServer
from tests.realerrors import write

pytestmark = pytest.mark.e2e


def _by_name(spans: list[dict], prefix: str) -> list[dict]:
    return [s for s in spans if s["name"].startswith(prefix)]


def test_demo_exports_tool_spans_digests_and_escalation(phoenix: PhoenixServer, tmp_path: Path) -> None:
    project = f"demo-{uuid.uuid4().hex[:8]}"
    db = tmp_path / "demo.sqlite3"
    env = {
        k: v for k, v in os.environ.items() if not (k.startswith("OTEL_") or k.startswith("PHOENIX_"))
    }
    env.update(
        OTEL_EXPORTER_OTLP_TRACES_ENDPOINT=f"{phoenix.otlp_http_endpoint}/v1/traces",
        OTEL_RESOURCE_ATTRIBUTES=f"openinference.project.name={project}",
        OTEL_SERVICE_NAME="errcompact-demo-e2e",
        OTEL_ERRCOMPACT_SQLITE_PATH=str(db),
    )
    run = subprocess.run(
        [sys.executable, "-m", "otel_errcompact.cli", "demo"], env=env, capture_output=True, text=True,
        timeout=300,
    )
    assert run.returncode == 0, run.stdout + run.stderr
    assert "[RECENT ERRORS]" in run.stdout and "Escalation: consecutive" in run.stdout

    spans = phoenix.spans(project, min_count=12, timeout_s=60)
    tools = [s for s in _by_name(spans, "execute_tool ") if s["name"] != "execute_tool read_notes"]  # not recovery's
    failed = [s for s in tools if s["status_code"] == "ERROR"]
    assert len(failed) == 10, [(s["name"], s["status_code"]) for s in tools]
    assert any(s["status_code"] != "ERROR" for s in tools)  # read_config(settings.example.yaml) succeeded
    for span in failed:
        attrs = span["attributes"]
        assert attrs["errcompact.digest"].startswith("[")
        assert len(attrs["errcompact.key"]) == 16
        assert attrs["gen_ai.operation.name"] == "execute_tool"
    query = [s for s in failed if s["attributes"]["gen_ai.tool.name"] == "query_db"]
    assert [s["attributes"]["errcompact.count"] for s in sorted(query, key=lambda s: s["start_time"])] == [1, 2, 3, 4]
    assert all("no such table: orders" in s["attributes"]["errcompact.digest"] for s in query)
    rate_limited = [s for s in failed if s["attributes"].get("error.type") == "tool_error"]
    assert rate_limited and all("[HTTP 429]" in s["attributes"]["errcompact.digest"] for s in rate_limited)

    (agent,) = _by_name(spans, "invoke_agent demo-agent")
    escalations = [e for e in agent["events"] if e["name"] == "errcompact.escalation"]
    assert len(escalations) == 1
    event = escalations[0]["attributes"]
    assert event["errcompact.reason"] == "consecutive"
    assert event["errcompact.action"] == "halt"
    assert "no such table: orders" in event["errcompact.digest"]

    # The full raw errors stayed local, correlated with the exported spans by trace and span id.
    with TrajectoryStore(db) as store:
        exported = {(s["context"]["trace_id"], s["context"]["span_id"]) for s in failed}
        rows = [r for r in store.list(limit=50) if r.tool_name != "read_notes"]  # not the recovery part's
        assert len(rows) == 10
        assert {(r.trace_id, r.span_id) for r in rows} == exported
        record = store.get(rows[0].record_id)
        assert record is not None and record.raw_error.strip()


def test_app_owned_provider_exports_annotated_tool_spans(phoenix: PhoenixServer, tmp_path: Path) -> None:
    project = f"app-{uuid.uuid4().hex[:8]}"
    provider = TracerProvider(resource=Resource.create({"openinference.project.name": project}))
    provider.add_span_processor(
        BatchSpanProcessor(OTLPSpanExporter(endpoint=f"{phoenix.otlp_http_endpoint}/v1/traces"))
    )
    ec = otel_errcompact.init(tracer_provider=provider, sqlite_path=tmp_path / "app.sqlite3")
    try:
        # A real failure from real code: the tool imports a module that does not exist.
        write(tmp_path, "inventory_tool.py", "def lookup(sku):\n    import inventory_backend_v2\n")
        sys.path.insert(0, str(tmp_path))
        import inventory_tool  # type: ignore[import-not-found]

        tracer = provider.get_tracer("app")
        with tracer.start_as_current_span(
            "invoke_agent shop", attributes={"gen_ai.operation.name": "invoke_agent",
                                             "gen_ai.conversation.id": "conv-e2e"}
        ):
            for _ in range(3):
                with tracer.start_as_current_span(
                    "execute_tool lookup",
                    attributes={"gen_ai.operation.name": "execute_tool", "gen_ai.tool.name": "lookup"},
                    record_exception=False, set_status_on_exception=False,
                ) as span:
                    try:
                        inventory_tool.lookup("sku-1")
                    except ImportError as exc:
                        span.record_exception(exc)
                        span.set_status(Status(StatusCode.ERROR, str(exc)))
                        span.set_attribute("error.type", type(exc).__name__)
        assert "inventory_backend_v2" in ec.context("conv-e2e")
        provider.force_flush()
    finally:
        ec.shutdown()
        provider.shutdown()
        sys.path.remove(str(tmp_path))

    spans = phoenix.spans(project, min_count=4, timeout_s=60)
    tools = _by_name(spans, "execute_tool ")
    assert len(tools) == 3
    counts = sorted(s["attributes"]["errcompact.count"] for s in tools)
    assert counts == [1, 2, 3]
    digest = tools[0]["attributes"]["errcompact.digest"]
    assert digest.startswith("[ModuleNotFoundError] at inventory_tool.py:2 in lookup")
    assert "inventory_backend_v2" in digest
    (agent,) = _by_name(spans, "invoke_agent ")
    assert [e["name"] for e in agent["events"]].count("errcompact.escalation") == 1


SCRIPT = textwrap.dedent(
    """
    import sys
    import otel_errcompact

    ec = otel_errcompact.init(service_name="short-script")
    if sys.argv[1] == "refused":
        refuse_threads_at_exit()

    @ec.tool
    def lookup(key):
        return {"sku-1": 3}[key]

    with ec.conversation("conv-exit"):
        for sku in ("sku-7", "sku-8"):
            print(lookup(sku))
    # no flush, no shutdown: the process ends, as a short agent script does
    """
)


@pytest.mark.parametrize("threads_at_exit", ["allowed", "refused"])
def test_a_script_that_just_exits_exports_its_spans(
    phoenix: PhoenixServer, tmp_path: Path, threads_at_exit: str
) -> None:
    """The shutdown at exit exports what the providers ``init()`` made still hold, also where no thread can
    be started at exit any more (Python 3.12+; see ``tests/atexit_threads.py``)."""
    project = f"exit-{uuid.uuid4().hex[:8]}"
    env = {k: v for k, v in os.environ.items() if not (k.startswith("OTEL_") or k.startswith("PHOENIX_"))}
    env.update(
        OTEL_EXPORTER_OTLP_TRACES_ENDPOINT=f"{phoenix.otlp_http_endpoint}/v1/traces",
        OTEL_RESOURCE_ATTRIBUTES=f"openinference.project.name={project}",
        OTEL_ERRCOMPACT_SQLITE_PATH=str(tmp_path / "exit.sqlite3"),
    )
    run = subprocess.run(
        [sys.executable, "-c", REFUSE_THREADS_AT_EXIT + SCRIPT, threads_at_exit],
        env=env, capture_output=True, text=True, timeout=120,
    )
    assert run.returncode == 0, run.stderr
    assert "Traceback" not in run.stderr and "Exception ignored" not in run.stderr, run.stderr
    assert run.stdout.count("[KeyError]") == 2, run.stdout

    tools = _by_name(phoenix.spans(project, min_count=2, timeout_s=60), "execute_tool ")
    assert len(tools) == 2
    assert sorted(s["attributes"]["errcompact.count"] for s in tools) == [1, 2]
    assert all("'sku-" in s["attributes"]["errcompact.digest"] for s in tools)
