"""Plain tracebacks without the walk: the shortcut for a traceback that starts the text, and a check of an
exception's fields against its traceback.

For the common shape, one plain CPython traceback (no chain, no exception group, no syntax error, a
one-line message), the python parser's :func:`~otel_errcompact.parsers.python.parse_plain` reads the type,
the message and the location with a few C-level scans, and gives the same :class:`Parsed` as the full
parser. :func:`parse_first` takes that answer before the unwrappers and the parsers ahead of python run,
when each of them provably declines the text. :func:`parse_exception` is ``parse_plain``'s answer when it
agrees with an OTel ``exception`` event's ``exception.type`` and ``exception.message``: the traceback's
last line names the same type and message, so the fields confirm the text rather than replace it.

>>> tb = ('Traceback (most recent call last):\\n  File "app.py", line 3, in load\\n'
...       "    return users[uid]\\nKeyError: 'uid'\\n")
>>> p = parse_exception(tb, "KeyError", "'uid'")
>>> p.type, p.cause, p.location.func
('KeyError', "'uid'", 'load')
"""

from __future__ import annotations

import functools
import re

from otel_errcompact.parsers import linter, pytest_report
from otel_errcompact.parsers._base import Frame, Parsed
from otel_errcompact.parsers.python import (
    COLUMN_0,
    HEADER,
    parse_plain,
    plain_exception,
    plain_location,
    plain_parse,
)
from otel_errcompact.unwrap import harness, json_escaped, lint_gate

__all__ = ["parse_exception", "parse_first"]

_HEADER_LINE = HEADER + "\n"

_SYNTAX_TYPES = frozenset({"SyntaxError", "IndentationError", "TabError"})
_PYDANTIC = re.compile(r"\d+ validation errors? for \S+$")
_MAX_LINE = 4000  # the full parser cuts lines here; longer messages take the full path


def parse_exception(text: str, exception_type: str | None, exception_message: str | None) -> Parsed | None:
    """The :class:`Parsed` of a plain traceback whose type and message are known; ``None`` when the
    full parser must decide (or when the fields disagree with the text)."""
    if not exception_type or exception_message is None:
        return None
    message = exception_message.strip()
    if not message or message.endswith(":") or "\n" in exception_message or len(exception_message) > _MAX_LINE:
        return None
    short = exception_type.rsplit(".", 1)[-1]
    if short in _SYNTAX_TYPES or _PYDANTIC.match(message):
        return None
    parsed = parse_plain(text)
    if parsed is None or parsed.type != short or parsed.cause != message:
        return None
    return parsed


def parse_first(text: str) -> Parsed | None:
    """The answer the default unwrappers and parsers give for a plain traceback that starts the text,
    without running those that provably decline it; ``None``: let them run.

    The shape :func:`parse_plain` accepts, with the header as the first line: every line down to the
    last is indented or empty, and the last is ``Type: message`` (a type name, then a colon or the end).
    No line but the first and the last starts at column 0, and neither starts with ``File "``, ``Ran ``,
    ``- ``, a digit, a month, a log level or a quote. So, in the default order:

    - unwrapping changes nothing: ``log_prefix`` needs a timestamp or level first, ``reindent`` a line
      starting with ``File "``; ``json_escaped``, ``harness`` and ``lint_gate`` are asked
      (:func:`json_escaped.declines`: a quote or bracket first, or escaped line breaks; a Windows path's
      backslashes are not enough);
    - the parsers ahead of python return ``None``: ``unittest`` needs a line starting with ``Ran ``,
      ``ipython`` a ``Type   Traceback (most recent call last)`` line, the linter a ``- `` line or a
      ``:line`` position (asked); pytest is asked (:func:`pytest_report.declines`).

    Every check is exact: a text any of them could take goes the whole way, and gets today's answer.

    The checks are split at the start of the last line: the *body* above it (header and frames) is the
    same for every failure of one code path, only the last line (the message) differs. What depends on
    the body alone is read once per body (:func:`_body_location`); the last line is read every time.
    """
    if (
        not text.startswith(_HEADER_LINE)
        or not json_escaped.declines(text)
        or not harness.declines(text)
        or not lint_gate.declines(text)
    ):
        return None
    body_end = len(text.rstrip("\n"))
    last_at = text.rfind("\n", 0, body_end) + 1
    if last_at <= 0:
        return None
    rest = text[last_at:]  # the last line and the newlines after it
    if HEADER in rest or not linter.declines_unbulleted(rest) or not pytest_report.declines(rest):
        return None
    exception = plain_exception(text[last_at:body_end])
    if exception is None:
        return None
    location = _body_location(text[:last_at])
    if location is None:
        return None
    return plain_parse(exception, location)


_BODIES_SIZE = 64  # the bodies of a few code paths fail again and again; a stranger costs one read
_MAX_BODY = 16_384


def _body_location(body: str) -> Frame | None:
    """:func:`_read_body`, remembered for the bodies read lately (up to :data:`_MAX_BODY` characters).
    Exact: the answer is a function of ``body`` only."""
    return _read_body_remembered(body) if len(body) <= _MAX_BODY else _read_body(body)


def _read_body(body: str) -> Frame | None:
    """The location :func:`parse_plain` reads from ``body`` (the text down to the start of its last line,
    the header first), or ``None`` when ``body`` rules out the plain shape or one of the checks of
    :func:`parse_first` fails on it.

    Every check that reads the whole text splits exactly between the body and the rest, because the
    body ends with a newline: the header, pytest's markers and the frame marker hold no newline, so none
    of their occurrences crosses the split; the linter's ``:line`` position (``:\\d+[:\\s]``) may end
    with the body's newline but never holds one inside; a column-0 line and the frame lines
    :func:`plain_location` reads lie above the last line by definition.
    """
    if body.find(HEADER, 1) >= 0 or COLUMN_0.search(body) is not None:
        return None
    if not linter.declines_unbulleted(body) or not pytest_report.declines(body):
        return None
    return plain_location(body, 0, len(body))


_read_body_remembered = functools.lru_cache(maxsize=_BODIES_SIZE)(_read_body)
