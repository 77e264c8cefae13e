"""Every failure gets an error class, and a structured ``retry_after_s`` when the failure says when to retry.

=================== ==================================================== ===============================
class               what                                                 what recovery does
=================== ==================================================== ===============================
``transient``       5xx, overloaded (529), timeouts, connection resets    retry with backoff (once)
``rate_limited``    429 (but not an exhausted quota), throttling          sleep ``retry_after_s``, pace
``prompt_too_long`` context-length / ``prompt is too long`` / 413          compact once, retry
``output_truncated`` ``finish_reason: length``, ``stop_reason: max_tokens`` double ``max_tokens`` (≤ 3×)
``permanent``       auth, validation, not found, policy, quota, budget    surface at once
``aborted``         cancelled by the user or the loop                    end the loop; never a failure
=================== ==================================================== ===============================

Three sources, each read without importing any SDK:

- :func:`classify_exception` — exceptions of the ``openai`` and ``anthropic`` SDKs (by class name along the
  MRO, ``status_code``, the error body's ``type``/``code`` and the response's retry headers), of httpx and
  of the standard library;
- :func:`classify_text` — the fields of a compacted :class:`~otel_errcompact.digest.Digest` (type, cause,
  status, format, retryable) plus the raw text (``retry-after`` headers, ``try again in 6s`` phrases);
- :func:`classify_span` — GenAI span attributes: ``error.type``, ``http.response.status_code`` and
  ``gen_ai.response.finish_reasons`` containing ``length`` or ``max_tokens``.

``Digest.retryable`` stays consistent: it is True exactly for ``transient`` and ``rate_limited``.
"""

from __future__ import annotations

import dataclasses
import email.utils
import re
import time
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Literal

if TYPE_CHECKING:
    from otel_errcompact.digest import Digest

__all__ = [
    "ERROR_CLASSES",
    "RETRYABLE_CLASSES",
    "Classification",
    "ErrorClass",
    "classify_exception",
    "classify_span",
    "classify_text",
    "retry_after_from_headers",
    "retry_after_from_text",
    "with_raw_text",
    "with_retry_after_attribute",
]

ErrorClass = Literal["transient", "rate_limited", "prompt_too_long", "output_truncated", "permanent", "aborted"]
ERROR_CLASSES: tuple[ErrorClass, ...] = (
    "transient",
    "rate_limited",
    "prompt_too_long",
    "output_truncated",
    "permanent",
    "aborted",
)
RETRYABLE_CLASSES: frozenset[str] = frozenset({"transient", "rate_limited"})

_RAW_CHARS = 4096  # retry hints live in the status line, the headers and the first body lines

MAX_RETRY_AFTER_S = 24 * 3600.0
"""A retry-after beyond a day is a server's way of saying "not today": it is kept, capped, and the loop's
total-wait cap turns it into a ``model_error``."""


@dataclass(frozen=True, slots=True)
class Classification:
    """An error class and, when the failure said so, how long to wait before trying again."""

    error_class: ErrorClass
    retry_after_s: float | None = None
    reason: str = ""

    @property
    def retryable(self) -> bool:
        return self.error_class in RETRYABLE_CLASSES


_PROMPT_TOO_LONG = re.compile(
    r"(?i)context_length_exceeded|prompt is too long|prompt too long|maximum context length"
    r"|context window|too many (?:input )?tokens|input is too long|request_too_large|string_above_max_length"
    r"|reduce the length of the messages|exceeds? the (?:model'?s? )?(?:context|token) limit"
)
_TRUNCATED = re.compile(r"(?i)finish_reason[\"'=: ]+length|stop_reason[\"'=: ]+max_tokens|max_tokens_exceeded"
                        r"|LengthFinishReasonError|output (?:was )?truncated")
