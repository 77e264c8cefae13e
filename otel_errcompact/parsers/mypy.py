"""Parser for mypy output: ``app.py:3: error: Incompatible return value type …  [return-value]``.

The type is ``mypy error``; the error code stays in the cause (``… [return-value]``) because it names
the check that failed, and two codes on one line are two different problems. The location is the
first error's ``file:line``; with ``--show-error-context`` the ``note: In function "f":`` line gives
the function (``C.m`` for a method). ``--pretty`` wraps long messages onto unindented continuation
lines, which are joined back. ``Found N errors in M files`` supplies the ``(+N more)`` count, shown but
not keyed: fixing another error must not change the key of this one.
"""

from __future__ import annotations

import re

from otel_errcompact.parsers._base import Frame, Hints, Parsed

__all__ = ["parse"]
MARKERS = (": error: ",)  # see parsers/__init__.py

_FORMAT = "mypy"
_TYPE = "mypy error"
_MAX_LINES = 4000
_MAX_CONTINUATION = 4

# file.py:line[:col][:end_line:end_col]: severity: message (no line at all for "Cannot read file").
_DIAG = re.compile(
    r"^(?P<file>(?:[A-Za-z]:)?[^:\n]*?\.pyi?):(?:(?P<line>\d+):)?(?:\d+:)?(?:\d+:\d+:)?\s"
    r"(?P<sev>error|note|warning):\s(?P<msg>.*)$"
)
_CONTEXT = re.compile(
    r'^In\s(?:function|member|class)\s"(?P<name>[^"\n]+)"(?:\sof\sclass\s"(?P<cls>[^"\n]+)")?:$'
)
_CODE = re.compile(r"\[(?P<code>[a-z][a-z0-9-]*)\]\s*$")
_SUMMARY = re.compile(r"^Found\s(?P<count>\d+)\serrors?\sin\s\d+\sfiles?")


def parse(text: str, hints: Hints) -> Parsed | None:
    """Digest the first mypy error.

    >>> parse('m.py:3: error: Name "x" is not defined  [name-defined]\\n', Hints()).cause
    'Name "x" is not defined [name-defined]'
    """
    if ": error: " not in text or ".py" not in text:
        return None
    lines = text.splitlines()[:_MAX_LINES]
    first: tuple[str, int | None, str, str | None] | None = None
    errors = 0
    summary: int | None = None
    context_file: str | None = None
    context_func: str | None = None
    for index, line in enumerate(lines):
        diag = _DIAG.match(line) if ": " in line else None
        if diag is not None:
            file, severity, message = diag["file"], diag["sev"], diag["msg"]
            if severity == "note":
                context = _CONTEXT.match(message.strip())
                if context is not None:
                    context_file = file
                    name = context["name"]
                    context_func = f"{context['cls']}.{name}" if context["cls"] else name
                elif message.strip() == "At top level:":
                    context_file, context_func = file, None
                continue
            if severity != "error":
                continue
            errors += 1
            if first is None:
                message = _join_continuation(message, lines, index + 1)
                func = context_func if context_file == file else None
                line_no = int(diag["line"]) if diag["line"] else None
                first = (file, line_no, message, func)
            continue
        counted = _SUMMARY.match(line)
        if counted is not None:
            summary = int(counted["count"])
    if first is None:
        return None
    file, line_no, message, func = first
    total = summary if summary is not None and summary >= errors else errors
    keyed = _with_code(message)
    cause = f"{keyed} (+{total - 1} more)" if total > 1 else keyed
    return Parsed(_TYPE, cause, _FORMAT, location=Frame(file, line_no, func), key_text=keyed)


def _join_continuation(message: str, lines: list[str], start: int) -> str:
    """Rejoin a ``--pretty`` message that mypy wrapped onto following unindented lines."""
    parts = [message.rstrip()]
    for line in lines[start : start + _MAX_CONTINUATION]:
        if not line.strip() or line[:1].isspace() or _DIAG.match(line) or _SUMMARY.match(line):
            break
        parts.append(line.strip())
    return " ".join(parts)


def _with_code(message: str) -> str:
    """``msg  [code]`` → ``msg [code]`` (one space, so the key does not depend on mypy's padding)."""
    code = _CODE.search(message)
    if code is None:
        return " ".join(message.split())
    head = " ".join(message[: code.start()].split())
    return f"{head} [{code['code']}]"
