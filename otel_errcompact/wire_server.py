"""A small model server on 127.0.0.1 that speaks the OpenAI and Anthropic wire formats.

The demo, the tests and the benchmarks point the real ``openai`` and ``anthropic`` clients at it
(``base_url``), so recovery is exercised through the SDKs' own request, error and retry code rather than
through mocks. Replies are scripted (:class:`Reply`, consumed in order; an empty script answers "done")
and an optional :class:`TokenBucket` enforces a real request rate, answering 429 with ``retry-after`` when
it is empty and reporting the budget on every response in the provider's own headers
(``x-ratelimit-*`` on ``/v1/chat/completions``, ``anthropic-ratelimit-*`` on ``/v1/messages``) or in the
IETF ``RateLimit`` / ``RateLimit-Policy`` fields (``ietf=True``).

Error bodies and headers follow what the SDKs parse (``openai/_exceptions.py``,
``anthropic/_exceptions.py``, ``_base_client._parse_retry_after_header``): OpenAI's
``{"error": {"message", "type", "param", "code"}}`` and Anthropic's
``{"type": "error", "error": {"type", "message"}}``.
"""

from __future__ import annotations

import json
import math
import threading
import time
import uuid
from collections import deque
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import UTC, datetime
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, Literal

__all__ = ["ModelWireServer", "Reply", "TokenBucket", "serve"]

ReplyKind = Literal["text", "tool", "rate_limited", "prompt_too_long", "truncated", "unauthorized", "overloaded"]


@dataclass(frozen=True)
class Reply:
    """One scripted answer. ``delay_s`` holds the answer back (an in-flight call to abort)."""

    kind: ReplyKind = "text"
    text: str = "done"
    tool: str = ""
    arguments: dict[str, Any] = field(default_factory=dict)
    retry_after_s: float = 1.0
    delay_s: float = 0.0


class TokenBucket:
    """A real token bucket: ``capacity`` requests, refilled at ``rate`` per second. Thread-safe."""

    def __init__(self, capacity: float, rate: float, clock: Any = time.monotonic) -> None:
        self.capacity, self.rate, self._clock = float(capacity), float(rate), clock
        self._tokens, self._at = float(capacity), clock()
        self._lock = threading.Lock()
        self.admitted = 0
        self.refused = 0

    def take(self) -> tuple[bool, float, float]:
        """Take one token: (admitted, tokens left, seconds until full)."""
        with self._lock:
            now = self._clock()
            self._tokens = min(self.capacity, self._tokens + (now - self._at) * self.rate)
            self._at = now
            ok = self._tokens >= 1.0
            if ok:
                self._tokens -= 1.0
                self.admitted += 1
            else:
                self.refused += 1
            return ok, self._tokens, (self.capacity - self._tokens) / self.rate

    def drain(self) -> None:
        """Spend every token, as another caller of the same key would."""
        with self._lock:
            self._tokens, self._at = 0.0, self._clock()

    @property
    def window_s(self) -> float:
        return self.capacity / self.rate


def _duration(seconds: float) -> str:
    """OpenAI's reset format: ``6m0s``, ``1.5s``, ``120ms``."""
    if seconds < 1:
        return f"{max(0, round(seconds * 1000))}ms"
    minutes, rest = divmod(seconds, 60)
    return f"{int(minutes)}m{rest:.3g}s" if minutes else f"{rest:.3g}s"


class ModelWireServer:
    """The server; use :func:`serve` to run one for a ``with`` block."""

    def __init__(self, *, bucket: TokenBucket | None = None, ietf: bool = False) -> None:
        self.script: deque[Reply] = deque()
        self.requests: list[dict[str, Any]] = []
        self.bucket = bucket
        self.ietf = ietf
        self.stopping = threading.Event()
        self._lock = threading.Lock()

    def add(self, *replies: Reply) -> None:
        with self._lock:
            self.script.extend(replies)

    def next_reply(self, body: dict[str, Any]) -> Reply:
        with self._lock:
            self.requests.append(body)
            return self.script.popleft() if self.script else Reply()

    def limit_headers(self, api: str, ok_left_reset: tuple[bool, float, float]) -> dict[str, str]:
        assert self.bucket is not None
        _, left, reset = ok_left_reset
        limit, remaining = int(self.bucket.capacity), math.floor(left)
        if self.ietf:
            return {
                "RateLimit-Policy": f'"default";q={limit};w={max(1, round(self.bucket.window_s))}',
                "RateLimit": f'"default";r={remaining};t={math.ceil(reset)}',
            }
        if api == "openai":
            return {
                "x-ratelimit-limit-requests": str(limit),
                "x-ratelimit-remaining-requests": str(remaining),
                "x-ratelimit-reset-requests": _duration(reset),
            }
        full_at = datetime.fromtimestamp(time.time() + reset, tz=UTC)
        return {
            "anthropic-ratelimit-requests-limit": str(limit),
            "anthropic-ratelimit-requests-remaining": str(remaining),
            "anthropic-ratelimit-requests-reset": full_at.isoformat(timespec="milliseconds").replace("+00:00", "Z"),
        }


