"""Parser for TypeScript compiler (``tsc``) diagnostics, in both of the forms tsc prints.

* ``--pretty false`` (the default when output is not a terminal):
  ``app.ts(12,5): error TS2304: Cannot find name 'foo'.``
* ``--pretty`` (the default on a terminal): ``app.ts:12:5 - error TS2304: Cannot find name 'foo'.``
  followed by a code frame, related-information blocks (indented ``file:line:col`` lines) and a
  ``Found N errors in M files.`` summary. The compactor strips the colours before parsers see the text.

Errors about the command line or the project (``error TS5058: The specified path does not exist:
'nope'.``, ``error TS18003: No inputs were found in config file …``) carry no position at all.

Naming follows the other compilers: the type is ``tsc TS2304`` (the code is the error class, as in
``rustc E0425``), the cause is the first error's headline, which quotes the name, property, type or
module at fault (a trailing full stop is dropped), plus ``(+N more)`` when more errors followed (shown,
not keyed: fixing another error must not change the key of this one). A
message chain (the indented elaboration under a headline) is left out: the headline already names the
cause, and the chain's wording changes with the shape of the types involved. The location is the
first error's ``file:line``; tsc names no enclosing function, so ``func`` stays empty.
"""

from __future__ import annotations

import re

from otel_errcompact.parsers._base import Frame, Hints, Parsed, is_library_path

__all__ = ["parse"]
MARKERS = ("error TS",)  # see parsers/__init__.py

_FORMAT = "tsc"
_MAX_LINES = 4000
# Longer lines are never diagnostic headers worth reading; skipping them keeps every search cheap.
_MAX_LINE = 4000

# Each header pattern is searched for from the position onwards; the file is whatever precedes the
# match, so no pattern has to guess where a file name (which may hold spaces or parentheses) ends.
_PLAIN = re.compile(
    r"\((?P<line>\d+),(?P<col>\d+)\): (?P<sev>error|warning|message) TS(?P<code>\d+): (?P<msg>.*)$"
)
_PRETTY = re.compile(
    r":(?P<line>\d+):(?P<col>\d+) - (?P<sev>error|warning|message) TS(?P<code>\d+): (?P<msg>.*)$"
)
_GLOBAL = re.compile(r"^(?P<sev>error|warning|message) TS(?P<code>\d+): (?P<msg>.*)$")
# "Found 3 errors in 2 files.", "Found 1 error in a.ts:2", and watch mode's "[10:00:00 AM] Found 2 errors.".
_SUMMARY = re.compile(r"^(?:\[[^\]\n]{1,40}\] )?Found (?P<count>\d+) errors?\b")


def parse(text: str, hints: Hints) -> Parsed | None:
    """Digest the first tsc error.

    >>> p = parse("a.ts(2,13): error TS2304: Cannot find name 'foo'.\\n", Hints())
    >>> p.type, p.cause, p.location.line
    ('tsc TS2304', "Cannot find name 'foo'", 2)
    """
    if "error TS" not in text:
        return None
    first: tuple[str, str, Frame | None] | None = None  # code, message, location
    errors = 0
    summary: int | None = None
    for line in text.splitlines()[:_MAX_LINES]:
        if len(line) > _MAX_LINE:
            continue
        if "error TS" not in line:
            if line.startswith(("Found ", "[")):
                counted = _SUMMARY.match(line)
                if counted is not None:
                    summary = max(summary or 0, int(counted["count"]))
            continue
        header = _header(line)
        if header is None:
            continue
        errors += 1
        if first is None:
            first = header
    if first is None:
        return None
    code, message, location = first
    total = summary if summary is not None and summary >= errors else errors
    cause = f"{message} (+{total - 1} more)" if total > 1 else message
    return Parsed(f"tsc TS{code}", cause, _FORMAT, location=location, key_text=message)


def _header(line: str) -> tuple[str, str, Frame | None] | None:
    """``(code, message, location)`` when ``line`` is the header of a tsc error, else ``None``."""
    if line.startswith("error TS"):
        found = _GLOBAL.match(line)
        return None if found is None else (found["code"], _message(found["msg"]), None)
    pattern = _PLAIN if "): error TS" in line else _PRETTY if " - error TS" in line else None
    if pattern is None:
        return None
    found = pattern.search(line)
    if found is None or found["sev"] != "error":
        return None
    file = line[: found.start()]
    # Related-information positions are indented under the diagnostic they belong to; a header is not.
    if not file or file[0].isspace():
        return None
    location = Frame(file, int(found["line"]), None, in_app=not is_library_path(file))
    return found["code"], _message(found["msg"]), location


def _message(message: str) -> str:
    message = message.strip()
    return message[:-1] if message.endswith(".") and not message.endswith("..") else message
