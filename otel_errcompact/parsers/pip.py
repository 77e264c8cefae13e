"""Parser for pip's ``ERROR:`` lines.

pip ends a failed install with one or more ``ERROR:`` lines, the last the most specific (``ERROR: Could
not find a version that satisfies the requirement x`` then ``ERROR: No matching distribution found for
x``); ``Hint:`` lines and the progress above them are not the cause. A last line that only links to the
docs (``ResolutionImpossible: for help visit …``) gives way to the one above it, which names the
packages, with the reasons pip lists under ``The conflict is caused by:``. pip's error report
(``error: metadata-generation-failed`` above ``×`` lines) gives its code and the failing build's own
last ``error:`` line. The parser claims text only when the
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
# pip's error report: ``error: metadata-generation-failed`` at the margin, ``× …`` lines, and the failing
# build's own output indented under them, whose last ``error:`` line names the cause.
_REPORT = re.compile(r"^error: (?P<code>[a-z][a-z0-9-]+)$", re.M)
_INNER_ERROR = re.compile(r"^[ \t]+error: (?P<msg>.+)$", re.M)
_CROSS = re.compile(r"^[ \t]*× (?P<msg>.+)$", re.M)
_CONFLICT = re.compile(r"^The conflict is caused by:\n(?P<lines>(?:[ \t]+\S.*\n?)+)", re.M)
_PIP_COMMAND = re.compile(r"(?:^|[\s/])pip3?(?:\.\d+)?(?:\s|$)|-m\s+pip\b")


def parse(text: str, hints: Hints) -> Parsed | None:
    """Digest pip's last ``ERROR:`` line, or its error report; ``None`` for text that is not pip's."""
    if "ERROR: " not in text:
        return _report(text, hints)
    errors = [m["msg"].strip() for m in _ERROR.finditer(text)]
    if not errors:
        return None
    from_pip = bool(hints.command and _PIP_COMMAND.search(hints.command))
    if not from_pip and not any(word in e.lower() for e in errors for word in _VOCABULARY):
        return None
    cause = errors[-1]
    if cause.startswith("ResolutionImpossible") and len(errors) > 1:
        # Only a link to pip's docs: the line above names the packages, "The conflict is caused by:" why.
        cause = errors[-2]
        conflict = _CONFLICT.search(text)
        if conflict is not None:
            reasons = [line.strip() for line in conflict["lines"].splitlines() if line.strip()]
            cause = f"{cause.rstrip('.')} ({'; '.join(reasons)})"
    return Parsed("pip", cause, "pip", status=hints.exit_code)


def _report(text: str, hints: Hints) -> Parsed | None:
    """``metadata-generation-failed: invalid command 'bdist_wheel'``: pip's error report, its code and the
    failing build's last ``error:`` line (else the first ``×`` line); ``None`` when the text holds none."""
    if "× " not in text or "pip" not in text:
        return None
    report = _REPORT.search(text)
    if report is None:
        return None
    inner = _INNER_ERROR.findall(text)
    cross = _CROSS.search(text)
    detail = inner[-1].strip() if inner else (cross["msg"].strip() if cross else "")
    cause = f"{report['code']}: {detail}" if detail else report["code"]
    return Parsed("pip", cause, "pip", status=hints.exit_code)
