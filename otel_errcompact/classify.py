"""Decide whether a failure is worth retrying as it is (transient) or needs a change of input (permanent).

A first, conservative classification used for the digest's ``retryable`` flag: rate limits, overload,
timeouts and dropped connections are transient; everything else (bad input, missing keys, compile
errors, 4xx other than 408/409/425/429) is permanent until something changes.
"""

from __future__ import annotations

import re

from otel_errcompact.parsers._base import may_search

__all__ = ["RETRYABLE_STATUS", "is_retryable"]

RETRYABLE_STATUS = frozenset({408, 409, 425, 429, 500, 502, 503, 504, 520, 521, 522, 523, 524, 529})

_TRANSIENT_TYPE = re.compile(
    r"(?i)timeout|timedout|connection(?:reset|refused|aborted)?error|brokenpipe|temporar|unavailable"
    r"|ratelimit|overloaded|throttl|serviceunavailable|apiconnection|remotedisconnected|too\s?many\s?requests"
    r"|eagain|ECONNRESET|ECONNREFUSED|ETIMEDOUT|EAI_AGAIN|deadlineexceeded"
)
_TRANSIENT_CAUSE = re.compile(
    r"(?i)timed out|time-?out|temporarily|try again|rate.?limit|too many requests|overloaded"
    r"|connection (?:reset|refused|aborted)|service unavailable|bad gateway|resource.?exhausted"
)


# Lowercase words each alternative of the patterns above contains: ASCII text without any of them cannot
# match, and a few substring tests are far cheaper than an ignore-case alternation tried at every position.
_TYPE_WORDS = ("timeout", "timedout", "connection", "brokenpipe", "temporar", "unavailable", "ratelimit",
               "overloaded", "throttl", "remotedisconnected", "too", "eagain", "econn", "eai_again",
               "deadlineexceeded")
_CAUSE_WORDS = ("time", "temporarily", "try again", "rate", "too many requests", "overloaded", "connection ",
                "service unavailable", "bad gateway", "resource")


def is_retryable(type_: str, cause: str, status: int | None, fmt: str) -> bool:
    """True when the same call may succeed if simply repeated later.

    >>> is_retryable("HTTP 429", "rate limit exceeded", 429, "http")
    True
    >>> is_retryable("KeyError", "'user_id'", None, "python")
    False
    """
    if fmt == "http" and status is not None:
        return status in RETRYABLE_STATUS
    if fmt in {"gcc", "javac", "rustc", "mypy", "pytest"}:
        return False
    if fmt == "shell" and status is not None and status in {124, 137}:
        return True  # timeout(1) expired; killed (often the OOM killer): worth one more try
    return may_search(_TRANSIENT_TYPE, _TYPE_WORDS, type_) or may_search(_TRANSIENT_CAUSE, _CAUSE_WORDS, cause)
