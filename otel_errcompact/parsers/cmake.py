"""Parser for CMake's configure errors: ``CMake Error at CMakeLists.txt:27 (find_package):``.

CMake prints progress (``-- Detecting C compiler ABI info``) and a closing ``Configuring incomplete``
line around the one block that matters: a ``CMake Error at FILE:LINE (command):`` header followed by an
indented message. The digest keeps the command (as the location's function) and the message's first
paragraph (and the next one when the first ends with a colon, as in ``Cannot find source file:`` ⏎
``missing.c``), so the package, source file or command CMake could not find survives; the location is
the CMakeLists line. A parse error has no command (``CMake Error at CMakeLists.txt:3:`` ⏎ ``Parse error.
Expected "(", got identifier …``): its location is the file and line alone, and it is the first block
because the ``include`` that read the file fails after it. A ``CMake Error:`` without a position (a
missing source folder, a bad generator) keeps its own line.
"""

from __future__ import annotations

import re

from otel_errcompact.parsers._base import Frame, Hints, Parsed

__all__ = ["MARKERS", "parse"]

MARKERS = ("CMake Error",)
_MAX_PARAGRAPH = 400
_AT = re.compile(r"^CMake Error at (?P<file>.+?):(?P<line>\d+)(?: \((?P<command>[\w:]+)\))?:[ \t]*$", re.M)
_PLAIN = re.compile(r"^CMake Error(?: in (?P<file>[^:\n]+))?: (?P<msg>.+)$", re.M)


def parse(text: str, hints: Hints) -> Parsed | None:
    """Digest the first CMake error block; ``None`` without one."""
    if "CMake Error" not in text:
        return None
    at = _AT.search(text)
    if at is not None:
        message = _message(text[at.end():])
        # The command is the location's function (``in find_package``): the cause need not repeat it.
        cause = message or (f"{at['command']} failed" if at["command"] else "error")
        location = Frame(at["file"], int(at["line"]), at["command"])
        return Parsed("CMake Error", cause, "cmake", location=location, status=hints.exit_code)
    plain = _PLAIN.search(text)
    if plain is None:
        return None
    message = plain["msg"].strip() or _message(text[plain.end():])
    file_location = Frame(plain["file"]) if plain["file"] else None
    return Parsed("CMake Error", message, "cmake", location=file_location, status=hints.exit_code)


def _message(rest: str) -> str:
    """The indented block after a header: its first paragraph, and the second when the first ends in ':'."""
    paragraphs: list[list[str]] = [[]]
    for line in rest.split("\n")[1:200]:
        if line and not line[0].isspace():
            break  # the block ends at the first unindented line
        if not line.strip():
            if paragraphs[-1]:
                paragraphs.append([])
            continue
        paragraphs[-1].append(line.strip())
    texts = [" ".join(p) for p in paragraphs if p]
    if not texts:
        return ""
    message = texts[0]
    if message.endswith(":") and len(texts) > 1:
        message = f"{message} {texts[1]}"
    return message[:_MAX_PARAGRAPH]
