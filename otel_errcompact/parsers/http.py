"""Parser for failed HTTP calls: a status line, headers and an error body, as an HTTP tool reports them.

A status line is looked for only near the top (so a stray ``500`` deep in other output never counts):

- ``HTTP/1.1 429 Too Many Requests`` (also behind curl -v's ``< `` or inside an httpx log line);
- ``HTTP 500``, ``HTTP Error 429: Too Many Requests`` (urllib's ``HTTPError``);
- ``429 Too Many Requests`` as the first line, with the standard reason phrase;
- ``status: 503`` / ``status_code=503`` at the start of a line;
- ``429 Client Error: Too Many Requests for url: …`` (requests), ``Client error '429 …' for url '…'``
  (httpx), ``Error code: 429 - {…}`` (the OpenAI and Anthropic SDKs), ``429 Rate limited (request_id: …,
  type: rate_limit_error)`` (the Anthropic SDK from 2.x on);
- curl's ``The requested URL returned error: 404`` (``curl -f``); with ``--fail-with-body`` the body comes
  first, often glued to curl's line (a body seldom ends with a newline), and is read as the body.

Without a status line the text is claimed only when the caller says ``kind="http"`` or when it is a
self-describing API error envelope (Anthropic's ``"type": "error"``, Google's numeric ``error.code``, a
top-level 4xx/5xx ``status``). Stack traces and compiler output are left to their own parsers.

Bodies understood: the JSON error envelopes of OpenAI, Anthropic, Google/Gemini, Azure, FastAPI/pydantic
(``detail``, with the validation error's field ``loc``), RFC 7807 problem details, GraphQL/JSON:API
``errors``, OAuth ``error_description``, generic ``message``/``error``; server-sent ``data: {…}`` error
events; HTML error pages (``<title>`` and the first ``<h1>``); plain text (its first line).

The digest: type ``HTTP <status>``; cause ``<API error type/code>: <message>`` plus ``(retry after …)``
from ``Retry-After`` (or Google's ``RetryInfo``), because that is what the agent must act on. No
location: the failing code runs on the other side of the wire, and the URL carries hosts, ports and ids
that would split one failure into many dedup classes.
"""

from __future__ import annotations

import ast
import html
import json
import re
from dataclasses import dataclass
from http import HTTPStatus

from otel_errcompact.parsers import python as _python
from otel_errcompact.parsers._base import Hints, Parsed
from otel_errcompact.redact import redact

__all__ = ["parse"]

_HEAD_CHARS = 8192
_SCAN_LINES = 200  # status lines and header blocks (several, with redirects) live in the first lines
_HEAD_LINES = 8  # non-empty lines searched for a status line that is not the first line
_MAX_LINE = 1024
_CAUSE_BUDGET = 230
_MIN_MESSAGE = 60
_LITERAL_LIMIT = 16_384
_RETRY_CHARS = 30  # an HTTP-date is 29 characters
_MESSAGE_CHARS = 160
_LINK_IN_PARENS = re.compile(r"\s*\(https?://[^\s()]{1,300}\)")

