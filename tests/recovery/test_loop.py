"""RecoveryLoop end to end: the real openai and anthropic clients against the wire-format server."""

from __future__ import annotations

import asyncio
import time
from typing import Any

import anthropic
import openai
import pytest

from otel_errcompact.recovery.loop import AnthropicMessages, LoopPolicy, OpenAIChat, RecoveryLoop
from otel_errcompact.wire_server import ModelWireServer, Reply
from tests.conftest import OTel

FAST = LoopPolicy(backoff_s=0.01, jitter=0.1)


def read_config(path: str) -> str:
    with open(path) as f:  # a real FileNotFoundError for a missing path
        return f.read()


def adapters(url: str) -> list[Any]:
    return [
        OpenAIChat(openai.OpenAI(api_key="sk-test", base_url=url + "/v1", max_retries=0), "gpt-test"),
        AnthropicMessages(anthropic.Anthropic(api_key="sk-ant-test", base_url=url, max_retries=0), "claude-test"),
    ]


def async_adapters(url: str) -> list[Any]:
    return [
        OpenAIChat(openai.AsyncOpenAI(api_key="sk-test", base_url=url + "/v1", max_retries=0), "gpt-test"),
        AnthropicMessages(anthropic.AsyncAnthropic(api_key="sk-ant-test", base_url=url, max_retries=0), "claude-test"),
    ]


def pairs_are_valid(messages: list[dict[str, Any]]) -> bool:
    """Every tool call has exactly one result and every result answers a call, in both formats."""
    calls: list[str] = []
    results: list[str] = []
    for m in messages:
        for c in m.get("tool_calls") or ():
            calls.append(c["id"])
        if m.get("role") == "tool":
            results.append(m["tool_call_id"])
        if isinstance(m.get("content"), list):
            for b in m["content"]:
                if b.get("type") == "tool_use":
                    calls.append(b["id"])
                if b.get("type") == "tool_result":
                    results.append(b["tool_use_id"])
    return sorted(calls) == sorted(results) and len(set(calls)) == len(calls)


def test_every_continue_transition_then_completed(wire: tuple[ModelWireServer, str], tmp_path: Any) -> None:
    server, url = wire
    for adapter in adapters(url):
        server.requests.clear()
        server.add(
            Reply("tool", tool="read_config", arguments={"path": str(tmp_path / "a.toml")}),
            Reply("rate_limited", retry_after_s=0.05),
            Reply("prompt_too_long"),
            Reply("truncated"),
            Reply("overloaded"),
            Reply("text", text="all done"),
        )
        loop = RecoveryLoop(adapter, {"read_config": read_config}, policy=FAST)
        result = loop.run([{"role": "user", "content": "read the config"}])
        assert result.transition == "completed" and result.text == "all done"
        assert [e.transition for e in result.transitions] == [
            "tool_use", "retry_wait", "reactive_compact_retry", "max_output_tokens_recovery", "retry_wait",
            "completed",
        ]  # fmt: skip
        wait = result.transitions[1]
        assert wait.error_class == "rate_limited" and wait.wait_s is not None and 0.05 <= wait.wait_s <= 0.0551
        assert [r["max_tokens"] for r in server.requests] == [1024, 1024, 1024, 1024, 2048, 2048]
        assert pairs_are_valid(server.requests[-1]["messages"])
        assert "FileNotFoundError" in str(server.requests[-1]["messages"])


def test_prompt_too_long_twice_is_a_model_error(wire: tuple[ModelWireServer, str]) -> None:
    server, url = wire
    for adapter in adapters(url):
        server.add(Reply("prompt_too_long"), Reply("prompt_too_long"))
        result = RecoveryLoop(adapter, policy=FAST).run([{"role": "user", "content": "x"}])
        assert [e.transition for e in result.transitions] == ["reactive_compact_retry", "model_error"]
        assert result.reason == "prompt too long after compaction"


def test_truncation_doubles_at_most_three_times(wire: tuple[ModelWireServer, str]) -> None:
    server, url = wire
    for adapter in adapters(url):
        server.requests.clear()
        server.add(*[Reply("truncated")] * 4)
        result = RecoveryLoop(adapter, policy=FAST).run([{"role": "user", "content": "x"}])
        assert [e.transition for e in result.transitions] == ["max_output_tokens_recovery"] * 3 + ["model_error"]
        assert [r["max_tokens"] for r in server.requests] == [1024, 2048, 4096, 8192]


