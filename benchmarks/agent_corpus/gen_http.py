"""Generate ``http.jsonl``: failed HTTP calls as an agent's shell tool prints them.

Everything is real traffic on 127.0.0.1: ``curl -i`` (and ``curl -f``, ``curl -w``) against

- a loopback server answering with the model APIs' error envelopes. The shapes follow the SDKs' own types
  (``openai/types/shared/error_object.py``: ``message``/``type``/``param``/``code``;
  ``anthropic/types/shared/error_response.py``: ``type: "error"``, ``error.type``/``error.message``,
  ``request_id``) and the messages the providers document for each error code;
- a real ``python -m http.server`` (its own 404 HTML page);
- a real Django application (DEBUG on: the technical 500 page with the server's traceback; DEBUG off: the
  plain ``Server Error (500)`` and ``Not Found`` pages), served by ``wsgiref`` on 127.0.0.1;
- a closed port (``curl: (7) Failed to connect``).

Data values vary inside each class (request ids, ports, usage figures, retry-after, key tails, order ids);
near-miss pairs differ in what names the cause (model, table, status, error code).

    python benchmarks/agent_corpus/gen_http.py
"""

from __future__ import annotations

import json
import os
import random
import secrets
import shutil
import socket
import subprocess
import sys
import tempfile
import threading
import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler
from pathlib import Path
from typing import Any
from wsgiref.simple_server import WSGIRequestHandler, WSGIServer, make_server

from _gen import write_records

from tests.realerrors import loopback_server, send_body, stdlib_http_server

FAMILY = "http"
_RNG = random.Random(6)

Route = tuple[int, dict[str, str], str]


def _openai(message: str, type_: str, code: str | None, param: str | None = None) -> str:
    return json.dumps({"error": {"message": message, "type": type_, "param": param, "code": code}}, indent=2)


def _anthropic(type_: str, message: str, request_id: str) -> str:
    return json.dumps({"type": "error", "error": {"type": type_, "message": message}, "request_id": request_id})


def _req() -> str:
    return "req_" + secrets.token_hex(16)


def _areq() -> str:
    return "req_011C" + secrets.token_urlsafe(18).replace("-", "a").replace("_", "b")


def _key_tail() -> str:
    return f"sk-proj-{secrets.token_hex(2)}" + "*" * 40 + secrets.token_hex(2)


# Each class: (label, cause tokens, route builder). A builder returns a fresh response with new data values.
Case = tuple[str, list[str], Callable[[], Route]]


def _model_not_found(model: str) -> Case:
    def build() -> Route:
        return 404, {"x-request-id": _req()}, _openai(
            f"The model `{model}` does not exist or you do not have access to it.",
            "invalid_request_error", "model_not_found")
    return f"http/openai-404-model-{model}", ["404", "model_not_found", model], build