# Each applies to one line already cut to _MAX_LINE characters, so none can run away.
_HTTP_VERSION = re.compile(r"(?:^|[\s\"'<>(\[])HTTP/\d(?:\.\d)?[ \t]+(\d{3})\b[ \t]*([^\"'\n]*)")
_HTTP_WORD = re.compile(r"^(?:[\w.]+:[ \t]+)?HTTP(?:[ \t]+Error)?[ \t]+(\d{3})\b[:\s]*(.*)$")
_BARE = re.compile(r"^(\d{3})[ \t]+([A-Za-z][A-Za-z ,'\-]{1,60})$")
_STATUS_FIELD = re.compile(r"(?i)^(?:http[ _\-]?)?status(?:[ _\-]?code)?[ \t]*[:=][ \t]*(\d{3})\b[ \t]*(.*)$")
_REQUESTS = re.compile(r"^(?:[\w.]+:[ \t]+)?(\d{3}) (?:Client|Server) Error: (.*)$")
_HTTPX = re.compile(r"^(?:[\w.]+:[ \t]+)?(?:Informational|Redirect|Client|Server) error '(\d{3}) ([^']*)'")
_SDK = re.compile(r"^(?:[\w.]+:[ \t]+)?Error code: (\d{3})(?: - (.*))?$")
# The Anthropic SDK from 2.x on: ``401 invalid x-api-key (request_id: req_…, path: /v1/messages, type:
# authentication_error)``, the status, the body's error message and its labelled fields (``error_code``
# first when the body has one). The request id and the path are left out of the digest.
_SDK_LABELLED = re.compile(
    r"^(?:[\w.]+:[ \t]+)?(\d{3}) (.*?) ?\(((?:error_code|request_id|path|type): [^()\n]*)\)$"
)
_SDK_LABEL = re.compile(r"(error_code|request_id|path|type): ([^,]*)(?:, |$)")
_CURL_MARK = "The requested URL returned error:"
_CURL_PREFIX = "curl: ("
_FAIL_WITH_BODY = "--fail-with-body"
_CURL_22 = "curl: (22)"  # curl's exit code for an HTTP error under --fail and --fail-with-body
_CURL = re.compile(r"The requested URL returned error: (\d{3})\b[ \t]*([^\n]{0,200})")
_HEADER = re.compile(r"^(?:< )?([A-Za-z0-9!#$%&'*+.^_`|~\-]{1,64}):[ \t]*(.*)$")
_COMMON_HEADERS = frozenset(
    {"retry-after", "content-type", "content-length", "date", "server", "connection", "location",
     "vary", "via", "etag", "expires", "pragma", "age", "allow", "warning"}
)
# Output that belongs to another parser: tracebacks, stack frames, compiler diagnostics.
_FOREIGN = re.compile(
    r"^(?:Traceback \(most recent call last\)|\s+File \"|\s+at \S|Caused by: |Exception in thread "
    r"|goroutine \d|panic: |error\[E\d+\]: |[^\s:]{1,300}:\d+:(?:\d+:)? ?(?:fatal )?(?:error|warning)\b)",
    re.M,
)
_HTML_MARK = re.compile(r"<(?:!doctype[ \t]+html|html\b|head\b|body\b|title\b|h1\b)", re.I)
_TITLE = re.compile(r"<title\b[^<>]{0,300}>", re.I)
_H1 = re.compile(r"<h1\b[^<>]{0,300}>", re.I)
_TAG = re.compile(r"<[^<>]{0,1000}>")
_WS = re.compile(r"\s+")
_DIGITS = re.compile(r"\d+(?:\.\d+)?")
_PHRASE_ALIASES = {413: "content too large", 416: "range not satisfiable", 422: "unprocessable content"}
# Anthropic names its errors but a streamed error event arrives under a 200 status line.
_ANTHROPIC_STATUS = {
    "invalid_request_error": 400, "authentication_error": 401, "billing_error": 402,
    "permission_error": 403, "not_found_error": 404, "request_too_large": 413,
    "rate_limit_error": 429, "api_error": 500, "timeout_error": 504, "overloaded_error": 529,
}


@dataclass
class _Status:
    code: int
    reason: str
    inline_body: str = ""  # a body on the status line itself (``Error code: 429 - {…}``)
    raw: bool = False  # an ``HTTP/x.y`` line: the lines after it are headers


@dataclass
class _Envelope:
    label: str = ""
    message: str = ""
    status: int | None = None
    retry: str = ""
    html: bool = False  # the message is an HTML page's title or heading
    exception: Parsed | None = None  # the server's own traceback, shown on a debug error page


# Sentences that tell the reader what to do or where to read more; the digest keeps what happened.
_SENTENCE_END = re.compile(r"(?<=[.!?])\s+(?=[A-Z])")
_ADVICE = re.compile(
    r"(?i)^(?:please|visit|you can|you may|for more|for details|see |refer|learn more|to learn|check |read |if you)"
)
_TRY_AGAIN = re.compile(r"(?i)try again in (\d+(?:\.\d+)?\s?(?:ms|s|sec|seconds?|m|min|minutes?))\b")
# What an advice sentence may name that tells one failure from another: a quoted name (``Please provide the
# 'email' field.``, ``Check constraint 'orders_qty_max' is violated.``) or an identifier (``user_id``,
# ``maxTokens``), not an apostrophe (``don't``, ``server's``). Links are left out first: a documentation
# page names no cause.
_NAMED = re.compile(r"(?<!\w)(['\"`])[^'\"`\s][^'\"`\n]{0,200}?\1(?!\w)|\b[A-Za-z]\w*_\w+|\b[a-z]+[A-Z]\w*")
_URL = re.compile(r"\b\w+://\S+")
# Advice that is only advice even after a bare headline: when to retry, where to read more.
_ONLY_ADVICE = re.compile(r"(?i)try again|retry|://")
# A headline that names no cause (``Validation failed.``, ``Forbidden.``): the advice after it does.
_HEADLINE_WORDS = frozenset(
    {"validation", "failed", "failure", "invalid", "request", "bad", "denied", "access", "not", "allowed",
     "permitted", "permission", "conflict", "forbidden", "unauthorized", "input", "found"}
)
# Who the account is: it does not say what failed, and its id would only lengthen the line.
_ACCOUNT = re.compile(r"(?i)\s+(?:in|for) (?:your )?(?:organization|organisation|org|project)\s+\(?[\w\-]{3,80}\)?")
_GENERIC_WORDS = frozenset(
    {"error", "response", "server", "page", "oops", "an", "has", "occurred", "exception", "unknown", "internal",
     "something", "went", "wrong", "sorry", "!"}
)


