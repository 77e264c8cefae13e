"""Parser for ``node --test`` reports: TAP (what a tool gets when output is not a terminal) and spec.

The digest names the first failing test: the error's class (``AssertionError``, ``TypeError``) as type,
the error message and the test's name as cause (``Expected values to be strictly equal: 2 !== 3 (test
'adds numbers')``), and the test file's line as location (the innermost stack frame outside node's
internals, else the test's ``location``). The count of other failing tests is shown but not keyed.
"""

from __future__ import annotations

import re

from otel_errcompact.parsers._base import Frame, Hints, Parsed, innermost_in_app, is_library_path

__all__ = ["MARKERS", "parse"]

MARKERS = ("not ok ", "✖ ")
_MAX_BLOCK = 200
_NOT_OK = re.compile(r"^(?P<indent>\s*)not ok \d+ - (?P<name>.+?)(?:\s+#\s.*)?$", re.M)
_FIELD = re.compile(r"^(?P<key>[A-Za-z_]+):\s?(?P<value>.*)$")
_STACK_FRAME = re.compile(r"\(?(?:file://)?(?P<file>/[^\s():]+|[A-Za-z]:\\[^\s():]+|[^\s():]+\.[cm]?[jt]s):"
                          r"(?P<line>\d+):\d+\)?\s*$")
_FAIL_COUNT = re.compile(r"^# fail (?P<n>\d+)$", re.M)
_SPEC = re.compile(r"^\s*✖ (?P<name>.+?)(?: \([\d.]+m?s\))?\n\s+(?P<type>\w*Error)(?: \[\w+\])?: (?P<msg>.+)$", re.M)


def parse(text: str, hints: Hints) -> Parsed | None:
    """Digest the first failing test of a ``node --test`` run; ``None`` for other text."""
    if "not ok " in text:
        return _tap(text, hints)
    if "✖ " in text:
        return _spec(text, hints)
    return None


def _spec(text: str, hints: Hints) -> Parsed | None:
    """The spec reporter: ``✖ name (1ms)``, the error's lines, then its ``at …`` stack."""
    spec = _SPEC.search(text)
    if spec is None:
        return None
    message = [spec["msg"].strip()]
    stack: list[str] = []
    for line in text[spec.end():].split("\n")[1:_MAX_BLOCK]:
        stripped = line.strip()
        if stripped.startswith("at "):
            stack.append(stripped)
        elif stack or stripped.startswith(("{", "}")) or (line and not line[0].isspace()):
            break
        elif stripped:
            message.append(stripped)
    frames = tuple(_frames("\n".join(stack)))
    cause = f"{' '.join(message)} (test '{spec['name'].strip()}')"
    return Parsed(spec["type"], cause, "node-test", frames=frames,
                  location=innermost_in_app(frames) if frames else None, status=hints.exit_code)


def _tap(text: str, hints: Hints) -> Parsed | None:
    failures = list(_NOT_OK.finditer(text))
    if not failures:
        return None
    first = failures[0]
    name = first["name"].strip().strip("'")
    fields = _yaml_block(text[first.end():].split("\n")[1:_MAX_BLOCK], len(first["indent"]))
    type_ = fields.get("name", "").strip("'\"") or "TestFailure"
    message = " ".join(fields.get("error", "").replace("\n", " ").split()).strip("'\"") or "test failed"
    frames = tuple(_frames(fields.get("stack", "")))
    location = innermost_in_app(frames) if frames else None
    if location is None and "location" in fields:
        loc = _STACK_FRAME.search(fields["location"].strip("'\""))
        if loc is not None:
            location = Frame(loc["file"], int(loc["line"]))
    count = _FAIL_COUNT.search(text)
    more = (int(count["n"]) if count else len(failures)) - 1
    cause = f"{message} (test '{name}')"
    shown = f"{cause} (+{more} more failed)" if more > 0 else cause
    return Parsed(type_, shown, "node-test", frames=frames, location=location, status=hints.exit_code,
                  key_text=cause)


def _yaml_block(lines: list[str], indent: int) -> dict[str, str]:
    """The ``---``…``...`` block's top-level fields; ``|-`` values keep their indented lines."""
    fields: dict[str, str] = {}
    inside = False
    key: str | None = None
    for raw in lines:
        stripped = raw.strip()
        if not inside:
            if stripped == "---":
                inside = True
                continue
            break
        if stripped == "...":
            break
        depth = len(raw) - len(raw.lstrip())
        field = _FIELD.match(stripped) if depth <= indent + 2 else None
        if field is not None:
            key = field["key"]
            value = field["value"].strip()
            fields[key] = "" if value in ("|-", "|", ">-") else value
        elif key is not None:
            fields[key] = f"{fields[key]}\n{stripped}".strip("\n")
    return fields


def _frames(stack: str) -> list[Frame]:
    frames: list[Frame] = []
    for line in stack.splitlines():
        match = _STACK_FRAME.search(line.strip())
        if match is not None:
            file = match["file"]
            frames.append(Frame(file, int(match["line"]), None, in_app=not is_library_path(file)))
    frames.reverse()  # node prints innermost first; frames run outermost first
    return frames
