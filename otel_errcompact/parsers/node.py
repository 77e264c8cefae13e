"""Parser for Node.js / V8 uncaught errors and unhandled rejections.

Node prints an uncaught error as: the throw site (``/app/app.js:2``), the source line and a caret, a
blank line, then ``error.stack`` (``TypeError: message`` followed by ``    at func (file:line:col)``
frames, innermost first), then any own properties of the error in braces (``code: 'MODULE_NOT_FOUND'``,
``[cause]: …``) and a ``Node.js v20…`` trailer. Only the ``Type: message`` line is the cause: the source
line, caret, property dump and trailer are noise to an agent.
An ``assert`` failure's diff (``+ actual - expected``) gives the lines that differ, not the equal lines node
prints around them.

Choices worth knowing:

* Type is the error's class name as V8 prints it (``TypeError``, ``Error``, ``AssertionError``); a
  bracketed Node error code (``Error [ERR_MODULE_NOT_FOUND]``) goes into the cause, where it names the
  failure, not into the type.
* ``error.cause`` chains (``[cause]: SyntaxError: …``) are reported like the JVM parser reports
  ``Caused by:``: the thrown error's type, and a cause ``outer message ← RootType: root message``, so the
  agent sees both what the code was doing and why it failed.
* Frames under ``node:``/``internal/``/``node_modules`` are not in-app; the location is the innermost
  frame of the user's code (for an error thrown inside a package, that is the caller). When no frame
  is in-app (a ``SyntaxError`` while loading a file), the throw-site header names the file.
* ``throw "a string"`` prints no stack; it is reported as type ``Uncaught`` with the thrown value.

>>> from otel_errcompact.parsers._base import Hints
>>> p = parse("TypeError: x is not a function\\n    at run (/srv/app.js:3:9)\\n", Hints())
>>> p.type, p.cause, p.frames[-1].func
('TypeError', 'x is not a function', 'run')
"""

from __future__ import annotations

import difflib
import re

from otel_errcompact.parsers._base import Frame, Hints, Parsed, clip, is_library_path

__all__ = ["parse"]
MARKERS = ("    at ", "Node.js v", "--trace-uncaught")  # see parsers/__init__.py

_MAX_LINE = 2000  # longer lines are never frames or headers; skipping them keeps every regex cheap
_MAX_MESSAGE_LINES = 6
# ``assert``'s diff: a legend (``+ actual - expected``, with `` ... Lines skipped`` when it leaves some out),
# then the values with a ``+`` or ``-`` before each line that differs.
_DIFF_LEGEND = "+ actual - expected"
# The loose form (``assert.deepEqual``) prints no diff: the actual value, this line, then the expected value.
_LOOSE_SEPARATOR = "should loosely deep-equal"
_MAX_DIFF_LINES = 6
_MAX_DIFF_SCAN = 400
_MAX_OUTER_CHARS = 100
_HEADER_LOOKBACK = 60

_POSITION = re.compile(r":(?P<line>\d+)(?::\d+)?$")
# ``TypeError: message``, ``Error [ERR_X]: message``, ``Uncaught Error: message`` or a bare ``RangeError``.
_HEADER = re.compile(
    r"^(?:Uncaught )?(?P<type>[A-Za-z_$][\w$]*(?:\.[A-Za-z_$][\w$]*)*)"
    r"(?: \[(?P<code>[A-Za-z0-9_.]+)\])?(?::(?: (?P<msg>.*))?)?$"
)
_ERRORISH = re.compile(r"(?:Error|Exception|Rejection|Failure|Fault)$")
_THROW_SITE = re.compile(r"^(?P<file>\S+):(?P<line>\d+)$")
_CAUSE_PROP = re.compile(r"^\s+\[cause\]: (?P<head>.*)$")
_TRAILER = re.compile(r"^Node\.js v\d+")
# V8's names for a CommonJS module's top-level code: no function an agent could look for.
_TOP_LEVEL = frozenset({"Object.<anonymous>", "<anonymous>"})
_NON_APP_FILES = frozenset({"<anonymous>", "native", "[eval]-wrapper"})


