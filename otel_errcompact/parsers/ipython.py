"""Parser for tracebacks as IPython and Jupyter print them (``Cell In[36], line 5``).

IPython's formatter differs from CPython's: the exception type heads the block
(``KeyError      Traceback (most recent call last)``), a notebook cell is a frame written
``Cell In[36], line 4, in load(uid)``, a file frame is ``File /path/mod.py:346, in loads(s, …)``, and
each frame shows numbered context lines with an arrow (``----> 4``). The exception line ends the block.

A cell's execution number changes every time the cell is run again, so cell frames are all named
``<cell>``: the same failure in a re-run cell keeps its dedup key. Chained exceptions print one block
each; the last block is the exception that reached the notebook, and the first one's type is kept when
the last one's message only repeats it (a wrapper around a ``KeyError``).
"""

from __future__ import annotations

import re

from otel_errcompact.parsers._base import Frame, Hints, Parsed, is_library_path

__all__ = ["MARKERS", "parse"]

MARKERS = ("Traceback (most recent call last)",)
_MAX_LINES = 4000
_HEAD = re.compile(r"(?P<type>[A-Za-z_][\w.]{0,200})\s{2,}Traceback \(most recent call last\)\s*$")
_CELL = re.compile(r"Cell In\s?\[\s*\d{1,9}\s*\], line (?P<line>\d{1,9})(?:, in (?P<func>[\w<>.]{1,200}))?")
_FILE = re.compile(r"File (?P<file>[^\n]{1,1000}?):(?P<line>\d{1,9})(?:, in (?P<func>[\w<>.]{1,200}))?")
_EXCEPTION = re.compile(r"(?P<type>(?:[A-Za-z_]\w*\.)*[A-Za-z_]\w*)(?:: ?(?P<msg>.*))?$")


def parse(text: str, hints: Hints) -> Parsed | None:
    """Digest an IPython traceback; ``None`` when the text is not one."""
    if "Traceback (most recent call last)" not in text or ("Cell In" not in text and "\nFile " not in text):
        return None
    blocks: list[tuple[str, list[Frame], str, str]] = []
    frames: list[Frame] = []
    head_type = ""
    exc_type = exc_msg = ""
    for raw in text.split("\n", _MAX_LINES)[:_MAX_LINES]:
        line = raw.rstrip()
        head = _HEAD.match(line)
        if head is not None:
            if head_type:
                blocks.append((head_type, frames, exc_type, exc_msg))
            head_type, frames, exc_type, exc_msg = head.group("type"), [], "", ""
            continue
        if not head_type or not line or line[0] in " -":
            continue
        cell = _CELL.match(line)
        if cell is not None:
            frames.append(Frame("<cell>", int(cell.group("line")), cell.group("func") or "<module>"))
            continue
        file = _FILE.match(line)
        if file is not None:
            path = file.group("file")
            frames.append(Frame(path, int(file.group("line")), file.group("func"), in_app=not is_library_path(path)))
            continue
        exc = _EXCEPTION.match(line)
        if (
            exc is not None
            and (exc.group("msg") is not None or exc.group("type") == head_type)
            and (exc.group("type").rsplit(".", 1)[-1] == head_type.rsplit(".", 1)[-1] or not exc_type)
        ):
            exc_type, exc_msg = exc.group("type"), (exc.group("msg") or "").strip()
    if head_type:
        blocks.append((head_type, frames, exc_type, exc_msg))
    if not blocks:
        return None
    final_head, final_frames, final_type, message = blocks[-1]
    type_ = (final_type or final_head).rsplit(".", 1)[-1]
    if len(blocks) > 1:
        root_head, _, root_type, root_msg = blocks[0]
        root_name = (root_type or root_head).rsplit(".", 1)[-1]
        if root_name != type_ and root_name not in message:
            if root_msg and root_msg not in message:
                message = f"{message} ← {root_name}: {root_msg}"
            else:
                message = f"{message} ← {root_name}"
    return Parsed(type=type_, cause=message, format="python", frames=tuple(final_frames))
