"""Parser for command-line usage errors: argparse's (and optparse's) ``usage:`` line, then ``prog: error: …``.

A script run with a wrong flag or value prints::

    usage: export.py [-h] --input INPUT [--format {csv,json}]
    export.py: error: argument --format: invalid choice: 'xml' (choose from 'csv', 'json')

and exits with status 2. The agent's command line is wrong, not a type checker's verdict (mypy's
line-less ``file.py: error: …`` looks alike), so the type is ``usage error`` and the cause is the program
and argparse's message: ``export.py: argument --format: invalid choice: 'xml' (choose from 'csv',
'json')``. The value the agent passed is shown but not keyed (``invalid choice: <value>``, ``invalid int
value: <value>``): passing ``yaml`` next is the same mistake with the same flag. The program must be the
one the ``usage:`` line names, so a ``prog: error:`` line alone is left to the other parsers.

>>> parse("usage: t.py [-h] n\\nt.py: error: the following arguments are required: n\\n", Hints()).cause
't.py: the following arguments are required: n'
"""

from __future__ import annotations

import re

from otel_errcompact.parsers._base import Hints, Parsed

__all__ = ["MARKERS", "parse"]

MARKERS = ("usage:",)  # see parsers/__init__.py (matched ignoring case: optparse prints "Usage:")

_TYPE = "usage error"
_FORMAT = "usage"
_MAX_LINES = 200
_MAX_LINE = 2000
_USAGE = "usage: "
_ERROR = ": error: "
# argparse's ``invalid choice: %(value)r`` and ``invalid %(type)s value: %(value)r``: the value passed.
_PASSED = re.compile(r"(invalid (?:choice|[^:\n]{1,80}? value): )(?:'(?:[^'\\\n]|\\.)*'|\"(?:[^\"\\\n]|\\.)*\")")


def parse(text: str, hints: Hints) -> Parsed | None:
    """Digest a usage error; ``None`` without a ``usage:`` line naming the program of a ``prog: error:`` line."""
    if _ERROR not in text:
        return None
    lines = [line[:_MAX_LINE] for line in text.splitlines()[:_MAX_LINES]]
    programs = [line[len(_USAGE) :] for line in lines if line[: len(_USAGE)].lower() == _USAGE]
    if not programs:
        return None
    for line in lines:
        program, found, message = line.partition(_ERROR)
        if found and program and any(usage == program or usage.startswith(program + " ") for usage in programs):
            message = message.strip()
            keyed = _PASSED.sub(r"\1<value>", message)
            return Parsed(_TYPE, f"{program}: {message}", _FORMAT, status=hints.exit_code,
                          key_text=f"{program}: {keyed}")
    return None
