"""HTTP error parser, fed with real responses from a real ``http.server`` on 127.0.0.1.

The bodies below are written in the exact envelope shapes the real APIs return; everything around them
(status line, reason, headers, framing) is produced by the real server and read back by real clients:
``urllib``, ``requests`` and ``curl``.
"""

from __future__ import annotations

import json
import sys
import urllib.error
import urllib.request
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler
from pathlib import Path
from typing import Any

import pytest

from otel_errcompact import compactor
from otel_errcompact.parsers import http
from otel_errcompact.parsers._base import Hints
from tests.realerrors import have, loopback_server, python_error, run, send_body, write


def _fastapi_422_body() -> dict[str, Any]:
    """What FastAPI answers for a body that fails validation: pydantic's real errors under ``detail``,
    each ``loc`` prefixed with ``body``."""
    from pydantic import BaseModel, Field, ValidationError

    class NewUser(BaseModel):
        name: str
        age: int = Field(gt=0)

    try:
        NewUser.model_validate({"age": -1})
    except ValidationError as exc:
        errors = exc.errors(include_url=False)
    else:  # pragma: no cover - the model must reject the input
        raise AssertionError("validation was expected to fail")
    return {"detail": [{**e, "loc": ["body", *e["loc"]]} for e in errors]}


_NGINX_502 = """<html>
<head><title>502 Bad Gateway</title></head>
<body>
<center><h1>502 Bad Gateway</h1></center>
<hr><center>nginx/1.25.3</center>
</body>
</html>
"""
_APACHE_404 = """<!DOCTYPE HTML PUBLIC "-//IETF//DTD HTML 2.0//EN">
<html><head>
<title>404 Not Found</title>
</head><body>
<h1>Not Found</h1>
<p>The requested URL was not found on this server.</p>
<hr>
<address>Apache/2.4.57 (Debian) Server at 127.0.0.1 Port 80</address>
</body></html>
"""
_CLOUDFLARE_522 = """<!DOCTYPE html>
<!--[if lt IE 7]> <html class="no-js ie6 oldie" lang="en-US"> <![endif]-->
<!--[if gt IE 8]><!--> <html class="no-js" lang="en-US"> <!--<![endif]-->
<head>
<title>example.com | 522: Connection timed out</title>
<meta charset="UTF-8" />
<meta http-equiv="X-UA-Compatible" content="IE=Edge" />
<link rel="stylesheet" id="cf_styles-css" href="/cdn-cgi/styles/main.css" />
</head>
<body>
<div id="cf-wrapper">
    <div id="cf-error-details" class="p-0">
        <header class="mx-auto pt-10 lg:pt-6 lg:px-8 w-240 lg:w-full mb-8">
            <h1 class="inline-block sm:block sm:mb-2 font-light text-60 lg:text-4xl text-black-dark
                leading-tight mr-2">
              <span class="inline-block">Connection timed out</span>
              <span class="code-label">Error code 522</span>
            </h1>
            <div>Visit <a href="https://www.cloudflare.com/5xx-error-landing?utm_source=errorcode_522">
              cloudflare.com</a> for more information.</div>
        </header>
    </div>
</div>
</body>
</html>
"""
_HUGE_HTML = (
    "<!DOCTYPE html><html><head><title>500 Internal Server Error</title></head><body>"
    "<h1>Internal Server Error</h1><pre>"
    + "<span>frame &lt;module&gt; at line 1</span>\n" * 250_000
    + "</pre></body></html>"
)
assert len(_HUGE_HTML) > 10_000_000