def test_permanent_errors_end_at_once_and_the_wait_is_capped(wire: tuple[ModelWireServer, str]) -> None:
    server, url = wire
    for adapter in adapters(url):
        server.add(Reply("unauthorized"))
        result = RecoveryLoop(adapter, policy=FAST).run([{"role": "user", "content": "x"}])
        assert result.transition == "model_error" and "HTTP 401" in result.reason
        assert type(result.error).__name__ == "AuthenticationError"

        server.add(Reply("rate_limited", retry_after_s=30))
        capped = RecoveryLoop(adapter, policy=LoopPolicy(max_total_wait_s=5)).run([{"role": "user", "content": "x"}])
        assert capped.transition == "model_error" and capped.reason == "rate_limited: wait cap reached"


def test_a_given_sleep_is_called_for_the_wait_not_polled_in_real_time(wire: tuple[ModelWireServer, str]) -> None:
    """``RecoveryLoop(sleep=...)`` (a test's or a simulated clock's) owns the wait: a 3 s retry-after is three
    seconds of calls to it, taken at once in real time, not a loop polling it for three real seconds."""
    server, url = wire
    slept: list[float] = []
    server.add(Reply("rate_limited", retry_after_s=3))
    start = time.monotonic()
    result = RecoveryLoop(adapters(url)[0], policy=LoopPolicy(jitter=0), sleep=slept.append).run(
        [{"role": "user", "content": "x"}]
    )
    assert [e.transition for e in result.transitions] == ["retry_wait", "completed"]
    assert sum(slept) == pytest.approx(3.0) and len(slept) <= 100
    assert time.monotonic() - start < 2.0


def test_max_turns(wire: tuple[ModelWireServer, str]) -> None:
    server, url = wire
    server.add(*[Reply("tool", tool="noop")] * 5)
    loop = RecoveryLoop(adapters(url)[0], {"noop": lambda: "ok"}, policy=LoopPolicy(max_turns=3))
    result = loop.run([{"role": "user", "content": "x"}])
    assert result.transition == "max_turns" and result.turns == 3
    assert pairs_are_valid(result.messages)


def test_compaction_replaces_old_error_results_by_counted_digests(
    wire: tuple[ModelWireServer, str], tmp_path: Any
) -> None:
    server, url = wire
    missing = str(tmp_path / "settings.toml")
    for adapter in adapters(url):
        server.requests.clear()
        server.add(*[Reply("tool", tool="read_config", arguments={"path": missing})] * 4)
        server.add(Reply("prompt_too_long"), Reply("text", text="ok"))
        loop = RecoveryLoop(
            adapter, {"read_config": read_config}, policy=LoopPolicy(keep_recent_tool_results=1),
            summarizer=lambda text: f"summary({len(text)})",
        )  # fmt: skip
        result = loop.run([{"role": "user", "content": "x"}])
        assert result.transition == "completed"
        before, after = server.requests[-2]["messages"], server.requests[-1]["messages"]
        assert len(before) == len(after) and pairs_are_valid(after)
        texts = [str(m) for m in after]
        assert sum("Traceback" in t for t in texts) == 0  # raw errors never went back
        compacted = [t for t in texts if "(×3)" in t]
        assert len(compacted) == 1 and "FileNotFoundError" in compacted[0]


def test_async_loop_runs_tools_concurrently(wire: tuple[ModelWireServer, str]) -> None:
    server, url = wire

    async def slow(n: int) -> str:
        await asyncio.sleep(0.2)
        return f"slept {n}"

    async def main() -> None:
        for adapter in async_adapters(url):
            server.add(Reply("tool", tool="slow", arguments={"n": 1}), Reply("overloaded"), Reply("text", text="fin"))
            result = await RecoveryLoop(adapter, {"slow": slow}, policy=FAST).arun([{"role": "user", "content": "x"}])
            assert [e.transition for e in result.transitions] == ["tool_use", "retry_wait", "completed"]
            assert "slept 1" in str(result.messages)

    asyncio.run(main())