def parse(text: str, hints: Hints) -> Parsed | None:
    """Digest an HTTP error response, or ``None`` when the text is not one.

    >>> parse('HTTP/1.1 404 Not Found\\ncontent-type: application/json\\n\\n{"detail": "Item not found"}',
    ...       Hints()).cause
    'Item not found'
    """
    if not text:
        return None
    wanted = hints.kind == "http"
    head = text[:_HEAD_CHARS]
    low = head.lower()
    if not (wanted or "http" in low or "status" in low or "error" in low or head.lstrip()[:1].isdigit()):
        return None

    if "< HTTP/" in head:
        text = _curl_verbose(text)
    parts = text.split("\n", _SCAN_LINES)
    first = 0
    while first < len(parts) - 1 and not parts[first].strip():
        first += 1
    status: _Status | None = _status_line(parts[first], first_line=True, wanted=wanted)
    at = first
    if status is None:
        if _FOREIGN.search(head):
            return None
        at, status = _later_status(text, parts, first, with_body=_FAIL_WITH_BODY in (hints.command or ""))
    if status is None:
        return _without_status(text, wanted)

    headers: dict[str, str] = {}
    body_start = at + 1
    while True:
        body_start = _read_headers(parts, body_start, headers, status.raw)
        nxt = _next_nonblank(parts, body_start)
        follow = _status_line(parts[nxt], first_line=False, wanted=False) if nxt is not None else None
        if nxt is None or follow is None or not follow.raw:
            break
        status, headers, body_start = follow, {}, nxt + 1  # 100 Continue, a redirect, a proxy CONNECT
    body = "\n".join(parts[body_start:])
    if status.inline_body:
        body = status.inline_body + ("\n" + body if body.strip() else "")
    envelope = _read_body(body)
    code = status.code
    if code < 400:
        if envelope.status is not None and envelope.status >= 400:
            code = envelope.status  # an error event streamed under "200 OK"
        elif not wanted:
            return None  # a successful response or a redirect is not an error report
    retry = _retry_after(headers) or envelope.retry
    exception = envelope.exception
    if exception is not None:
        # A debug error page: the status and the server's own exception, located in the server's code.
        described = f"{exception.type}: {exception.cause}" if exception.cause else exception.type
        return Parsed(f"HTTP {code}", described, "http", frames=exception.frames, location=exception.location,
                      status=code, key_text=exception.key_text and f"{exception.type}: {exception.key_text}")
    if envelope.html and _generic(envelope.message) and status.reason:
        envelope.message = status.reason  # http.server's "Error response" page: the status line says more
    return Parsed(f"HTTP {code}", _cause(envelope, status.reason or _phrase(code), retry, code), "http",
                  status=code)


def _curl_verbose(text: str) -> str:
    """``curl -v`` output put back in response order: its ``< `` lines (status lines and headers) first, then
    the body without curl's own trace (``* Connected``, ``> GET``). Harnesses often join stdout before
    stderr, so the body can come before the status line it belongs to."""
    response: list[str] = []
    body: list[str] = []
    for line in text.split("\n"):
        if line[:2] == "< " or line == "<":
            response.append(line)
        elif not (line[:2] in ("* ", "> ", "{ ", "} ") or line in (">", "*")):
            body.append(line)
    return "\n".join(response) + "\n\n" + "\n".join(body)


def _generic(message: str) -> bool:
    words = message.lower().replace(".", " ").split()
    return bool(words) and all(word in _GENERIC_WORDS for word in words)