_QUOTA = re.compile(r"(?i)insufficient_quota|exceeded your current quota|billing|credit balance is too low")
_RATE = re.compile(r"(?i)rate.?limit|too many requests|throttl|resource.?exhausted|requests per (?:min|sec)")
_OVERLOADED = re.compile(r"(?i)overloaded|service unavailable|temporarily unavailable|server_error|api_error")
_ABORT_TYPES = frozenset(
    {"CancelledError", "KeyboardInterrupt", "APIUserAbortError", "Aborted", "AbortError", "LoopAborted"}
)
_TRANSIENT_TYPES = frozenset(
    {
        "APIConnectionError", "APITimeoutError", "InternalServerError", "OverloadedError",
        "ServiceUnavailableError", "DeadlineExceededError", "TimeoutError", "ConnectionError",
        "ConnectionResetError", "ConnectionRefusedError", "ConnectionAbortedError", "BrokenPipeError",
        "RemoteDisconnected", "ConnectError", "ReadTimeout", "WriteTimeout", "ConnectTimeout", "PoolTimeout",
        "ReadError", "WriteError", "RemoteProtocolError", "TimeoutException", "NetworkError",
        "IncompleteRead",
    }
)  # fmt: skip
_TRY_AGAIN = re.compile(
    r"(?i)(?:try again in|retry after|retry in|retry-after:?|retryDelay\"?:?\s*\"?)\s*"
    r"(?:(\d+)h)?\s*(?:(\d+)m)?\s*(\d+(?:\.\d+)?)\s*"
    r"(milliseconds?|ms|seconds?|secs?|s|minutes?|mins?|m|hours?|hrs?|h)?\b"
)
# Words one of which each pattern needs: a substring test on lowered text skips the regex for most errors.
_PROMPT_WORDS = ("context", "too long", "tokens", "too_large", "max_length", "too many", "limit")
_TRUNCATED_WORDS = ("finish_reason", "stop_reason", "max_tokens", "lengthfinish", "truncated")
_QUOTA_WORDS = ("quota", "billing", "credit")
_RATE_WORDS = ("rate", "too many", "throttl", "exhausted", "requests per")


def _mentions(lowered: str, words: tuple[str, ...]) -> bool:
    for word in words:  # noqa: SIM110 - a plain loop: a generator costs more than these short tests
        if word in lowered:
            return True
    return False


_RETRY_HEADER = re.compile(r"(?im)^\s*(?:<\s*)?(retry-after-ms|retry-after)\s*:\s*([^\r\n]{1,40})\r?$")


def _bounded(seconds: float | None) -> float | None:
    if seconds is None or seconds != seconds or seconds < 0:  # NaN or negative: no usable hint
        return None
    return min(float(seconds), MAX_RETRY_AFTER_S)


def retry_after_from_headers(headers: Mapping[str, str] | Any, *, now: float | None = None) -> float | None:
    """Seconds to wait from ``retry-after-ms`` or ``retry-after`` (seconds or an HTTP-date), as the SDKs
    read them; ``None`` when neither is there or usable.

    >>> retry_after_from_headers({"retry-after": "2"}), retry_after_from_headers({"retry-after-ms": "150"})
    (2.0, 0.15)
    """
    try:
        get = headers.get
        for name, divisor in (("retry-after-ms", 1000.0), ("retry-after", 1.0)):
            value = get(name)
            if value is None:
                continue
            try:
                return _bounded(float(str(value).strip()) / divisor)
            except ValueError:
                pass
        value = get("retry-after")
        if value:
            parsed = email.utils.parsedate_tz(str(value))
            if parsed is not None:
                return _bounded(max(0.0, email.utils.mktime_tz(parsed) - (time.time() if now is None else now)))
    except Exception:
        return None
    return None


def retry_after_from_text(text: str) -> float | None:
    """Seconds to wait as a raw error says it: header lines (``Retry-After: 20``, ``retry-after-ms: 150``),
    OpenAI's ``Please try again in 6.5s`` / ``in 20ms`` / ``in 1m30s`` / ``in 1h2m3s``, ``in 5 minutes``,
    ``in 2 hours``, Google's ``"retryDelay": "20s"``; header lines end in LF or CRLF.

    >>> retry_after_from_text("Rate limit reached. Please try again in 1m2.5s.")
    62.5
    """
    head = text[:16_384]
    lowered = head.lower()
    if "retry" not in lowered and "try again" not in lowered:
        return None  # the cheap test first: most errors say nothing about when to retry
    for m in _RETRY_HEADER.finditer(head):
        name, value = m.group(1).lower(), m.group(2).strip()
        seconds = retry_after_from_headers({name: value})
        if seconds is not None:
            return seconds
    phrase = _TRY_AGAIN.search(head)
    if phrase is None:
        return None
    hours, minutes, number, unit = phrase.group(1), phrase.group(2), float(phrase.group(3)), phrase.group(4)
    seconds = number * _unit_seconds(unit) + (int(minutes) * 60 if minutes else 0) + (int(hours) * 3600 if hours else 0)
    return _bounded(seconds)


def _unit_seconds(unit: str | None) -> float:
    """Seconds in one of :data:`_TRY_AGAIN`'s units (none: seconds)."""
    if not unit:
        return 1.0
    unit = unit.lower()
    if unit.startswith("mil") or unit == "ms":
        return 0.001
    if unit.startswith("h"):
        return 3600.0
    if unit.startswith("m"):
        return 60.0
    return 1.0