# path -> (status, extra headers, body, content type)
_ROUTES: dict[str, tuple[int, dict[str, str], str, str]] = {
    "/openai/429": (429, {"Retry-After": "20", "x-request-id": "req_8d0f3c4b5a6e7f8091a2b3c4d5e6f708"},
        json.dumps(
        {"error": {
            "message": "Rate limit reached for gpt-4o in organization org-Xq3ZkLm9 on tokens per min (TPM): "
                       "Limit 30000, Used 29512, Requested 1834. Please try again in 2.692s. Visit "
                       "https://platform.openai.com/account/rate-limits to learn more.",
            "type": "tokens", "param": None, "code": "rate_limit_exceeded"}}), "application/json"),
    "/openai/400": (400, {}, json.dumps(
        {"error": {
            "message": "This model's maximum context length is 128000 tokens. However, your messages "
                       "resulted in 131072 tokens. Please reduce the length of the messages.",
            "type": "invalid_request_error", "param": "messages", "code": "context_length_exceeded"}}),
        "application/json"),
    "/openai/400-param": (400, {}, json.dumps(
        {"error": {"message": "Unsupported value: 'temperature' does not support 0.2 with this model. "
                              "Only the default (1) value is supported.",
                   "type": "invalid_request_error", "param": "temperature", "code": "unsupported_value"}}),
        "application/json"),
    "/anthropic/429": (429, {"retry-after": "20", "request-id": "req_011CSHoEeqs5C35K2UUqR7Fy"}, json.dumps(
        {"type": "error",
         "error": {"type": "rate_limit_error",
                   "message": "Number of request tokens has exceeded your per-minute rate limit "
                              "(https://docs.anthropic.com/en/api/rate-limits); see the response headers for "
                              "current usage. Please reduce the prompt length or the maximum tokens "
                              "requested, or try again later."},
         "request_id": "req_011CSHoEeqs5C35K2UUqR7Fy"}), "application/json"),
    "/anthropic/429-other-request": (429, {"retry-after": "7", "request-id": "req_011CSJq9w2ZsT4e8Zr6YyV1P"},
        json.dumps(
        {"type": "error",
         "error": {"type": "rate_limit_error",
                   "message": "Number of request tokens has exceeded your per-minute rate limit "
                              "(https://docs.anthropic.com/en/api/rate-limits); see the response headers for "
                              "current usage. Please reduce the prompt length or the maximum tokens "
                              "requested, or try again later."},
         "request_id": "req_011CSJq9w2ZsT4e8Zr6YyV1P"}), "application/json"),
    "/anthropic/529": (529, {}, json.dumps(
        {"type": "error", "error": {"type": "overloaded_error", "message": "Overloaded"},
         "request_id": "req_011CSHpX3HqFZ4HrDgYt6f7a"}), "application/json"),
    "/anthropic/stream": (200, {"Cache-Control": "no-cache"},
        "event: message_start\n"
        'data: {"type": "message_start", "message": {"id": "msg_01XFDUDYJgAACzvnptvVoYEL"}}\n\n'
        "event: error\n"
        'data: {"type": "error", "error": {"type": "overloaded_error", "message": "Overloaded"}}\n\n',
        "text/event-stream"),
    "/google/429": (429, {}, json.dumps(
        {"error": {
            "code": 429,
            "message": "You exceeded your current quota, please check your plan and billing details. For "
                       "more information on this error, head to: https://ai.google.dev/gemini-api/docs/rate-limits.",
            "status": "RESOURCE_EXHAUSTED",
            "details": [
                {"@type": "type.googleapis.com/google.rpc.QuotaFailure",
                 "violations": [{"quotaMetric":
                                     "generativelanguage.googleapis.com/generate_content_free_tier_requests",
                                 "quotaId": "GenerateRequestsPerMinutePerProjectPerModel-FreeTier",
                                 "quotaDimensions": {"location": "global", "model": "gemini-2.0-flash"},
                                 "quotaValue": "15"}]},
                {"@type": "type.googleapis.com/google.rpc.Help",
                 "links": [{"description": "Learn more about Gemini API quotas",
                            "url": "https://ai.google.dev/gemini-api/docs/rate-limits"}]},
                {"@type": "type.googleapis.com/google.rpc.RetryInfo", "retryDelay": "38s"}]}}),
        "application/json; charset=UTF-8"),
    "/google/400": (400, {}, json.dumps(
        {"error": {
            "code": 400, "message": "API key not valid. Please pass a valid API key.",
            "status": "INVALID_ARGUMENT",
            "details": [{"@type": "type.googleapis.com/google.rpc.ErrorInfo", "reason": "API_KEY_INVALID",
                         "domain": "googleapis.com",
                         "metadata": {"service": "generativelanguage.googleapis.com"}}]}}),
        "application/json; charset=UTF-8"),
    "/azure/429": (429, {"Retry-After": "6", "apim-request-id": "6f0e4b3a-2d1c-4e5f-9a8b-7c6d5e4f3a2b"},
        json.dumps(
        {"error": {
            "code": "429",
            "message": "Requests to the ChatCompletions_Create Operation under Azure OpenAI API version "
                       "2024-02-01 have exceeded token rate limit of your current OpenAI S0 pricing tier. "
                       "Please retry after 6 seconds."}}), "application/json"),
    "/azure/404": (404, {}, json.dumps(
        {"error": {"code": "DeploymentNotFound",
                   "message": "The API deployment for this resource does not exist. If you created the "
                              "deployment within the last 5 minutes, please wait a moment and try again."}}),
        "application/json"),
    "/azure/content-filter": (400, {}, json.dumps(
        {"error": {"message": "The response was filtered due to the prompt triggering Azure OpenAI's content "
                              "management policy.",
                   "type": None, "param": "prompt", "code": "content_filter", "status": 400,
                   "innererror": {"code": "ResponsibleAIPolicyViolation",
                                  "content_filter_result": {"hate": {"filtered": False, "severity": "safe"},
                                                            "violence": {"filtered": True,
                                                                         "severity": "medium"}}}}}),
        "application/json"),
    "/fastapi/422": (422, {}, json.dumps(_fastapi_422_body()), "application/json"),
    "/fastapi/404": (404, {}, json.dumps({"detail": "Not Found"}), "application/json"),
    "/graphql": (400, {}, json.dumps(
        {"errors": [{"message": 'Cannot query field "nme" on type "User". Did you mean "name"?',
                     "locations": [{"line": 1, "column": 9}],
                     "extensions": {"code": "GRAPHQL_VALIDATION_FAILED"}}]}), "application/json"),
    "/problem": (404, {}, json.dumps(
        {"type": "about:blank", "title": "Not Found", "status": 404, "detail": "No order with id 4711",
         "instance": "/orders/4711"}), "application/problem+json"),
    "/oauth": (400, {"Cache-Control": "no-store"}, json.dumps(
        {"error": "invalid_grant",
         "error_description": "The provided authorization grant is invalid, expired, or revoked."}),
        "application/json"),
    "/openai/401": (401, {"www-authenticate": 'Bearer realm="OpenAI API"'}, json.dumps(
        {"error": {"message": "Incorrect API key provided: sk-proj-aab5" + "*" * 40 + "adeb. You can find your API key "
                              "at https://platform.openai.com/account/api-keys.",
                   "type": "invalid_request_error", "param": None, "code": "invalid_api_key"}}),
        "application/json"),
    "/ollama": (404, {}, json.dumps({"error": 'model "llama3.2" not found, try pulling it first'}),
                "application/json; charset=utf-8"),
    "/envoy": (503, {"server": "envoy"},
               "upstream connect error or disconnect/reset before headers. reset reason: connection failure",
               "text/plain"),
    "/nginx": (502, {"Server": "nginx/1.25.3"}, _NGINX_502, "text/html"),
    "/apache": (404, {}, _APACHE_404, "text/html; charset=iso-8859-1"),
    "/cloudflare": (522, {"Server": "cloudflare", "CF-RAY": "8a1b2c3d4e5f6a7b-FRA"}, _CLOUDFLARE_522,
                    "text/html; charset=UTF-8"),
    "/huge-html": (500, {}, _HUGE_HTML, "text/html"),
    "/empty-503": (503, {"Retry-After": "120"}, "", "text/plain"),
    "/users/email": (400, {}, json.dumps({"message": "Validation failed. Please provide the 'email' field."}),
                     "application/json"),
    "/users/phone": (400, {}, json.dumps({"message": "Validation failed. Please provide the 'phone' field."}),
                     "application/json"),
    "/orders/amount": (409, {}, json.dumps({"error": "Conflict. Check constraint 'orders_amount_positive' is "
                                                     "violated."}), "application/json"),
    "/orders/qty": (409, {}, json.dumps({"error": "Conflict. Check constraint 'orders_qty_max' is violated."}),
                    "application/json"),
    "/repos/scope": (403, {}, json.dumps({"message": "Forbidden. You can only access repositories in org 'acme'."}),
                     "application/json"),
    "/comments/scope": (403, {}, json.dumps({"message": "Forbidden. You can only delete your own comments."}),
                        "application/json"),
    **{f"/token/{state}": (401, {}, json.dumps({"message": f"Token {state}."}), "application/json")
       for state in ("expired", "revoked", "malformed")},
    "/pretty/404": (404, {}, json.dumps({"error": {"code": "not_found", "message": "No order with id 4711"}},
                                        indent=2), "application/json"),
    "/ok": (200, {}, json.dumps({"id": "chatcmpl-123", "object": "chat.completion", "choices": []}),
            "application/json"),
    "/welcome": (200, {}, "<html><head><title>Welcome to nginx!</title></head><body><h1>Welcome</h1>"
                          "</body></html>", "text/html"),
}