def _status_line(line: str, *, first_line: bool, wanted: bool) -> _Status | None:
    line = line[:_MAX_LINE].split("\n", 1)[0].strip()
    if not line:
        return None
    match = _HTTP_VERSION.search(line)
    if match:
        return _valid(match.group(1), match.group(2), raw=True)
    if "HTTP" in line:
        match = _HTTP_WORD.match(line)
        if match:
            return _valid(match.group(1), match.group(2))
    if "rror" in line:
        match = _REQUESTS.match(line)
        if match:
            return _valid(match.group(1), match.group(2).partition(" for url: ")[0])
        match = _HTTPX.match(line)
        if match:
            return _valid(match.group(1), match.group(2))
        match = _SDK.match(line)
        if match:
            found = _valid(match.group(1), "")
            if found is not None:
                found.inline_body = match.group(2) or ""
            return found
    if line[:1] in "sShH":
        match = _STATUS_FIELD.match(line)
        if match:
            return _valid(match.group(1), match.group(2))
    if line[-1:] == ")" and ("type: " in line or "request_id: " in line):
        labelled = _labelled_sdk_status(line)
        if labelled is not None:
            return labelled
    if first_line and line[:1].isdigit():
        match = _BARE.match(line)
        if match:
            found = _valid(match.group(1), match.group(2))
            if found is not None and (wanted or _is_phrase(found.code, found.reason)):
                return found
    return None


def _labelled_sdk_status(line: str) -> _Status | None:
    """The Anthropic SDK's status line with labelled fields (see ``_SDK_LABELLED``), its message and fields
    given as the JSON error envelope the SDK read them from, so the digest is the one its ``Error code:
    401 - {…}`` form had (``[HTTP 401]: authentication_error: invalid x-api-key``) and the class stays."""
    match = _SDK_LABELLED.match(line)
    if match is None:
        return None
    found = _valid(match.group(1), "")
    if found is None:
        return None
    fields = dict(_SDK_LABEL.findall(match.group(3)))
    error: dict[str, object] = {"message": match.group(2)}
    if fields.get("type"):
        error["type"] = fields["type"]
    if fields.get("error_code"):
        error["details"] = {"error_code": fields["error_code"]}
    found.inline_body = json.dumps({"type": "error", "error": error})
    return found


def _later_status(text: str, parts: list[str], first: int, *, with_body: bool) -> tuple[int, _Status | None]:
    seen = 0
    for index in range(first + 1, len(parts) - 1):
        if not parts[index].strip():
            continue
        seen += 1
        if seen > _HEAD_LINES:
            break
        found = _status_line(parts[index], first_line=False, wanted=False)
        if found is not None:
            return index, found
    # curl -f reports on stderr, after whatever reached stdout.
    position = text.find(_CURL_MARK)
    if position >= 0:
        match = _CURL.match(text, position)
        if match:
            found = _valid(match.group(1), match.group(2))
            if found is not None:
                found.inline_body = _body_before_curl(text[:position], with_body)
                return len(parts), found
    return first, None


def _body_before_curl(before: str, with_body: bool) -> str:
    """The response body ``curl --fail-with-body`` printed ahead of its ``curl: (22) …`` line: what the
    command printed when the command says ``--fail-with-body``, else only text glued to that line (a body
    without a final newline, as most JSON APIs send it: its last line). Output above a plain ``curl -f``
    line (an earlier command's JSON, a script's ``echo``) is no body."""
    line_at = before.rfind(_CURL_PREFIX)
    if line_at < 0 or before[line_at:].strip() != _CURL_22:
        return ""
    body = before[:line_at]
    if with_body:
        return body.strip()
    if body[-1:] in ("", "\n"):
        return ""
    last = body.rsplit("\n", 1)[-1]
    if last.strip(" \t}]"):
        return last.strip()
    # The close of a pretty-printed JSON body: the body is the document that opened at column 0.
    opened = max(body.rfind("\n{"), body.rfind("\n["))
    return body[opened + 1 :].strip()


def _valid(code_text: str, reason: str, *, raw: bool = False) -> _Status | None:
    code = int(code_text)
    if not 100 <= code <= 599:
        return None
    return _Status(code, _WS.sub(" ", reason).strip(" :-\"'"), raw=raw)


def _is_phrase(code: int, reason: str) -> bool:
    reason = reason.strip().lower()
    try:
        if HTTPStatus(code).phrase.lower() == reason:
            return True
    except ValueError:
        return False
    return _PHRASE_ALIASES.get(code) == reason


