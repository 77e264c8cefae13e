"""Parser for pip's ``ERROR:`` lines.

pip ends a failed install with one or more ``ERROR:`` lines, the last the most specific (``ERROR: Could
not find a version that satisfies the requirement x`` then ``ERROR: No matching distribution found for
x``); ``Hint:`` lines and the progress above them are not the cause. The parser claims text only when the
command is pip or the error speaks pip's vocabulary (requirement, distribution, wheel, project files),
because ``ERROR:`` alone is common to many tools.
"""

from __future__ import annotations

import re

from otel_errcompact.parsers._base import Hints, Parsed

__all__ = ["MARKERS", "parse"]

MARKERS = ("ERROR: ",)
_ERROR = re.compile(r"^ERROR: (?P<msg>.+)$", re.M)
_VOCABULARY = ("requirement", "distribution", "wheel", "setup.py", "pyproject.toml", "pip", "installable",
               "package metadata", "dependency resolver", "dependencies")
_PIP_COMMAND = re.compile(r"(?:^|[\s/])pip3?(?:\.\d+)?(?:\s|$)|-m\s+pip\b")


def parse(text: str, hints: Hints) -> Parsed | None:
    """Digest pip's last ``ERROR:`` line; ``None`` for text that is not pip's."""
    if "ERROR: " not in text:
        return None
    errors = [m["msg"].strip() for m in _ERROR.finditer(text)]
    if not errors:
        return None
    from_pip = bool(hints.command and _PIP_COMMAND.search(hints.command))
    if not from_pip and not any(word in e.lower() for e in errors for word in _VOCABULARY):
        return None
    return Parsed("pip", errors[-1], "pip", status=hints.exit_code)
