"""Recovery at the tool boundary: retry, circuit breaker, escalation fixes, abort and halt cancellation.

The failing tools make real HTTP calls with httpx to a server on 127.0.0.1 that answers with a scripted
status sequence, or raise real Python errors.
"""

from __future__ import annotations

import asyncio
import json
import threading
import time
from collections import deque
from collections.abc import Callable, Iterator
from http.server import BaseHTTPRequestHandler
from typing import Any

import httpx
import pytest
from opentelemetry.trace import StatusCode

from otel_errcompact import (
    BreakerPolicy,
    ErrorBudgetExceeded,
    InMemoryStateStore,
    RetryPolicy,
    Thresholds,
    ToolErrorText,
)
from tests.conftest import OTel
from tests.realerrors import loopback_server

QUICK = RetryPolicy(initial_s=0.01, max_s=0.02, jitter_s=0.01)


class Upstream:
    """A loopback HTTP service answering each GET with the next scripted (status, headers)."""

    def __init__(self) -> None:
        self.script: deque[tuple[int, dict[str, str]]] = deque()
        self.hits = 0
        self.lock = threading.Lock()

    def handler(self) -> type[BaseHTTPRequestHandler]:
        upstream = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, format: str, *args: Any) -> None:
                pass

            def do_GET(self) -> None:
                with upstream.lock:
                    upstream.hits += 1
                    status, headers = upstream.script.popleft() if upstream.script else (200, {})
                body = b'{"ok": true}' if status == 200 else b'{"error": {"message": "upstream unavailable"}}'
                self.send_response(status)
                for k, v in headers.items():
                    self.send_header(k, v)
                self.send_header("content-length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

        return Handler


@pytest.fixture
def upstream() -> Iterator[tuple[Upstream, str]]:
    u = Upstream()
    with loopback_server(u.handler()) as url:
        yield u, url


def fetch_tool(otel: OTel, url: str, **options: Any) -> Callable[[str], Any]:
    @otel.ec.tool(name="fetch", **options)
    def fetch(path: str) -> Any:
        response = httpx.get(url + path, timeout=5)
        response.raise_for_status()
        return response.json()

    return fetch


def events(otel: OTel, name: str) -> list[dict[str, Any]]:
    return [dict(e.attributes or {}) for s in otel.spans() for e in s.events if e.name == name]


def test_transient_failure_is_retried_once_with_retry_after(make_otel: Callable[..., OTel], upstream: Any) -> None:
    otel = make_otel(retry=QUICK)
    server, url = upstream
    fetch = fetch_tool(otel, url)
    server.script.extend([(429, {"retry-after": "0.2"}), (200, {})])
    assert fetch("/items") == {"ok": True}
    assert server.hits == 2
    (retry,) = events(otel, "errcompact.retry")
    assert retry["errcompact.error_class"] == "rate_limited" and retry["errcompact.wait_s"] >= 0.2
    assert otel.ec.context("default") == ""  # recovered: nothing for the agent to see

    server.script.extend([(503, {}), (503, {})])
    result = fetch("/items")
    assert isinstance(result, ToolErrorText) and "503 Service Unavailable" in result
    assert server.hits == 4  # one retry, then surface
    assert result.outcome is not None and result.outcome.digest.error_class == "transient"


def test_the_retry_event_holds_the_redacted_head_of_the_error(make_otel: Callable[..., OTel], upstream: Any) -> None:
    """The ``errcompact.retry`` event keeps the first 512 characters of the error's message, redacted before
    it is cut: a key the URL carries across that bound leaves no part of itself on the span (cut first, its
    head would be too short to read as a key, and would stay)."""
    otel = make_otel(retry=QUICK)
    server, url = upstream
    fetch = fetch_tool(otel, url)
    key = "sk-proj-" + "Zq7x9K2mP4w" * 5
    before = f"Server error '503 Service Unavailable' for url '{url}/reports/"
    path = "/reports/" + "q" * (512 - 16 - len(before) - 1) + "/" + key  # the key starts 16 characters before
    server.script.extend([(503, {}), (200, {})])
    assert fetch(path) == {"ok": True}
    (retry,) = events(otel, "errcompact.retry")
    message = str(retry["exception.message"])
    assert message.startswith(before) and len(message) == 512
    assert not any(key[i:i + 6] in message for i in range(8, len(key) - 5))
    assert retry["exception.type"] == "HTTPStatusError"


def test_permanent_failures_surface_at_once(make_otel: Callable[..., OTel], upstream: Any) -> None:
    otel = make_otel(retry=QUICK)
    server, url = upstream
    fetch = fetch_tool(otel, url)
    server.script.append((404, {}))
    result = fetch("/missing")
    assert isinstance(result, ToolErrorText) and server.hits == 1
    calls = []

    @otel.ec.tool(retry=3)
    def lookup(key: str) -> int:
        calls.append(key)
        return {"a": 1}[key]

    assert isinstance(lookup("user_id"), ToolErrorText) and calls == ["user_id"]
    assert events(otel, "errcompact.retry") == []


def test_breaker_opens_refuses_half_opens_and_closes(make_otel: Callable[..., OTel], upstream: Any) -> None:
    otel = make_otel(
        retry=RetryPolicy(attempts=1), breaker=BreakerPolicy(threshold=3, cooldown_s=0.3),
        thresholds=Thresholds(consecutive=100, budget=None),
    )  # fmt: skip
    server, url = upstream
    fetch = fetch_tool(otel, url)

    @otel.ec.tool
    def other_tool() -> str:
        return "fine"

    server.script.extend([(503, {})] * 3)
    for _ in range(3):
        assert "503 Service Unavailable" in fetch("/down")
    refused = fetch("/down")
    assert isinstance(refused, ToolErrorText) and refused.circuit_open
    assert refused.startswith("circuit open: [HTTPStatusError 503] at ") and "(×3); retry after 0s" in refused
    assert server.hits == 3  # the tool was not called
    assert fetch("/up") == {"ok": True}  # other arguments of the same tool run
    assert other_tool() == "fine"  # other tools run

    time.sleep(0.35)  # the cooldown
    server.script.append((503, {}))
    assert "503 Service Unavailable" in fetch("/down")  # the half-open probe fails: open again
    assert fetch("/down").circuit_open  # type: ignore[attr-defined]
    time.sleep(0.35)
    assert fetch("/down") == {"ok": True}  # the probe succeeds: closed
    assert fetch("/down") == {"ok": True}

    changes = [(e["errcompact.breaker.from"], e["errcompact.breaker.state"]) for e in events(otel, "errcompact.breaker")
               if "errcompact.breaker.from" in e]  # fmt: skip
    assert changes == [
        ("closed", "open"), ("open", "half_open"), ("half_open", "open"), ("open", "half_open"), ("half_open", "closed")
    ]  # fmt: skip
    points = {(p.attributes["errcompact.breaker.from"], p.attributes["errcompact.breaker.state"]): p.value
              for p in otel.metric_points("errcompact.breaker.changes")}  # fmt: skip
    assert points[("closed", "open")] == 1 and points[("half_open", "closed")] == 1
    # refusals are in the history (a loop against an open breaker still escalates), not extra tool failures
    assert "(×6)" in otel.ec.context("default")  # 4 failures + 2 refusals
    assert otel.metric_sum("errcompact.errors") == 4


def test_a_different_error_class_of_the_same_tool_counts_apart(make_otel: Callable[..., OTel], tmp_path: Any) -> None:
    otel = make_otel(thresholds=Thresholds(consecutive=100, budget=None))

    @otel.ec.tool
    def read(path: str) -> str:
        with open(path) as f:
            return f.read()

    missing, folder = str(tmp_path / "missing.txt"), str(tmp_path)
    for _ in range(2):
        assert "FileNotFoundError" in read(missing)
        assert "IsADirectoryError" in read(folder)
    assert "FileNotFoundError" in read(missing)  # the third identical failure: open
    assert read(missing).circuit_open  # type: ignore[attr-defined]
    assert "IsADirectoryError" in read(folder)  # its class is at 3 now, and was never refused
    assert read(folder).circuit_open  # type: ignore[attr-defined]


def test_a_refused_call_ends_its_span_failed_without_counting_a_tool_failure(
    make_otel: Callable[..., OTel], tmp_path: Any
) -> None:
    """The agent gets an error for a refused call, so its ``execute_tool`` span ends as the conventions
    ask of an operation that returned one: status ERROR with the refusal as its description, and an
    ``error.type``. It is still not one more failure of the tool (the tool did not run)."""
    otel = make_otel(thresholds=Thresholds(consecutive=100, budget=None))

    @otel.ec.tool
    def read(path: str) -> str:
        with open(path) as f:
            return f.read()

    missing = str(tmp_path / "missing.txt")
    for _ in range(3):
        assert "FileNotFoundError" in read(missing)
    refused = read(missing)
    assert isinstance(refused, ToolErrorText) and refused.circuit_open
    spans = otel.spans("execute_tool read")
    assert len(spans) == 4
    span = spans[-1]
    assert (span.attributes or {})["errcompact.circuit_open"] is True
    assert span.status.status_code is StatusCode.ERROR
    assert span.status.description == str(refused)
    assert (span.attributes or {})["error.type"] == "circuit_open"
    assert otel.metric_sum("errcompact.errors") == 3
    assert {p.attributes["errcompact.outcome"]: p.value for p in otel.metric_points("errcompact.tool.calls")} == {
        "error": 3
    }


def test_a_probe_that_fails_another_way_opens_the_breaker_again(make_otel: Callable[..., OTel], tmp_path: Any) -> None:
    """The half-open probe is the one call let through: whatever way it fails, the breaker it probed opens
    again for another cooldown, and a later probe may close it (it must not stay half-open, its probe
    out, refusing every call for good)."""
    otel = make_otel(
        retry=RetryPolicy(attempts=1), breaker=BreakerPolicy(threshold=3, cooldown_s=0.3),
        thresholds=Thresholds(consecutive=100, budget=None),
    )  # fmt: skip

    @otel.ec.tool
    def settings(path: str) -> Any:
        with open(path) as f:
            return json.load(f)

    path = tmp_path / "settings.json"
    for _ in range(3):
        assert "FileNotFoundError" in settings(str(path))
    assert settings(str(path)).circuit_open  # type: ignore[attr-defined]
    time.sleep(0.35)  # the cooldown
    path.write_text('{"retries": 3,}')  # the file is back, but not valid JSON yet
    assert "JSONDecodeError" in settings(str(path))  # the probe fails another way
    refused = settings(str(path))
    assert isinstance(refused, ToolErrorText) and refused.circuit_open and "retry after" in refused
    path.write_text('{"retries": 3}')
    time.sleep(0.35)
    assert settings(str(path)) == {"retries": 3}  # the next probe runs and closes it
    assert settings(str(path)) == {"retries": 3}


def test_a_hung_probe_holds_the_half_open_breaker_only_for_its_lease(
    make_otel: Callable[..., OTel], tmp_path: Any
) -> None:
    """The half-open probe is a lease (``probe_timeout_s``): while one thread's probe hangs in the tool (as on
    a read that never returns), another thread's call with the same arguments is refused, until the lease
    runs out; then that call is the probe, and closes the breaker, instead of being refused for as long as
    the first one hangs."""
    store = InMemoryStateStore(probe_timeout_s=0.5)
    otel = make_otel(
        retry=RetryPolicy(attempts=1), breaker=BreakerPolicy(threshold=3, cooldown_s=0.0),
        thresholds=Thresholds(consecutive=100, budget=None), state_store=store,
    )  # fmt: skip
    inside = threading.Event()  # the first probe is in the tool
    release = threading.Event()  # lets it return

    @otel.ec.tool(name="settings")
    def settings(path: str) -> Any:
        with open(path) as f:
            text = f.read()
        if not inside.is_set():
            inside.set()
            release.wait(60)  # stuck until the test lets go
        return json.loads(text)

    path = tmp_path / "settings.json"
    failures = [settings(str(path)) for _ in range(3)]  # the third opens the breaker, for no cooldown
    assert all("FileNotFoundError" in f for f in failures)
    outcome = failures[-1].outcome  # type: ignore[attr-defined]
    key = outcome.digest.key
    path.write_text('{"retries": 3}')
    hung: list[Any] = []
    first = threading.Thread(target=lambda: hung.append(settings(str(path))))
    first.start()
    try:
        assert inside.wait(30)  # the probe is out, and hangs
        refused = settings(str(path))
        assert isinstance(refused, ToolErrorText) and refused.circuit_open, refused
        assert "a probe is running" in refused
        snapshot = store.breaker_snapshot("settings", key)
        assert snapshot is not None and snapshot.state == "half_open" and snapshot.probe_out
        time.sleep(0.6)  # the lease runs out; the first probe still hangs
        snapshot = store.breaker_snapshot("settings", key)
        assert snapshot is not None and snapshot.state == "half_open" and not snapshot.probe_out
        assert settings(str(path)) == {"retries": 3}  # the probe now: it ran, and closed the breaker
        assert store.breaker_snapshot("settings", key) is None
        assert first.is_alive()
    finally:
        release.set()
        first.join(30)
    assert hung == [{"retries": 3}]
    changes = [(e["errcompact.breaker.from"], e["errcompact.breaker.state"]) for e in events(otel, "errcompact.breaker")
               if "errcompact.breaker.from" in e]  # fmt: skip
    # on the spans in the order they ended: the hung probe's (open → half-open) last
    assert sorted(changes) == [("closed", "open"), ("half_open", "closed"), ("open", "half_open")]


def test_calls_that_differ_only_past_the_recorded_arguments_are_other_calls(make_otel: Callable[..., OTel]) -> None:
    """The span and the record keep the first 64 KiB of a call's arguments; the breaker tells calls apart
    by all of them: a call with other arguments runs, even when they differ only after a long document."""
    otel = make_otel(
        retry=RetryPolicy(attempts=1), breaker=BreakerPolicy(threshold=3, cooldown_s=30),
        thresholds=Thresholds(consecutive=100, budget=None),
    )  # fmt: skip

    @otel.ec.tool
    def section_of(document: str, section: str) -> str:
        return {"intro": document[:10]}[section]

    document = "x" * 70_000
    for _ in range(3):
        assert "[KeyError]" in section_of(document, "summary")
    assert section_of(document, "summary").circuit_open  # type: ignore[attr-defined]
    assert section_of(document, "intro") == "x" * 10


def test_a_refused_call_that_breaches_the_threshold_says_so_in_its_flag(make_otel: Callable[..., OTel]) -> None:
    """``ToolErrorText.escalated`` agrees with its text for a refused call too: refusals count in the
    conversation's history, and the third one breaches its threshold."""
    otel = make_otel(retry=RetryPolicy(attempts=1), breaker=BreakerPolicy(threshold=3, cooldown_s=30))

    @otel.ec.tool
    def load(user_id: str) -> Any:
        return {}[user_id]

    with otel.ec.conversation("c1"):
        for _ in range(3):
            load("u1")  # trips the breaker, shared by the process
    with otel.ec.conversation("c2"):
        refused = [load("u1") for _ in range(3)]
    assert all(r.circuit_open for r in refused)  # type: ignore[attr-defined]
    assert [r.escalated for r in refused] == [False, False, True]  # type: ignore[attr-defined]
    assert refused[2].endswith("error threshold breached: stop retrying this step.")
    assert otel.ec.history.escalation("c2") is not None


def test_a_breach_a_refused_call_causes_is_an_escalation_like_any_other(make_otel: Callable[..., OTel]) -> None:
    """A refused call that breaches the threshold is alerted on as any breach is: an event on the agent's
    span, the escalation metric, the review hook, and a trajectory record holding the refusal (the other
    refusals count in the history only: the tool did not run)."""
    reviewed: list[Any] = []
    otel = make_otel(
        retry=RetryPolicy(attempts=1),
        breaker=BreakerPolicy(threshold=3, cooldown_s=30),
        thresholds=Thresholds(consecutive=5, budget=None, action="human"),
        human_review=reviewed.append,
    )

    @otel.ec.tool
    def load(user_id: str) -> Any:
        return {}[user_id]

    with otel.tracer.start_as_current_span(
        "invoke_agent support", attributes={"gen_ai.operation.name": "invoke_agent", "gen_ai.conversation.id": "c1"}
    ):
        results = [load("u1") for _ in range(5)]  # three failures open the breaker; two refusals follow
    otel.ec.flush()
    assert [r.circuit_open for r in results] == [False, False, False, True, True]  # type: ignore[attr-defined]
    assert results[4].escalated  # type: ignore[attr-defined]
    assert [e.count for e in reviewed] == [5]
    assert otel.metric_sum("errcompact.escalations") == 1
    (agent,) = otel.spans("invoke_agent support")
    assert [e.name for e in agent.events] == ["errcompact.escalation"]
    records = sorted(otel.records(), key=lambda r: r.count or 0)
    assert [r.count for r in records] == [1, 2, 3, 5]  # the three failures, and the refusal that breached
    assert records[3].raw_error.startswith("circuit open: [KeyError]")
    assert records[3].escalation is not None and records[3].escalation["count"] == 5
    assert otel.metric_sum("errcompact.errors") == 3  # refusals are no tool failures of their own


def test_a_breach_a_refused_call_causes_in_a_plain_loop_is_an_event_on_its_span(make_otel: Callable[..., OTel]) -> None:
    """A plain loop (``ec.conversation`` around ``@ec.tool`` calls, no agent span): the refused call that
    breaches carries the ``errcompact.escalation`` event on its own span, as a failing call does, and the
    halt marks that root span ERROR (the breach was counted after its span ended, so it had no span at all)."""
    otel = make_otel(
        retry=RetryPolicy(attempts=1),
        breaker=BreakerPolicy(threshold=3, cooldown_s=30),
        thresholds=Thresholds(consecutive=5, budget=None),
    )

    @otel.ec.tool
    def load(user_id: str) -> Any:
        return {}[user_id]

    with otel.ec.conversation("c1"):
        results = [load("u1") for _ in range(5)]  # three failures open the breaker; two refusals follow
    assert results[4].circuit_open and results[4].escalated  # type: ignore[attr-defined]
    spans = otel.spans("execute_tool load")
    assert len(spans) == 5
    breached = spans[4]
    events = [dict(e.attributes or {}) for e in breached.events if e.name == "errcompact.escalation"]
    assert len(events) == 1
    assert events[0]["errcompact.reason"] == "consecutive" and events[0]["errcompact.count"] == 5
    assert events[0]["errcompact.action"] == "halt" and events[0]["gen_ai.tool.name"] == "load"
    assert breached.status.status_code is StatusCode.ERROR
    assert [e.name for s in spans[:4] for e in s.events if e.name == "errcompact.escalation"] == []


def test_rate_limits_are_not_stuck_but_the_budget_caps_them(make_otel: Callable[..., OTel], upstream: Any) -> None:
    otel = make_otel(retry=RetryPolicy(attempts=1), breaker_threshold=0, thresholds=Thresholds(consecutive=3, budget=6))
    server, url = upstream
    fetch = fetch_tool(otel, url)
    server.script.extend([(429, {"retry-after": "1"})] * 6)
    for _ in range(5):
        result = fetch("/x")
        assert not result.escalated  # type: ignore[attr-defined]
    result = fetch("/x")
    assert result.escalated  # type: ignore[attr-defined]
    breach = otel.ec.history.escalation("default")
    assert breach is not None and breach.reason == "budget"
    record = otel.records()[-1]
    assert record.digest is not None  # the wait came from the response's header, not the traceback
    assert (record.digest.error_class, record.digest.retry_after_s) == ("rate_limited", 1.0)


def test_a_standing_breach_does_not_hide_a_later_stuck_loop(make_otel: Callable[..., OTel]) -> None:
    otel = make_otel(thresholds=Thresholds(consecutive=2, budget=None, action="human"), human_review=lambda e: None)

    @otel.ec.tool
    def lookup(key: str) -> int:
        return {"a": 1}[key]

    @otel.ec.tool
    def parse(text: str) -> int:
        return int(text)

    lookup("user_id")
    assert lookup("user_id").escalated  # type: ignore[attr-defined]
    parse("seven")
    later = parse("seven")
    assert later.escalated  # type: ignore[attr-defined]
    breach = otel.ec.history.escalation("default")
    assert breach is not None and breach.error_type == "ValueError"
    assert otel.metric_sum("errcompact.escalations") == 2


def test_the_library_halt_is_not_recorded_as_a_tool_failure(make_otel: Callable[..., OTel]) -> None:
    otel = make_otel(thresholds=Thresholds(consecutive=1, budget=None), breaker_threshold=0)

    @otel.ec.tool
    def lookup(key: str) -> int:
        return {"a": 1}[key]

    with otel.ec.conversation("conv-halted"):
        lookup("user_id")  # breach: the next boundary call raises
        framework_attributes = {"gen_ai.operation.name": "execute_tool", "gen_ai.tool.name": "lookup"}
        with (
            pytest.raises(ErrorBudgetExceeded),  # a framework's tool span around the halted call
            otel.tracer.start_as_current_span("execute_tool lookup", attributes=framework_attributes),
        ):
            lookup("user_id")
    (framework,) = [s for s in otel.spans("execute_tool lookup") if s.instrumentation_scope.name == "tests.agent"]
    assert [e.name for e in framework.events] == ["exception"]  # the halt did end it with an exception
    records = otel.records()
    assert len(records) == 1 and "history.py" not in str(records[0].digest)
    assert otel.metric_sum("errcompact.errors") == 1


def test_a_halted_root_that_is_a_tool_span_is_not_one_more_failure(make_otel: Callable[..., OTel]) -> None:
    """A framework's tool span with no agent span above it is its trace's root: when the call inside it
    breaches the halt threshold, the root is marked ERROR (a halted run is never green), with the halt as
    its ``error.type``, and it is not counted as one more tool failure."""
    otel = make_otel(thresholds=Thresholds(consecutive=3, budget=None), breaker_threshold=0)

    @otel.ec.tool
    def load_user(user_id: str) -> Any:
        return {}[user_id]

    framework_attributes = {
        "gen_ai.operation.name": "execute_tool", "gen_ai.tool.name": "load_user", "gen_ai.conversation.id": "conv-1",
    }  # fmt: skip
    with otel.ec.conversation("conv-1"):
        for _ in range(3):
            with otel.tracer.start_as_current_span("execute_tool load_user", attributes=framework_attributes):
                load_user("u-42")
    roots = [s for s in otel.spans("execute_tool load_user") if s.instrumentation_scope.name == "tests.agent"]
    assert roots[2].status.status_code is StatusCode.ERROR  # halted: marked
    assert (roots[2].attributes or {})["error.type"] == "otel_errcompact.exceptions.ErrorBudgetExceeded"
    assert "3 tool failure(s), 1 distinct" in otel.ec.context("conv-1")
    assert len(otel.records()) == 3 and otel.metric_sum("errcompact.errors") == 3


def test_a_halt_cancels_in_flight_sibling_tools(make_otel: Callable[..., OTel]) -> None:
    otel = make_otel(thresholds=Thresholds(consecutive=1, budget=None), breaker_threshold=0)
    finished: list[str] = []

    @otel.ec.tool
    async def slow_search(q: str) -> str:
        await asyncio.sleep(2)
        finished.append("search")
        return "results"

    @otel.ec.tool(mutating=True)
    async def save(name: str) -> str:
        await asyncio.sleep(0.3)
        finished.append("save")
        return "saved"

    @otel.ec.tool
    async def broken(key: str) -> int:
        await asyncio.sleep(0.05)
        return {"a": 1}[key]

    async def main() -> list[Any]:
        with otel.ec.conversation("conv-halt"):
            return await asyncio.gather(slow_search("q"), save("a.txt"), broken("user_id"))

    started = time.perf_counter()
    search, saved, failed = asyncio.run(main())
    assert time.perf_counter() - started < 1.5  # not the 2 s of the search
    assert isinstance(failed, ToolErrorText) and failed.escalated
    assert isinstance(search, ToolErrorText) and search.cancelled and search == "Cancelled: slow_search (halt)"
    assert saved == "saved" and finished == ["save"]  # the mutating tool finished
    assert otel.ec.history.escalation("conv-halt") is not None
    assert "(×1)" not in otel.ec.context("conv-halt") and "1 tool failure(s)" in otel.ec.context("conv-halt")
    cancelled = [r for r in otel.records() if r.exception_type == "CancelledError"]
    assert [(r.tool_name, r.raw_error) for r in cancelled] == [("slow_search", "cancelled: halt")]
    assert events(otel, "errcompact.cancelled") == [{"errcompact.reason": "halt", "gen_ai.tool.name": "slow_search"}]


def test_abort_cancels_read_only_tools_and_lets_mutating_ones_finish(make_otel: Callable[..., OTel]) -> None:
    otel = make_otel()
    finished: list[str] = []

    @otel.ec.tool
    async def grep(pattern: str) -> str:
        await asyncio.sleep(5)
        return "matches"

    @otel.ec.tool(mutating=True)
    async def write(name: str) -> str:
        await asyncio.sleep(0.3)
        finished.append(name)
        return "written"

    async def main() -> tuple[Any, ...]:
        with otel.ec.conversation("conv-abort"):
            tasks = asyncio.gather(grep("TODO"), write("notes.md"))
            await asyncio.sleep(0.1)
            cancelled = otel.ec.abort()
            results = await tasks
            after = await grep("again")  # an abort stands: the next call does not run
            return (cancelled, *results, after)

    started = time.perf_counter()
    cancelled, grep_result, write_result, after = asyncio.run(main())
    assert time.perf_counter() - started < 2
    assert cancelled == 1 and write_result == "written" and finished == ["notes.md"]
    assert grep_result.cancelled and after.cancelled
    assert otel.ec.context("conv-abort") == ""  # cancellations are not failures
    assert otel.metric_sum("errcompact.errors") == 0
    assert [r.raw_error for r in otel.records()] == ["cancelled: abort", "cancelled: abort"]


def test_a_call_cut_short_by_a_timeout_is_neither_a_failure_nor_a_success(make_otel: Callable[..., OTel]) -> None:
    """A call the host cancels (``asyncio.wait_for`` timing out) ends its span with no status and no
    exception event, as OpenTelemetry ends a span on a ``BaseException``: it must not count as the success
    that resets the consecutive counter, so the third identical failure still escalates."""
    otel = make_otel(thresholds=Thresholds(consecutive=3, budget=None), breaker_threshold=0)

    @otel.ec.tool
    async def lookup(key: str, wait_s: float = 0.0) -> int:
        await asyncio.sleep(wait_s)
        return {"a": 1}[key]

    async def main() -> list[Any]:
        with otel.ec.conversation("conv-timeout"):
            results = [await lookup("user_id"), await lookup("user_id")]
            with pytest.raises(TimeoutError):
                await asyncio.wait_for(lookup("user_id", 30.0), 0.05)
            results.append(await lookup("user_id"))
            return results

    *_, third = asyncio.run(main())
    assert isinstance(third, ToolErrorText) and third.escalated, third
    assert otel.ec.history.escalation("conv-timeout") is not None
    timed_out = [s for s in otel.spans("execute_tool lookup") if (s.attributes or {}).get("errcompact.cancelled")]
    assert len(timed_out) == 1
    assert [e.attributes for e in timed_out[0].events] == [
        {"errcompact.reason": "cancelled", "gen_ai.tool.name": "lookup"}
    ]
    outcomes = {p.attributes["errcompact.outcome"]: p.value for p in otel.metric_points("errcompact.tool.calls")}
    assert outcomes == {"error": 3}  # the timed-out call is no successful call
    assert "3 tool failure(s), 1 distinct" in otel.ec.context("conv-timeout")


def test_the_hosts_cancellation_propagates_while_a_halt_or_an_abort_stands(make_otel: Callable[..., OTel]) -> None:
    """A halt or an abort turns the cancellation of a tool *it* cancelled into a "Cancelled" result; the
    host's own cancellation of the task (a timeout, ``task.cancel()``) must still reach the host, also
    while one of them stands for the scope: swallowed, the task would run on past its deadline."""
    otel = make_otel(thresholds=Thresholds(consecutive=1, budget=None), breaker_threshold=0)

    @otel.ec.tool(mutating=True)
    async def save(name: str) -> str:
        await asyncio.sleep(30)
        return "saved"

    @otel.ec.tool
    async def grep(pattern: str) -> str:
        await asyncio.sleep(30)
        return "matches"

    @otel.ec.tool
    async def broken(key: str) -> int:
        return {"a": 1}[key]

    async def halted_then_timed_out() -> str:
        with otel.ec.conversation("conv-halted"):
            saving = asyncio.ensure_future(save("a.txt"))  # a mutating tool: the halt lets it finish
            await asyncio.sleep(0.01)
            assert (await broken("user_id")).escalated
            try:
                async with asyncio.timeout(0.05):
                    await saving
            except TimeoutError:
                return "timed out"
            return "ran on past its timeout"

    async def aborted_and_cancelled() -> str:
        async def agent() -> Any:
            with otel.ec.conversation("conv-aborted"):
                return await grep("TODO")

        task = asyncio.ensure_future(agent())
        while otel.ec.boundary.aborts.in_flight("conv-aborted") == 0:
            await asyncio.sleep(0.005)
        otel.ec.abort("conv-aborted")  # a stop button: the abort, and the request's task cancelled with it
        task.cancel()
        try:
            await task
        except asyncio.CancelledError:
            return "cancelled"
        return "ran on after its cancellation"

    assert asyncio.run(halted_then_timed_out()) == "timed out"
    assert asyncio.run(aborted_and_cancelled()) == "cancelled"
    assert otel.ec.boundary.aborts.in_flight("conv-halted") == 0
    assert otel.ec.boundary.aborts.in_flight("conv-aborted") == 0


def test_a_conversation_aborted_while_others_run_can_be_used_again(make_otel: Callable[..., OTel]) -> None:
    """``abort()`` stops one conversation's tools while its neighbours run on; a later run that reuses
    the conversation id (the user writes again after pressing stop) calls ``acknowledge`` or ``reset``
    first, and its tools run again (the abort stood for good without a recovery loop to consume it)."""
    otel = make_otel()

    @otel.ec.tool
    async def grep(pattern: str, wait_s: float = 0.0) -> str:
        await asyncio.sleep(wait_s)
        return f"matches for {pattern}"

    async def agent(conv: str, wait_s: float) -> Any:
        with otel.ec.conversation(conv):
            return await grep("TODO", wait_s)

    async def main() -> list[Any]:
        tasks = [asyncio.ensure_future(agent(f"conv-{i}", 0.3 if i else 30.0)) for i in range(4)]
        while otel.ec.boundary.aborts.in_flight("conv-0") == 0:
            await asyncio.sleep(0.005)
        assert otel.ec.abort("conv-0") == 1
        return await asyncio.gather(*tasks)

    stopped, *neighbours = asyncio.run(main())
    assert isinstance(stopped, ToolErrorText) and stopped.cancelled
    assert neighbours == ["matches for TODO"] * 3
    assert asyncio.run(agent("conv-0", 0.0)).cancelled  # the abort stands until cleared

    otel.ec.acknowledge("conv-0")
    assert asyncio.run(agent("conv-0", 0.0)) == "matches for TODO"
    otel.ec.abort("conv-0")
    otel.ec.reset("conv-0")
    assert asyncio.run(agent("conv-0", 0.0)) == "matches for TODO"
    assert otel.ec.context("conv-0") == "" and otel.metric_sum("errcompact.errors") == 0
