"""Classification of real SDK exceptions, of their digests, and of GenAI span attributes."""

from __future__ import annotations

import email.utils
import http.client
import socket
import time
import urllib.error
import urllib.request
from http.server import BaseHTTPRequestHandler
from typing import Any

import anthropic
import openai
import pytest

from otel_errcompact import compact_text
from otel_errcompact.recovery.classify import (
    classify_exception,
    classify_span,
    retry_after_from_headers,
    retry_after_from_text,
)
from otel_errcompact.trajectory import DigestInfo
from otel_errcompact.wire_server import ModelWireServer, Reply
from tests.realerrors import loopback_server

CASES = [
    ("rate_limited", "rate_limited", 2.0),
    ("prompt_too_long", "prompt_too_long", None),
    ("unauthorized", "permanent", None),
    ("overloaded", "transient", None),
]


def _openai_error(client: openai.OpenAI) -> BaseException:
    with pytest.raises(openai.APIError) as info:
        client.chat.completions.create(model="m", messages=[{"role": "user", "content": "hi"}])
    return info.value


def _anthropic_error(client: anthropic.Anthropic) -> BaseException:
    with pytest.raises(anthropic.APIError) as info:
        client.messages.create(model="m", max_tokens=16, messages=[{"role": "user", "content": "hi"}])
    return info.value


@pytest.mark.parametrize(("kind", "expected", "retry_after"), CASES)
def test_sdk_exceptions_and_their_digests(
    wire: tuple[ModelWireServer, str],
    openai_client: openai.OpenAI,
    anthropic_client: anthropic.Anthropic,
    kind: str,
    expected: str,
    retry_after: float | None,
) -> None:
    server, _ = wire
    for call, client in ((_openai_error, openai_client), (_anthropic_error, anthropic_client)):
        server.add(Reply(kind, retry_after_s=2))  # type: ignore[arg-type]
        exc = call(client)  # type: ignore[operator]
        got = classify_exception(exc)
        assert got.error_class == expected, (type(exc), got)
        assert got.retry_after_s == retry_after
        digest = compact_text(str(exc))
        assert digest.error_class == expected
        assert digest.retryable is (expected in ("transient", "rate_limited"))
        info = DigestInfo.from_digest(digest)
        assert info.error_class == expected


def test_anthropic_sdk_errors_keep_their_status_and_type_however_the_sdk_words_them(
    wire: tuple[ModelWireServer, str], anthropic_client: anthropic.Anthropic
) -> None:
    """The Anthropic SDK words a status error as ``401 invalid x-api-key (request_id: req_…, path:
    /v1/messages, type: authentication_error)`` from 2.x on, where it wrote ``Error code: 401 - {…}``
    before: the digest keeps the status and the error type either way, and each request's own id stays
    out of the key, so repeats of one failure share their class."""
    server, _ = wire
    digests = []
    for _ in range(2):
        server.add(Reply("unauthorized"))
        digests.append(compact_text(str(_anthropic_error(anthropic_client))))
    assert digests[0].line.startswith("[HTTP 401]: authentication_error: "), digests[0].line
    assert digests[0].status == 401 and not digests[0].retryable
    assert digests[0].key == digests[1].key
    server.add(Reply("rate_limited", retry_after_s=2))
    limited = compact_text(str(_anthropic_error(anthropic_client)))
    assert limited.line.startswith("[HTTP 429]: rate_limit_error: "), limited.line
    assert limited.retryable and limited.error_class == "rate_limited"


def test_openai_rate_limit_digest_carries_retry_after_from_the_body(
    wire: tuple[ModelWireServer, str], openai_client: openai.OpenAI
) -> None:
    wire[0].add(Reply("rate_limited", retry_after_s=6.5))
    digest = compact_text(str(_openai_error(openai_client)))
    assert (digest.error_class, digest.retry_after_s) == ("rate_limited", 6.5)


