"""The span shapes ``benchmarks/bench_processor.py`` replays are recorded from real framework runs, and
the plugin reads a replay as what the recorded span was: the successful tool span is one successful call
of its tool, the LLM and root spans are no tool call, and nothing is stored as a failure."""

from __future__ import annotations

from collections.abc import Callable

import pytest
from opentelemetry.trace import Status, StatusCode

from benchmarks.span_shapes import FRAMEWORKS, KINDS, SpanShape, shapes
from tests.conftest import OTel

_OI_KIND = "openinference.span.kind"


@pytest.fixture(scope="module")
def recorded() -> dict[str, list[SpanShape]]:
    return shapes()


def _attributes(shape: SpanShape) -> dict[str, object]:
    return {**shape.start_attributes, **shape.end_attributes}


def test_the_shapes_are_a_real_runs_root_llm_and_tool_spans(recorded: dict[str, list[SpanShape]]) -> None:
    assert set(recorded) == set(FRAMEWORKS)
    for framework, spans in recorded.items():
        assert [s.kind for s in spans] == list(KINDS), framework
        root, llm, tool = spans
        assert root.root and not llm.root and not tool.root, framework
        assert _attributes(llm)[_OI_KIND] == "LLM", framework
        assert _attributes(tool)[_OI_KIND] == "TOOL", framework
        assert tool.status is StatusCode.OK, framework
        # The LLM span carries the conversation so far: the question, the tool call and its result.
        assert llm.attribute_count() >= 20, (framework, llm.attribute_count())
        assert any("lookup_order" in str(v) for v in _attributes(llm).values()), framework


@pytest.mark.parametrize("batch", [False, True], ids=["simple", "batch"])
@pytest.mark.parametrize("framework", list(FRAMEWORKS))
def test_a_replayed_run_is_one_successful_tool_call(
    make_otel: Callable[..., OTel], recorded: dict[str, list[SpanShape]], framework: str, batch: bool
) -> None:
    otel = make_otel(batch=batch)
    tracer = otel.tracer_provider.get_tracer("span-shapes")
    root, llm, tool = recorded[framework]
    with tracer.start_as_current_span(root.name, attributes=root.start_attributes) as root_span:
        for shape in (llm, tool):
            with tracer.start_as_current_span(shape.name, attributes=shape.start_attributes) as span:
                span.set_attributes(shape.end_attributes)
                span.set_status(Status(shape.status))
        root_span.set_attributes(root.end_attributes)
        root_span.set_status(Status(root.status))

    calls = {
        (p.attributes.get("gen_ai.tool.name"), p.attributes.get("errcompact.outcome")): int(p.value)
        for p in otel.metric_points("errcompact.tool.calls")
    }
    assert calls == {("lookup_order", "ok"): 1}
    assert otel.store().count() == 0
    assert [s.name for s in otel.spans()] == [llm.name, tool.name, root.name]
    assert all(not k.startswith("errcompact.") for s in otel.spans() for k in (s.attributes or {}))