def _phrase(code: int) -> str:
    try:
        return HTTPStatus(code).phrase
    except ValueError:
        return ""


def _read_headers(parts: list[str], start: int, headers: dict[str, str], raw: bool) -> int:
    """Collect ``Name: value`` lines from ``start``; return where the body begins.

    After an ``HTTP/x.y`` line every ``Name: value`` line is a header. After the other status forms
    (urllib's ``str(e)`` followed by the body) only names that look like headers count, so a plain-text
    body such as ``Error: db down`` stays the body.
    """
    index = start
    while index < len(parts) - 1 or (index == len(parts) - 1 and "\n" not in parts[index]):
        line = parts[index][:_MAX_LINE]
        if not line.strip() or line.strip() == "<":  # ``<`` alone: the end of the headers in curl -v
            return index + 1 if raw or headers else index
        match = _HEADER.match(line.strip())
        if match is None:
            return index
        name = match.group(1).lower()
        if not raw and "-" not in name and name not in _COMMON_HEADERS:
            return index
        headers[name] = match.group(2).strip()
        index += 1
    return index


def _next_nonblank(parts: list[str], start: int) -> int | None:
    for index in range(start, min(len(parts) - 1, start + 3)):
        if parts[index].strip():
            return index
    return None


def _without_status(text: str, wanted: bool) -> Parsed | None:
    envelope = _read_body(text)
    status = envelope.status
    if not wanted:
        if status is None or status < 400 or not text.lstrip().startswith("{"):
            return None
        if not (envelope.message or envelope.label):
            return None
    if wanted and status is None:
        status = _status_from_html_title(text)
    type_ = f"HTTP {status}" if status is not None else "HTTP error"
    reason = _phrase(status) if status else ""
    return Parsed(type_, _cause(envelope, reason, envelope.retry, status), "http", status=status)


def _status_from_html_title(body: str) -> int | None:
    title = _html_element(body, _TITLE, "</title")
    match = re.match(r"(\d{3})\b", title)
    if match and 400 <= int(match.group(1)) <= 599:
        return int(match.group(1))
    return None


def _read_body(body: str) -> _Envelope:
    stripped = body.strip()
    if not stripped:
        return _Envelope()
    payload = _json_payload(stripped)
    if payload is not None:
        envelope = _envelope(payload)
        if "Traceback (most recent call last)" in stripped:
            envelope.exception = _json_traceback(payload)
        if envelope.message or envelope.label or envelope.exception is not None:
            return envelope
    if stripped[:1] in "{[":
        return _envelope_from_fragments(stripped)
    if _HTML_MARK.search(stripped[:_HEAD_CHARS]) or _TITLE.search(stripped):
        return _Envelope(message=_html_summary(stripped), html=True, exception=_server_traceback(stripped))
    return _Envelope(message=_squash(_TAG.sub(" ", stripped.split("\n", 1)[0][:_MAX_LINE])),
                     exception=_server_traceback(stripped, markup=False))


def _json_payload(body: str) -> object | None:
    if body[:1] in "{[":
        try:
            decoded: object = json.JSONDecoder().raw_decode(body)[0]
            return decoded
        except (ValueError, RecursionError):
            pass
        if "'" in body[:_LITERAL_LIMIT] and len(body) <= _LITERAL_LIMIT:
            # The Python SDKs print the envelope as a dict repr: ``Error code: 429 - {'error': …}``.
            try:
                literal: object = ast.literal_eval(body)
                return literal
            except (ValueError, TypeError, SyntaxError, MemoryError, RecursionError):
                return None
        return None
    # A streamed response fails with a server-sent event: ``event: error`` / ``data: {…}``.
    if "data:" in body[:_HEAD_CHARS]:
        for line in body[:_HEAD_CHARS].split("\n"):
            if line.startswith("data:") and '"error"' in line:
                try:
                    event: object = json.JSONDecoder().raw_decode(line[5:].lstrip())[0]
                except (ValueError, RecursionError):
                    continue
                if isinstance(event, dict) and ("error" in event or event.get("type") == "error"):
                    return event
    return None