class _Handler(BaseHTTPRequestHandler):
    def _answer(self) -> None:
        # Read the request body: closing a socket with unread input resets the connection.
        self.rfile.read(int(self.headers.get("Content-Length") or 0))
        path = self.path.split("?", 1)[0]
        if path.startswith("/redirect"):
            self.send_response(302)
            self.send_header("Location", path[len("/redirect") :])
            self.send_header("Content-Length", "0")
            self.end_headers()
            return
        status, headers, body, content_type = _ROUTES[path]
        send_body(self, status, body.encode("utf-8"), content_type=content_type, headers=headers)

    do_GET = _answer
    do_POST = _answer

    def log_message(self, format: str, *args: Any) -> None:
        pass


@pytest.fixture(scope="module")
def server() -> Iterator[str]:
    with loopback_server(_Handler) as base:
        yield base


def _urllib(url: str) -> tuple[str, str]:
    """Fetch ``url`` and report the failure twice: as a raw response and as ``str(e)`` plus the body."""
    request = urllib.request.Request(url, data=b'{"model": "m"}',
                                     headers={"Content-Type": "application/json"})
    try:
        urllib.request.urlopen(request, timeout=30)
    except urllib.error.HTTPError as e:
        body = e.read().decode("utf-8", "replace")
        raw = (f"HTTP/1.1 {e.code} {e.reason}\n" + "".join(f"{k}: {v}\n" for k, v in e.headers.items())
               + "\n" + body)
        return raw, f"{e}\n{body}"
    raise AssertionError(f"{url} was expected to fail")


