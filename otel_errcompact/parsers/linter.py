"""Parser for linter reports: flake8, pyflakes, pycodestyle, ruff (concise and full) and eslint (stylish).

Harnesses run a linter after every edit and hand the agent its report. The digest names the first
diagnostic that matters most (a syntax error, then a name that is not defined, then other errors, then
style and warnings), with its
rule code, message and ``file:line``; the number of further diagnostics is shown but kept out of the key,
so fixing one of three warnings does not make the remaining ones look like a new failure.

========================  ===========================================================================
format                    example
========================  ===========================================================================
flake8, ruff concise      ``app.py:5:12: F821 undefined name 'usr'``, ``a.py:1:16: invalid-syntax: …``
ruff full                 ``F821 Undefined name `usr``` then `` --> app.py:5:12``
eslint stylish            ``/w/client.js`` then ``  4:31  error  'x' is not defined  no-undef``
a lint gate's list        ``- E999 IndentationError: unexpected indent`` (+ ``[File: /w/app.py]``, left
                          by :mod:`otel_errcompact.unwrap.lint_gate`); OpenHands' post-edit list
                          ``- Line 2, Column 12: F821 undefined name 'usr'`` under ``The file … has
                          been edited``
========================  ===========================================================================

Type: the rule code (``F821``, ``no-undef``, ``invalid-syntax``), or ``eslint`` for a parse error that
carries none.
"""

from __future__ import annotations

import re

from otel_errcompact.parsers._base import Frame, Hints, Parsed

__all__ = ["MARKERS", "declines_unbulleted", "parse"]

MARKERS = (":",)
_MAX_LINES = 4000

_CODE = r"[A-Z]{1,3}\d{2,4}|[a-z]+(?:-[a-z]+)+"
_FLAT = re.compile(
    rf"^(?P<file>[^\s:][^:\n]*?\.\w+):(?P<line>\d+):(?P<col>\d+):\s(?P<code>{_CODE}):?\s(?:\[\*\]\s)?(?P<msg>.+)$",
    re.M,
)
_FULL = re.compile(
    rf"^(?P<code>{_CODE}):?\s(?:\[\*\]\s)?(?P<msg>.+)\n\s*-->\s(?P<file>[^\n:]+):(?P<line>\d+):(?P<col>\d+)$",
    re.M,
)
_ESLINT_FILE = re.compile(r"^(?P<file>(?:[A-Za-z]:)?[^\s:]*[\\/]?[^\s\\/]+\.(?:[cm]?[jt]sx?|vue|svelte))$")
_ESLINT_ROW = re.compile(
    r"^\s+(?P<line>\d+):(?P<col>\d+)\s+(?P<sev>error|warning)\s+(?P<msg>.+?)(?:\s{2,}(?P<rule>[\w@/-]+))?$"
)
_BULLET = re.compile(rf"^- (?:Line (?P<line>\d+), Column \d+: )?(?P<code>{_CODE}) (?P<msg>.+)$", re.M)
_BULLET_FILE = re.compile(r"^\[File: (?P<file>[^\]\n]+?)\]$|^The file (?P<edited>\S+) has been edited", re.M)
# Every format above has a position ``12:5`` (flake8 ``a.py:12:5:``, ruff ``--> a.py:12:5``, eslint
# ``  12:5  error``): one C-level scan rules out most text before the line-anchored patterns run.
_POSITION = re.compile(r":\d+[:\s]")  # a literal first character: the engine skips to each colon
_SYNTAX = ("E999", "E902", "invalid-syntax", "Parsing error", "SyntaxError")


def declines_unbulleted(text: str) -> bool:
    """True when :func:`parse` returns ``None`` for ``text``, which the caller knows neither starts with
    ``- `` nor has a line that does: then only a ``:line`` position could make it a report."""
    return _POSITION.search(text) is None


def parse(text: str, hints: Hints) -> Parsed | None:
    """Digest a linter report; ``None`` when no diagnostic line is found."""
    if ":" not in text and "- " not in text:
        return None
    if declines_unbulleted(text) and not text.startswith("- ") and "\n- " not in text:
        return None
    found = _flat(text) or _eslint(text) or _bullets(text)
    if not found:
        return None
    ranked = sorted(range(len(found)), key=lambda i: (_rank(found[i]), i))
    code, msg, file, line, _ = found[ranked[0]]
    message = " ".join(msg.split())
    more = len(found) - 1
    cause = f"{message} (+{more} more)" if more else message
    location = Frame(file, line or None) if file else None
    return Parsed(code, cause, "linter", location=location, status=hints.exit_code, key_text=message)


Diagnostic = tuple[str, str, str, int, str]


def _flat(text: str) -> list[Diagnostic]:
    found: list[Diagnostic] = []
    for pattern in (_FLAT, _FULL) if "-->" in text else (_FLAT,):
        for m in pattern.finditer(text):
            found.append((m["code"], m["msg"].rstrip(), m["file"], int(m["line"]), "error"))
            if len(found) >= _MAX_LINES:
                break
        if found:
            break
    return found


def _bullets(text: str) -> list[Diagnostic]:
    """A lint gate's list (``- E999 IndentationError: …``) under the ``[File: …]`` header it names."""
    if "- " not in text:
        return []
    where = _BULLET_FILE.search(text)
    file = (where["file"] or where["edited"]) if where else ""
    return [(m["code"], m["msg"].rstrip(), file, int(m["line"] or 0), "error")
            for m in _BULLET.finditer(text)][:_MAX_LINES]


def _eslint(text: str) -> list[Diagnostic]:
    if "error" not in text and "warning" not in text:
        return []
    found: list[Diagnostic] = []
    file: str | None = None
    for raw in text.splitlines()[:_MAX_LINES]:
        header = _ESLINT_FILE.match(raw) if raw and not raw[0].isspace() else None
        if header is not None:
            file = header["file"]
            continue
        row = _ESLINT_ROW.match(raw) if file is not None and raw[:1].isspace() else None
        if row is not None and file is not None:
            code = row["rule"] or "eslint"
            found.append((code, row["msg"], file, int(row["line"]), row["sev"]))
    return found


def _rank(d: Diagnostic) -> int:
    """0 syntax error, 1 a name that is not defined, 2 other errors, 3 style and warnings."""
    code, msg, _, _, severity = d
    if any(mark in code or msg.startswith(mark) for mark in _SYNTAX):
        return 0
    lowered = msg.lower()
    if "undefined" in lowered or "not defined" in lowered:
        return 1
    if severity == "error" and (code[:1] == "F" or not code[:1].isupper()):
        return 2
    return 3
