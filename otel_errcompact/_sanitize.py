"""Turn whatever arrived as an error into bounded, printable text before any parser sees it.

Hostile or broken input is the normal case here: binary junk from a crashed subprocess, a 10 MB HTML
error page, terminal colour codes, bidirectional-override characters that hide text from a reviewer.
Everything downstream can assume plain text of bounded length with ``\\n`` line ends.
"""

from __future__ import annotations

import re

__all__ = ["MAX_INPUT_CHARS", "printable_ratio", "sanitize"]

MAX_INPUT_CHARS = 131_072
"""Text longer than this keeps its head and tail: the head holds status lines, envelopes and the first
compiler error; the tail holds the final exception of a traceback. The middle is repeated frames."""

_HEAD_CHARS = 49_152
_TAIL_CHARS = MAX_INPUT_CHARS - _HEAD_CHARS

# CSI sequences (colours, cursor moves), OSC sequences (titles, hyperlinks) and lone two-byte escapes.
_ANSI = re.compile(r"\x1b\[[0-?]*[ -/]*[@-~]|\x1b\][^\x07\x1b]*(?:\x07|\x1b\\)|\x1b[@-Z\\-_]")
# C0 controls except tab and newline, DEL, C1 controls, bidi overrides and isolates, zero-width marks.
_CONTROL = re.compile("[\x00-\x08\x0b-\x1f\x7f-\x9f\u200b-\u200f\u202a-\u202e\u2060-\u2069\ufeff]")

_ASCII_PRINTABLE = bytes([9, 10, *range(0x20, 0x7F)])  # what _CONTROL keeps of ASCII: tab, newline, printables


def sanitize(raw: str | bytes | bytearray | memoryview | None) -> tuple[str, int]:
    """Return ``(text, raw_chars)``: printable text bounded to :data:`MAX_INPUT_CHARS`, and the size of
    the original (characters for ``str``, bytes for binary input).

    >>> sanitize(b"\\x1b[31mKeyError\\x1b[0m: 'id'\\r\\n")
    ("KeyError: 'id'\\n", 25)
    """
    if raw is None:
        return "", 0
    if isinstance(raw, (bytes, bytearray, memoryview)):
        data = bytes(raw)
        raw_chars = len(data)
        if len(data) > MAX_INPUT_CHARS * 4:
            data = data[: _HEAD_CHARS * 4] + b"\n" + data[-_TAIL_CHARS * 4 :]
        text = data.decode("utf-8", errors="replace")
    else:
        text = str(raw)
        raw_chars = len(text)
    # Cut before the regular expressions run so their cost stays bounded, with slack for escapes.
    if len(text) > MAX_INPUT_CHARS * 2:
        text = text[: _HEAD_CHARS * 2] + "\n" + text[-_TAIL_CHARS * 2 :]
    if "\x1b" in text:
        text = _ANSI.sub("", text)
    if "\r" in text:
        text = text.replace("\r\n", "\n").replace("\r", "\n")
    if not (text.isascii() and not text.encode("ascii").translate(None, _ASCII_PRINTABLE)):
        text = _CONTROL.sub("", text)  # the common case, plain ASCII without controls, skips the scan
    if len(text) > MAX_INPUT_CHARS:
        omitted = len(text) - MAX_INPUT_CHARS
        text = f"{text[:_HEAD_CHARS]}\n[… {omitted} characters omitted …]\n{text[-_TAIL_CHARS:]}"
    return text, raw_chars


def printable_ratio(text: str) -> float:
    """Share of characters that are not the U+FFFD replacement character; low for binary junk."""
    if not text:
        return 1.0
    sample = text[:4096]
    return 1.0 - sample.count("\ufffd") / len(sample)
