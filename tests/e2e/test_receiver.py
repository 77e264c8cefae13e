"""Self-test of the e2e harness: a real SDK span over OTLP/HTTP, read back from Phoenix.

If this fails, every other e2e test's failure says nothing about our code: it
checks that attributes, status and an exception event survive the round trip
and documents the JSON field names the other tests rely on.
"""

from __future__ import annotations

import json
import uuid
from typing import TYPE_CHECKING, Any

import pytest
from opentelemetry.exporter.otlp.proto.grpc.trace_exporter import OTLPSpanExporter as GrpcSpanExporter
from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor
from opentelemetry.trace import Status, StatusCode

if TYPE_CHECKING:
    from tests.e2e.conftest import PhoenixServer

pytestmark = pytest.mark.e2e


def _lookup(catalog: dict[str, int], sku: str) -> int:
    """Raise a real KeyError for a missing SKU."""
    return catalog[sku]


def _provider_for(phoenix: PhoenixServer, project: str) -> TracerProvider:
    """A TracerProvider exporting over OTLP/HTTP to the fixture, into ``project``."""
    provider = TracerProvider(
        resource=Resource.create({"service.name": "e2e-selftest", "openinference.project.name": project})
    )
    exporter = OTLPSpanExporter(endpoint=f"{phoenix.otlp_http_endpoint}/v1/traces", timeout=10)
    provider.add_span_processor(BatchSpanProcessor(exporter))
    return provider


def test_error_span_round_trips_with_attributes_status_and_exception_event(phoenix: PhoenixServer) -> None:
    project = f"selftest-{uuid.uuid4().hex[:8]}"
    provider = _provider_for(phoenix, project)
    tracer = provider.get_tracer("e2e.selftest")
    with tracer.start_as_current_span("execute_tool lookup", record_exception=False) as span:
        span.set_attribute("gen_ai.operation.name", "execute_tool")
        span.set_attribute("gen_ai.tool.name", "lookup")
        try:
            _lookup({"sku-1": 3}, "sku-42")
        except KeyError as exc:
            span.record_exception(exc)
            span.set_status(Status(StatusCode.ERROR, "lookup failed"))
        sent_trace_id = format(span.get_span_context().trace_id, "032x")
    assert provider.force_flush(timeout_millis=15_000)
    provider.shutdown()

    spans = phoenix.spans(project, timeout_s=30)
    got: dict[str, Any] = spans[0]
    print(json.dumps(got, indent=2, default=str)[:4000])

    assert len(spans) == 1
    assert got["name"] == "execute_tool lookup"
    assert got["context"]["trace_id"] == sent_trace_id
    attributes = got["attributes"]
    assert attributes["gen_ai.operation.name"] == "execute_tool"
    assert attributes["gen_ai.tool.name"] == "lookup"
    assert got["status_code"] == "ERROR"
    assert got["status_message"] == "lookup failed"
    exception_events = [e for e in got["events"] if e["name"] == "exception"]
    assert len(exception_events) == 1
    event_attributes = exception_events[0]["attributes"]
    assert event_attributes["exception.type"] == "KeyError"
    assert "sku-42" in event_attributes["exception.message"]
    assert "_lookup" in event_attributes["exception.stacktrace"]


def test_grpc_endpoint_receives_parent_and_child(phoenix: PhoenixServer) -> None:
    """The gRPC listener works too, and ``parent_id`` is the parent's hex span_id."""
    project = f"grpc-{uuid.uuid4().hex[:8]}"
    provider = TracerProvider(resource=Resource.create({"openinference.project.name": project}))
    exporter = GrpcSpanExporter(endpoint=phoenix.grpc_endpoint, insecure=True, timeout=10)
    provider.add_span_processor(BatchSpanProcessor(exporter))
    tracer = provider.get_tracer("e2e.selftest")
    with tracer.start_as_current_span("agent turn") as parent:
        parent_span_id = format(parent.get_span_context().span_id, "016x")
        with tracer.start_as_current_span("execute_tool lookup"):
            pass
    assert provider.force_flush(timeout_millis=15_000)
    provider.shutdown()

    by_name = {s["name"]: s for s in phoenix.spans(project, min_count=2)}
    assert by_name["agent turn"]["parent_id"] is None
    assert by_name["agent turn"]["context"]["span_id"] == parent_span_id
    assert by_name["execute_tool lookup"]["parent_id"] == parent_span_id
    assert by_name["execute_tool lookup"]["status_code"] == "UNSET"


def test_span_without_project_attribute_lands_in_default_project(phoenix: PhoenixServer) -> None:
    """Without ``openinference.project.name`` (or an x-project-name header) Phoenix uses ``default``."""
    marker = f"default-{uuid.uuid4().hex[:8]}"
    provider = TracerProvider(resource=Resource.create({"service.name": "e2e-selftest"}))
    exporter = OTLPSpanExporter(endpoint=f"{phoenix.otlp_http_endpoint}/v1/traces", timeout=10)
    provider.add_span_processor(BatchSpanProcessor(exporter))
    with provider.get_tracer("e2e.selftest").start_as_current_span(marker):
        pass
    assert provider.force_flush(timeout_millis=15_000)
    provider.shutdown()

    assert marker in {s["name"] for s in phoenix.spans("default", timeout_s=30)}