def _rate_limit(model: str, unit: str, limit: int) -> Case:
    def build() -> Route:
        used = _RNG.randint(limit // 2, limit)
        wait = round(_RNG.uniform(0.2, 9.0), 2)
        per = "tokens per min (TPM)" if unit == "TPM" else "requests per min (RPM)"
        message = (f"Rate limit reached for {model} in organization org-{secrets.token_hex(6)} on {per}: "
                   f"Limit {limit}, Used {used}, Requested {_RNG.randint(1, 4000)}. Please try again in "
                   f"{wait}s. Visit https://platform.openai.com/account/rate-limits to learn more.")
        headers = {"x-request-id": _req(), "retry-after": str(max(1, round(wait))),
                   f"x-ratelimit-limit-{'tokens' if unit == 'TPM' else 'requests'}": str(limit),
                   "x-ratelimit-reset-tokens": f"{wait}s"}
        return 429, headers, _openai(message, "tokens" if unit == "TPM" else "requests", "rate_limit_exceeded")
    return (f"http/openai-429-{model}-{unit}", ["429", "rate_limit_exceeded", unit, str(limit), "retry after"],
            build)


def _quota() -> Route:
    return 429, {"x-request-id": _req()}, _openai(
        "You exceeded your current quota, please check your plan and billing details. For more information on "
        "this error, read the docs: https://platform.openai.com/docs/guides/error-codes/api-errors.",
        "insufficient_quota", "insufficient_quota")


def _bad_key() -> Route:
    return 401, {"x-request-id": _req(), "www-authenticate": 'Bearer realm="OpenAI API"'}, _openai(
        f"Incorrect API key provided: {_key_tail()}. You can find your API key at "
        "https://platform.openai.com/account/api-keys.", "invalid_request_error", "invalid_api_key")


def _context(limit: int) -> Callable[[], Route]:
    def build() -> Route:
        asked = limit + _RNG.randint(1, 90_000)
        return 400, {"x-request-id": _req()}, _openai(
            f"This model's maximum context length is {limit} tokens. However, your messages resulted in "
            f"{asked} tokens. Please reduce the length of the messages.", "invalid_request_error",
            "context_length_exceeded", "messages")
    return build


def _anthropic_rate() -> Route:
    rid = _areq()
    return 429, {"request-id": rid, "retry-after": str(_RNG.randint(1, 60)),
                 "anthropic-ratelimit-input-tokens-limit": "40000"}, _anthropic(
        "rate_limit_error",
        "This request would exceed the rate limit for your organization "
        f"({uuid.uuid4()}) of 40,000 input tokens per minute. For details, refer "
        "to: https://docs.claude.com/en/api/rate-limits. You can see the response headers for current usage. "
        "Please reduce the prompt length or the maximum tokens requested, or try again later.", rid)


def _anthropic_overloaded() -> Route:
    rid = _areq()
    return 529, {"request-id": rid, "x-should-retry": "true"}, _anthropic("overloaded_error", "Overloaded", rid)


def _anthropic_model(model: str) -> Case:
    def build() -> Route:
        rid = _areq()
        return 404, {"request-id": rid}, _anthropic("not_found_error", f"model: {model}", rid)
    return f"http/anthropic-404-{model}", ["404", "not_found_error", model], build


def _anthropic_max_tokens() -> Route:
    rid = _areq()
    asked = _RNG.randint(64_001, 200_000)
    return 400, {"request-id": rid}, _anthropic(
        "invalid_request_error",
        f"max_tokens: {asked} > 64000, which is the maximum allowed number of output tokens for "
        "claude-sonnet-4-5-20250929", rid)


CASES: list[Case] = [
    _model_not_found("gpt-5-turbo"),
    _model_not_found("gpt-4o-mini-2024"),
    _rate_limit("gpt-4o", "TPM", 30000),
    _rate_limit("gpt-4o", "RPM", 500),
    ("http/openai-429-quota", ["429", "insufficient_quota"], _quota),
    ("http/openai-401-key", ["401", "invalid_api_key"], _bad_key),
    # The model's limit is a number like any other (a value): one class whatever the model's window.
    ("http/openai-400-context", ["400", "context_length_exceeded", "128000"], _context(128000)),
    ("http/openai-400-context", ["400", "context_length_exceeded", "8192"], _context(8192)),
    ("http/anthropic-429", ["429", "rate_limit_error", "retry after"], _anthropic_rate),
    ("http/anthropic-529", ["529", "overloaded_error"], _anthropic_overloaded),
    _anthropic_model("claude-3-opus-latest"),
    _anthropic_model("claude-sonnet-9"),
    ("http/anthropic-400-max-tokens", ["400", "max_tokens", "64000"], _anthropic_max_tokens),
]


class _Api(BaseHTTPRequestHandler):
    """Answers ``/case/<n>`` with a fresh response of case ``n``."""

    def _answer(self) -> None:
        self.rfile.read(int(self.headers.get("Content-Length") or 0))
        status, headers, body = CASES[int(self.path.rsplit("/", 1)[-1])][2]()
        send_body(self, status, body.encode("utf-8"), headers=headers)

    do_GET = _answer
    do_POST = _answer

    def log_message(self, format: str, *args: Any) -> None:
        """Quiet."""


def _curl(args: list[str], *, stderr_first: bool = False) -> tuple[str, int, str]:
    """What the agent sees: stdout then stderr as most harnesses join them (or stderr first, as a terminal
    shows ``curl -v``'s trace before the body)."""
    cmd = ["curl", "-sS", *args]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=60, errors="replace")
    text = proc.stderr + proc.stdout if stderr_first else proc.stdout + proc.stderr
    return text, proc.returncode, " ".join(cmd)


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
    return port


