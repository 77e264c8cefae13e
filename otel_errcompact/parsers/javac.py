"""Parser for javac diagnostics: ``Main.java:5: error: cannot find symbol`` and the lines under it.

javac states what is wrong on the diagnostic line and names the culprit on the indented lines below the
caret (``symbol:   variable foo``, ``location: class Main``, ``required: int`` / ``found: String``).
A bare ``cannot find symbol`` names nothing, so the cause borrows the symbol line:
``cannot find symbol: variable foo``. The type is always ``javac error``; ``(+N more)`` counts the other
errors (from the ``N errors`` summary when javac printed one), shown but not keyed. Errors without a position
(``error: file not found: Nope.java``) are claimed only when they mention a ``.java`` file or the
command was javac, since ``error: …`` alone could come from any tool.
"""

from __future__ import annotations

import re

from otel_errcompact.parsers._base import Frame, Hints, Parsed

__all__ = ["parse"]
MARKERS = ("error",)  # see parsers/__init__.py

_FORMAT = "javac"
_TYPE = "javac error"
_MAX_LINES = 4000
_DETAIL_LOOKAHEAD = 8

_DIAG = re.compile(
    r"^(?P<file>(?:[A-Za-z]:)?[^:\n]*?\.java):(?P<line>\d+):\s(?P<sev>error|warning):\s(?P<msg>.*)$"
)
_BARE_ERROR = re.compile(r"^(?:javac:\s)?error:\s(?P<msg>.+)$")
_DETAIL = re.compile(r"^\s+(?P<key>symbol|location|required|found|reason)\s*:\s+(?P<value>\S.*)$")
_SUMMARY = re.compile(r"^(?P<count>\d+)\serrors?$")


def parse(text: str, hints: Hints) -> Parsed | None:
    """Digest the first javac error.

    >>> parse("A.java:3: error: ';' expected\\n1 error\\n", Hints()).cause
    "';' expected"
    """
    if "error" not in text or (".java" not in text and not _is_javac(hints.command)):
        return None
    lines = text.splitlines()[:_MAX_LINES]
    first_index: int | None = None
    first: tuple[str, int, str] | None = None
    bare: str | None = None
    errors = 0
    summary: int | None = None
    for index, line in enumerate(lines):
        if "error" not in line:
            continue
        diag = _DIAG.match(line)
        if diag is not None:
            if diag["sev"] == "error":
                errors += 1
                if first is None:
                    first = (diag["file"], int(diag["line"]), diag["msg"].strip())
                    first_index = index
            continue
        counted = _SUMMARY.match(line)
        if counted is not None:
            summary = int(counted["count"])
            continue
        plain = _BARE_ERROR.match(line)
        if plain is not None and bare is None:
            bare = plain["msg"].strip()
    total = summary if summary is not None and summary >= errors else errors
    if first is not None and first_index is not None:
        file, line_no, message = first
        cause = _with_details(message, _details(lines, first_index + 1))
        return Parsed(_TYPE, _with_more(cause, total - 1), _FORMAT, location=Frame(file, line_no), key_text=cause)
    if bare is not None and (".java" in bare or _is_javac(hints.command)):
        return Parsed(_TYPE, _with_more(bare, total - 1), _FORMAT, key_text=bare)
    return None


def _details(lines: list[str], start: int) -> dict[str, str]:
    """The ``key: value`` lines javac prints under a diagnostic, up to the next diagnostic."""
    found: dict[str, str] = {}
    for line in lines[start : start + _DETAIL_LOOKAHEAD]:
        if _DIAG.match(line) is not None or _SUMMARY.match(line) is not None:
            break
        detail = _DETAIL.match(line)
        if detail is not None:
            found.setdefault(detail["key"], " ".join(detail["value"].split()))
    return found


def _with_details(message: str, details: dict[str, str]) -> str:
    """Add the name javac put on a detail line when the headline names nothing itself."""
    message = message.rstrip(";").strip()
    if "symbol" in details and "symbol" in message:
        return f"{message}: {details['symbol']}"
    if "required" in details or "found" in details:
        parts = [f"{key}: {details[key]}" for key in ("required", "found") if key in details]
        return f"{message} ({'; '.join(parts)})"
    return message


def _is_javac(command: str | None) -> bool:
    return bool(command) and re.search(r"(?:^|[\\/\s])javac(?:\.exe)?(?:\s|$)", command or "") is not None


def _with_more(cause: str, more: int) -> str:
    return f"{cause} (+{more} more)" if more > 0 else cause
