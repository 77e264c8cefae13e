"""Parser for JVM stack traces (Java, Kotlin, Scala): ``Exception in thread "main" …`` and ``Caused by:``.

A JVM trace is a header ``java.lang.IllegalStateException: message`` (optionally preceded by
``Exception in thread "main" ``), ``\\tat pkg.Class.method(File.java:7)`` frames innermost first, and
zero or more ``Caused by: …`` sections whose trailing ``... 3 more`` stands for frames shared with the
enclosing trace. ``Suppressed:`` sections are indented one level deeper and are skipped.

How a chained trace is reported (the choice an agent benefits from most):

* **type** is the short class name of the *outermost* exception (``RuntimeException``): it is what the
  thread died of and what a ``catch`` in the agent's code would name.
* **cause** is ``outer message ← RootType: root message`` with the *root* ``Caused by`` (for example
  ``could not initialise settings ← FileNotFoundException: config.properties (No such file or
  directory)``). The outer message is cut to 80 characters so the root, which names the real problem,
  always survives the digest's length bound. When the outer message already quotes the root (the
  ``new RuntimeException(e)`` idiom), the cause is just ``RootType: root message``. Middle links of a
  long chain are dropped.
* **location** is the innermost in-app frame of the root cause's full stack (its own frames plus the
  ``... N more`` frames it shares with the enclosing trace), falling back to the outer trace: that is the
  user's line that actually hit the failure, not the line that wrapped it.

Frames of ``java.*``, ``javax.*``, ``jakarta.*``, ``sun.*``, ``com.sun.*``, ``jdk.*``, the Kotlin and
Scala runtimes and common build/test harnesses are not in-app. When a text holds several traces, the
last one is reported: in a log, the fatal trace comes last.

>>> from otel_errcompact.parsers._base import Hints
>>> p = parse('Exception in thread "main" java.lang.IllegalStateException: not ready\\n'
...           '\\tat com.acme.App.load(App.java:7)\\n', Hints())
>>> p.type, p.cause, p.frames[-1].func
('IllegalStateException', 'not ready', 'App.load')
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from otel_errcompact.parsers._base import Frame, Hints, Parsed, clip

__all__ = ["parse"]
MARKERS = ("\tat ", "    at ")  # see parsers/__init__.py

_MAX_LINE = 2000
_MAX_OUTER_CHARS = 80
_HEADER_LOOKBACK = 30

_HEADER = re.compile(
    r'^(?:Exception in thread "[^"]*" )?(?P<cls>[A-Za-z_$][\w$]*(?:\.[A-Za-z_$][\w$]*)*)(?:: ?(?P<msg>.*))?$'
)
_THROWABLE_NAME = re.compile(r"(?:Exception|Error|Throwable|Failure|Fault)$")
_MORE = re.compile(r"^\.\.\. (\d+) more$")
_SOURCE = re.compile(r"^(?P<file>[^:]*):(?P<line>\d+)$")
_LIBRARY_CLASS = re.compile(
    r"^(?:java|javax|jakarta|sun|com\.sun|jdk|kotlin|kotlinx|scala|groovy|org\.codehaus\.groovy"
    r"|org\.junit|junit|org\.testng|org\.gradle|org\.apache\.maven|worker\.org\.gradle)\."
)
_JDK_MODULE = re.compile(r"^(?:java|jdk)\.[\w.]+(?:@[\w.\-]+)?$")


@dataclass
class _Block:
    """One exception of a trace: the header and the frames printed under it (innermost first)."""

    cls: str
    message: str
    frames: list[Frame] = field(default_factory=list)
    more: int = 0


def parse(text: str, hints: Hints) -> Parsed | None:
    """Recognise a JVM stack trace; ``None`` when the text has no ``at Class.method(File)`` frames."""
    if "\tat " not in text and "    at " not in text:
        return None
    trace = _last_trace(text.splitlines())
    if not trace:
        return None
    outer, root = trace[0], trace[-1]
    type_ = _short(outer.cls)
    cause = outer.message or type_
    if root is not outer:
        root_text = f"{_short(root.cls)}: {root.message}" if root.message else _short(root.cls)
        if not outer.message or (root.message and root.message in outer.message):
            cause = root_text
        else:
            cause = f"{clip(outer.message, _MAX_OUTER_CHARS)} ← {root_text}"
    frames = _full_frames(trace)
    if not any(f.in_app for f in frames):
        frames = outer.frames
    return Parsed(type_, cause, "jvm", frames=tuple(reversed(frames)))


def _last_trace(lines: list[str]) -> list[_Block]:
    """Split the text into traces (each a list of blocks, outermost first) and return the last.

    Indentation, not column 0, structures a trace: frames sit deeper than their header (one tab from
    the JVM, more under Gradle or Maven), ``Suppressed:`` sections deeper still, and a line shallower
    than the frames ends the trace unless it is a ``Caused by:``.
    """
    traces: list[list[_Block]] = []
    block: _Block | None = None
    frame_indent = 0
    for index, line in enumerate(lines):
        if len(line) > _MAX_LINE or not line.strip():
            continue
        stripped = line.strip()
        indent = len(line) - len(line.lstrip())
        if block is not None and indent < frame_indent and stripped.startswith("Caused by: "):
            header = _HEADER.match(stripped[len("Caused by: ") :])
            if header is not None:
                block = _Block(header.group("cls"), (header.group("msg") or "").strip())
                traces[-1].append(block)
            continue
        if indent > 0 and stripped.startswith("at "):
            frame = _frame(stripped)
            if frame is None:
                continue
            if block is None:
                block = _header_above(lines, index, indent)
                if block is None:
                    continue
                traces.append([block])
                frame_indent = indent
            if indent <= frame_indent:  # deeper frames belong to a ``Suppressed:`` section
                block.frames.append(frame)
            continue
        more = _MORE.match(stripped) if indent > 0 else None
        if more and block is not None and indent == frame_indent:
            block.more = int(more.group(1))
            continue
        if block is not None and indent < frame_indent and (block.frames or block.more):
            block = None  # a shallower line after frames ends the trace
    return traces[-1] if traces else []


def _header_above(lines: list[str], frame_index: int, frame_indent: int) -> _Block | None:
    """The exception header nearest above the first frame (a message may span several lines)."""
    for index in range(frame_index - 1, max(-1, frame_index - 1 - _HEADER_LOOKBACK), -1):
        line = lines[index]
        if len(line) > _MAX_LINE:
            return None
        stripped = line.strip()
        if stripped and len(line) - len(line.lstrip()) >= frame_indent:
            return None  # text as deep as the frames between them and a header: not a JVM trace
        header = _HEADER.match(stripped)
        if header is None:
            continue
        cls = header.group("cls")
        if "." in cls or _THROWABLE_NAME.search(cls) or stripped.startswith("Exception in thread"):
            return _Block(cls, (header.group("msg") or "").strip())
    return None


def _frame(stripped: str) -> Frame | None:
    """``at [module/]pkg.Class.method(File.java:7)``; ``None`` for anything else (a V8 frame)."""
    rest = stripped[3:].strip()
    paren = rest.find("(")
    if paren <= 0 or not rest.endswith(")") or " " in rest[:paren]:
        return None
    qualified, source = rest[:paren], rest[paren + 1 : -1]
    module = ""
    slash = qualified.rfind("/")
    if slash >= 0:
        module, qualified = qualified[:slash].rstrip("/"), qualified[slash + 1 :]
    cls, dot, method = qualified.rpartition(".")
    if not dot or not cls or not method:
        return None
    simple = cls.rpartition(".")[2]
    position = _SOURCE.match(source)
    if position:
        file, line_no = position.group("file"), int(position.group("line"))
    elif source.endswith((".java", ".kt", ".scala", ".groovy")):
        file, line_no = source, None
    else:  # ``Native Method``, ``Unknown Source``
        file, line_no = simple.partition("$")[0], None
    in_app = not (_LIBRARY_CLASS.match(cls) or _JDK_MODULE.match(module))
    return Frame(file=file, line=line_no, func=f"{simple}.{method}", in_app=in_app)


def _full_frames(trace: list[_Block]) -> list[Frame]:
    """The root cause's frames plus the ``... N more`` frames it shares with each enclosing trace."""
    full: list[Frame] = []
    for block in trace:
        shared = full[len(full) - block.more :] if block.more and block.more <= len(full) else []
        full = block.frames + shared
    return full


def _short(cls: str) -> str:
    return cls.rpartition(".")[2] or cls
