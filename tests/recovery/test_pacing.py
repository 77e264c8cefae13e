"""Pacing from real rate-limit headers: a real token bucket on 127.0.0.1, real SDK and httpx clients."""

from __future__ import annotations

import asyncio
import contextlib
import socket
import threading
import time
from http.server import BaseHTTPRequestHandler
from typing import Any

import anthropic
import httpx
import openai

from otel_errcompact.recovery.pacing import Pacer, pace, parse_duration, parse_rate_limit_headers
from otel_errcompact.wire_server import ModelWireServer, TokenBucket, serve
from tests.realerrors import loopback_server


def _hammer(call: Any, seconds: float, workers: int = 4) -> int:
    done = [0]
    lock = threading.Lock()
    end = time.monotonic() + seconds

    def work() -> None:
        while time.monotonic() < end:
            try:
                call()
            except openai.RateLimitError:
                continue
            except anthropic.RateLimitError:
                continue
            except httpx.HTTPStatusError:
                continue
            with lock:
                done[0] += 1

    threads = [threading.Thread(target=work) for _ in range(workers)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return done[0]


def test_headers_of_all_three_families_are_read_from_real_responses() -> None:
    for ietf, path in ((False, "/v1/chat/completions"), (False, "/v1/messages"), (True, "/v1/chat/completions")):
        with serve(ModelWireServer(bucket=TokenBucket(10, 5), ietf=ietf)) as (_, url):
            with httpx.Client() as client:
                for _ in range(4):
                    response = client.post(url + path, json={})
            now = time.time()
            budget = parse_rate_limit_headers(response.headers, now)["requests"]
            assert budget.limit == 10 and budget.remaining == 6
            assert 0.5 < budget.reset_at - now <= 1.1  # 4 of 10 used, refilled at 5/s
            # 10 / 5 per second = 2 s: from the policy, or inferred never shorter (less the response's latency,
            # where the reset is a time of day) and longer by at most 1 unit in 3
            assert 1.95 <= budget.window_s <= 2.7


def test_durations() -> None:
    assert parse_duration("6m0s") == 360 and parse_duration("12ms") == 0.012 and parse_duration("1h") == 3600
    assert parse_duration("0.5") == 0.5 and parse_duration("") is None


def test_paced_sdk_clients_get_no_429_where_unpaced_ones_do() -> None:
    for kind in ("openai", "anthropic", "ietf"):
        counts = {}
        for paced in (False, True):
            bucket = TokenBucket(capacity=6, rate=6)
            with serve(ModelWireServer(bucket=bucket, ietf=kind == "ietf")) as (_, url):
                if kind == "anthropic":
                    a = anthropic.Anthropic(api_key="k", base_url=url, max_retries=0)
                    call: Any = lambda a=a: a.messages.create(  # noqa: E731
                        model="m", max_tokens=8, messages=[{"role": "user", "content": "x"}]
                    )
                    client: Any = a
                elif kind == "openai":
                    o = openai.OpenAI(api_key="k", base_url=url + "/v1", max_retries=0)
                    call = lambda o=o: o.chat.completions.create(  # noqa: E731
                        model="m", messages=[{"role": "user", "content": "x"}]
                    )
                    client = o
                else:
                    h = httpx.Client()
                    call = lambda h=h: h.post(url + "/v1/chat/completions", json={}).raise_for_status()  # noqa: E731
                    client = h
                if paced:
                    pace(client, Pacer())
                done = _hammer(call, 1.5)
            counts[paced] = (bucket.refused, done)
        assert counts[True][0] == 0, (kind, counts)
        assert counts[False][0] > 0, (kind, counts)
        assert counts[True][1] >= 6, (kind, counts)  # it did run, at the bucket's pace


def test_async_client_and_429_retry_after_holds_every_caller() -> None:
    bucket = TokenBucket(capacity=2, rate=4)
    with serve(ModelWireServer(bucket=bucket)) as (_, url):

        async def main() -> tuple[int, int]:
            pacer = Pacer()
            client = pace(httpx.AsyncClient(), pacer)
            assert pace(client, pacer) is client and len(client.event_hooks["request"]) == 1
            async with client:
                statuses = [(await client.post(url + "/v1/chat/completions", json={})).status_code for _ in range(8)]
            return statuses.count(429), pacer.delays

        refused, delays = asyncio.run(main())
    assert refused == 0 and delays > 0


def test_pace_rejects_what_it_cannot_hook() -> None:
    try:
        pace(object())
    except TypeError as exc:
        assert "httpx client" in str(exc)
    else:  # pragma: no cover
        raise AssertionError("pace(object()) should have raised")


def test_clients_paced_by_one_handle_share_the_budget(make_otel: Any) -> None:
    otel = make_otel()
    bucket = TokenBucket(capacity=6, rate=6)
    with serve(ModelWireServer(bucket=bucket)) as (_, url):
        clients = [otel.ec.pace(openai.OpenAI(api_key="k", base_url=url + "/v1", max_retries=0)) for _ in range(2)]
        turn = iter(range(1_000_000))

        def call() -> None:  # the workers alternate between the two clients
            client = clients[next(turn) % 2]
            client.chat.completions.create(model="m", messages=[{"role": "user", "content": "x"}])

        done = _hammer(call, 1.5)
    assert bucket.refused == 0 and done >= 6


def _openai_call(client: Any) -> Any:
    return lambda: client.chat.completions.create(model="m", messages=[{"role": "user", "content": "x"}])


def test_more_callers_than_the_limit_get_no_429() -> None:
    """Eight threads against a bucket of six: more requests wait than the bucket holds."""
    bucket = TokenBucket(capacity=6, rate=6)
    with serve(ModelWireServer(bucket=bucket)) as (_, url):
        client = pace(openai.OpenAI(api_key="k", base_url=url + "/v1", max_retries=0), Pacer())
        _openai_call(client)()  # nothing can pace the requests sent before any response reported a budget
        done = _hammer(_openai_call(client), 1.5, workers=8)
    assert bucket.refused == 0 and done >= 6, (bucket.refused, done)


def test_after_a_429_the_held_callers_do_not_burst() -> None:
    """A 429 means the bucket is empty: when its retry-after ends there is about one unit, not a window."""
    bucket = TokenBucket(capacity=4, rate=2)  # a unit every 0.5 s: the next call surely finds it empty
    with serve(ModelWireServer(bucket=bucket)) as (_, url):
        client = pace(openai.OpenAI(api_key="k", base_url=url + "/v1", max_retries=0), Pacer())
        bucket.drain()  # another, unpaced, caller spends the whole bucket
        with contextlib.suppress(openai.RateLimitError):
            _openai_call(client)()
        assert bucket.refused == 1
        done = _hammer(_openai_call(client), 2.0, workers=6)
    assert bucket.refused == 1 and done >= 2, (bucket.refused, done)


def a_429_seen_by_one_worker_holds_another(store: Any) -> None:
    """Two workers' pacers over one ``store`` (a fleet's shared state): the first worker's 429 holds the
    second worker's next request for its retry-after, though the second pacer never saw a 429 itself."""
    from otel_errcompact.wire_server import Reply

    server = ModelWireServer()
    server.add(Reply("rate_limited", retry_after_s=1.5), Reply(text="done"))
    with serve(server) as (_, url):
        first_pacer, second_pacer = Pacer(store), Pacer(store)
        first = pace(openai.OpenAI(api_key="k", base_url=url + "/v1", max_retries=0), first_pacer)
        second = pace(openai.OpenAI(api_key="k", base_url=url + "/v1", max_retries=0), second_pacer)
        with contextlib.suppress(openai.RateLimitError):
            _openai_call(first)()
        started = time.monotonic()
        _openai_call(second)()
        waited = time.monotonic() - started
    assert second_pacer.delays == 1 and second_pacer.delayed_s > 1.0, (second_pacer.delays, second_pacer.delayed_s)
    assert waited > 1.0


def test_a_429_seen_by_one_worker_holds_another_sharing_the_store() -> None:
    from otel_errcompact.recovery.state import InMemoryStateStore

    a_429_seen_by_one_worker_holds_another(InMemoryStateStore())


class _Flaky(BaseHTTPRequestHandler):
    """A healthy budget (10 requests a second, 9 left, full again in 100 ms) while ``up``; while not, every
    connection is dropped before a response, as by a restarting load balancer."""

    protocol_version = "HTTP/1.1"
    up = True

    def do_GET(self) -> None:
        if not type(self).up:
            self.close_connection = True
            self.connection.shutdown(socket.SHUT_RDWR)
            return
        self.send_response(200)
        self.send_header("x-ratelimit-limit-requests", "10")
        self.send_header("x-ratelimit-remaining-requests", "9")
        self.send_header("x-ratelimit-reset-requests", "100ms")
        self.send_header("Content-Length", "0")
        self.end_headers()

    def log_message(self, format: str, *args: Any) -> None:
        return None


def test_requests_dropped_without_a_response_give_their_reservation_back() -> None:
    """A request that never got a response is no longer in flight once its send raised: it must not slow
    every later request to the host until its reservation expires a minute later. (Its turn stays spent:
    it may have reached the server.)"""
    pacer = Pacer()
    with loopback_server(_Flaky) as base, pace(httpx.Client(timeout=5), pacer) as client:
        assert client.get(base).status_code == 200
        _Flaky.up = False
        try:
            dropped = 0
            for _ in range(20):
                with contextlib.suppress(httpx.TransportError):
                    client.get(base)
                    raise AssertionError("a dropped connection answered")
                dropped += 1
        finally:
            _Flaky.up = True
        time.sleep(2.5)  # the turns the dropped requests took, at 10 a second, are past
        took = []
        for _ in range(3):
            start = time.monotonic()
            assert client.get(base).status_code == 200
            took.append(time.monotonic() - start)
    assert dropped == 20 and max(took) < 0.5, took


class _PerKey(BaseHTTPRequestHandler):
    """A model API's rate limits, per API key: key A has spent its requests for the next 6 s, key B has
    nearly all of its own left."""

    def do_GET(self) -> None:
        spent = self.headers.get("Authorization", "").endswith("key-A")
        self.send_response(200)
        self.send_header("x-ratelimit-limit-requests", "10000")
        self.send_header("x-ratelimit-remaining-requests", "0" if spent else "9999")
        self.send_header("x-ratelimit-reset-requests", "6s")
        self.send_header("Content-Length", "0")
        self.end_headers()

    def log_message(self, format: str, *args: Any) -> None:
        return None


def test_two_api_keys_to_one_host_are_two_budgets() -> None:
    """A provider limits each API key on its own: key A's spent budget does not hold back key B's requests
    to the same host."""
    pacer = Pacer()
    with (
        loopback_server(_PerKey) as base,
        pace(httpx.Client(headers={"Authorization": "Bearer sk-key-A"}, timeout=10), pacer) as a,
        pace(httpx.Client(headers={"Authorization": "Bearer sk-key-B"}, timeout=10), pacer) as b,
    ):
        assert b.get(base).status_code == 200 and a.get(base).status_code == 200  # each key reports its budget
        start = time.monotonic()
        assert b.get(base).status_code == 200
        b_waited = time.monotonic() - start
    assert b_waited < 1.0, b_waited  # not the 6 s key A's budget holds its own requests for