# ------------------------------------------------------------------------------------------------ Django

_DJANGO_APP = '''
import sqlite3
from django.conf import settings
from django.http import HttpResponse
from django.urls import path

ORDERS = {"1": "paid"}

def order(request, order_id):
    return HttpResponse(ORDERS[order_id])

def report(request, table):
    db = sqlite3.connect(":memory:")
    rows = db.execute(f"select count(*) from {table}").fetchall()
    return HttpResponse(str(rows))

def ratio(request, n):
    return HttpResponse(str(100 // int(n)))

urlpatterns = [
    path("orders/<str:order_id>", order),
    path("report/<str:table>", report),
    path("ratio/<str:n>", ratio),
]
'''


@contextmanager
def _django(debug: bool, folder: Path) -> Iterator[str]:
    (folder / "shopapp.py").write_text(_DJANGO_APP, encoding="utf-8")
    sys.path.insert(0, str(folder))
    import django
    from django.conf import settings

    if not settings.configured:
        settings.configure(DEBUG=debug, ROOT_URLCONF="shopapp", ALLOWED_HOSTS=["127.0.0.1", "localhost"],
                           SECRET_KEY=secrets.token_hex(16), MIDDLEWARE=[], INSTALLED_APPS=[])
        django.setup()
    settings.DEBUG = debug
    from django.core.wsgi import get_wsgi_application

    class Quiet(WSGIRequestHandler):
        def log_message(self, format: str, *args: Any) -> None:
            """Quiet."""

    server = make_server("127.0.0.1", 0, get_wsgi_application(), server_class=WSGIServer, handler_class=Quiet)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()


