"""Parser for CPython tracebacks: plain, chained, exception groups and compile errors.

One pass over the lines turns the traceback into a flat list of *units* in print order, each a
``Type: message`` line with the frames printed above it and its nesting level inside an exception
group's box (``  | `` prefixes). That one list is enough for every shape CPython prints:

* **Chains.** ``The above exception was the direct cause…`` and ``During handling of the above
  exception…`` join units at the same level; CPython prints the root first and the exception that
  reached the caller last. The digest's type is the *last* one (what the caller saw and would catch);
  the cause is ``final message ← RootType: root message``, so the token that names the root (the missing
  file, key, table) survives a wrapper like ``RuntimeError: config load failed``. The root part is left
  out when the final message already quotes it. The location is the innermost in-app frame of the final
  exception (the wrapper's frames start at the caller's entry point; a root caught inside a library
  often has no in-app frame at all), else of the nearest earlier link.
  An asyncio timeout (``wait_for``, ``asyncio.timeout``) raises a bare ``TimeoutError`` from the
  ``CancelledError`` of the call it cancelled: its cause is ``timed out awaiting fetch_rates (app.py:4)``, the
  awaited call being the cancelled one's innermost in-app frame.
* **Exception groups** (``asyncio.TaskGroup``, ``ExceptionGroup``): type ``ExceptionGroup`` (or the
  subclass's name); the cause is the group message plus its leaf exceptions, nested groups flattened,
  identical leaves counted: ``unhandled errors in a TaskGroup (2 sub-exceptions): ValueError: bad id
  'x'; KeyError: 'k'``. The location is the innermost in-app frame of the first leaf. The dedup key
  lists each leaf once per masked form, without counts: a batch whose tasks fail alike for other data
  (``KeyError: 'user_42'``, ``'user_43'``) is one class whatever its size.
* **SyntaxError / IndentationError / TabError**: the location is the position CPython reports (the
  ``File "x.py", line N`` line without a function), even without a ``Traceback`` header (source
  compiled from a string, ``<string>``, is located at the caller of ``compile()`` instead), and the
  offending source line joins the message, so two different syntax errors in one file do not share a
  dedup key just because CPython calls both ``invalid syntax``.
* **A bare** ``assert``: its ``AssertionError`` has no message, so the statement CPython prints under the
  frame (``assert resp["status"] == 200``) is the message; every bare assert of a function would
  otherwise read ``(no message)`` and share one key.
* **Multi-line messages**: the first line is the message. pydantic's ``N validation error(s) for Model``
  gets its fields and their messages (``age — Input should be a valid integer``) with the per-error
  ``[type=…, input_value=…]`` detail dropped (the input value would split the dedup key); a first line
  that is empty or ends with ``:`` gets the next non-empty line, and one followed by a line naming the
  file it is about (PyYAML's ``in "app.yaml", line 2, column 9``, configparser's ``file: 'app.ini', line:
  1``) gets that line: the same message about two files is two failures. PyYAML's message that opens
  with its context (``while parsing a flow sequence``) says what went wrong on a later line of its own
  (``expected ',' or ']', but got ':'``): that line and the file line under it join the context.
  A first line that only says that something failed (``step failed with exit status 2``) gets the line under
  it that names the failure (``ls: cannot access 'dist': No such file or directory``, as a tool's output put
  in the message says it), read as :func:`otel_errcompact.parsers.shell.telling_line` reads a command's output.
* **The logging module's report** of a record it could not format (``--- Logging error ---``): under the
  exception it prints ``Call stack:`` with the frames of the logging call, then ``Message: '…'`` and
  ``Arguments: (…)``. Those frames locate the exception (its own frames are all inside ``logging``), and
  the two lines after them are no exception.
* **Module-qualified types** (``urllib.error.HTTPError``, ``sqlite3.OperationalError``,
  ``f.<locals>.MyError``) are reported by their class name.
* **Django's debug page** (the plain text it serves a client that does not take HTML, and the text of its
  HTML page): under the frames the exception reads ``Exception Type: KeyError at /profile/`` and
  ``Exception Value: 'email'``, and a request dump follows (``USER: AnonymousUser``) whose lines are no
  exception. Under its response's status line the page reads as that response (``HTTP 500``, the
  exception and its location), as the HTTP parser reads it; the page alone reads as its exception.

When the text holds several unrelated tracebacks (a log with a handled error and a fatal one), the
last one wins: it is the most recent. Log lines around a traceback are ignored, and a constant
per-line prefix (``web-1  | Traceback …`` from ``docker compose``) is stripped. Every step is a
``startswith`` check or an anchored regular expression on one line, and frames are kept in a bounded
head and tail, so a 5,000-frame recursion costs one linear pass and yields a bounded result.

>>> from otel_errcompact.parsers._base import Hints
>>> p = parse('Traceback (most recent call last):\\n  File "app.py", line 3, in load\\n'
...           "    return d[k]\\nKeyError: 'user_id'\\n", Hints())
>>> p.type, p.cause, p.location.func
('KeyError', "'user_id'", 'load')
"""

