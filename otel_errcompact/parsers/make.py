"""Parser for GNU make's own errors: the ``***`` lines and the recipe that failed.

make reports two kinds of failure, and the decisive line differs:

* make itself stops (``make: *** No rule to make target 'main.o', needed by 'app'.  Stop.``,
  ``Makefile:4: *** missing separator.  Stop.``): that line is the cause; ``Makefile:4`` is the location.
* a recipe command fails (``make: *** [Makefile:6: build] Error 1``): the last line only says that a
  command in target ``build`` failed. The cause is the command's own telling line above it (``cp: cannot
  stat 'config.ini': No such file or directory``), chosen the way the shell parser chooses one; the
  location is the Makefile line and the target. Compiler and interpreter output inside a recipe is
  claimed earlier by its own parser (gcc, Python …), which is where its cause is.

Type ``make``; the status is the exit code the caller gave.
"""

from __future__ import annotations

import re

from otel_errcompact.parsers._base import Frame, Hints, Parsed
from otel_errcompact.parsers.shell import telling_line

__all__ = ["MARKERS", "parse"]

MARKERS = ("*** ",)
_MAX_LINES = 2000
_MAKE = r"(?:[\w./-]*/)?g?make(?:\[\d+\])?"
_STOP = re.compile(
    rf"^(?:{_MAKE}|(?P<file>[^\s:]+):(?P<line>\d+)):\s\*\*\*\s(?P<msg>.+?)\.?\s+Stop\.$", re.M
)
_RECIPE = re.compile(
    rf"^{_MAKE}:\s\*\*\*\s\[(?:(?P<file>[^\s:\]]+):(?P<line>\d+):\s)?(?P<target>[^\]]+)\]\s(?P<what>Error\s-?\d+|.+)$",
    re.M,
)
_NOISE = re.compile(rf"^{_MAKE}:\s(?:Entering|Leaving) directory|^{_MAKE}:\s\*\*\*")


def parse(text: str, hints: Hints) -> Parsed | None:
    """Digest a failed make run; ``None`` without make's ``***`` lines."""
    if "*** " not in text:
        return None
    stop = _STOP.search(text)
    if stop is not None:
        location = Frame(stop["file"], int(stop["line"])) if stop["file"] else None
        return Parsed("make", stop["msg"].strip(), "make", location=location, status=hints.exit_code)
    recipe = _RECIPE.search(text)
    if recipe is None:
        return None
    before = text[: recipe.start()].splitlines()[-_MAX_LINES:]
    lines = [ln.strip() for ln in before if ln.strip() and not _NOISE.match(ln.strip())]
    telling = telling_line(lines)
    target = recipe["target"].strip()
    what = telling or recipe["what"].strip()
    location = Frame(recipe["file"], int(recipe["line"]), target) if recipe["file"] else None
    return Parsed("make", f"{what} (target '{target}')", "make", location=location, status=hints.exit_code)
