"""The fast path for an exception the span already describes: type, message and stack trace as fields.

An OpenTelemetry ``exception`` event carries ``exception.type``, ``exception.message`` and
``exception.stacktrace``. For the common shape, one plain CPython traceback (no chain, no exception
group, no syntax error, a one-line message), the python parser's :func:`~otel_errcompact.parsers.python.
parse_plain` reads the type, the message and the location with a few C-level scans. It must give the
same :class:`Parsed` as the full parser, so every check errs towards handing the text to the full parser:
the fields must agree with the traceback's last line, and anything the full parser treats specially
(chains, groups, notes, syntax errors, pydantic listings, empty or colon-ended messages, very long lines)
falls through.

>>> tb = ('Traceback (most recent call last):\\n  File "app.py", line 3, in load\\n'
...       "    return users[uid]\\nKeyError: 'uid'\\n")
>>> p = parse_exception(tb, "KeyError", "'uid'")
>>> p.type, p.cause, p.location.func
('KeyError', "'uid'", 'load')
"""

from __future__ import annotations

import re

from otel_errcompact.parsers._base import Parsed
from otel_errcompact.parsers.python import parse_plain

__all__ = ["parse_exception"]

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
