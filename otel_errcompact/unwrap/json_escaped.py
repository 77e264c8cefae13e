"""Unwrap an error that travelled as JSON: a JSON string, or a report / API response carrying it.

Tools and APIs serialise tracebacks: ``json.dumps(traceback)`` gives one long line with literal ``\\n``
escapes, an error report puts the traceback in a field (``{"error": {"traceback": "…"}}``), Jupyter's
messages carry it as a list of lines. Parsed as it is, the whole report is one line and a fragment of it
becomes the cause; unwrapped, the traceback's own parser sees its real lines.

Only multi-line text is taken out: a JSON body whose strings are all single lines is an API error
envelope, which the HTTP parser reads as it is. Text that merely *contains* an escaped fragment (a log
line quoting a traceback, a JSON document cut in the middle) has its escapes decoded in place.
"""

from __future__ import annotations

import json
import re

from otel_errcompact.parsers._base import Hints

__all__ = ["declines", "unwrap"]

_MAX_CHARS = 262_144
_MAX_NODES = 2_000
_ESCAPE = re.compile(r"\\(u[0-9a-fA-F]{4}|[\"\\/bfnrt])")
_SIMPLE = {"n": "\n", "t": "\t", "r": "\r", "b": "\b", "f": "\f", '"': '"', "\\": "\\", "/": "/"}
_JSON_START = re.compile(r"\s*[\"{\[]")
_ERRORISH = ("Traceback", "Error", "Exception", "panic:", "error", "at ")
_FRAME_MARKS = ("Traceback", 'File "', "\tat ", "\n    at ", "goroutine ", "Cell In[", "Caused by:", "HTTP/")


def unwrap(text: str, hints: Hints) -> tuple[str, Hints] | None:
    """The multi-line error inside JSON-escaped ``text``; ``None`` when there is none."""
    if len(text) > _MAX_CHARS:
        return None
    stripped = text.strip() if _JSON_START.match(text) else ""  # most text is no JSON: no copy of it
    if "\\n" in stripped or "Traceback" in stripped:
        try:
            value: object = json.JSONDecoder().raw_decode(stripped)[0]
        except (ValueError, RecursionError):
            value = None
        if isinstance(value, str) and "\\n" in value:
            return value, hints  # serialised twice: the next pass takes off the second layer
        if value is not None:
            found = _best_text(value)
            if found is not None:
                return found, hints
    if _few_escapes(text):
        return None
    decoded = _ESCAPE.sub(_decode_one, text)
    # Only a serialised trace is unwrapped in place: a one-line message quoting a string with ``\n`` in it
    # (``KeyError: 'a\nb\nc'``) is the error itself and stays one line.
    if decoded.count("\n") < 2 or not any(mark in decoded for mark in _FRAME_MARKS):
        return None
    return decoded, hints


def declines(text: str) -> bool:
    """True when :func:`unwrap` returns ``None`` for ``text`` by its cheap tests alone: too long, or not
    JSON at its start and with too few escaped line breaks. A traceback whose paths are Windows paths has
    backslashes in every frame and is declined here, which a test for any backslash would not tell."""
    return len(text) > _MAX_CHARS or (_JSON_START.match(text) is None and _few_escapes(text))


def _few_escapes(text: str) -> bool:
    """True when ``text`` has fewer than two escaped line breaks, or fewer than twice its real ones."""
    if "\\" not in text:
        return True  # no backslash, no escape: one memchr instead of counting a two-character needle
    escaped = text.count("\\n")
    # Real lines outnumbering the escaped ones: a Windows path, not a serialised error.
    return escaped < 2 or text.count("\n") * 2 > escaped


def _decode_one(match: re.Match[str]) -> str:
    code = match.group(1)
    if code[0] == "u":
        char = chr(int(code[1:], 16))
        return char if not 0xD800 <= ord(char) <= 0xDFFF else "?"
    return _SIMPLE[code]


def _best_text(value: object) -> str | None:
    """The longest multi-line string (or list of lines) in ``value`` that reads like an error."""
    best: str | None = None
    stack: list[object] = [value]
    seen = 0
    while stack and seen < _MAX_NODES:
        node = stack.pop()
        seen += 1
        candidate: str | None = None
        if isinstance(node, str):
            candidate = node
        elif isinstance(node, list):
            if len(node) >= 3 and all(isinstance(item, str) for item in node[:50]) and any(
                mark in item for item in node[:50] for mark in _FRAME_MARKS
            ):
                # A traceback kept as a list of lines (Jupyter's ``traceback`` field).
                candidate = "\n".join(str(item).rstrip("\n") for item in node)
            else:
                stack.extend(reversed(node[:200]))
        elif isinstance(node, dict):
            stack.extend(reversed(list(node.values())[:200]))
        if (
            candidate is not None
            and candidate.count("\n") >= 2
            and any(mark in candidate for mark in _ERRORISH)
            and (best is None or len(candidate) > len(best))
        ):
            best = candidate
    return best