from __future__ import annotations

import re
from collections import deque
from dataclasses import dataclass, field

from otel_errcompact.digest import short_file
from otel_errcompact.normalize import normalize_message
from otel_errcompact.parsers._base import Frame, Hints, Parsed, clip, is_library_path, new_parsed
from otel_errcompact.parsers.shell import names_the_failure, telling_line
from otel_errcompact.redact import redact

__all__ = ["COLUMN_0", "HEADER", "in_app", "parse", "parse_plain", "plain_exception", "plain_location"]
MARKERS = ('File "', "Traceback (most recent call last):")  # see parsers/__init__.py

HEADER = "Traceback (most recent call last):"
_GROUP_HEADER = "Exception Group Traceback (most recent call last):"
_CHAIN_MARKS = frozenset(
    {
        "The above exception was the direct cause of the following exception:",
        "During handling of the above exception, another exception occurred:",
    }
)
_SYNTAX_TYPES = frozenset({"SyntaxError", "IndentationError", "TabError"})
# An asyncio timeout: a bare ``TimeoutError`` raised from the ``CancelledError`` of the call it cancelled.
_TIMEOUT = "TimeoutError"
_CANCELLED = "CancelledError"
_ASSERT = "assert "

_MAX_LINE = 4000  # lines are cut to this before any regular expression sees them
_HEAD_FRAMES = 8
_TAIL_FRAMES = 56
_MAX_CONTINUATION = 16
_MAX_LEAVES = 3
_KEY_LEAVES = 64  # leaves masked for a group's key (CPython prints 15 per group): the cost stays bounded
_MAX_PART = 120  # each part of a composed cause; the compactor bounds the whole
_MAX_SOURCE = 60