def _envelope(payload: object) -> _Envelope:
    if isinstance(payload, list):
        payload = next((item for item in payload[:5] if isinstance(item, dict)), None)
    env = _Envelope()
    if not isinstance(payload, dict):
        return env
    error = payload.get("error")
    if isinstance(error, dict):
        _from_error_object(error, env)
    elif isinstance(error, str) and error.strip():
        described = _first_str(payload, ("error_description", "message", "detail", "msg"))
        if described:
            env.label, env.message = error, described
        else:
            env.message = error
    if not env.message:
        _from_detail(payload.get("detail"), env)
    if not env.message:
        _from_errors(payload.get("errors"), env)
    if not env.message:
        env.message = _first_str(payload, ("message", "msg", "error_message", "errorMessage", "description"))
        if not env.message and not env.label:
            env.message = _first_str(payload, ("title", "reason"))
    if not env.label:
        env.label = _label_of(payload, env.message)
    if env.status is None:
        env.status = _status_of(payload, ("status", "statusCode", "status_code", "code"))
    if (env.status is None or env.status < 400) and env.label in _ANTHROPIC_STATUS:
        env.status = _ANTHROPIC_STATUS[env.label]
    return env


def _from_error_object(error: dict[object, object], env: _Envelope) -> None:
    """The nested ``error`` object of OpenAI, Anthropic, Google and Azure envelopes."""
    env.message = _first_str(error, ("message", "msg", "detail", "description"))
    labels: list[str] = []
    for key in ("type", "status", "code"):
        value = error.get(key)
        text = value.strip() if isinstance(value, str) else ""
        if text.lower() not in {"", "error"} and not text.isdigit():
            if key == "code" and labels and labels[0] == error.get("type"):
                labels.pop(0)  # OpenAI's ``type`` is the category of its ``code``: the code names the error
            labels.append(text)
    inner = error.get("innererror")
    if isinstance(inner, dict) and isinstance(inner.get("code"), str):
        labels.append(str(inner["code"]))
    details = error.get("details")
    field = ""
    if isinstance(details, list):  # google.rpc.Status details
        for item in details[:10]:
            if not isinstance(item, dict):
                continue
            kind = str(item.get("@type", ""))
            if kind.endswith("RetryInfo") and isinstance(item.get("retryDelay"), str):
                env.retry = str(item["retryDelay"])
            elif kind.endswith("ErrorInfo") and isinstance(item.get("reason"), str):
                labels.append(str(item["reason"]))
            elif kind.endswith("BadRequest") and isinstance(item.get("fieldViolations"), list):
                violation = next(iter(item["fieldViolations"]), None)
                if isinstance(violation, dict) and isinstance(violation.get("field"), str):
                    field = f"field: {violation['field']}"
                    if not env.message:
                        env.message = _first_str(violation, ("description",))
    param = error.get("param")
    if isinstance(param, str) and param and param not in env.message:
        field = field or f"param: {param}"
    seen: list[str] = []
    for label in labels:
        if label not in seen:
            seen.append(label)
    env.label = "/".join(seen[:3])
    if field and field.partition(": ")[2] not in env.message:
        env.label = f"{env.label} ({field})" if env.label else field
    env.status = _status_of(error, ("code", "status"))


def _from_detail(detail: object, env: _Envelope) -> None:
    """FastAPI / Starlette ``{"detail": …}``: a string, a pydantic validation list, or an object."""
    if isinstance(detail, str) and detail.strip():
        env.message = detail
    elif isinstance(detail, list):
        env.message = _validation_errors(detail)
    elif isinstance(detail, dict):
        inner = _envelope(detail)
        env.message = inner.message
        env.label = env.label or inner.label


def _validation_errors(items: list[object]) -> str:
    described: list[str] = []
    for item in items:
        if isinstance(item, dict):
            message = _first_str(item, ("msg", "message", "detail"))
            loc = item.get("loc") or item.get("path") or item.get("field")
            where = ".".join(str(part) for part in loc) if isinstance(loc, list) else str(loc or "")
            described.append(f"{where}: {message}" if where and message else where or message)
        elif isinstance(item, str):
            described.append(item)
        if len(described) == 2:
            break
    described = [text for text in described if text]
    if not described:
        return ""
    more = len(items) - len(described)
    return "; ".join(described) + (f" (+{more} more)" if more > 0 else "")


