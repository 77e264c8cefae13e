"""The fast path for an exception the span already describes: type, message and stack trace as fields.

An OpenTelemetry ``exception`` event carries ``exception.type``, ``exception.message`` and
``exception.stacktrace``. For the common shape, one plain CPython traceback (no chain, no exception
group, no syntax error, a one-line message), the type and the message are known from the fields, and
only the location has to come from the text: one regular-expression pass over the ``File "…", line N, in
f`` lines finds the innermost in-app frame. That is a fraction of the line-by-line walk of
:mod:`otel_errcompact.parsers.python`, and it must give the same :class:`Parsed`, so every check below
errs towards handing the text to the full parser: the fields must agree with the traceback's last line,
and anything the full parser treats specially (chains, groups, notes, syntax errors, pydantic listings,
empty or colon-ended messages, very long lines) falls through.

>>> tb = ('Traceback (most recent call last):\\n  File "app.py", line 3, in load\\n'
...       "    return users[uid]\\nKeyError: 'uid'\\n")
>>> p = parse_exception(tb, "KeyError", "'uid'")
>>> p.type, p.cause, p.location.func
('KeyError', "'uid'", 'load')
"""

from __future__ import annotations

import re

from otel_errcompact.parsers._base import Frame, Parsed, is_library_path

__all__ = ["parse_exception"]

_HEADER = "Traceback (most recent call last):\n"
_SPECIAL = (
    "\nThe above exception was the direct cause",
    "\nDuring handling of the above exception",
    "Exception Group Traceback",
)
_SYNTAX_TYPES = frozenset({"SyntaxError", "IndentationError", "TabError"})
# Same frame shape as the full parser's, over the whole text at once.
_FRAME = re.compile(r'  File "([^"\n]{1,1000})", line (\d{1,9})(?:, in (.+))?$')
_FRAME_START = '\n  File "'
_TYPE = re.compile(r"[A-Za-z_][\w.<>]{0,200}")
_PYDANTIC = re.compile(r"\d+ validation errors? for \S+$")
_MAX_TEXT = 65_536
_MAX_LINE = 4000  # the full parser cuts lines here; longer messages take the full path


def parse_exception(text: str, exception_type: str | None, exception_message: str | None) -> Parsed | None:
    """The :class:`Parsed` of a plain traceback whose type and message are known; ``None`` when the
    full parser must decide."""
    if not exception_type or exception_message is None or len(text) > _MAX_TEXT:
        return None
    message = exception_message.strip()
    if not message or message.endswith(":") or "\n" in exception_message or len(exception_message) > _MAX_LINE:
        return None
    short = exception_type.rsplit(".", 1)[-1]
    if short in _SYNTAX_TYPES or _PYDANTIC.match(message):
        return None
    if not text.startswith(_HEADER) or text.count("Traceback (most recent call last):") != 1:
        return None
    if any(mark in text for mark in _SPECIAL):
        return None
    tail = text.rstrip("\n").rsplit("\n", 1)[-1]
    suffix = ": " + exception_message
    if not tail.endswith(suffix):
        return None
    shown_type = tail[: len(tail) - len(suffix)]
    if _TYPE.fullmatch(shown_type) is None or shown_type.rsplit(".", 1)[-1] != short:
        return None
    # The location is the innermost in-app frame, else the last one: walk the frame lines from the end
    # (str.rfind jumps between them) and stop at the first in-app frame, usually the first one read.
    chosen: re.Match[str] | None = None
    last: re.Match[str] | None = None
    at = text.rfind(_FRAME_START)
    while at >= 0:
        line_end = text.find("\n", at + 1)
        line = text[at + 1 : line_end if line_end >= 0 else len(text)]
        if len(line) > _MAX_LINE:
            return None
        match = _FRAME.match(line)
        if match is not None:
            last = last or match
            if not is_library_path(match.group(1)):
                chosen = match
                break
        at = text.rfind(_FRAME_START, 0, at)
    if last is None:
        return None
    in_app = chosen is not None
    chosen = chosen or last
    location = Frame(chosen.group(1), int(chosen.group(2)), chosen.group(3), in_app=in_app)
    return Parsed(
        type=short,
        cause=message,
        format="python",
        frames=(location,),
        location=location,
    )
