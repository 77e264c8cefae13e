"""Parser for yq's report of a Python exception (``yq``, ``tomlq``, ``xq``: the jq wrapper written in Python).

yq reads its input with PyYAML (tomlq with toml, xq with xmltodict) and reports a failure as one line, the
exception's class and its text: ``yq: Error running jq: ScannerError: mapping values are not allowed in this
context`` then, for PyYAML, the position of the problem on the next line (``  in "app.yaml", line 2, column
4.``). A PyYAML error that opens with its context (``while scanning a quoted scalar``, and its position)
says what went wrong on a later line of its own (``found unexpected end of stream``): the cause is the context
and that problem, as :mod:`otel_errcompact.parsers.python` reads the same exception in a traceback. The
location is the file and line of the problem; the program's ``Error running jq`` label is none of the cause.
"""

from __future__ import annotations

import re

from otel_errcompact.parsers._base import Frame, Hints, Parsed, clip

__all__ = ["MARKERS", "parse"]

MARKERS = ("Error running jq: ", "Error starting jq: ")
_REPORT = re.compile(r"^\S+: Error (?:running|starting) jq: (?P<type>[A-Za-z_]\w{0,100}): (?P<msg>.*)$", re.M)
# PyYAML's mark: ``  in "app.yaml", line 2, column 4`` (a full stop after the last one: yq's own).
_MARK = re.compile(r'^\s+in "(?P<file>[^"\n]{1,1000})", line (?P<line>\d{1,9}), column \d{1,9}[.:]?$')
_MAX_CAUSE = 240


def parse(text: str, hints: Hints) -> Parsed | None:
    """Digest yq's last ``Error running jq`` report; ``None`` for text without one."""
    reports = list(_REPORT.finditer(text)) if "rror " in text else []
    if not reports:
        return None
    report = reports[-1]
    lines = [report["msg"], *text[report.end() :].split("\n")[1:]]
    parts: list[str] = []
    location: Frame | None = None
    for line in lines:
        if not line.strip():
            break
        mark = _MARK.match(line)
        if mark is not None:
            location = Frame(mark["file"], int(mark["line"]))
        elif line[0] == " ":
            continue  # the snippet and caret PyYAML prints under a mark into a buffer it holds
        else:
            parts.append(line.strip().removesuffix("."))
    cause = clip(": ".join(part for part in parts if part), _MAX_CAUSE)
    return Parsed(report["type"], cause or report["type"], "yq", frames=(location,) if location else (),
                  location=location, status=hints.exit_code)
