"""Take off the lint gate's report that SWE-agent-style edit tools return when an edit breaks the file.

Such a tool runs flake8 after the edit, reverts it, and answers with a template: a preamble (``Your proposed
edit has introduced new syntax error(s). Please read this error message carefully …``), the ``ERRORS:``
list (``- E999 IndentationError: unexpected indent``, or flake8's own ``path:line:col: CODE message`` lines
in OpenHands' variant), then two code windows (``This is how your edit would have looked if applied`` and
the original, each under a ``[File: /repo/app.py (1997 lines total)]`` header) and reminders (``Your
changes have NOT been applied…``, ``DO NOT re-run…``). Only the error list names the cause; the windows are
the agent's own code. What is kept: the error lines and the ``[File: …]`` header naming the edited file,
which the linter parser reads as the location.
"""

from __future__ import annotations

import re

from otel_errcompact.parsers._base import Hints

__all__ = ["declines", "unwrap"]

_MARKER = "proposed edit has introduced new syntax error"
_ERRORS = re.compile(r"^\[?ERRORS:\]?[ \t]*$", re.M)
_WINDOW = re.compile(r"^\[?This is (?:how your edit would have looked|the original code)", re.M)
_FILE = re.compile(r"^\[File: (?P<path>[^\]\n]+?)(?: \(\d+ lines total\))?\]$", re.M)


def declines(text: str) -> bool:
    """True when :func:`unwrap` returns ``None`` for ``text``: the preamble is not where it looks for it."""
    return _MARKER not in text[:400]


def unwrap(text: str, hints: Hints) -> tuple[str, Hints] | None:
    """The error list and the edited file's header; ``None`` without the lint gate's preamble."""
    if declines(text):
        return None
    errors = _ERRORS.search(text)
    if errors is None:
        return None
    window = _WINDOW.search(text, errors.end())
    block = text[errors.end() : window.start() if window else len(text)]
    lines = [ln.strip() for ln in block.splitlines() if ln.strip()]
    if not lines:
        return None
    found = _FILE.search(text, errors.end())
    if found is not None:
        lines.append(f"[File: {found['path']}]")
    return "\n".join(lines), hints