@pytest.mark.parametrize("mutating", [False, True])
def test_abort_cancels_model_calls_and_read_only_tools_but_lets_mutating_tools_finish(
    wire: tuple[ModelWireServer, str], mutating: bool
) -> None:
    server, url = wire
    finished: list[str] = []

    async def write_file(name: str) -> str:
        await asyncio.sleep(0.3)
        finished.append(name)
        return "written"

    async def main() -> None:
        adapter = async_adapters(url)[1]
        server.add(Reply("tool", tool="write_file", arguments={"name": "a.txt"}))
        loop = RecoveryLoop(adapter, {"write_file": write_file}, mutating=["write_file"] if mutating else [])
        task = asyncio.ensure_future(loop.arun([{"role": "user", "content": "x"}]))
        while loop.aborts.in_flight(loop.scope) == 0 or not server.requests:
            await asyncio.sleep(0.01)
        await asyncio.sleep(0.05)  # the tool is running now
        loop.aborts.abort(loop.scope)
        result = await task
        assert result.transition == "aborted_streaming"
        assert finished == (["a.txt"] if mutating else [])
        assert pairs_are_valid(result.messages)

        server.add(Reply("text", delay_s=5))  # an in-flight model call
        loop2 = RecoveryLoop(adapter, {})
        task2 = asyncio.ensure_future(loop2.arun([{"role": "user", "content": "x"}]))
        await asyncio.sleep(0.3)
        started = time.perf_counter()
        loop2.aborts.abort(loop2.scope)
        result2 = await task2
        assert result2.transition == "aborted_streaming"
        assert time.perf_counter() - started < 2.0  # not the 5 s the server holds the answer back

    asyncio.run(main())


def test_transitions_are_span_events_and_counted(make_otel: Any, wire: tuple[ModelWireServer, str]) -> None:
    otel: OTel = make_otel()
    server, url = wire
    server.add(Reply("rate_limited", retry_after_s=0.01), Reply("truncated"), Reply("text"))
    with otel.ec.conversation("conv-loop"):
        loop = otel.ec.recovery_loop(adapters(url)[0], agent_name="support")
    assert loop.scope == "conv-loop"
    result = loop.run([{"role": "user", "content": "x"}])
    assert result.transition == "completed"
    (agent,) = otel.spans("invoke_agent support")
    events = [e for e in agent.events if e.name == "errcompact.transition"]
    assert [e.attributes["errcompact.transition"] for e in events] == [  # type: ignore[index]
        "retry_wait", "max_output_tokens_recovery", "completed",
    ]  # fmt: skip
    assert events[0].attributes["errcompact.reason"] == "status 429; retry after 0.01s"  # type: ignore[index]
    assert [e.attributes["errcompact.attempt"] for e in events] == [1, 2, 3]  # type: ignore[index]
    points = {p.attributes["errcompact.transition"]: p.value for p in otel.metric_points("errcompact.transitions")}
    assert points == {"retry_wait": 1, "max_output_tokens_recovery": 1, "completed": 1}


def test_an_aborted_run_consumes_the_abort(wire: tuple[ModelWireServer, str]) -> None:
    server, url = wire
    loop = RecoveryLoop(adapters(url)[0])
    loop.aborts.abort(loop.scope)  # before the run: it ends at its first step
    first = loop.run([{"role": "user", "content": "x"}])
    assert first.transition == "aborted_streaming" and first.turns == 0 and server.requests == []
    server.add(Reply("text", text="again"))
    second = loop.run([{"role": "user", "content": "x"}])
    assert (second.transition, second.text) == ("completed", "again")


def test_sync_loop_abort_ends_the_wait_for_an_in_flight_model_call(wire: tuple[ModelWireServer, str]) -> None:
    import threading

    server, url = wire
    server.add(Reply("text", delay_s=5))
    loop = RecoveryLoop(adapters(url)[0])
    timer = threading.Timer(0.3, loop.aborts.abort, args=(loop.scope,))
    started = time.perf_counter()
    timer.start()
    result = loop.run([{"role": "user", "content": "x"}])
    assert result.transition == "aborted_streaming" and result.turns == 1
    assert time.perf_counter() - started < 2.0  # not the 5 s the server holds the answer back


def test_the_hosts_cancellation_propagates_while_an_abort_stands(wire: tuple[ModelWireServer, str]) -> None:
    """An abort ends a loop with ``aborted_streaming``; the host cancelling the loop's task at the same
    moment (a server dropping the request) must still see the task cancelled, not a normal return."""
    server, url = wire
    server.add(Reply("text", delay_s=5))  # an in-flight model call

    async def main() -> str:
        loop = RecoveryLoop(async_adapters(url)[0])
        task = asyncio.ensure_future(loop.arun([{"role": "user", "content": "x"}]))
        while loop.aborts.in_flight(loop.scope) == 0:
            await asyncio.sleep(0.01)
        loop.aborts.abort(loop.scope)
        task.cancel()
        try:
            await task
        except asyncio.CancelledError:
            return "cancelled"
        return "returned after its cancellation"

    assert asyncio.run(main()) == "cancelled"