def parse(text: str, hints: Hints) -> Parsed | None:
    """Recognise a Node/V8 stack trace; ``None`` when the text has no V8 frames or Node trailer."""
    if "    at " not in text and "Node.js v" not in text and "--trace-uncaught" not in text:
        return None
    lines = text.splitlines()
    first_frame = _first_frame_index(lines)
    if first_frame is None:
        return _parse_stackless(lines)
    header_index = _find_header(lines, first_frame)
    if header_index is None:
        return None
    header = _HEADER.match(lines[header_index].strip())
    if header is None:  # _find_header only returns matching lines
        return None
    type_ = header.group("type")
    message = _message(header.group("msg") or "", lines[header_index + 1 : first_frame])
    frames, end = _frames(lines, first_frame)
    code = header.group("code")
    root = _root_cause(lines, end)
    if code:
        message = f"{message} ({code})" if message else code
    if type_ == "UnhandledPromiseRejection":
        # Node's explanation of the rejection mode is boilerplate; the reason is the cause.
        reason = message.find("rejected with the reason ")
        if reason >= 0:
            message = "promise " + message[reason:].rstrip(".")
    cause = message or type_
    if root is not None:
        root_type, root_message, root_frames = root
        if not (root_message and root_message in message):
            cause = f"{clip(message, _MAX_OUTER_CHARS)} ← {root_type}: {root_message}".strip()
        if any(f.in_app for f in root_frames):
            frames = root_frames
    location = None
    if not any(f.in_app for f in frames):
        # Only runtime frames (a load-time SyntaxError, a rejection reported by node itself): the
        # throw-site header may still name the user's file; node's own internals never help the agent.
        location = _throw_site(lines, header_index)
        frames = ()
    return Parsed(type_, cause, "node", frames=frames, location=location)


def _first_frame_index(lines: list[str]) -> int | None:
    for index, line in enumerate(lines):
        if line.startswith("    at ") and len(line) <= _MAX_LINE and _frame(line) is not None:
            return index
    return None


def _find_header(lines: list[str], first_frame: int) -> int | None:
    """The nearest ``Type: message`` line above the first frame, preferring error-like class names.

    A multi-line message (``AssertionError``'s diff, ``Require stack:``) sits between the header and the
    frames, so the header is searched for rather than assumed to be the line just above.
    """
    fallback: int | None = None
    for index in range(first_frame - 1, max(-1, first_frame - 1 - _HEADER_LOOKBACK), -1):
        line = lines[index]
        if not line or line[0].isspace() or len(line) > _MAX_LINE:
            continue
        match = _HEADER.match(line.rstrip())
        if match is None:
            continue
        if _ERRORISH.search(match.group("type")):
            return index
        if fallback is None:
            fallback = index
    return fallback


def _message(first: str, rest: list[str]) -> str:
    """The header's message plus its continuation lines, stopping at the require stack; for an assertion's
    diff, or the two values of a loose ``deepEqual``, the lines that differ."""
    parts = [first.strip()] if first.strip() else []
    if any(line.startswith(_DIFF_LEGEND) for line in rest[:_MAX_MESSAGE_LINES]):
        return " ".join(parts + _differing(rest))
    loose = _loosely_differing(rest)
    if loose:
        return " ".join(parts + loose)
    for line in rest[:_MAX_MESSAGE_LINES]:
        stripped = line.strip()
        if stripped == "Require stack:":
            break
        if stripped:
            parts.append(stripped)
    return " ".join(parts)


def _differing(rest: list[str]) -> list[str]:
    """The ``+``/``-`` lines of ``assert``'s diff (``+   name: 'bob',`` ``-   name: 'alice',``), white space
    folded: the lines around them repeat what is equal, and node shows as many of them as fit, so the lines
    that differ come after the few a message would keep."""
    found: list[str] = []
    for line in rest[:_MAX_DIFF_SCAN]:
        if line.startswith(("+ ", "- ", "+\t", "-\t")) and not line.startswith(_DIFF_LEGEND):
            found.append(clip(line, _MAX_LINE))
            if len(found) == _MAX_DIFF_LINES:
                break
    return found


def _loosely_differing(rest: list[str]) -> list[str]:
    """The lines that differ between the two values of a loose ``assert.deepEqual``, marked as the strict
    form's diff marks them (``+ plan: 'free',`` ``- plan: 'pro',``): node prints both values whole with no
    diff, so the lines a message would keep are the equal ones at the top. ``[]`` for other messages."""
    scanned = [line.strip() for line in rest[:_MAX_DIFF_SCAN]]
    if _LOOSE_SEPARATOR not in scanned:
        return []
    at = scanned.index(_LOOSE_SEPARATOR)
    actual = [clip(line, _MAX_LINE) for line in scanned[:at] if line]
    expected = [clip(line, _MAX_LINE) for line in scanned[at + 1 :] if line]
    found: list[str] = []
    matcher = difflib.SequenceMatcher(None, actual, expected, autojunk=False)
    for tag, a_from, a_to, e_from, e_to in matcher.get_opcodes():
        if tag != "equal":
            found += [f"+ {line}" for line in actual[a_from:a_to]] + [f"- {line}" for line in expected[e_from:e_to]]
    return found[:_MAX_DIFF_LINES]


