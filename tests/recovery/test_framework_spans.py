"""Transitions a framework makes on its own, read from its GenAI model spans as they end."""

from __future__ import annotations

from typing import Any

import openai
from opentelemetry.trace import Status, StatusCode

from otel_errcompact.wire_server import ModelWireServer, Reply
from tests.conftest import OTel


def _chat(otel: OTel, client: openai.OpenAI) -> None:
    """One model call the way an instrumented framework records it: a ``chat`` span."""
    with otel.tracer.start_as_current_span(
        "chat gpt-test",
        attributes={"gen_ai.operation.name": "chat", "gen_ai.request.model": "gpt-test"},
        record_exception=False,
        set_status_on_exception=False,
    ) as span:
        try:
            response = client.chat.completions.create(model="gpt-test", messages=[{"role": "user", "content": "x"}])
        except openai.APIStatusError as exc:
            span.record_exception(exc)
            span.set_attribute("error.type", type(exc).__qualname__)
            span.set_attribute("http.response.status_code", exc.status_code)
            span.set_status(Status(StatusCode.ERROR, str(exc)))
            return
        span.set_attribute("gen_ai.response.finish_reasons", [c.finish_reason for c in response.choices])


def test_prompt_too_long_truncation_and_429_then_success(
    make_otel: Any, wire: tuple[ModelWireServer, str], openai_client: openai.OpenAI
) -> None:
    otel: OTel = make_otel()
    server, _ = wire
    server.add(Reply("rate_limited", retry_after_s=1), Reply("text"), Reply("prompt_too_long"), Reply("truncated"))
    agent_attributes = {"gen_ai.operation.name": "invoke_agent"}
    with otel.tracer.start_as_current_span("invoke_agent planner", attributes=agent_attributes):
        for _ in range(4):
            _chat(otel, openai_client)
    (agent,) = otel.spans("invoke_agent planner")
    seen = [(e.name, dict(e.attributes or {})) for e in agent.events]
    assert [(n, a.get("errcompact.transition"), a.get("errcompact.error_class")) for n, a in seen] == [
        ("errcompact.transition", "retry_wait", "rate_limited"),
        ("errcompact.recovered", None, None),
        ("errcompact.transition", "reactive_compact_retry", "prompt_too_long"),
        ("errcompact.transition", "max_output_tokens_recovery", "output_truncated"),
    ]
    assert seen[1][1] == {"errcompact.retries": 1}
    points = {
        p.attributes["errcompact.transition"]: (p.value, p.attributes["errcompact.source"])
        for p in otel.metric_points("errcompact.transitions")
    }
    assert points == {
        "retry_wait": (1, "spans"),
        "reactive_compact_retry": (1, "spans"),
        "max_output_tokens_recovery": (1, "spans"),
    }
    assert otel.metric_sum("errcompact.errors") == 0  # model calls are not tool failures
