"""Unwrap log prefixes: a timestamp, level or logger name repeated at the start of every line.

A traceback that went through a logger line by line (a process supervisor, ``docker logs -t``,
``journalctl``, a ``logging.Formatter`` applied to each line of a child's stderr) carries
``2026-11-22 16:58:07,204 ERROR [worker] `` before every frame. Parsers look for ``Traceback``, ``  File``,
``at `` or ``goroutine`` at the start of a line, and a timestamp there splits one failure into as many
classes as there are seconds.

The prefix is found by shape, not by a list of formats: the longest start shared by most lines once
digits are made alike, ending at white space, that holds a clock time (``16:58:07``) or a ``LEVEL:name:``
field. It is then cut from every line that carries it; lines without it are left alone.
"""

from __future__ import annotations

import re

from otel_errcompact.parsers._base import Hints

__all__ = ["unwrap"]

_MAX_LINES = 2_000
_SAMPLE = 60
_MAX_PREFIX = 160  # a log prefix is short; comparing more of each line would only cost time
_SHARE = 0.6
_DIGIT = str.maketrans("0123456789", "0000000000")
# A cheap look at the first line: does it start like a log record at all?
_START = re.compile(
    r"\[?(?:\d{2,4}[-/:.]|(?:Jan|Feb|Mar|Apr|May|Jun|Jul|Aug|Sep|Oct|Nov|Dec) [ \d]\d "
    r"|(?:DEBUG|INFO|WARNING|WARN|ERROR|CRITICAL|FATAL|SEVERE|TRACE):)"
)
_CLOCK = re.compile(r"\d{1,2}:\d{2}:\d{2}")
_LEVEL_NAME = re.compile(r"(?:DEBUG|INFO|WARNING|ERROR|CRITICAL|FATAL):[\w.\-]*:")


def unwrap(text: str, hints: Hints) -> tuple[str, Hints] | None:
    """``text`` with the repeated log prefix cut from each line; ``None`` when there is none."""
    head = text.lstrip()[:64]
    if not _START.match(head):
        return None
    lines = text.split("\n", _MAX_LINES)
    sample = [line for line in lines[:_SAMPLE * 4] if line.strip()][:_SAMPLE]
    if len(sample) < 2:
        return None
    shapes = [line[:_MAX_PREFIX].translate(_DIGIT) for line in sample]
    first = shapes[0]
    lengths = sorted(_common(first, shape) for shape in shapes[1:])
    # The length most lines share (a minority of lines without the prefix must not shrink it to zero).
    length = lengths[int(len(lengths) * (1 - _SHARE))]
    prefix_len = _cut_at_space(sample[0], length)
    if prefix_len < 5:
        return None
    prefix = sample[0][:prefix_len]
    if not (_CLOCK.search(prefix) or _LEVEL_NAME.match(prefix.lstrip("["))):
        return None
    shape = first[:prefix_len]
    carrying = sum(1 for s in shapes if s.startswith(shape))
    if carrying < 2 or carrying < len(shapes) * _SHARE:
        return None
    carries = re.compile(re.escape(shape).replace("0", r"\d")).match  # the shape, any digits
    out = [line[prefix_len:] if carries(line) else line for line in lines]
    return "\n".join(out), hints


def _common(a: str, b: str) -> int:
    """Length of the common start of ``a`` and ``b``: a binary search over ``startswith`` (a few C-level
    comparisons rather than a Python loop over every character)."""
    low, high = 0, min(len(a), len(b))
    while low < high:
        mid = (low + high + 1) // 2
        if b.startswith(a[:mid]):
            low = mid
        else:
            high = mid - 1
    return low


def _cut_at_space(line: str, length: int) -> int:
    """The prefix ends just after one white-space character, before the record's own text."""
    head = line[:length]
    body = head.rstrip()
    if len(body) < len(head):
        return len(body) + 1
    at = body.rfind(" ")
    return at + 1 if at > 0 else 0
