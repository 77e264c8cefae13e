"""Mask the variable parts of an error message so two occurrences of one failure share a dedup key.

Rules, applied in this order (each replaces the match with the placeholder shown):

==================  =========================================================  =============
what                example                                                    becomes
==================  =========================================================  =============
PEM / secrets       already ``[REDACTED]`` by :mod:`otel_errcompact.redact`    (unchanged)
timestamps          ``2026-11-22T06:02:19.123Z``, ``Sun Nov 22 06:02:19 2026``  ``<ts>``
UUIDs               ``3f2c…-…``                                                ``<uuid>``
memory addresses    ``0x7f3a2c1b9e80``                                         ``<addr>``
temp paths          ``/tmp/tmpa1b2/users.json``, ``/var/folders/…/T/x``        ``<tmp>/users.json``
URLs                ``http://127.0.0.1:54321/v1/items/42?page=3&sig=…``        ``http://<ip>:<port>/v1/items/<n>?page=<v>&sig=<v>``
IPv4/IPv6 + port    ``10.0.0.7:5432``                                          ``<ip>:<port>``
request/trace ids   ``request id: req_011CX…``, ``trace_id=4bf9…``             ``request id: <id>``
hashes, long ids    ``9f86d081884c7d65``, ``a1B2c3D4e5F6g7H8i9``                ``<hex>`` / ``<id>``
durations           ``30.5s``, ``1500 ms``, ``2 minutes``                       ``<dur>``
numbers             ``pid 4242``, ``line 7 column 3``, ``after 3 attempts``     ``pid <n>`` …
==================  =========================================================  =============

What is never masked: identifiers. A number glued to letters (``user_2``, ``v1``, ``t3_orders``) is part
of a name and stays; quoted text keeps its words (``'user_id'``, ``"orders"``), so two different missing
keys, tables, modules or fields never share a key. File names survive temp-path masking (only the
directory is masked). HTTP status codes and exit codes are carried by the error *type*
(``HTTP 429``, ``exit 2``), not by the message, so masking numbers never merges them.
"""

from __future__ import annotations

import re

__all__ = ["MAX_NORMALIZED_CHARS", "normalize_message"]

MAX_NORMALIZED_CHARS = 240

_MONTH = r"(?:Jan|Feb|Mar|Apr|May|Jun|Jul|Aug|Sep|Oct|Nov|Dec)"
# Each rule: (pattern, placeholder, characters of which at least one must occur for the rule to apply).
# The guard skips a regular-expression pass in the common case of a short message without digits.
_DIGITS = "0123456789"
_RULES: tuple[tuple[re.Pattern[str], str, str], ...] = (
    (
        re.compile(
            r"\b\d{4}-\d{2}-\d{2}[T ]\d{2}:\d{2}(?::\d{2}(?:[.,]\d+)?)?(?:Z|[+-]\d{2}:?\d{2}|\s?UTC)?\b"
            rf"|\b(?:(?:Mon|Tue|Wed|Thu|Fri|Sat|Sun),?\s+)?(?:\d{{1,2}}\s+{_MONTH}|{_MONTH}\s+\d{{1,2}})"
            r"(?:,?\s+\d{4})?\s+\d{2}:\d{2}:\d{2}(?:\s+(?:\d{4}|GMT|UTC))*"
            r"|\b\d{2}:\d{2}:\d{2}(?:[.,]\d+)?\b"
        ),
        "<ts>",
        _DIGITS,
    ),
    (re.compile(r"\b[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}\b"), "<uuid>", _DIGITS),
    (re.compile(r"\b0x[0-9a-fA-F]{4,}\b"), "<addr>", "x"),
    (
        re.compile(
            r"(?:/private)?/var/folders/(?:[^/\s'\"]+/)+"
            r"|(?:/tmp|/var/tmp|/dev/shm)/(?:[^/\s'\"]+/)*"
            r"|[A-Za-z]:\\(?:[^\\\s'\"]+\\)*?Temp\\(?:[^\\\s'\"]+\\)*"
        ),
        "<tmp>/",
        "/\\",
    ),
    (re.compile(r"(?<=[?&;])([A-Za-z0-9_.\-\[\]]+)=[^&\s#'\"]*"), r"\1=<v>", "?&;"),
    (
        re.compile(
            r"\b(?:\d{1,3}\.){3}\d{1,3}\b"
            r"|\[[0-9a-fA-F:]*:[0-9a-fA-F:]+\]"
            r"|(?<![\w:])(?:[0-9a-fA-F]{1,4}:){2,7}[0-9a-fA-F]{1,4}(?![\w:])"
        ),
        "<ip>",
        _DIGITS + ":",
    ),
    (re.compile(r"(?<=[\w>\]]):\d{2,5}\b"), ":<port>", ":"),
    (
        re.compile(
            r"(?i)\b((?:x-)?(?:request|req|trace|span|correlation|transaction|message|job|run|task|session)"
            r"[\s_\-]?id)([^\w<]{1,3})[A-Za-z0-9_\-:.]{4,}"
        ),
        r"\1\2<id>",
        "dD",
    ),
    (re.compile(r"\b(?:req|msg|run|call|chatcmpl|resp|toolu|evt|job)_[A-Za-z0-9]{8,}\b"), "<id>", "_"),
    (re.compile(r"\b(?=[0-9a-f]*[a-f])(?=[0-9a-f]*\d)[0-9a-f]{7,}\b"), "<hex>", _DIGITS),
    (re.compile(r"\b(?=[A-Za-z0-9]*\d)(?=[A-Za-z0-9]*[A-Za-z])[A-Za-z0-9]{16,}\b"), "<id>", _DIGITS),
    (
        re.compile(
            r"\b\d+(?:\.\d+)?\s?(?:ns|us|µs|ms|s|sec|secs|seconds?|m|mins?|minutes?|h|hrs?|hours?)\b"
        ),
        "<dur>",
        _DIGITS,
    ),
    (re.compile(r"(?<![\w.])[-+]?\d+(?:\.\d+)?(?:e[-+]?\d+)?(?![\w])"), "<n>", _DIGITS),
    (re.compile(r"\s+"), " ", " \t\n"),
)

# A second guard for the costliest digit-guarded rules: characters every match of the rule contains
# (each alternative of the timestamp rule has a ``:``, a UUID has ``-``, an address ``.`` or ``:``, every
# duration unit an ``s``, ``m`` or ``h``). Skipping a rule whose match is impossible changes no result.
_ALSO: dict[str, frozenset[str]] = {
    "<ts>": frozenset(":"),
    "<uuid>": frozenset("-"),
    "<ip>": frozenset(".:"),
    "<dur>": frozenset("smh"),
}
_GUARDED = tuple(
    (pattern, placeholder, frozenset(needs), _ALSO.get(placeholder, frozenset(needs)))
    for pattern, placeholder, needs in _RULES
)


def normalize_message(message: str) -> str:
    """Mask variable data in ``message`` (see the module docstring for the rules).

    >>> normalize_message("connect to 127.0.0.1:54321 failed after 3.2s (pid 4242)")
    'connect to <ip>:<port> failed after <dur> (pid <n>)'
    >>> normalize_message("KeyError: 'user_id'")
    "KeyError: 'user_id'"
    """
    text = message[: MAX_NORMALIZED_CHARS * 4]
    chars = set(text)  # one pass; each guard is then a small set intersection, not a scan per character
    for pattern, placeholder, needs, also in _GUARDED:
        if not needs.isdisjoint(chars) and not also.isdisjoint(chars):
            text = pattern.sub(placeholder, text)
            chars = set(text)
    return text.strip()[:MAX_NORMALIZED_CHARS]