_FRAME = re.compile(r'  File "(?P<file>[^"\n]{1,1000})", line (?P<line>\d{1,9})(?:, in (?P<func>.+))?$')
# ``KeyError: 'k'``, ``ValueError: ``, ``socket.gaierror: …``, ``f.<locals>.MyErr: x`` or a bare
# ``KeyboardInterrupt`` (a bare word must start upper-case, so a stray log word is not taken for a type).
_EXCEPTION = re.compile(r"(?P<type>[A-Za-z_][\w.<>]{0,200})(?:: ?(?P<msg>.*))?$")
_BARE_TYPE = re.compile(r"(?:[\w<>]+\.)*[A-Z_]\w*$")
_MORE = re.compile(r"and (?P<n>\d{1,9}) more exceptions?$")
# Django's debug page: ``Exception Type: KeyError at /profile/`` then ``Exception Value: 'email'``.
_PAGE_TYPE = "Exception Type: "
_PAGE_VALUE = "Exception Value:"
_PAGE_EXCEPTION = re.compile(r"Exception Type: (?P<type>[A-Za-z_][\w.<>]{0,200})(?: at \S*)?\s*$")
_PYDANTIC = re.compile(r"\d+ validation errors? for \S+$")
# The line under a message that names the file it is about: PyYAML's ``  in "app.yaml", line 2, column 9``,
# configparser's ``file: 'app.ini', line: 1``.
_FILE_MARK = re.compile(r"\s*(?:in|file:) ([\"'])[^\"'\n]{1,1000}\1, line:? \d")
# PyYAML's context line (``while parsing a block mapping``, ``while scanning a quoted scalar``): the problem
# follows on a later line that starts at column 0, under the context's own indented file and snippet lines.
_YAML_CONTEXT = "while "
# jsonschema's ValidationError says what is wrong on its first line (``'abc' is not of type 'integer'``) and
# names the place after a blank line: ``Failed validating 'type' in schema[…]:`` then ``On instance['age']:``.
_SCHEMA_FAILED = "Failed validating "
_SCHEMA_ON = "On instance"
_SCHEMA_INSTANCE = re.compile(r"On instance(?P<path>\[.{1,200}\]):$")
# The logging module's report of a record it could not format: the frames of the logging call follow this
# line, then the record's ``Message: '…'`` and ``Arguments: (…)`` lines.
_CALL_STACK = "Call stack:"
_RECORD_LINES = ("Message: ", "Arguments: ")
# What a group's str() appends to its message: its size, not what failed.
_SUB_COUNT = re.compile(r" \(\d+ sub-exceptions?\)$")
_ERRORISH = re.compile(r"(?:Error|Exception|Exit|Interrupt|Warning|Group|Iteration)$")
_WS = re.compile(r"\s+")
# CPython's own library on Windows (``C:\...\Python311\Lib\json\decoder.py``): no ``pythonX.Y`` folder.
_WINDOWS_STDLIB = re.compile(r"(?i)^[a-z]:\\(?:[^\\\n]+\\)*python\d*\\lib\\")
# The names jinja2 gives a template made from a string (``Template("…")``, ``from_string``): its runtime frames
# are ``<template>``, its syntax errors ``<unknown>``. No one can open them: the user's render() call is the
# place (a template loaded from a file keeps its own name and line, which are the user's).
_TEMPLATE_PSEUDO_FILES = frozenset({"<template>", "<unknown>"})
# What the plain shape must not hold above its header (see :func:`parse_plain`): a chain mark joining an
# earlier exception to it. Below the header a chain mark would start a line, which the plain shape rules out.
_CHAIN_STARTS = ("The above exception was the direct cause", "During handling of the above exception")
_FRAME_START = '\n  File "'
# A line that starts at column 0 (not the first line of the text): in the frame block of a plain traceback
# every line is indented or empty, so such a line is an interleaved message, a chain or a second exception.
COLUMN_0 = re.compile(r"\n[^ \n]")


class _Frames:
    """Frames of one traceback: a bounded head and tail, and the innermost in-app frame seen."""

    __slots__ = ("count", "head", "in_app", "in_app_above_last", "last", "tail")

    def __init__(self) -> None:
        self.head: list[Frame] = []
        self.tail: deque[Frame] = deque(maxlen=_TAIL_FRAMES)
        self.in_app: Frame | None = None
        self.in_app_above_last: Frame | None = None  # innermost in-app frame above the latest one
        self.last: Frame | None = None
        self.count = 0

    def add(self, frame: Frame) -> None:
        if len(self.head) < _HEAD_FRAMES:
            self.head.append(frame)
        else:
            self.tail.append(frame)
        self.in_app_above_last = self.in_app
        if frame.in_app:
            self.in_app = frame
        self.last = frame
        self.count += 1

    def frames(self) -> tuple[Frame, ...]:
        return (*self.head, *self.tail)


@dataclass(slots=True, eq=False)
class _Unit:
    """One printed exception: its ``Type: message`` line, the lines after it, and its frames."""

    level: int
    type: str
    message: str
    frames: _Frames
    group: bool
    source: str = ""  # the source line under the last frame (shown for syntax errors)
    more: list[str] = field(default_factory=list)
    superseded: bool = False  # a later link of the same chain follows it
    hidden: int = 0  # "and N more exceptions" under a group
    page: bool = False  # read off Django's debug page (its ``Exception Type:`` line)
    caller: _Frames | None = None  # the logging call's frames, under the logging module's ``Call stack:``


def parse(text: str, hints: Hints) -> Parsed | None:
    """Recognise a CPython traceback; ``None`` when the text holds none."""
    if 'File "' not in text and HEADER not in text:
        return _bare_exception(text) if hints.kind == "python" else None
    units = _units(text)
    if not units:
        return _bare_exception(text) if hints.kind == "python" else None
    if units[-1].page and hints.kind != "python":
        served = _served(text, hints)
        if served is not None:
            return served
    return _digest(units)