def _from_errors(errors: object, env: _Envelope) -> None:
    """``{"errors": …}``: GraphQL and JSON:API lists, plain string lists, Rails-style field maps."""
    if isinstance(errors, list) and errors:
        first = errors[0]
        if isinstance(first, dict):
            if "loc" in first:
                env.message = _validation_errors(errors)
                return
            env.message = _first_str(first, ("message", "msg", "detail", "title"))
            source = first.get("source")
            field = _first_str(source, ("pointer", "parameter")) if isinstance(source, dict) else ""
            field = field or _first_str(first, ("field", "param"))
            if field and field not in env.message:
                env.message = f"{field}: {env.message}"
            extensions = first.get("extensions")
            code = _first_str(extensions, ("code",)) if isinstance(extensions, dict) else ""
            env.label = env.label or code or _first_str(first, ("code",))
        elif isinstance(first, str):
            env.message = first
        if env.message and len(errors) > 1:
            env.message += f" (+{len(errors) - 1} more)"
    elif isinstance(errors, dict) and errors:
        field, problems = next(iter(errors.items()))
        problem = problems[0] if isinstance(problems, list) and problems else problems
        if isinstance(problem, str):
            env.message = f"{field}: {problem}"


def _label_of(payload: dict[object, object], message: str) -> str:
    for key in ("type", "code", "error_type", "errorType", "name", "title"):
        value = payload.get(key)
        if isinstance(value, str):
            value = value.strip()
            if value and value != message and not value.isdigit() and value.lower() != "error" and (
                "://" not in value and value != "about:blank"
            ):
                return value
    return ""


def _status_of(mapping: dict[object, object], keys: tuple[str, ...]) -> int | None:
    for key in keys:
        value = mapping.get(key)
        if isinstance(value, str) and value.strip().isdigit():
            value = int(value.strip())
        if isinstance(value, int) and not isinstance(value, bool) and 100 <= value <= 599:
            return value
    return None


def _first_str(mapping: dict[object, object], keys: tuple[str, ...]) -> str:
    for key in keys:
        value = mapping.get(key)
        if isinstance(value, str) and value.strip():
            return value.strip()
    return ""


_FRAGMENT = re.compile(
    r"\"(message|detail|error_description|msg|type|code|status)\"\s*:\s*(\"(?:[^\"\\\n]|\\.){0,2000}\"|\d{3}\b)"
)


def _envelope_from_fragments(body: str) -> _Envelope:
    """A JSON body too large to keep whole (its middle was cut): read the first fields by pattern."""
    found: dict[str, str] = {}
    for match in _FRAGMENT.finditer(body[:_HEAD_CHARS]):
        name, value = match.group(1), match.group(2)
        if name in found:
            continue
        if value.startswith('"'):
            try:
                value = str(json.loads(value))
            except ValueError:
                value = value.strip('"')
        found[name] = value
    env = _Envelope()
    env.message = found.get("message") or found.get("detail") or found.get("error_description") or ""
    env.message = env.message or found.get("msg", "")
    label = found.get("type") or found.get("code") or ""
    env.label = "" if label.isdigit() or label.lower() == "error" else label
    for name in ("code", "status"):
        if found.get(name, "").isdigit() and 100 <= int(found[name]) <= 599:
            env.status = int(found[name])
            break
    return env


def _server_traceback(body: str, *, markup: bool = True) -> Parsed | None:
    """The Python traceback a debug error page shows (Django's technical 500 page in HTML or in the plain
    text it serves a client that does not take HTML, Werkzeug's debugger), parsed by the Python parser;
    ``None`` when the page shows none. Plain text is read as it is: its ``in <module>`` is no tag."""
    start = body.find("Traceback (most recent call last)")
    if start < 0:
        return None
    window = body[start : start + 60_000]
    if markup:
        for closing in ("</textarea>", "</pre>"):
            end = window.find(closing)
            if end > 0:
                window = window[:end]
                break
        window = html.unescape(_TAG.sub("", window))
    parsed = _python.parse(window, Hints(kind="python"))
    return parsed if parsed is not None and parsed.frames else None


def _json_traceback(payload: object) -> Parsed | None:
    """A server's traceback carried in a JSON error body (a debug ``{"detail": …, "traceback": "…"}``),
    parsed by the Python parser, so the digest keeps the exception as well as the status."""
    stack: list[object] = [payload]
    for _ in range(200):
        if not stack:
            break
        node = stack.pop()
        if isinstance(node, dict):
            stack.extend(list(node.values())[:50])
        elif isinstance(node, list):
            if node and all(isinstance(item, str) for item in node[:50]):
                node = "\n".join(str(item).rstrip("\n") for item in node[:500])
            else:
                stack.extend(node[:50])
        if isinstance(node, str) and "Traceback (most recent call last)" in node:
            parsed = _python.parse(node, Hints(kind="python"))
            return parsed if parsed is not None and parsed.frames else None
    return None


