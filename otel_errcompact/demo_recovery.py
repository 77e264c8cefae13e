"""The recovery part of ``otel-errcompact demo``: the real ``openai`` client against a local model server.

Four recoveries, each printed and each read back from the finished spans (an in-memory exporter is added
to the SDK tracer provider for the demo): a 429 recovered after its retry-after, a prompt-too-long
compacted once, a truncated reply recovered by doubling ``max_tokens``, and a circuit breaker opening,
refusing, half-opening on its probe and closing.
"""

from __future__ import annotations

import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from opentelemetry import trace
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from otel_errcompact.api import ErrCompact
from otel_errcompact.boundary import ToolErrorText
from otel_errcompact.recovery.loop import LoopPolicy, OpenAIChat
from otel_errcompact.wire_server import Reply, serve

__all__ = ["run_recovery_demo"]


def _exporter() -> InMemorySpanExporter | None:
    provider = trace.get_tracer_provider()
    if not isinstance(provider, TracerProvider):
        return None
    exporter = InMemorySpanExporter()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    return exporter


def _events(exporter: InMemorySpanExporter | None, names: tuple[str, ...]) -> list[str]:
    if exporter is None:
        return []
    lines = []
    for span in exporter.get_finished_spans():
        for event in span.events:
            if event.name in names:
                attrs = dict(event.attributes or {})
                what = attrs.get("errcompact.transition") or attrs.get("errcompact.breaker.state", "")
                if "errcompact.breaker.from" in attrs:
                    what = f"{attrs['errcompact.breaker.from']} → {what}"
                elif attrs.get("errcompact.breaker.refused"):
                    what = "refused (open)"
                lines.append(f"    span {span.name!r}: event {event.name} {what}  {attrs.get('errcompact.reason', '')}")
    exporter.clear()
    return lines


def run_recovery_demo(ec: ErrCompact, say: Callable[[str], None], *, cooldown_s: float = 1.0) -> None:
    """Print the four recoveries; ``ec``'s breaker policy should have a short cooldown (the demo waits it)."""
    say("")
    try:
        import openai  # the demo's only optional dependency
    except ImportError:
        say("RECOVERY — skipped: `pip install openai` to see it (the real client against a local server)")
        return
    exporter = _exporter()
    say("RECOVERY — the real openai client (max_retries=0) against a local model server on 127.0.0.1")
    # The notes folder goes when the demo ends, however it ends: a kept folder per run piles up in /tmp.
    with serve() as (server, url), tempfile.TemporaryDirectory(prefix="errcompact-recovery-") as notes:
        client = openai.OpenAI(api_key="sk-demo", base_url=url + "/v1", max_retries=0)
        model = OpenAIChat(client, "gpt-demo")
        workdir = Path(notes)

        def read_notes(name: str) -> str:
            return (workdir / name).read_text(encoding="utf-8")

        def run_check() -> str:
            # A shell-style tool: it reports the failing command's output as its result, raw.
            code = "import json\ndef load(text):\n    return json.loads(text)\nload('{\"notes\": ')\n"
            proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
            return f"exit status {proc.returncode}\n{proc.stderr}"

        tools: dict[str, Callable[..., Any]] = {"read_notes": ec.tool(read_notes), "run_check": run_check}
        scenarios: list[tuple[str, list[Reply]]] = [
            ("a 429 recovered after its retry-after", [Reply("rate_limited", retry_after_s=0.5), Reply(text="done")]),
            ("a prompt too long, compacted once", [
                *[Reply("tool", tool="run_check")] * 3,
                Reply("prompt_too_long"), Reply(text="done"),
            ]),
            ("a truncated reply recovered by doubling max_tokens", [Reply("truncated"), Reply(text="done")]),
        ]  # fmt: skip
        for title, replies in scenarios:
            server.requests.clear()
            server.add(*replies)
            with ec.conversation(f"recovery-{len(title)}"):
                loop = ec.recovery_loop(
                    model, tools, agent_name="recovery-demo", policy=LoopPolicy(keep_recent_tool_results=1)
                )
            started = time.perf_counter()
            result = loop.run([{"role": "user", "content": "summarise the notes"}])
            took = time.perf_counter() - started
            say(f"  {title}: {' → '.join(e.transition for e in result.transitions)}  ({took:.2f} s)")
            for event in result.transitions:
                if event.transition not in ("tool_use", "completed"):
                    say(f"    {event.transition}: {event.reason}")
            if any(e.transition == "reactive_compact_retry" for e in result.transitions):
                before, after = server.requests[-2]["messages"], server.requests[-1]["messages"]
                say(f"    request before compaction: {len(str(before))} chars; after: {len(str(after))} chars, "
                    f"{len(after)} messages (pairing kept)")
            if any(e.transition == "max_output_tokens_recovery" for e in result.transitions):
                say(f"    max_tokens sent: {[r['max_tokens'] for r in server.requests]}")
            for line in _events(exporter, ("errcompact.transition",)):
                say(line)

        say("  a circuit breaker opening and half-opening (tool read_notes, cooldown "
            f"{cooldown_s:g} s):")
        say("    (each call in a conversation of its own: the breaker is the process's, the history each one's)")
        for attempt in range(1, 5):
            with ec.conversation(f"recovery-breaker-{attempt}"):
                result_text = tools["read_notes"]("report.md")
            state = "refused" if getattr(result_text, "circuit_open", False) else "ran"
            say(f"    call {attempt}: {state}: {result_text}")
        (workdir / "report.md").write_text("all good\n", encoding="utf-8")
        with ec.conversation("recovery-breaker-5"):
            time.sleep(cooldown_s + 0.05)
            probe = tools["read_notes"]("report.md")
            say(f"    after the cooldown, the half-open probe: {'failed' if isinstance(probe, ToolErrorText) else 'ok'}"
                f" → closed; next call: {tools['read_notes']('report.md')!r}")
        for line in _events(exporter, ("errcompact.breaker",)):
            say(line)
    if exporter is None:
        say("  (span events not shown: the global tracer provider is not the OpenTelemetry SDK's)")