# path -> (status, expected cause prefix, expected cause suffix)
_EXPECTED: dict[str, tuple[int, str, str]] = {
    # Issue 6 shortens model-API envelopes: the code (not its category), no account id, no advice.
    "/openai/429": (429, "rate_limit_exceeded: Rate limit reached for gpt-4o on tokens per min (TPM): "
                         "Limit 30000", "(retry after 20s)"),
    "/openai/400": (400, "context_length_exceeded: This model's maximum context length is 128000 tokens.",
                    "tokens."),
    "/openai/400-param": (400, "unsupported_value: Unsupported value: 'temperature'", ""),
    # A code that names a secret is not followed by a colon: the message must not read as its value.
    "/openai/401": (401, "invalid_api_key - Incorrect API key provided:", ""),
    "/anthropic/429": (429, "rate_limit_error: Number of request tokens has exceeded your per-minute "
                            "rate limit",
                       "(retry after 20s)"),
    "/anthropic/529": (529, "overloaded_error: Overloaded", "Overloaded"),
    "/google/429": (429, "RESOURCE_EXHAUSTED: You exceeded your current quota", "(retry after 38s)"),
    "/google/400": (400, "INVALID_ARGUMENT/API_KEY_INVALID: API key not valid.", "API key not valid."),
    "/azure/429": (429, "Requests to the ChatCompletions_Create Operation", "(retry after 6s)"),
    "/azure/404": (404, "DeploymentNotFound: The API deployment for this resource does not exist.", ""),
    "/azure/content-filter": (400, "content_filter/ResponsibleAIPolicyViolation: The response was filtered",
                              ""),
    "/fastapi/422": (422, "body.name: Field required; body.age: Input should be greater than 0", ""),
    "/fastapi/404": (404, "Not Found", "Not Found"),
    "/graphql": (400, 'GRAPHQL_VALIDATION_FAILED: Cannot query field "nme" on type "User".', ""),
    "/problem": (404, "Not Found: No order with id 4711", ""),
    "/oauth": (400, "invalid_grant: The provided authorization grant is invalid, expired, or revoked.", ""),
    "/ollama": (404, 'model "llama3.2" not found, try pulling it first', ""),
    "/envoy": (503, "upstream connect error or disconnect/reset before headers. reset reason: connection "
                    "failure", ""),
    "/pretty/404": (404, "not_found: No order with id 4711", ""),
    "/nginx": (502, "Bad Gateway", "Bad Gateway"),
    "/apache": (404, "Not Found", "Not Found"),
    "/cloudflare": (522, "example.com | 522: Connection timed out: Connection timed out Error code 522", ""),
    "/huge-html": (500, "Internal Server Error", "Internal Server Error"),
    "/empty-503": (503, "Service Unavailable (retry after 120s)", ""),
}


