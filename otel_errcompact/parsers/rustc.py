"""Parser for rustc and cargo diagnostics: ``error[E0425]: cannot find value `x` in this scope``.

The type is ``rustc E0425`` when rustc gives an error code (the code is the error class: ``rustc
--explain E0425`` documents it) and ``rustc error`` otherwise. The location comes from the ``-->``
line under the header (or the position in front of ``--error-format=short`` lines). A headline that
names nothing in backticks (``mismatched types``) borrows the primary label under the caret
(``expected `String`, found integer``), so the cause keeps the token. Summary lines (``aborting due to
3 previous errors``, cargo's ``could not compile``) give the ``(+N more)`` count (shown, not keyed) and are
never the cause.
rustc prints no enclosing function, so ``func`` stays empty.
"""

from __future__ import annotations

import re

from otel_errcompact.parsers._base import Frame, Hints, Parsed, is_library_path

__all__ = ["parse"]
MARKERS = ("error[E", "error: ")  # see parsers/__init__.py

_FORMAT = "rustc"
_MAX_LINES = 4000
_MAX_LABEL_LOOKAHEAD = 12

_HEADER = re.compile(r"^(?P<sev>error|warning)(?:\[(?P<code>E\d{4})\])?:\s(?P<msg>.*)$")
_SHORT = re.compile(
    r"^(?P<file>(?:[A-Za-z]:)?[^:\n]+?):(?P<line>\d+):(?P<col>\d+):\s"
    r"(?P<sev>error|warning)(?:\[(?P<code>E\d{4})\])?:\s(?P<msg>.*)$"
)
_ARROW = re.compile(r"^\s*-->\s(?P<file>(?:[A-Za-z]:)?[^:\n]+?):(?P<line>\d+):(?P<col>\d+)\s*$")
# "  |        ^^^^ not found in this scope" (the primary span uses carets; secondary spans use dashes).
_LABEL = re.compile(r"^\s*(?:\d+\s*)?\|[\s|\-_]*\^+\s+(?P<label>\S.*)$")
_ABORTING = re.compile(r"due to (?P<count>\d+) previous errors?")
_SUMMARY_PREFIXES = ("aborting due to", "could not compile", "build failed")


def parse(text: str, hints: Hints) -> Parsed | None:
    """Digest the first rustc error.

    >>> parse("error[E0425]: cannot find value `y` in this scope\\n --> m.rs:2:5\\n", Hints()).type
    'rustc E0425'
    """
    if "error[E" not in text and not ("error: " in text and ("-->" in text or "aborting due to" in text)):
        return None
    lines = text.splitlines()[:_MAX_LINES]
    first: tuple[str | None, str, int] | None = None  # code, message, index of the header line
    location: Frame | None = None
    errors = 0
    summary: int | None = None
    for index, line in enumerate(lines):
        if "error" not in line:
            continue
        short = _SHORT.match(line) if ": error" in line else None
        header = short or _HEADER.match(line)
        if header is None or header["sev"] != "error":
            continue
        message = header["msg"].strip()
        if message.startswith(_SUMMARY_PREFIXES):
            counted = _ABORTING.search(message)
            if counted is not None:
                summary = max(summary or 0, int(counted["count"]))
            continue
        errors += 1
        if first is None:
            first = (header["code"], message, index)
            if short is not None:
                location = _frame(short["file"], short["line"])
    if first is None:
        return None
    code, message, index = first
    if location is None:
        location = _arrow_location(lines, index + 1)
    if "`" not in message:
        label = _primary_label(lines, index + 1)
        if label:
            message = f"{message}: {label}"
    total = summary if summary is not None and summary >= errors else errors
    cause = f"{message} (+{total - 1} more)" if total > 1 else message
    type_ = f"rustc {code}" if code else "rustc error"
    return Parsed(type_, cause, _FORMAT, location=location, key_text=message)


def _frame(file: str, line: str) -> Frame:
    return Frame(file, int(line), None, in_app=not is_library_path(file))


def _following(lines: list[str], start: int) -> list[str]:
    """The lines that belong to the diagnostic whose header sits just before ``start``."""
    block: list[str] = []
    for line in lines[start : start + _MAX_LABEL_LOOKAHEAD]:
        if _HEADER.match(line) is not None:
            break
        block.append(line)
    return block


def _arrow_location(lines: list[str], start: int) -> Frame | None:
    for line in _following(lines, start):
        arrow = _ARROW.match(line) if "-->" in line else None
        if arrow is not None:
            return _frame(arrow["file"], arrow["line"])
    return None


def _primary_label(lines: list[str], start: int) -> str | None:
    for line in _following(lines, start):
        label = _LABEL.match(line) if "^" in line else None
        if label is not None:
            return label["label"].strip()
    return None
