"""init(redis_url=…) end to end: worker processes as users run them share one circuit breaker."""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

from tests.conftest import OTel
from tests.fleet.conftest import RedisServer, free_port

AGENT = Path(__file__).with_name("fleet_agent.py")
ROOT = Path(__file__).resolve().parents[2]


def _worker(
    url: str, calls: int, run_log: Path, consecutive: int = 100, service: str = "fleet-worker", **variables: str
) -> list[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("OTEL_EXPORTER_OTLP", "OTEL_ERRCOMPACT_"))}
    env["PYTHONPATH"] = str(ROOT)
    env.update(variables)
    done = subprocess.run(
        [sys.executable, str(AGENT), url, str(calls), str(run_log), str(consecutive), service],
        capture_output=True, text=True, env=env, timeout=120,
    )
    assert done.returncode == 0, done.stderr
    return done.stdout.splitlines()


def test_failures_in_two_workers_open_the_breaker_for_both(redis_server: RedisServer, tmp_path: Path) -> None:
    run_log = tmp_path / "runs.log"
    first = _worker(redis_server.url, 2, run_log)  # fails twice, for real
    assert all("no such table: orders" in line for line in first)
    second = _worker(redis_server.url, 2, run_log)  # fails a third time: the breaker opens fleet-wide
    assert "no such table: orders" in second[0]
    assert second[1].startswith("Error: circuit open") or "circuit open" in second[1]
    third = _worker(redis_server.url, 1, run_log)  # a fresh worker never runs the tool
    assert "circuit open" in third[0] and "(×3)" in third[0]
    assert run_log.read_text().count("ran") == 3


def test_services_sharing_one_redis_keep_their_own_breakers(redis_server: RedisServer, tmp_path: Path) -> None:
    """Two services on one Redis, with the same tool and arguments: the breaker one service's failures open
    refuses that service's workers only (its keys are named by its ``service.name``); workers given one
    ``OTEL_ERRCOMPACT_FLEET_NAMESPACE`` share it whatever their service."""
    run_log = tmp_path / "runs.log"
    _worker(redis_server.url, 3, run_log, service="billing-agent")  # three real failures: billing's breaker opens
    assert "circuit open" in _worker(redis_server.url, 1, run_log, service="billing-agent")[0]
    support = _worker(redis_server.url, 1, run_log, service="support-agent")
    assert "no such table: orders" in support[0] and "circuit open" not in support[0]  # support's tool ran
    assert run_log.read_text().count("ran") == 4
    keys = {key.decode() for key in redis_server.client().scan_iter("errcompact:*")}
    assert "errcompact:billing-agent:breakers:count_orders" in keys

    _worker(redis_server.url, 3, run_log, service="reports", OTEL_ERRCOMPACT_FLEET_NAMESPACE="shop")
    joined = _worker(redis_server.url, 1, run_log, service="audit", OTEL_ERRCOMPACT_FLEET_NAMESPACE="shop")
    assert "circuit open" in joined[0]
    assert run_log.read_text().count("ran") == 7


def test_a_loop_against_a_breaker_other_workers_opened_escalates(redis_server: RedisServer, tmp_path: Path) -> None:
    """A worker whose own calls never failed is refused by the shared breaker; its agent asking again and
    again is one more occurrence of the class each time, and halts at its threshold as it would had the
    worker seen the failures itself."""
    run_log = tmp_path / "runs.log"
    _worker(redis_server.url, 3, run_log)  # three real failures open the breaker fleet-wide
    fresh = _worker(redis_server.url, 6, run_log, consecutive=3)
    assert [line.startswith("circuit open") for line in fresh[:3]] == [True, True, True]
    assert "error threshold breached" in fresh[2]
    assert fresh[3].startswith("halted: ") and "no such table: orders" in fresh[3]
    assert len(fresh) == 4
    assert run_log.read_text().count("ran") == 3  # the fresh worker never ran the tool


def test_a_worker_that_cannot_reach_redis_counts_the_outage(make_otel: Callable[..., OTel]) -> None:
    """init() builds the shared store before its meter exists; the outage counter is still its own."""
    otel = make_otel(redis_url=f"redis://127.0.0.1:{free_port()}/0")

    @otel.ec.tool
    def lookup(key: str) -> int:
        return {"a": 1}[key]

    assert str(lookup("b")).startswith("Error: [KeyError]")
    (point,) = otel.metric_points("errcompact.state.degraded")
    assert point.value == 1 and point.attributes["errcompact.reason"] == "ConnectionError"


def test_an_async_tool_waits_for_the_shared_breaker_off_the_event_loop(
    redis_server: RedisServer, make_otel: Callable[..., OTel]
) -> None:
    """Redis stops answering (its process paused) as an async tool is called: the call waits for the
    breaker off the event loop, so another task of the loop runs meanwhile. Here that task resumes Redis,
    which then answers the call within its timeout: no fallback to local state, and the failures are
    counted in Redis, their breaker's opening an event on the third call's tool span. The host's own
    blocking work fills the loop's default executor all along (as a framework running sync tools there
    does): the breaker's calls do not queue behind it, the calls are done before it is let go."""
    import threading
    from concurrent.futures import ThreadPoolExecutor

    from otel_errcompact.recovery.redis_state import redis_state_store

    store = redis_state_store(redis_server.url, timeout_s=3.0)
    otel = make_otel(state_store=store)

    @otel.ec.tool
    async def lookup(key: str) -> int:
        return {"a": 1}[key]

    let_go = threading.Event()

    async def resume_redis() -> None:
        redis_server.resume()

    async def calls() -> list[object]:
        loop = asyncio.get_running_loop()
        loop.set_default_executor(ThreadPoolExecutor(max_workers=2))
        busy = [loop.run_in_executor(None, let_go.wait, 20.0) for _ in range(2)]
        first, _ = await asyncio.gather(lookup("b"), resume_redis())
        results = [first, await lookup("b"), await lookup("b")]
        let_go.set()
        return [*results, *await asyncio.gather(*busy)]

    redis_server.pause()
    *results, released_a, released_b = asyncio.run(calls())
    assert all(str(r).startswith("Error: [KeyError]") for r in results)
    assert not store.degraded
    assert (released_a, released_b) == (True, True)  # let go after the calls, not by their own timeout
    assert len(redis_server.client().hkeys("errcompact:breakers:lookup")) == 1  # counted in Redis
    spans = [s for s in otel.span_exporter.get_finished_spans() if s.name == "execute_tool lookup"]
    opened = [e for e in spans[-1].events if e.name == "errcompact.breaker"]
    assert [e.attributes["errcompact.breaker.state"] for e in opened if e.attributes] == ["open"]