def _served(text: str, hints: Hints) -> Parsed | None:
    """The HTTP parser's reading of a debug page printed under its response's status line (``curl -i``,
    urllib's ``HTTP Error 500: …``): the status as well as the exception; ``None`` for the page alone,
    which does not say its status (Django serves it as a 500, or as a 400 for a bad request)."""
    from otel_errcompact.parsers import http  # imports this module

    return http.parse(text, hints)


def in_app(file: str) -> bool:
    """True when a frame's file is the user's own code: not a library, the standard library (also
    CPython's own ``Lib`` folder on Windows), the tool boundary or a template made from a string. One test
    for every Python path."""
    return (
        not is_library_path(file)
        and not (file[1:3] == ":\\" and _WINDOWS_STDLIB.match(file))
        and file not in _TEMPLATE_PSEUDO_FILES
    )


def parse_plain(text: str) -> Parsed | None:
    """The :class:`Parsed` of the common shape, found with a few C-level scans; ``None`` when the
    full parser must decide.

    The common shape: one traceback whose header starts a line, no chain, no exception group, then only
    indented (or empty) lines down to the last line, which is the ``Type: message`` line and not a
    syntax error. There the full parser's answer is known without walking every line: the type and the
    message of the last line, and the innermost in-app frame (found by jumping between ``File`` lines
    from the end). Anything else, however slightly different, returns ``None``. ``frames`` holds only
    the chosen frame: the compactor needs no more, and :func:`parse` (which keeps them all) is unchanged.
    """
    at = text.find(HEADER)
    if at < 0 or (at and text[at - 1] != "\n") or text.find(HEADER, at + 1) >= 0:
        return None  # (an exception group's header holds this header too, never at column 0)
    if at and (_CHAIN_STARTS[0] in text[:at] or _CHAIN_STARTS[1] in text[:at]):
        return None
    body_end = len(text.rstrip("\n"))
    last_at = text.rfind("\n", at, body_end) + 1
    if last_at <= at or COLUMN_0.search(text, at, last_at) is not None:
        return None
    exception = plain_exception(text[last_at:body_end])
    if exception is None:
        return None
    location = plain_location(text, at, last_at)
    if location is None:
        return None
    return plain_parse(exception, location)


def plain_parse(exception: tuple[str, str], location: Frame) -> Parsed:
    """The parse of a plain traceback: its last line's ``(type, message)`` and its innermost frame."""
    return new_parsed(
        type=exception[0], cause=exception[1], format="python", frames=(location,), location=location,
        retryable=None, status=None, key_text=None, keyed_as=None,
    )


def plain_exception(line: str) -> tuple[str, str] | None:
    """``(type, message)`` of the last line as the full parser reads it; ``None`` for anything it treats
    specially (syntax errors, groups, a bare assert) or would not take as an exception line."""
    if not line or line[0] == " " or len(line) > _MAX_LINE:
        return None
    exc = _EXCEPTION.match(line)
    if exc is None or (exc.group("msg") is None and not _BARE_TYPE.match(line)):
        return None
    short = exc.group("type").rsplit(".", 1)[-1] or exc.group("type")
    message = (exc.group("msg") or "").strip()
    if short in _SYNTAX_TYPES or short.endswith("ExceptionGroup") or (short == "AssertionError" and not message):
        return None
    return short, message


def plain_location(text: str, start: int, end: int) -> Frame | None:
    """The innermost in-app ``File`` line between ``start`` and ``end``, else the innermost one; ``None``
    when there is none or a line the full parser would cut is on the way (it reads only the first
    ``_MAX_LINE`` characters of a line).

    Walks the frame lines from the end (``str.rfind`` jumps between them) and stops at the first in-app
    frame, usually the first one read.
    """
    last: Frame | None = None
    at = text.rfind(_FRAME_START, start, end)
    while at >= 0:
        line_end = text.find("\n", at + 1, end)
        line = text[at + 1 : line_end if line_end >= 0 else end]
        if len(line) > _MAX_LINE:
            return None
        match = _FRAME.match(line)
        if match is not None:
            file = match.group("file")
            if in_app(file):
                return Frame(file, int(match.group("line")), match.group("func"), in_app=True)
            if last is None:  # the innermost library frame: the answer when no frame is the user's
                last = Frame(file, int(match.group("line")), match.group("func"), in_app=False)
        at = text.rfind(_FRAME_START, start, at)
    return last