def generate() -> tuple[list[dict[str, Any]], list[dict[str, str]]]:
    """Run every case against real servers; return the records and the near-miss pairs."""
    records: list[dict[str, Any]] = []

    def add(name: str, fmt: str, text: str, label: str, tokens: list[str], source: str,
            exit_code: int | None, command: str | None) -> None:
        records.append({"id": f"{FAMILY}/{name}", "format": fmt, "source": source, "text": text,
                        "exit_code": exit_code, "command": command, "label": label, "cause_tokens": tokens})

    curl_forms = (
        ("i", ["-i"]),
        ("iw", ["-i", "-w", "\\ntime_total: %{time_total}s  http_code: %{http_code}\\n"]),
        ("iv", ["-i", "-H", "Accept: application/json", "-X", "POST", "-d", '{"model": "m", "messages": []}']),
        ("v", ["-v"]),
        ("v-stderr-first", ["-v"]),
    )
    with loopback_server(_Api) as base:
        for index, (label, tokens, _build) in enumerate(CASES):
            for rep in range(len(curl_forms)):
                form, extra = curl_forms[rep % len(curl_forms)]
                text, code, cmd = _curl([*extra, f"{base}/v1/case/{index}"], stderr_first=form == "v-stderr-first")
                add(f"{label.split('/', 1)[1]}-{index}-{rep}", "http-api", text, label, tokens, f"curl -sS {form}",
                    code, cmd)

    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp)
        (folder / "index.html").write_text("<h1>ok</h1>", encoding="utf-8")
        with stdlib_http_server(folder) as base:
            for rep, name in enumerate(["missing.txt", "missing.txt?v=2", "missing.txt?v=3", "missing.txt#top"]):
                text, code, cmd = _curl(["-i", f"{base}/{name}"])
                add(f"httpserver-404-{rep}", "http-html", text, "http/httpserver-404", ["404", "File not found"],
                    "curl -sS -i against python -m http.server", code, cmd)
            for rep, name in enumerate(["a.tar.gz", "b/c.txt", "reports/2026-11.csv"]):
                text, code, cmd = _curl(["-f", f"{base}/{name}"])
                # curl -f prints no more than the status: as a class it is any plain "404 Not Found".
                add(f"curl-f-404-{rep}", "http-curl", text, "http/404-not-found", ["404"],
                    "curl -sS -f against python -m http.server", code, cmd)
        for rep in range(4):
            text, code, cmd = _curl(["-i", f"http://127.0.0.1:{_free_port()}/v1/models"])
            add(f"curl-refused-{rep}", "http-curl", text, "http/curl-refused", ["Failed to connect"],
                "curl -sS -i against a closed port", code, cmd)

        for debug in (True, False):
            tag = "debug" if debug else "prod"
            with _django(debug, folder) as base:
                for rep, oid in enumerate(["42", "1007", "9", "310"]):
                    text, code, cmd = _curl(["-i", f"{base}/orders/{oid}"])
                    tokens = ["500", "KeyError"] if debug else ["500", "Server Error"]
                    add(f"django-{tag}-orders-{rep}", "http-html", text, f"http/django-{tag}-keyerror", tokens,
                        f"curl -sS -i against a Django app (DEBUG={debug})", code, cmd)
                if debug:
                    for table in ("invoices", "customers"):
                        for rep in range(3):
                            text, code, cmd = _curl(["-i", f"{base}/report/{table}?page={rep + 1}"])
                            add(f"django-debug-table-{table}-{rep}", "http-html", text,
                                f"http/django-debug-table-{table}", ["500", "OperationalError", table],
                                "curl -sS -i against a Django app (DEBUG=True)", code, cmd)
                    for rep in range(3):
                        text, code, cmd = _curl(["-i", f"{base}/ratio/0?try={rep}"])
                        add(f"django-debug-zero-{rep}", "http-html", text, "http/django-debug-zerodivision",
                            ["500", "ZeroDivisionError"], "curl -sS -i against a Django app (DEBUG=True)", code,
                            cmd)
                for rep, missing in enumerate(["api/v1/users/5", "api/v1/users/17", "api/v1/users/5?x=1"]):
                    text, code, cmd = _curl(["-i", f"{base}/{missing}"])
                    label = "http/django-debug-404" if debug else "http/404-not-found"
                    add(f"django-{tag}-404-{rep}", "http-html", text, label, ["404"],
                        f"curl -sS -i against a Django app (DEBUG={debug})", code, cmd)

    pairs = [
        ("openai-404-model-gpt-5-turbo-0-0", "openai-404-model-gpt-4o-mini-2024-1-0", "different model"),
        ("openai-429-gpt-4o-TPM-2-0", "openai-429-gpt-4o-RPM-3-0", "different limit hit"),
        ("openai-429-gpt-4o-TPM-2-1", "openai-429-quota-4-1", "rate limit versus quota"),
        ("openai-401-key-5-0", "openai-429-quota-4-0", "different error code"),
        ("anthropic-404-claude-3-opus-latest-10-0", "anthropic-404-claude-sonnet-9-11-0", "different model"),
        ("anthropic-429-8-0", "anthropic-529-9-0", "different status"),
        ("django-debug-table-invoices-0", "django-debug-table-customers-0", "different missing table"),
        ("django-debug-orders-0", "django-debug-zero-0", "different exception"),
        ("django-debug-404-0", "django-prod-404-0", "different page"),
        ("httpserver-404-0", "django-prod-404-1", "File not found versus Not Found"),
        ("curl-f-404-0", "curl-refused-0", "different failure"),
    ]
    return records, [{"a": f"{FAMILY}/{a}", "b": f"{FAMILY}/{b}", "why": why} for a, b, why in pairs]


def main() -> None:
    if shutil.which("curl") is None:
        raise SystemExit("curl is required")
    os.environ.setdefault("NO_COLOR", "1")
    records, pairs = generate()
    ids = {r["id"] for r in records}
    for pair in pairs:
        assert pair["a"] in ids and pair["b"] in ids, pair
    write_records(FAMILY, records, pairs)


if __name__ == "__main__":
    main()