@pytest.mark.parametrize("path", sorted(_EXPECTED))
def test_raw_response_from_urllib(server: str, path: str) -> None:
    status, prefix, suffix = _EXPECTED[path]
    raw, _ = _urllib(server + path)
    parsed = http.parse(raw, Hints())
    assert parsed is not None
    assert parsed.type == f"HTTP {status}"
    assert parsed.status == status
    assert parsed.format == "http"
    assert parsed.cause.startswith(prefix), parsed.cause
    assert parsed.cause.endswith(suffix), parsed.cause
    assert len(parsed.cause) <= compactor.MAX_CAUSE_CHARS
    assert parsed.location is None and parsed.frames == ()


@pytest.mark.parametrize("path", sorted(_EXPECTED))
def test_str_of_httperror_plus_body(server: str, path: str) -> None:
    """``str(e)`` is ``HTTP Error 429: Too Many Requests``; the headers (and Retry-After) are lost."""
    status, prefix, _ = _EXPECTED[path]
    _, plain = _urllib(server + path)
    assert plain.startswith(f"HTTP Error {status}: ")
    parsed = http.parse(plain, Hints())
    assert parsed is not None
    assert parsed.type == f"HTTP {status}"
    retry_from_header = path in {"/openai/429", "/anthropic/429", "/azure/429", "/empty-503"}
    expected = prefix.split(" (retry after")[0] if retry_from_header else prefix
    assert parsed.cause.startswith(expected), parsed.cause
    # Without headers the delay comes from the body: Google's RetryInfo, OpenAI's "try again in 2.692s".
    assert ("(retry after " in parsed.cause) == (path in ("/google/429", "/openai/429"))


def test_compact_text_line_and_retryable(server: str) -> None:
    raw, _ = _urllib(server + "/anthropic/429")
    digest = compactor.compact_text(raw)
    assert digest.format == "http"
    assert digest.line.startswith(
        "[HTTP 429]: rate_limit_error: Number of request tokens has exceeded your per-minute rate limit")
    assert digest.line.endswith("(retry after 20s)")
    assert digest.status == 429
    assert digest.retryable is True
    assert digest.location is None
    assert "req_011" not in digest.line

    bad_request, _ = _urllib(server + "/fastapi/422")
    assert compactor.compact_text(bad_request).retryable is False


def test_dedup_key_ignores_request_id_retry_and_port(server: str) -> None:
    first, _ = _urllib(server + "/anthropic/429")
    second, _ = _urllib(server + "/anthropic/429-other-request")
    one, two = compactor.compact_text(first), compactor.compact_text(second)
    assert one.cause != two.cause  # the retry-after differs…
    assert one.key == two.key  # …but it is the same failure
    port = server.rsplit(":", 1)[1]
    assert port not in one.key_parts.message and port not in one.key_parts.where

    overloaded, _ = _urllib(server + "/anthropic/529")
    assert compactor.compact_text(overloaded).key != one.key