def _html_summary(body: str) -> str:
    title = _html_element(body, _TITLE, "</title")
    heading = _html_element(body, _H1, "</h1")
    if title and heading:
        if heading.lower() in title.lower():
            return title
        if title.lower() in heading.lower():
            return heading
        return f"{title}: {heading}"
    if title or heading:
        return title or heading
    return _squash(_TAG.sub(" ", body[:2000]))[:200]


def _html_element(body: str, opening: re.Pattern[str], closing: str) -> str:
    match = opening.search(body)
    if match is None:
        return ""
    window = body[match.end() : match.end() + 4000]
    end = window.lower().find(closing)
    inner = window[:end] if end >= 0 else window[:300]
    return _squash(html.unescape(_TAG.sub(" ", inner)))[:200]


def _retry_after(headers: dict[str, str]) -> str:
    value = headers.get("retry-after", "")
    if value:
        return f"{value}s" if _DIGITS.fullmatch(value) else value[:60]
    millis = headers.get("retry-after-ms", "")
    if _DIGITS.fullmatch(millis):
        return f"{millis}ms"
    return ""


def _cause(envelope: _Envelope, reason: str, retry: str, status: int | None) -> str:
    label = _squash(envelope.label)[:80]
    # Redact before cutting: a key cut in half no longer looks like a key to the compactor's redaction.
    message = _squash(redact(_LINK_IN_PARENS.sub("", envelope.message[: _MESSAGE_CHARS * 8])))
    message, advised = _without_advice(message, reason)
    retry = retry or advised
    suffix = f" (retry after {_squash(retry)[:_RETRY_CHARS]})" if retry else ""
    if status is not None and message.startswith(f"{status} "):
        message = message[4:].lstrip(" :-")  # "502 Bad Gateway" under the type "HTTP 502"
    # The room left for the message must not depend on the retry value, or two occurrences of one
    # failure would be cut at different places and fall into two dedup classes.
    reserve = len(" (retry after )") + _RETRY_CHARS if retry else 0
    budget = min(_MESSAGE_CHARS, max(_MIN_MESSAGE, _CAUSE_BUDGET - len(label) - reserve - 2))
    if len(message) > budget:
        # Whole sentences read better than a cut one; the first sentences name the problem.
        end = message.rfind(". ", 0, budget)
        message = message[: end + 1] if end >= _MIN_MESSAGE // 2 else message[: budget - 1].rstrip() + "…"
    if not message and not label:
        message = reason or "(empty body)"
    # A label that names a secret (``invalid_api_key``) must not make the message read as its value. The
    # probe is no word of prose: after a key whose values are random text, a word stays (see redact).
    separator = ": " if redact(f"{label}: v4lue") == f"{label}: v4lue" else " - "
    cause = f"{label}{separator}{message}" if label and message else label or message
    return cause + suffix


def _without_advice(message: str, reason: str) -> tuple[str, str]:
    """The message without the account it concerns and without sentences of advice (``Please try again
    in 2.93s.``, ``Visit … to learn more.``), and the retry delay such a sentence gave.

    A sentence that starts like advice but names something (``Please provide the 'email' field.``) is the
    cause and stays; so does one after a bare headline (``Forbidden. You can only delete your own
    comments.``), unless it only says when to retry or where to read more."""
    message = _ACCOUNT.sub("", message)
    sentences = _SENTENCE_END.split(message)
    dropped: set[int] = set()
    retry = ""
    for at, sentence in enumerate(sentences):
        if _ADVICE.match(sentence):
            found = _TRY_AGAIN.search(sentence)
            if found and not retry:
                retry = found.group(1).replace(" ", "")
            if not _NAMED.search(_URL.sub("", sentence)):
                dropped.add(at)
    kept = [sentence for at, sentence in enumerate(sentences) if at not in dropped]
    if kept and dropped and _headline(" ".join(kept), reason):
        kept = [s for at, s in enumerate(sentences) if at not in dropped or not _ONLY_ADVICE.search(s)]
    return (" ".join(kept) if kept else message), retry


def _headline(text: str, reason: str) -> bool:
    """True when ``text`` names no cause: the status's reason phrase or generic words only."""
    words = text.lower().replace(".", " ").replace(",", " ").split()
    known = _GENERIC_WORDS | _HEADLINE_WORDS | frozenset(reason.lower().split())
    return bool(words) and all(word in known for word in words)


def _squash(text: str) -> str:
    return _WS.sub(" ", text).strip()
