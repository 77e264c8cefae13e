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

# Python's programming errors. Their message quotes the code (a keyword, a key, an attribute): that word may
# sound transient ("unexpected keyword argument 'timeout'", KeyError: 'retry_after'), yet the same call fails
# the same way however often it is repeated.
_PROGRAMMING_ERRORS = frozenset(
    {
        "TypeError", "KeyError", "AttributeError", "NameError", "UnboundLocalError", "IndexError", "LookupError",
        "ImportError", "ModuleNotFoundError", "SyntaxError", "IndentationError", "AssertionError",
        "NotImplementedError", "ZeroDivisionError", "RecursionError", "UnicodeDecodeError", "UnicodeEncodeError",
    }
)  # fmt: skip

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
    >>> is_retryable("TypeError", "fetch() got an unexpected keyword argument 'timeout'", None, "python")
    False
    """
    if fmt == "http" and status is not None:
        return status in RETRYABLE_STATUS
    if fmt in {"gcc", "javac", "rustc", "mypy", "pytest"}:
        return False
    if fmt == "shell" and status is not None and status in {124, 137}:
        return True  # timeout(1) expired; killed (often the OOM killer): worth one more try
    if may_search(_TRANSIENT_TYPE, _TYPE_WORDS, type_):
        return True
    words = type_.split(None, 1)  # "KeyError", "json.JSONDecodeError", "ValueError exit 3"
    if words and words[0].rsplit(".", 1)[-1] in _PROGRAMMING_ERRORS:
        return False
    return may_search(_TRANSIENT_CAUSE, _CAUSE_WORDS, cause)