def _units(text: str) -> list[_Unit]:
    """Walk the lines once and return the exceptions of the last traceback, in print order."""
    units: list[_Unit] = []
    last_at_level: dict[int, _Unit] = {}
    pending = _Frames()
    source = ""  # the source line printed under the latest frame
    expecting = False  # after a header, frame or group separator an exception line may follow
    in_message: _Unit | None = None
    logged: _Unit | None = None  # the exception whose logging ``Call stack:`` is being read
    header_is_group = False
    top_chained = False
    in_group = False
    prefix = ""
    for raw in text.split("\n"):
        line = raw
        if prefix and line.startswith(prefix):
            line = line[len(prefix) :]
        elif not prefix and not in_group and len(line) < _MAX_LINE:
            at = line.find(HEADER, 1)
            if at > 0 and line[:at].strip(" |+") and not line[:at].endswith("Exception Group "):
                prefix, line = line[:at], line[at:]
        level, body, boxed = _unbox(line, in_group)
        if boxed:  # a group header (``+ Exception Group Traceback``) or a sub-exception separator
            header_is_group = body.startswith(_GROUP_HEADER)
            in_group = in_group or header_is_group
            pending, source, expecting, in_message = _Frames(), "", True, None
            continue
        if not body or body.isspace():
            in_message = None
            continue
        if logged is not None:
            if _logged_call(logged, body):
                continue
            logged = None
        if body == _CALL_STACK and level == 0 and in_message is not None and units and in_message is units[-1]:
            logged, in_message = in_message, None
            logged.caller = _Frames()
            continue
        if body.startswith(HEADER) or body.startswith(_GROUP_HEADER):
            header_is_group = body.startswith(_GROUP_HEADER)
            in_group = in_group or header_is_group
            pending, source, expecting, in_message = _Frames(), "", True, None
            continue
        if body in _CHAIN_MARKS:
            previous = last_at_level.get(level)
            if previous is not None:
                previous.superseded = True
            top_chained = top_chained or level == 0
            expecting, in_message = False, None
            continue
        if len(body) > _MAX_LINE:
            body = body[:_MAX_LINE]  # a huge message keeps its head; no frame or marker is this long
        if body.startswith('  File "'):
            frame = _FRAME.match(body)
            if frame is not None:
                if not expecting:  # a header-less traceback: a compile error printed by the interpreter
                    pending, header_is_group = _Frames(), False
                file = frame.group("file")
                pending.add(Frame(file, int(frame.group("line")), frame.group("func"), in_app=in_app(file)))
                source, expecting, in_message = "", True, None
                continue
        if in_message is None and not expecting and _schema_report_goes_on(last_at_level.get(level), body):
            in_message = last_at_level[level]  # jsonschema's report goes on after its blank lines
        if in_message is not None:
            if in_message.page and not in_message.more and body.startswith(_PAGE_VALUE):
                in_message.message = body[len(_PAGE_VALUE) :]
            elif len(in_message.more) < _MAX_CONTINUATION:
                in_message.more.append(body)
            continue
        if not expecting:
            continue
        if body[0] == " ":
            if not source and pending.count and body.startswith("    ") and body.strip(" ~^"):
                source = body.strip()  # the code line under the frame; caret lines are skipped
            continue
        if level > 0:
            more = _MORE.match(body)
            owner = last_at_level.get(level - 1)
            if more is not None and owner is not None:
                owner.hidden += int(more.group("n"))
                continue
        page = _PAGE_EXCEPTION.match(body) if body.startswith(_PAGE_TYPE) else None
        exc = page or _EXCEPTION.match(body)
        if exc is None or (page is None and exc.group("msg") is None and not _BARE_TYPE.match(body)):
            continue
        if level == 0:
            if units and not top_chained:  # an unrelated, later traceback: the most recent one wins
                units.clear()
                last_at_level.clear()
            top_chained = False
        short = exc.group("type").rsplit(".", 1)[-1] or exc.group("type")
        unit = _Unit(
            level=level,
            type=short,
            message="" if page is not None else exc.group("msg") or "",
            frames=pending,
            group=header_is_group or short.endswith("ExceptionGroup"),
            source=source,
            page=page is not None,
        )
        units.append(unit)
        last_at_level[level] = unit
        pending, source, expecting, in_message, header_is_group = _Frames(), "", False, unit, False
    return units