def test_a_sentence_worded_as_advice_that_names_the_cause_stays(server: str) -> None:
    """``Please provide the 'email' field.`` and ``Check constraint '…' is violated.`` start like advice but
    name what failed; after a bare ``Forbidden.`` the next sentence is all the body says. Each stays, so two
    causes are two classes."""
    pairs = [("/users/email", "/users/phone", "Validation failed. Please provide the 'email' field."),
             ("/orders/amount", "/orders/qty", "Conflict. Check constraint 'orders_amount_positive' is violated."),
             ("/repos/scope", "/comments/scope", "Forbidden. You can only access repositories in org 'acme'.")]
    for one, other, cause in pairs:
        first, second = (compactor.compact_text(_urllib(server + path)[0]) for path in (one, other))
        assert first.cause == cause
        assert first.key != second.key, second.line
    own, _ = _urllib(server + "/comments/scope")
    assert compactor.compact_text(own).cause == "Forbidden. You can only delete your own comments."


def test_a_token_refusal_in_one_sentence_keeps_its_word(server: str) -> None:
    """``Token expired.`` names why the call was refused, not a credential: the word stays, and expired,
    revoked and malformed tokens are three classes."""
    digests = [compactor.compact_text(_urllib(f"{server}/token/{state}")[0])
               for state in ("expired", "revoked", "malformed")]
    assert [d.line for d in digests] == ["[HTTP 401]: Token expired.", "[HTTP 401]: Token revoked.",
                                         "[HTTP 401]: Token malformed."]
    assert len({d.key for d in digests}) == 3


def test_distinct_statuses_with_same_body_text_have_distinct_keys(server: str) -> None:
    apache, _ = _urllib(server + "/apache")
    fastapi, _ = _urllib(server + "/fastapi/404")
    nginx, _ = _urllib(server + "/nginx")
    keys = {compactor.compact_text(text).key for text in (apache, nginx)}
    assert len(keys) == 2
    # Same status and same cause text from two servers: one failure class.
    assert compactor.compact_text(apache).key == compactor.compact_text(fastapi).key


def test_huge_html_page_is_summarised_from_title(server: str) -> None:
    raw, _ = _urllib(server + "/huge-html")
    assert len(raw) > 10_000_000
    digest = compactor.compact_text(raw)
    assert digest.line == "[HTTP 500]: Internal Server Error"
    assert digest.raw_chars == len(raw)


def test_requests_raise_for_status(server: str) -> None:
    requests = pytest.importorskip("requests")
    response = requests.post(server + "/azure/429?api-version=2024-02-01", json={"model": "m"}, timeout=30)
    with pytest.raises(requests.HTTPError) as info:
        response.raise_for_status()
    text = f"{info.value}\n{response.text}"
    assert "for url: http://127.0.0.1:" in text
    parsed = http.parse(text, Hints())
    assert parsed is not None
    assert parsed.type == "HTTP 429"
    assert parsed.cause.startswith("Requests to the ChatCompletions_Create Operation")
    assert "127.0.0.1" not in parsed.cause and "api-version" not in parsed.cause

    bare = http.parse(str(info.value), Hints())
    assert bare is not None and bare.type == "HTTP 429" and bare.cause == "Too Many Requests"


def test_body_only_with_kind_hint(server: str) -> None:
    _, google = _urllib(server + "/google/429")
    body = google.split("\n", 1)[1]
    assert body.lstrip().startswith("{")
    digest = compactor.compact_text(body, kind="http")
    assert digest.type == "HTTP 429"  # from the envelope's own code
    assert digest.cause.startswith("RESOURCE_EXHAUSTED: You exceeded your current quota")

    _, nginx = _urllib(server + "/nginx")
    html_page = nginx.split("\n", 1)[1]
    parsed = http.parse(html_page, Hints(kind="http"))
    assert parsed is not None and parsed.type == "HTTP 502" and parsed.cause == "Bad Gateway"

    _, envoy = _urllib(server + "/envoy")
    plain = envoy.split("\n", 1)[1]
    assert http.parse(plain, Hints()) is None  # plain text without a status line is not claimed…
    parsed = http.parse(plain, Hints(kind="http"))  # …unless the caller says it is HTTP
    assert parsed is not None and parsed.type == "HTTP error" and parsed.cause.startswith("upstream connect")