# The classes with no variable part: immutable, so one of each serves every failure (most failures are
# permanent and not retryable: classify_text builds no object for them).
_PROMPT_TOO_LONG_CLASS = Classification("prompt_too_long", None, "context length")
_OUTPUT_TRUNCATED_CLASS = Classification("output_truncated", None, "output truncated")
_FINISH_REASON_LENGTH_CLASS = Classification("output_truncated", None, "finish_reason length")
_QUOTA_CLASS = Classification("permanent", None, "quota exhausted")
_NOT_RETRYABLE_CLASS = Classification("permanent", None, "not retryable")


def classify_text(
    type_: str, cause: str, status: int | None, fmt: str, retryable: bool, raw: str = ""
) -> Classification:
    """The class of a compacted failure from its digest fields and (optionally) its raw text.

    >>> classify_text("HTTP 429", "rate_limit_exceeded: slow down (retry after 20)", 429, "http", True)
    Classification(error_class='rate_limited', retry_after_s=20.0, reason='status 429')
    """
    text = f"{type_}\n{cause}\n{raw[:_RAW_CHARS]}"
    lowered = text.lower()
    bare_type = type_.rsplit(".", 1)[-1]
    if bare_type in _ABORT_TYPES:
        return Classification("aborted", None, f"type {bare_type}")
    if status == 413 or (_mentions(lowered, _PROMPT_WORDS) and _PROMPT_TOO_LONG.search(text)):
        return _PROMPT_TOO_LONG_CLASS
    if _mentions(lowered, _TRUNCATED_WORDS) and _TRUNCATED.search(text):
        return _OUTPUT_TRUNCATED_CLASS
    if _mentions(lowered, _QUOTA_WORDS) and _QUOTA.search(text):
        return _QUOTA_CLASS
    if fmt == "http" and status is not None:
        if status == 429:
            return Classification("rate_limited", _retry_after(cause, raw), "status 429")
        if retryable:
            return Classification("transient", _retry_after(cause, raw), f"status {status}")
        return Classification("permanent", None, f"status {status}")
    if _mentions(lowered, _RATE_WORDS) and _RATE.search(f"{type_}\n{cause}"):
        return Classification("rate_limited", _retry_after(cause, raw), "rate limit")
    if retryable:
        return Classification("transient", _retry_after(cause, raw), "transient")
    return _NOT_RETRYABLE_CLASS


def _retry_after(cause: str, raw: str) -> float | None:
    """The wait the cause names, else the raw text's; read only for the classes that carry one (most
    failures are permanent, and these reads are pure: when they run changes no answer)."""
    return retry_after_from_text(cause) or (retry_after_from_text(raw[:_RAW_CHARS]) if raw else None)


def with_raw_text(digest: Digest, raw: str) -> Digest:
    """``digest`` with the retry-after its raw text states (a header line the parser left out of the
    cause); the class itself is decided from the digest's fields, which already carry the cause."""
    if digest.retry_after_s is not None or digest.error_class not in RETRYABLE_CLASSES or not raw:
        return digest
    seconds = retry_after_from_text(raw[:_RAW_CHARS])
    return digest if seconds is None else dataclasses.replace(digest, retry_after_s=seconds)


RETRY_AFTER_ATTRIBUTE = "errcompact.retry_after_s"
"""Span attribute with the retry-after an exception carried in its response headers (set by the tool
boundary): the raw traceback does not show headers, so the digest takes the wait from here."""


def with_retry_after_attribute(digest: Digest, attributes: Mapping[str, Any]) -> Digest:
    """``digest`` with the retry-after of :data:`RETRY_AFTER_ATTRIBUTE`, when its text named none."""
    try:
        value = attributes.get(RETRY_AFTER_ATTRIBUTE)
        if value is None or digest.retry_after_s is not None or digest.error_class not in RETRYABLE_CLASSES:
            return digest
        seconds = _bounded(float(value))
        return digest if seconds is None else dataclasses.replace(digest, retry_after_s=seconds)
    except Exception:
        return digest


def _type_names(exc: BaseException) -> list[str]:
    return [c.__name__ for c in type(exc).__mro__]


def _is_http_error(exc: BaseException) -> bool:
    """urllib's ``HTTPError``: the status in ``code`` and the response headers in ``headers`` (read by duck
    typing: an ``int`` status code and headers that answer ``get``)."""
    code = getattr(exc, "code", None)
    return (
        type(code) is int and 100 <= code <= 599 and callable(getattr(getattr(exc, "headers", None), "get", None))
    )


