"""The last resort: pick the most error-like line of text no parser recognised.

Never returns an empty digest: empty input, whitespace and binary junk each get a cause that says so.
"""

from __future__ import annotations

import re

from otel_errcompact._sanitize import printable_ratio
from otel_errcompact.parsers._base import Hints, Parsed

__all__ = ["parse"]

_MAX_LINES = 400
_SCORES: tuple[tuple[re.Pattern[str], float], ...] = (
    (re.compile(r"(?i)\b(?:fatal|panic|critical)\b"), 4.0),
    (re.compile(r"\b[A-Z][A-Za-z0-9_.]*(?:Error|Exception|Failure|Fault)\b"), 4.0),
    (re.compile(r"(?i)\berror\b|\berr\b|\bERR!"), 3.0),
    (re.compile(r"(?i)\bexception\b|\btraceback\b"), 3.0),
    (re.compile(r"(?i)\bfail(?:ed|ure|s)?\b"), 2.0),
    (
        re.compile(
            r"(?i)denied|refused|not found|no such|cannot|can't|could not|couldn't|unable|invalid"
            r"|missing|timed? ?out|unexpected|undefined|forbidden|unauthori[sz]ed|not allowed|abort"
        ),
        2.0,
    ),
    (re.compile(r"(?i)\bwarn(?:ing)?\b"), 0.5),
)
_TYPE_IN_LINE = re.compile(r"\b([A-Z][A-Za-z0-9_]*(?:Error|Exception|Failure|Fault))\b")
_LEADING_LABEL = re.compile(r"^\s*(?:[\w.\-]+:\s*)?(?:fatal|error|ERROR|Error|FATAL)\s*[:!]\s*")


def parse(text: str, hints: Hints) -> Parsed:
    """Return the best guess; unlike the format parsers this one always answers."""
    if not text.strip():
        return Parsed("Error", "(empty error output)", "fallback", status=hints.exit_code)
    if printable_ratio(text) < 0.7:
        return Parsed("BinaryOutput", f"non-text output ({len(text)} characters)", "fallback",
                      status=hints.exit_code)
    best_line, best_score = "", -1.0
    lines = [ln.strip() for ln in text.splitlines() if ln.strip()]
    for position, line in enumerate(lines[:_MAX_LINES]):
        score = sum(weight for pattern, weight in _SCORES if pattern.search(line))
        # Later lines win ties: the summary of a failure usually comes last.
        score += position / (10.0 * len(lines))
        if score > best_score:
            best_line, best_score = line, score
    type_match = _TYPE_IN_LINE.search(best_line)
    type_ = type_match.group(1) if type_match else "Error"
    cause = best_line
    if type_match and cause.startswith(type_ + ":"):
        cause = cause[len(type_) + 1 :].strip()
    else:
        cause = _LEADING_LABEL.sub("", cause) or cause
    return Parsed(type_, cause, "fallback", status=hints.exit_code)