def test_connection_refused_and_timeouts_are_transient() -> None:
    client = openai.OpenAI(api_key="sk", base_url="http://127.0.0.1:9/v1", max_retries=0, timeout=2)
    exc = _openai_error(client)
    assert type(exc).__name__ == "APIConnectionError"
    assert classify_exception(exc).error_class == "transient"
    assert classify_exception(TimeoutError("timed out")).error_class == "transient"


class _Statuses(BaseHTTPRequestHandler):
    """Answers ``GET /<status>`` with that status, a ``Retry-After`` of 7 s on 429 and 503, and ``GET /short``
    with a body cut short of its ``Content-Length``."""

    def do_GET(self) -> None:
        if self.path == "/short":
            self.send_response(200)
            self.send_header("Content-Length", "100")
            self.end_headers()
            self.wfile.write(b"abc")
            return
        status = int(self.path.strip("/"))
        self.send_response(status)
        if status in (429, 503):
            self.send_header("Retry-After", "7")
        self.send_header("Content-Length", "0")
        self.end_headers()

    def log_message(self, format: str, *args: Any) -> None:
        return None


def _urllib_error(url: str) -> BaseException:
    # URLError and HTTPError are OSErrors; IncompleteRead an HTTPException
    with pytest.raises((OSError, http.client.HTTPException)) as info, urllib.request.urlopen(url, timeout=10) as r:
        r.read()
    return info.value


def test_the_standard_librarys_http_errors() -> None:
    """urllib keeps the status in ``code`` and the headers in ``headers``, and wraps what the socket raised
    in ``URLError.reason``: a 5xx, a refused connection and a cut body are transient as httpx's are."""
    with loopback_server(_Statuses) as base:
        paths = ("/503", "/502", "/429", "/404", "/short")
        got = {path: classify_exception(_urllib_error(base + path)) for path in paths}
    assert (got["/503"].error_class, got["/503"].retry_after_s) == ("transient", 7.0)
    assert got["/502"].error_class == "transient"
    assert (got["/429"].error_class, got["/429"].retry_after_s) == ("rate_limited", 7.0)
    assert got["/404"].error_class == "permanent"
    assert got["/short"].error_class == "transient"
    refused = _urllib_error(f"http://127.0.0.1:{_closed_port()}/")
    assert isinstance(refused, urllib.error.URLError) and classify_exception(refused).error_class == "transient"


def _closed_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def test_cancellation_is_aborted_and_plain_bugs_permanent() -> None:
    import asyncio

    assert classify_exception(asyncio.CancelledError()).error_class == "aborted"
    try:
        {}["user_id"]
    except KeyError as exc:
        assert classify_exception(exc).error_class == "permanent"


def test_quota_exhaustion_is_permanent_though_it_is_a_429() -> None:
    raw = 'Error code: 429 - {"error": {"message": "You exceeded your current quota", "code": "insufficient_quota"}}'
    d = compact_text(raw)
    assert (d.status, d.error_class, d.retryable) == (429, "permanent", False)


def test_retry_after_forms() -> None:
    assert retry_after_from_headers({"retry-after": "Wed, 21 Oct 2015 07:28:10 GMT"}, now=1445412480.0) == 10.0
    assert retry_after_from_headers({"retry-after": "soon"}) is None
    assert retry_after_from_text("HTTP/1.1 429 Too Many Requests\nRetry-After: 7\n\n{}") == 7.0
    assert retry_after_from_text('{"retryDelay": "20s"}') == 20.0
    assert retry_after_from_text("Please try again in 120ms.") == 0.12
    assert retry_after_from_text("Rate limit exceeded. Please try again in 5 minutes.") == 300.0
    assert retry_after_from_text("Daily quota window: try again in 2 hours") == 7200.0
    assert retry_after_from_text("Please try again in 1h2m3s.") == 3723.0
    assert retry_after_from_text("nothing here") is None


class _Later(BaseHTTPRequestHandler):
    """Answers 429 with a ``Retry-After`` HTTP-date 30 s ahead (the form the header also takes)."""

    def do_GET(self) -> None:
        self.send_response(429)
        self.send_header("Retry-After", email.utils.formatdate(time.time() + 30, usegmt=True))
        self.send_header("Content-Length", "0")
        self.end_headers()

    def log_message(self, format: str, *args: Any) -> None:
        return None