def _openai_body(reply: Reply, model: str) -> tuple[int, dict[str, Any]]:
    def error(status: int, message: str, type_: str, code: str | None) -> tuple[int, dict[str, Any]]:
        return status, {"error": {"message": message, "type": type_, "param": None, "code": code}}

    if reply.kind == "rate_limited":
        return error(429, f"Rate limit reached for {model} on requests per min (RPM): Limit 3, Used 3, "
                     f"Requested 1. Please try again in {reply.retry_after_s:g}s.", "requests", "rate_limit_exceeded")
    if reply.kind == "prompt_too_long":
        return error(400, "This model's maximum context length is 128000 tokens. However, your messages resulted "
                     "in 131072 tokens. Please reduce the length of the messages.", "invalid_request_error",
                     "context_length_exceeded")
    if reply.kind == "unauthorized":
        return error(401, "Incorrect API key provided: sk-test. You can find your API key in your account "
                     "settings.", "invalid_request_error", "invalid_api_key")
    if reply.kind == "overloaded":
        return error(503, "The engine is currently overloaded, please try again later", "server_error", None)
    message: dict[str, Any] = {"role": "assistant", "content": reply.text, "refusal": None}
    finish = "stop"
    if reply.kind == "tool":
        message = {"role": "assistant", "content": None, "tool_calls": [{
            "id": f"call_{uuid.uuid4().hex[:12]}", "type": "function",
            "function": {"name": reply.tool, "arguments": json.dumps(reply.arguments)}}]}
        finish = "tool_calls"
    elif reply.kind == "truncated":
        finish = "length"
    return 200, {
        "id": f"chatcmpl-{uuid.uuid4().hex[:12]}", "object": "chat.completion", "created": int(time.time()),
        "model": model, "choices": [{"index": 0, "message": message, "finish_reason": finish, "logprobs": None}],
        "usage": {"prompt_tokens": 10, "completion_tokens": 5, "total_tokens": 15},
    }


def _anthropic_body(reply: Reply, model: str) -> tuple[int, dict[str, Any]]:
    def error(status: int, type_: str, message: str) -> tuple[int, dict[str, Any]]:
        return status, {"type": "error", "error": {"type": type_, "message": message}}

    if reply.kind == "rate_limited":
        return error(429, "rate_limit_error", "Number of request tokens has exceeded your per-minute rate limit")
    if reply.kind == "prompt_too_long":
        return error(400, "invalid_request_error", "prompt is too long: 215034 tokens > 200000 maximum")
    if reply.kind == "unauthorized":
        return error(401, "authentication_error", "invalid x-api-key")
    if reply.kind == "overloaded":
        return error(529, "overloaded_error", "Overloaded")
    content: list[dict[str, Any]] = [{"type": "text", "text": reply.text}]
    stop = "end_turn"
    if reply.kind == "tool":
        content = [{"type": "tool_use", "id": f"toolu_{uuid.uuid4().hex[:12]}", "name": reply.tool,
                    "input": reply.arguments}]
        stop = "tool_use"
    elif reply.kind == "truncated":
        stop = "max_tokens"
    return 200, {
        "id": f"msg_{uuid.uuid4().hex[:12]}", "type": "message", "role": "assistant", "model": model,
        "content": content, "stop_reason": stop, "stop_sequence": None,
        "usage": {"input_tokens": 10, "output_tokens": 5},
    }  # fmt: skip


def _handler(server: ModelWireServer) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def log_message(self, format: str, *args: Any) -> None:
            pass

        def do_POST(self) -> None:
            length = int(self.headers.get("content-length") or 0)
            try:
                body = json.loads(self.rfile.read(length) or b"{}")
            except ValueError:
                body = {}
            api = "anthropic" if self.path.rstrip("/").endswith("/messages") else "openai"
            headers: dict[str, str] = {}
            if server.bucket is not None:
                taken = server.bucket.take()
                headers.update(server.limit_headers(api, taken))
                if not taken[0]:
                    retry = max(0.001, (1.0 - taken[1]) / server.bucket.rate)
                    headers["retry-after-ms"] = str(math.ceil(retry * 1000))
                    headers["retry-after"] = str(math.ceil(retry))
                    reply = Reply("rate_limited", retry_after_s=retry)
                    self._send(api, reply, body, headers)
                    return
            reply = server.next_reply(body)
            if reply.delay_s and server.stopping.wait(reply.delay_s):
                return
            if reply.kind == "rate_limited":
                headers["retry-after"] = f"{reply.retry_after_s:g}"
            self._send(api, reply, body, headers)

        def _send(self, api: str, reply: Reply, body: dict[str, Any], headers: dict[str, str]) -> None:
            model = str(body.get("model") or "test-model")
            status, payload = (_anthropic_body if api == "anthropic" else _openai_body)(reply, model)
            data = json.dumps(payload).encode()
            try:
                self.send_response(status)
                self.send_header("content-type", "application/json")
                self.send_header("content-length", str(len(data)))
                self.send_header("request-id" if api == "anthropic" else "x-request-id", f"req_{uuid.uuid4().hex[:16]}")
                for name, value in headers.items():
                    self.send_header(name, value)
                self.end_headers()
                self.wfile.write(data)
            except OSError:  # the client went away (an aborted call)
                pass

    return Handler


@contextmanager
def serve(server: ModelWireServer | None = None) -> Iterator[tuple[ModelWireServer, str]]:
    """Run ``server`` (a fresh one by default) on 127.0.0.1 for a ``with`` block; yields it and its base URL.

    >>> with serve() as (srv, url):
    ...     url.startswith("http://127.0.0.1:")
    True
    """
    server = server or ModelWireServer()
    httpd = ThreadingHTTPServer(("127.0.0.1", 0), _handler(server))
    httpd.daemon_threads = True
    thread = threading.Thread(target=httpd.serve_forever, name="errcompact-wire-server", daemon=True)
    thread.start()
    try:
        yield server, f"http://127.0.0.1:{httpd.server_address[1]}"
    finally:
        server.stopping.set()
        httpd.shutdown()
        httpd.server_close()