def test_self_describing_envelope_without_status_line(server: str) -> None:
    _, anthropic = _urllib(server + "/anthropic/529")
    body = anthropic.split("\n", 1)[1]
    parsed = http.parse(body, Hints())
    assert parsed is not None
    assert parsed.type == "HTTP 529" and parsed.cause == "overloaded_error: Overloaded"


def test_curl_include_headers(server: str, tmp_path: Path) -> None:
    if not have("curl"):
        pytest.skip("curl is not installed")
    for path in ("/anthropic/429", "/google/429", "/cloudflare", "/fastapi/422"):
        result = run(["curl", "-sS", "-i", "-X", "POST", "-d", "{}", server + path], cwd=tmp_path)
        assert result.returncode == 0
        assert result.stdout.startswith("HTTP/1.0 ")
        status, prefix, suffix = _EXPECTED[path]
        parsed = http.parse(result.output, Hints())
        assert parsed is not None, result.output[:300]
        assert parsed.type == f"HTTP {status}"
        assert parsed.cause.startswith(prefix) and parsed.cause.endswith(suffix), parsed.cause


def test_curl_follows_redirect_to_the_final_error(server: str, tmp_path: Path) -> None:
    if not have("curl"):
        pytest.skip("curl is not installed")
    result = run(["curl", "-sS", "-i", "-L", server + "/redirect/azure/429"], cwd=tmp_path)
    assert result.stdout.startswith("HTTP/1.0 302")
    parsed = http.parse(result.output, Hints())
    assert parsed is not None
    assert parsed.type == "HTTP 429"
    assert parsed.cause.endswith("(retry after 6s)")


def test_curl_fail_flag(server: str, tmp_path: Path) -> None:
    if not have("curl"):
        pytest.skip("curl is not installed")
    result = run(["curl", "-sS", "-f", server + "/nginx"], cwd=tmp_path)
    assert result.returncode == 22
    digest = compactor.compact_text(result.output, exit_code=result.returncode, command="curl")
    assert digest.type == "HTTP 502"
    assert digest.status == 502
    assert "Bad Gateway" in digest.cause


def test_curl_fail_with_body_reads_the_body(server: str, tmp_path: Path) -> None:
    """``curl --fail-with-body`` prints the body, then ``curl: (22) The requested URL returned error: 400``
    on the same line when the body ends without a newline: the body says why, so two 400s of different
    causes are two classes, as they are under ``curl -i``. A plain ``curl -f`` prints no body."""
    if not have("curl"):
        pytest.skip("curl is not installed")
    digests = {}
    for path in ("/openai/400", "/openai/400-param", "/fastapi/422", "/envoy", "/pretty/404"):
        command = ["curl", "-sS", "--fail-with-body", "-X", "POST", "-d", "{}", server + path]
        result = run(command, cwd=tmp_path)
        if "--fail-with-body" in result.stderr:
            pytest.skip("this curl has no --fail-with-body")
        assert result.returncode == 22 and "curl: (22) The requested URL returned error:" in result.output
        digest = compactor.compact_text(result.output, exit_code=result.returncode, command=" ".join(command))
        status, prefix, _ = _EXPECTED[path]
        assert (digest.type, digest.status) == (f"HTTP {status}", status)
        assert digest.cause.startswith(prefix), digest.cause
        # Without the command, the body still reads as one: it is glued to curl's line (no final newline).
        assert compactor.compact_text(result.output).cause == digest.cause
        digests[path] = digest
    # A plain ``curl -f`` prints no body: the JSON above its line is an earlier command's output.
    script = f"curl -sS {server}/users/email; echo; curl -sSf {server}/openai/400"
    result = run(["bash", "-c", script], cwd=tmp_path)
    assert result.output.startswith('{"message": "Validation failed.') and result.returncode == 22
    assert compactor.compact_text(result.output, exit_code=22, command=script).cause == "Bad Request"
    assert "curl: (22){" not in digests["/openai/400"].cause
    assert digests["/openai/400"].key != digests["/openai/400-param"].key