def test_a_raw_response_with_crlf_line_ends_gives_its_http_date() -> None:
    """A raw response as it came off the socket ends its lines in CRLF: the HTTP-date is read there too."""
    with loopback_server(_Later) as base, socket.create_connection(("127.0.0.1", int(base.rsplit(":", 1)[1]))) as c:
        c.sendall(b"GET / HTTP/1.0\r\nHost: 127.0.0.1\r\n\r\n")
        raw = b"".join(iter(lambda: c.recv(4096), b"")).decode("latin-1")
    assert "\r\nRetry-After: " in raw
    seconds = retry_after_from_text(raw)
    assert seconds is not None and 25 <= seconds <= 30


def test_genai_span_attributes() -> None:
    assert classify_span({"gen_ai.response.finish_reasons": ("stop",)}) is None
    assert classify_span({"gen_ai.response.finish_reasons": ["max_tokens"]}).error_class == "output_truncated"  # type: ignore[union-attr]
    assert classify_span({"error.type": "openai.RateLimitError"}).error_class == "rate_limited"  # type: ignore[union-attr]
    assert classify_span({"error.type": "529"}).error_class == "transient"  # type: ignore[union-attr]
    assert classify_span({"error.type": "timeout"}).error_class == "transient"  # type: ignore[union-attr]
    bad = classify_span({"error.type": "anthropic.BadRequestError"}, "prompt is too long: 215034 tokens > 200000")
    assert bad is not None and bad.error_class == "prompt_too_long"


class _Hostile(Exception):
    """An exception whose attributes blow up when read, as a broken SDK wrapper might."""

    @property
    def status_code(self) -> int:
        raise RuntimeError("boom")

    @property
    def response(self) -> object:
        raise RuntimeError("boom")


def test_hostile_and_odd_input_gets_a_bounded_answer() -> None:
    assert classify_exception(_Hostile("x")).error_class == "permanent"
    assert retry_after_from_headers(object()) is None
    assert retry_after_from_headers({"retry-after": "nan"}) is None
    assert retry_after_from_headers({"retry-after": "1e12"}) == 24 * 3600.0  # capped
    assert retry_after_from_text("x" * 1_000_000 + "try again in 5s") is None  # only the head is read
    assert classify_span({"gen_ai.response.finish_reasons": object()}) is None
    from otel_errcompact.recovery.pacing import parse_rate_limit_headers

    assert parse_rate_limit_headers(object(), 0.0) == {}
    odd = {"x-ratelimit-limit-requests": "0", "x-ratelimit-remaining-requests": "x"}
    assert parse_rate_limit_headers(odd, 0.0) == {}



def _fetch(url: str) -> str:
    return url


def test_a_programming_error_quoting_a_transient_word_is_permanent() -> None:
    """A keyword, key or attribute named ``timeout`` in a programming error's message is code, not a
    timeout: the same call fails the same way however often it is repeated."""
    import traceback

    def bad_keyword() -> object:
        return _fetch("http://127.0.0.1/", **{"timeout": 5})  # type: ignore[arg-type]

    def missing_key() -> object:
        return {"url": "u"}["timeout"]

    def no_attribute() -> object:
        return None.timeout  # type: ignore[attr-defined]

    def timed_out() -> object:
        left, right = socket.socketpair()
        with left, right:
            left.settimeout(0.01)
            return left.recv(1)  # nothing is ever sent: a real timeout

    def raised(call: Any) -> tuple[BaseException, str]:
        try:
            call()
        except Exception as exc:
            return exc, traceback.format_exc()
        raise AssertionError("did not raise")

    for call in (bad_keyword, missing_key, no_attribute):
        exc, raw = raised(call)
        digest = compact_text(raw)
        assert "timeout" in digest.line, digest.line
        assert not digest.retryable, digest.line
        assert classify_exception(exc).error_class == "permanent"
    exc, raw = raised(timed_out)
    assert compact_text(raw).retryable, compact_text(raw).line  # a real timeout stays transient
    assert classify_exception(exc).error_class == "transient"