def _frames(lines: list[str], start: int) -> tuple[tuple[Frame, ...], int]:
    """Frames from ``start`` on, outermost first, and the index just past the last frame."""
    found: list[Frame] = []
    index = start
    while index < len(lines):
        line = lines[index]
        if line.startswith("    at ") and len(line) <= _MAX_LINE:
            frame = _frame(line)
            if frame is not None:
                found.append(frame)
        elif not (line.startswith("    ...") and "lines matching" in line):
            break
        index += 1
    found.reverse()
    return tuple(found), index


def _frame(line: str) -> Frame | None:
    """One ``at func (location)`` / ``at location`` line; ``None`` for anything else (a JVM frame).

    Split by hand rather than by one regular expression: function names hold brackets and parentheses
    (``Function.executeUserEntryPoint [as runMain]``, ``eval at f (…)``), and a split stays linear.
    """
    rest = line.strip().removesuffix(" {")
    if not rest.startswith("at "):
        return None
    rest = rest[3:].removeprefix("async ").strip()
    if not rest:
        return None
    func: str | None = None
    open_paren = rest.find(" (")
    if open_paren > 0 and rest.endswith(")"):
        func, location = rest[:open_paren].strip(), rest[open_paren + 2 : -1]
    elif "(" in rest or (" " in rest and not _POSITION.search(rest)):
        return None  # ``pkg.Class.method(File.java:12)`` and prose are not V8 frames
    else:
        location = rest  # an anonymous function: ``at /app/my dir/x.js:1:85``
    if location.startswith("eval at "):
        # ``eval at fn (/app/x.js:1:1), <anonymous>:1:1``: the code came from the eval site.
        inner = location.find("(")
        close = location.find(")", inner)
        location = location[inner + 1 : close] if 0 <= inner < close else location
    position = _POSITION.search(location)
    file, line_no = location, None
    if position is not None:
        file, line_no = location[: position.start()], int(position.group("line"))
    if file.startswith("file://"):
        file = file[len("file://") :]
    if func in _TOP_LEVEL:
        func = None
    in_app = not (is_library_path(file) or file in _NON_APP_FILES or (line_no is None and " " in file))
    return Frame(file=file, line=line_no, func=func, in_app=in_app)


def _root_cause(lines: list[str], start: int) -> tuple[str, str, tuple[Frame, ...]] | None:
    """The innermost ``[cause]: Type: message`` in the property dump after the frames, if any."""
    found: tuple[str, str, tuple[Frame, ...]] | None = None
    index = start
    while index < len(lines) and not _TRAILER.match(lines[index]):
        line = lines[index]
        match = _CAUSE_PROP.match(line) if len(line) <= _MAX_LINE else None
        header = _HEADER.match(match.group("head").strip()) if match else None
        if header is not None:
            message = (header.group("msg") or "").strip()
            code = header.group("code")
            if code:
                message = f"{message} ({code})"
            frames: list[Frame] = []
            index += 1
            while index < len(lines) and lines[index].lstrip().startswith("at "):
                frame = _frame(lines[index])
                if frame is not None:
                    frames.append(frame)
                index += 1
            frames.reverse()
            found = (header.group("type"), message, tuple(frames))
            continue
        index += 1
    return found


def _throw_site(lines: list[str], header_index: int) -> Frame | None:
    """The ``/app/file.js:LINE`` header Node prints above the source line, when it is the user's file."""
    for index in range(max(0, header_index - 8), header_index):
        match = _THROW_SITE.match(lines[index].strip()) if len(lines[index]) <= _MAX_LINE else None
        if match:
            file = match.group("file")
            if file.startswith("file://"):
                file = file[len("file://") :]
            if not is_library_path(file):
                return Frame(file=file, line=int(match.group("line")))
    return None


def _parse_stackless(lines: list[str]) -> Parsed | None:
    """``throw "text"``: no stack, the value sits above ``(Use `node --trace-uncaught ...`…)``."""
    for index, line in enumerate(lines):
        if line.startswith("(Use `node --trace-uncaught"):
            value = next((lines[i].strip() for i in range(index - 1, -1, -1) if lines[i].strip()), "")
            if not value or len(value) > _MAX_LINE:
                return None
            return Parsed("Uncaught", value, "node", location=_throw_site(lines, index))
    return None