def test_streamed_error_event_under_200(server: str, tmp_path: Path) -> None:
    if not have("curl"):
        pytest.skip("curl is not installed")
    result = run(["curl", "-sS", "-i", server + "/anthropic/stream"], cwd=tmp_path)
    assert result.stdout.startswith("HTTP/1.0 200")
    parsed = http.parse(result.output, Hints())
    assert parsed is not None
    assert parsed.type == "HTTP 529" and parsed.cause == "overloaded_error: Overloaded"


def test_successful_response_is_not_claimed(server: str, tmp_path: Path) -> None:
    if not have("curl"):
        pytest.skip("curl is not installed")
    for path, status in (("/ok", 200), ("/welcome", 200), ("/redirect/ok", 302)):
        result = run(["curl", "-sS", "-i", server + path], cwd=tmp_path)
        assert result.stdout.startswith(f"HTTP/1.0 {status}")
        assert http.parse(result.output, Hints()) is None


# --- what this parser must leave alone ------------------------------------------------------------------


def test_python_traceback_mentioning_http_is_not_claimed(tmp_path: Path) -> None:
    text = python_error(tmp_path, """
        def call():
            raise RuntimeError("upstream returned HTTP 500; status: 503")
        call()
    """)
    assert http.parse(text, Hints()) is None
    assert http.parse(text, Hints(kind="http")) is None


def test_urllib_traceback_is_not_claimed(tmp_path: Path, server: str) -> None:
    text = python_error(tmp_path, f"""
        import urllib.request
        urllib.request.urlopen("{server}/nginx")
    """)
    assert "HTTP Error 502: Bad Gateway" in text
    assert http.parse(text, Hints()) is None


def test_node_trace_is_not_claimed(tmp_path: Path) -> None:
    if not have("node"):
        pytest.skip("node is not installed")
    write(tmp_path, "client.js", """
        function fetchUser() { throw new Error("Request failed with status code 500"); }
        fetchUser();
    """)
    result = run(["node", "client.js"], cwd=tmp_path)
    assert result.returncode != 0 and "status code 500" in result.stderr
    assert http.parse(result.stderr, Hints()) is None


def test_jvm_trace_is_not_claimed(tmp_path: Path) -> None:
    if not (have("javac") and have("java")):
        pytest.skip("a JDK is not installed")
    write(tmp_path, "Client.java", """
        public class Client {
            public static void main(String[] args) {
                throw new IllegalStateException("HTTP 503 from inventory service");
            }
        }
    """)
    result = run(["java", "Client.java"], cwd=tmp_path)
    assert result.returncode != 0 and "HTTP 503" in result.stderr
    assert http.parse(result.stderr, Hints()) is None


def test_compiler_output_is_not_claimed(tmp_path: Path) -> None:
    if not have("gcc"):
        pytest.skip("gcc is not installed")
    write(tmp_path, "status.c", """
        int main(void) { return status_500; }
    """)
    result = run(["gcc", "-c", "status.c"], cwd=tmp_path)
    assert result.returncode != 0 and "status_500" in result.stderr
    assert http.parse(result.stderr, Hints()) is None


def test_mypy_output_is_not_claimed(tmp_path: Path) -> None:
    write(tmp_path, "status.py", """
        HTTP_STATUS: int = "500"
    """)
    result = run([sys.executable, "-m", "mypy", "--no-incremental", "status.py"], cwd=tmp_path)
    assert result.returncode != 0 and "error:" in result.stdout
    assert http.parse(result.output, Hints()) is None


def test_bare_numbers_are_not_a_status_line(tmp_path: Path) -> None:
    result = run(["seq", "495", "505"], cwd=tmp_path)
    assert "500" in result.stdout.split()
    assert http.parse(result.stdout, Hints()) is None
    listing = run([sys.executable, "-c", "print('500 rows copied'); print('error: 3 rows rejected')"],
                  cwd=tmp_path)
    assert http.parse(listing.stdout, Hints()) is None
