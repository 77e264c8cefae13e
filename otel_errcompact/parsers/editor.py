"""Parser for the refusals of the file-editing tools agents use (``str_replace``-style editors).

These tools answer a bad call with one sentence naming the parameter, the value and the file:
``No replacement was performed, old_str `…` did not appear verbatim in /w/app.py.``, ``Multiple
occurrences of old_str `…` in lines [3, 9]``, ``Parameter `old_str` is required for command:
str_replace.``, ``Invalid `path` parameter: /w/x.py. The path /w/x.py does not exist.``, ``Invalid
`view_range` parameter: [0, 5]. Its first element …``, ``No edit history found for /w/app.py.``,
``String to replace not found in file.`` The harness banner around them (``ERROR:``, ``<tool_use_error>``)
is taken off by :mod:`otel_errcompact.unwrap.harness` first.

The digest keeps the sentence that says what was wrong with the file or parameter it names; sentences
that only ask the model to try again (``Please …``) are dropped. The text the agent asked to replace
(``old_str``/``new_str`` values) is data, not the cause: it is shown cut short, and left out of the key,
so retrying with a different ``old_str`` on the same file counts as the same failure, while the same
fault on another file is another class.
"""

from __future__ import annotations

import re

from otel_errcompact.parsers._base import Hints, Parsed, cut

__all__ = ["MARKERS", "parse"]

MARKERS = ("old_str", "new_str", "parameter", "Parameter", "view_range", "edit history", "String to replace",
           "verbatim", "insert_line", "file_text")

_MAX_LINES = 12
_MAX_SNIPPET = 40
_SIGNS = re.compile(
    r"did not appear verbatim|Multiple occurrences of|Parameter `\w+` is required|Invalid `\w+` parameter"
    r"|No edit history found|String to replace not found|Found \d+ matches of the string to replace"
    r"|File has not been read yet|has been modified since read|old_string and new_string are"
)
_PLEASE = re.compile(r"\s*(?:Please|You may want to|Maybe you meant|Did you mean)\b[^.?!]*[.?!]?")
_NO_REPLACEMENT = re.compile(r"^No replacement was performed[.,]\s*")
_INVALID = re.compile(r"^Invalid `(?P<param>\w+)` parameter: (?P<value>.*?)\.(?:\s+(?P<rest>.*))?$", re.S)
# A quoted snippet of the text to replace: `…` after old_str/new_str (or "String: …" on its own line).
_SNIPPET = re.compile(r"(?P<head>\b(?:old_str|new_str|old_string|new_string) )`(?P<body>[^`]*)`", re.S)
_STRING_LINE = re.compile(r"^String:\s.*$", re.M)


def parse(text: str, hints: Hints) -> Parsed | None:
    """Digest an editor tool's refusal; ``None`` for anything else."""
    if not any(marker in text for marker in MARKERS):
        return None
    head = "\n".join(text.strip().splitlines()[:_MAX_LINES])
    if _SIGNS.search(head) is None:
        return None
    message = _NO_REPLACEMENT.sub("", head.strip())
    invalid = _INVALID.match(message)
    if invalid is not None:
        rest = (invalid["rest"] or "").strip()
        param, value = invalid["param"], invalid["value"]
        if not rest:
            message = f"invalid `{param}`: {value}"
        elif value in rest:  # the explanation repeats the value: say it once
            message = f"`{param}`: {rest}"
        else:
            message = f"`{param}` {value}: {rest}"
    message = _PLEASE.sub("", message).strip()
    shown = _SNIPPET.sub(lambda m: f"{m['head']}`{_short(m['body'])}`", message)
    shown = _STRING_LINE.sub(lambda m: _short(m.group(0), 60), shown)
    keyed = _SNIPPET.sub(lambda m: f"{m['head']}`…`", message)
    keyed = _STRING_LINE.sub("String: …", keyed)
    return Parsed("EditorError", " ".join(shown.split()), "editor", status=hints.exit_code,
                  key_text=" ".join(keyed.split()))


def _short(snippet: str, limit: int = _MAX_SNIPPET) -> str:
    return cut(" ".join(snippet.split()), limit)