def _error_body(exc: BaseException) -> tuple[str, str]:
    """The provider's error ``type``/``code`` and message from an SDK exception's parsed body."""
    body = getattr(exc, "body", None)
    kind, message = "", ""
    if isinstance(body, Mapping):
        inner = body.get("error", body)
        if isinstance(inner, Mapping):
            kind = " ".join(str(inner.get(k) or "") for k in ("type", "code")).strip()
            message = str(inner.get("message") or "")
    code = getattr(exc, "code", None)
    if code and not kind:
        kind = str(code)
    return kind, message or str(exc)


def classify_exception(exc: BaseException) -> Classification:
    """The class of an exception, read by duck typing (no SDK is imported).

    >>> classify_exception(TimeoutError("read timed out")).error_class
    'transient'
    """
    try:
        names = _type_names(exc)
        if any(n in _ABORT_TYPES for n in names):
            return Classification("aborted", None, f"type {names[0]}")
        if "LengthFinishReasonError" in names:
            return _FINISH_REASON_LENGTH_CLASS
        status = getattr(exc, "status_code", None)
        if not isinstance(status, int):
            response = getattr(exc, "response", None)
            status = getattr(response, "status_code", None) if response is not None else None
        response = getattr(exc, "response", None)
        headers = getattr(response, "headers", None)
        if not isinstance(status, int) and _is_http_error(exc):  # the standard library's urllib
            status, headers = exc.code, exc.headers  # type: ignore[attr-defined]
        status = status if isinstance(status, int) else None
        retry_after = retry_after_from_headers(headers) if headers is not None else None
        reason = getattr(exc, "reason", None)
        if isinstance(reason, BaseException) and status is None:  # urllib's URLError: what the socket raised
            names = [*names, *_type_names(reason)]
        kind, message = _error_body(exc)
        # Bounded: the signal is in the error's code and first lines; a 10 MB message must not cost seconds.
        text = f"{kind[:_RAW_CHARS]}\n{message[:_RAW_CHARS]}"
        if retry_after is None:
            retry_after = retry_after_from_text(text)
        if status == 413 or _PROMPT_TOO_LONG.search(text):
            return _PROMPT_TOO_LONG_CLASS
        if _QUOTA.search(text):
            return _QUOTA_CLASS
        if status == 429 or "RateLimitError" in names:
            return Classification("rate_limited", retry_after, "status 429")
        if status is not None:
            if status in (408, 409, 425) or status >= 500 or _OVERLOADED.search(kind):
                return Classification("transient", retry_after, f"status {status}")
            return Classification("permanent", None, f"status {status}")
        if any(n in _TRANSIENT_TYPES for n in names):
            return Classification("transient", retry_after, f"type {names[0]}")
        if _RATE.search(text):
            return Classification("rate_limited", retry_after, "rate limit")
        return Classification("permanent", None, f"type {names[0]}")
    except Exception:  # a hostile exception object must not break the caller
        return Classification("permanent", None, "unclassifiable")


def _finish_reasons(value: Any) -> Iterable[str]:
    if isinstance(value, str):
        return (value,)
    if isinstance(value, (list, tuple)):
        return (str(v) for v in value)
    return ()


def classify_span(attributes: Mapping[str, Any], message: str = "") -> Classification | None:
    """The class a GenAI (``chat``) span's attributes show, or None for a span that shows no failure.

    ``message`` is the span's exception message or status description, where "prompt is too long" is
    said (``error.type`` alone is only the exception class).

    >>> classify_span({"gen_ai.response.finish_reasons": ("length",)}).error_class
    'output_truncated'
    """
    try:
        reasons = _finish_reasons(attributes.get("gen_ai.response.finish_reasons"))
        if any(r in ("length", "max_tokens") for r in reasons):
            return _FINISH_REASON_LENGTH_CLASS
        error_type = attributes.get("error.type")
        status = attributes.get("http.response.status_code")
        status = int(status) if isinstance(status, (int, str)) and str(status).isdigit() else None
        if not error_type and (status is None or status < 400):
            return None
        text = str(error_type or "")
        if status is None and text.isdigit():
            status = int(text)
        bare = text.rsplit(".", 1)[-1]
        if bare.lower() == "timeout":  # the semantic conventions' own value for a timed-out operation
            bare = "TimeoutError"
        if bare in _ABORT_TYPES:
            return Classification("aborted", None, f"type {bare}")
        if status == 413 or _PROMPT_TOO_LONG.search(f"{text}\n{message[:_RAW_CHARS]}"):
            return _PROMPT_TOO_LONG_CLASS
        if status == 429 or "RateLimit" in bare or _RATE.search(text):
            return Classification("rate_limited", None, "status 429")
        if (status is not None and (status >= 500 or status in (408, 409, 425))) or bare in _TRANSIENT_TYPES:
            return Classification("transient", None, f"error.type {text or status}")
        return Classification("permanent", None, f"error.type {text or status}")
    except Exception:
        return None
