"""Restore the indentation a Python traceback lost (pasted into a chat, a ticket, a markdown quote).

CPython indents ``File "…", line N, in f`` by two spaces and the source line under it by four; the
exception line starts at column 0. With every line stripped, the source line ``raise LookupError(…) from
None`` looks like any other line and can be read as the message. The shape of a traceback tells them
apart again: after a ``File`` line comes its source line (and caret lines), then the next ``File`` line
or the exception.
"""

from __future__ import annotations

import re

from otel_errcompact.parsers._base import Hints

__all__ = ["unwrap"]

_HEADER = "Traceback (most recent call last):"
_FRAME = re.compile(r'File "[^"\n]{1,1000}", line \d{1,9}')
_CARET = re.compile(r"[\^~ ]+")
# ``KeyError: 'x'``, ``json.decoder.JSONDecodeError: …``, a bare ``StopIteration``: a class name first.
_EXCEPTION = re.compile(r"(?:[A-Za-z_]\w*\.)*[A-Z]\w*(?::(?: .*)?)?")
_MARKS = ("The above exception", "During handling of the above", _HEADER)


def unwrap(text: str, hints: Hints) -> tuple[str, Hints] | None:
    """``text`` with frame and source lines indented again; ``None`` when nothing was lost."""
    if _HEADER not in text or '\nFile "' not in text:
        return None
    out: list[str] = []
    in_frame = False
    changed = False
    for line in text.split("\n"):
        body = line.strip()
        if _FRAME.match(body):
            out.append("  " + body)
            in_frame, changed = True, True
            continue
        if in_frame and body and not body.startswith(_MARKS):
            if _CARET.fullmatch(body):
                out.append("    " + body)
                continue
            if not line.startswith(" ") and not _EXCEPTION.fullmatch(body):
                out.append("    " + body)
                continue
        in_frame = False
        out.append(line)
    return ("\n".join(out), hints) if changed else None