def _schema_report_goes_on(unit: _Unit | None, body: str) -> bool:
    """Whether ``body``, after a blank line that ended ``unit``'s message, is the next part of jsonschema's
    report: its ``Failed validating …`` line, then its ``On instance[…]:`` line (the field at fault). Other
    messages end at their first blank line, so what a program prints after its traceback stays out."""
    if unit is None:
        return False
    if body.startswith(_SCHEMA_FAILED):
        return not unit.more
    return body.startswith(_SCHEMA_ON) and bool(unit.more) and unit.more[0].startswith(_SCHEMA_FAILED)


def _logged_call(unit: _Unit, body: str) -> bool:
    """Read one line of the logging module's ``Call stack:`` block into ``unit``'s caller frames; ``False``
    at the first line that is not part of the block (a frame, its source line, the record's lines)."""
    if body.startswith('  File "'):
        frame = _FRAME.match(body)
        if frame is not None and unit.caller is not None:
            file = frame.group("file")
            unit.caller.add(Frame(file, int(frame.group("line")), frame.group("func"), in_app=in_app(file)))
            return True
    return body.startswith("    ") or body.startswith(_RECORD_LINES)


def _unbox(line: str, in_group: bool) -> tuple[int, str, bool]:
    """Split an exception-group box prefix off a line: ``(level, body, is_header_or_separator)``.

    CPython draws a group's own traceback behind ``  | `` and each sub-exception two columns further
    right; level 0 is the top (plain traceback or outermost group), 1 its sub-exceptions, and so on.
    Bars count only once a group header was seen, so a source line starting with ``|`` is left alone.
    """
    if not line or line[0] not in " |+":
        return 0, line, False
    stripped = line.lstrip(" ")
    if not stripped:
        return 0, "", False
    col = len(line) - len(stripped)
    level = max(0, col // 2 - 1)
    mark = stripped[0]
    if mark == "+":
        rest = stripped[1:]
        if rest.startswith(" " + _GROUP_HEADER):
            return level, rest[1:], True
        if in_group and rest[:1] in ("-", "+"):
            return level, rest, True
    elif mark == "|" and in_group:
        body = stripped[1:]
        return level, body[1:] if body.startswith(" ") else body, False
    return 0, line, False


def _digest(units: list[_Unit]) -> Parsed:
    top = min(unit.level for unit in units)
    tops = [i for i, unit in enumerate(units) if unit.level == top]
    final_at = tops[-1]
    final = units[final_at]
    message = _message(final)
    location: Frame | None = None
    key_message: str | None = None
    if final.group:
        leaves = _leaves(units, final_at)
        key_message = _group_key(message, leaves)
        message = _group_cause(message, units, final_at, leaves)
        location = _group_location(units, final_at, leaves)
    elif final.type in _SYNTAX_TYPES:
        if final.source:
            message = f"{message} — {clip(final.source, _MAX_SOURCE)}" if message else final.source
        last = final.frames.last
        if last is not None and last.func is None:
            # The position CPython reports; for source compiled from a string (``<string>``) the line
            # number is relative to that string, so the caller of compile()/exec() says more.
            pseudo = last.file.startswith("<")
            location = (final.frames.in_app_above_last or last) if pseudo else last
    key_text = key_message
    if len(tops) > 1:
        key_text = _with_root(key_message or message, final, units, tops[0], shorten=False)
        message = _with_root(message, final, units, tops[0])
    if location is None:
        location = final.frames.in_app
    if location is None and final.caller is not None:
        location = final.caller.in_app
    for i in reversed(tops[:-1]):
        if location is not None:
            break
        location = units[i].frames.in_app
    if location is None:
        location = final.frames.last
    return Parsed(
        type=final.type,
        cause=message,
        format="python",
        frames=final.frames.frames(),
        location=location,
        key_text=key_text if key_text != message else None,
    )


def _subtree_end(units: list[_Unit], at: int) -> int:
    """Index just past the units printed inside the group at ``at`` (its sub-exceptions)."""
    level = units[at].level
    end = at + 1
    while end < len(units) and units[end].level > level:
        end += 1
    return end


def _leaves(units: list[_Unit], at: int) -> list[_Unit]:
    """The group's leaf exceptions, nested groups flattened, chain links before the last left out."""
    return [u for u in units[at + 1 : _subtree_end(units, at)] if not u.group and not u.superseded]


def _group_cause(message: str, units: list[_Unit], at: int, leaves: list[_Unit]) -> str:
    counts: dict[str, int] = {}
    for leaf in leaves:
        described = clip(_describe(leaf), _MAX_PART)
        counts[described] = counts.get(described, 0) + 1
    hidden = sum(u.hidden for u in units[at : _subtree_end(units, at)])
    shown = [f"{text} (×{n})" if n > 1 else text for text, n in list(counts.items())[:_MAX_LEAVES]]
    rest = sum(list(counts.values())[_MAX_LEAVES:]) + hidden
    if rest:
        shown.append(f"+{rest} more")
    head = clip(message, _MAX_PART)
    if not shown:
        return head
    return f"{head}: {'; '.join(shown)}" if head else "; ".join(shown)


def _group_key(message: str, leaves: list[_Unit]) -> str:
    """The group's message and each of its leaves once per masked form (redacted first, as the compactor
    redacts a cause before masking it): what the group failed of, not how many tasks it ran."""
    message = _SUB_COUNT.sub("", message)
    forms: dict[str, None] = {}
    for leaf in leaves[:_KEY_LEAVES]:
        forms.setdefault(normalize_message(redact(_describe(leaf))), None)
    if len(forms) > _MAX_LEAVES:
        return f"{message}: {'; '.join(list(forms)[:_MAX_LEAVES])}; +more"
    return f"{message}: {'; '.join(forms)}" if forms else message


def _group_location(units: list[_Unit], at: int, leaves: list[_Unit]) -> Frame | None:
    """Innermost in-app frame of the first leaf, else of the nearest group around it."""
    if not leaves:
        return units[at].frames.in_app
    first = units.index(leaves[0], at)
    for i in range(first, at - 1, -1):
        if units[i].frames.in_app is not None:
            return units[i].frames.in_app
    return None


def _with_root(message: str, final: _Unit, units: list[_Unit], root_at: int, *, shorten: bool = True) -> str:
    """Append the chain's root cause unless the final message already says it.

    With ``shorten=False`` nothing is shortened: that is the text the dedup key is built from, since the
    display cut moves when a variable part (a port, an id) early in the message changes length.
    """
    root = units[root_at]
    if root.group:
        leaves = _leaves(units, root_at)
        if leaves:
            root = leaves[0]
    root_message = _message(root)
    if root.type == final.type and root_message == _message(final):
        return message
    if root.type == _CANCELLED and final.type == _TIMEOUT and not message.strip():
        return _timed_out(root, shorten=shorten)
    shown = clip(message, _MAX_PART) if shorten else message
    if root_message and root_message in shown:
        # Only when the quoted root survives the cut: a long wrapper message (requests' "Max retries
        # exceeded … Caused by …") quotes the root at its very end. A wrapper whose whole message is the
        # root's (``ToolkitError: 'name'`` around ``KeyError: 'name'``) says nothing of what failed: the
        # root's type does.
        if root_message == message.strip() and root.type != final.type:
            return f"{message} ← {root.type}"
        return message
    described = clip(_describe(root), _MAX_PART) if shorten else _describe(root)
    return f"{shown or '(no message)'} ← {described}"


def _timed_out(cancelled: _Unit, *, shorten: bool) -> str:
    """What an asyncio timeout (``wait_for``, ``asyncio.timeout``) says: it cancels the awaited call and
    raises a bare ``TimeoutError`` from the ``CancelledError``, so neither names the timeout; the awaited
    call is the cancelled one's innermost frame of the user's code, when it has one. Without ``shorten``
    (the text the dedup key is built from) the line number is left out, as the key leaves it out of the
    location."""
    awaited = cancelled.frames.in_app
    if awaited is None or not awaited.func:
        return "timed out"
    place = short_file(awaited.file) + (f":{awaited.line}" if shorten and awaited.line else "")
    return f"timed out awaiting {awaited.func} ({place})"


def _describe(unit: _Unit) -> str:
    message = _message(unit)
    return f"{unit.type}: {message}" if message else unit.type


def _message(unit: _Unit) -> str:
    """The message's first line, completed from the lines after it where the first line says little or
    the next one names the file it is about. A bare ``assert`` has no message: the statement CPython
    prints under the frame says what failed."""
    first = unit.message.strip()
    if not first and unit.type == "AssertionError" and unit.source.startswith(_ASSERT):
        return clip(unit.source, _MAX_PART)
    if _PYDANTIC.match(first):
        fields = _pydantic_errors(unit.more)
        if fields:
            return f"{first}: {fields}"
    if first.startswith(_YAML_CONTEXT):
        problem = _yaml_problem(unit.more)
        if problem:
            return f"{first}: {problem}"
    if unit.more and unit.more[0].startswith(_SCHEMA_FAILED):
        path = _schema_path(unit.more)
        return f"{first} on instance{path}" if path else first
    if not first or first.endswith(":"):
        following = next((line.strip() for line in unit.more if line.strip()), "")
        if following:
            first = f"{first} {following}" if first else following
    elif unit.more and _FILE_MARK.match(unit.more[0]):
        first = f"{first} {unit.more[0].strip()}"
    elif unit.more and not names_the_failure(first):
        said = _telling(unit.more)
        if said:
            first = f"{first}: {said}"
    return first


def _telling(lines: list[str]) -> str:
    """The line under a message that names the failure specifically, where the message's first line only
    says that something failed: a wrapper that puts a tool's output in its message (``build failed with
    exit status 2`` then ``ls: cannot access 'dist': No such file or directory``). ``""`` when no line does."""
    line = telling_line([line.strip() for line in lines if line.strip()])
    return line if line and names_the_failure(line) else ""


def _yaml_problem(lines: list[str]) -> str:
    """The problem under PyYAML's context line (the first line at column 0), with the line naming its file
    and position when one follows: without it every error in one kind of block reads the same."""
    for at, line in enumerate(lines):
        if line and line[0] != " ":
            problem = line.strip()
            after = lines[at + 1] if at + 1 < len(lines) else ""
            return f"{problem} {after.strip()}" if _FILE_MARK.match(after) else problem
    return ""


def _schema_path(lines: list[str]) -> str:
    """The failing field's path in jsonschema's report (``['age']``, ``['items'][0]['qty']``), ``""`` for
    the document itself or another message: without it, two fields failing alike read the same."""
    for line in lines:
        found = _SCHEMA_INSTANCE.match(line)
        if found:
            return found.group("path")
    return ""


def _pydantic_errors(lines: list[str]) -> str:
    """``age — Input should be a valid integer; name — Field required`` from pydantic's error listing."""
    errors: list[str] = []
    total = 0
    loc = ""
    for line in lines:
        if not line.startswith(" "):
            loc = line.strip()
            continue
        if line.startswith("    "):
            continue  # "For further information visit …"
        text = line.strip()
        cut = max(text.rfind(" [type="), text.rfind(" (type="))
        if cut > 0:
            text = text[:cut]
        total += 1
        if len(errors) < _MAX_LEAVES:
            errors.append(f"{loc} — {text}" if loc else text)
        loc = ""
    if total > len(errors):
        errors.append(f"+{total - len(errors)} more")
    return "; ".join(errors)


def _bare_exception(text: str) -> Parsed | None:
    """A lone ``Type: message`` line (an exception log record without its stack), near the end."""
    for line in text.rstrip().rsplit("\n", 40)[::-1]:
        if not line or line[0] == " " or len(line) > _MAX_LINE:
            continue
        exc = _EXCEPTION.match(line)
        if exc is None:
            continue
        short = exc.group("type").rsplit(".", 1)[-1]
        if _ERRORISH.search(short):
            return Parsed(type=short, cause=(exc.group("msg") or "").strip(), format="python")
    return None
