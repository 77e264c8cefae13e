"""Parser for a Rust program's panic: ``thread 'main' (4242) panicked at src/main.rs:2:5:`` and its message.

Rust 1.73 and later print the position, then the message on the next line; earlier releases print the
message first (``thread 'main' panicked at 'index out of bounds…', src/main.rs:2:5``); since 1.92 the
thread's id follows its name. The digest is ``[panic] at src/main.rs:2: <message>``: the message names
the cause (the index and length, the ``unwrap`` on ``None``, the ``expect`` text), the position is the
panicking line in the program's own code (a panic inside the standard library names the caller's line).
The ``RUST_BACKTRACE`` note and the backtrace after it are never the cause.
"""

from __future__ import annotations

import re

from otel_errcompact.parsers._base import Frame, Hints, Parsed

__all__ = ["MARKERS", "parse"]

MARKERS = ("panicked at",)  # see parsers/__init__.py

_NEW = re.compile(
    r"^thread '[^'\n]*'(?: \(\d+\))? panicked at (?P<file>[^\n:]+):(?P<line>\d+):\d+:\n(?P<msg>[^\n]+)",
    re.M,
)
_OLD = re.compile(
    r"^thread '[^'\n]*'(?: \(\d+\))? panicked at '(?P<msg>[^\n]*)', (?P<file>[^\n:]+):(?P<line>\d+):\d+",
    re.M,
)


def parse(text: str, hints: Hints) -> Parsed | None:
    """Digest a Rust panic; ``None`` when the text holds none.

    >>> parse("thread 'main' (7) panicked at src/main.rs:2:5:\\nattempt to subtract with overflow\\n", Hints()).cause
    'attempt to subtract with overflow'
    """
    if "panicked at" not in text:
        return None
    match = _NEW.search(text) or _OLD.search(text)
    if match is None:
        return None
    return Parsed(
        "panic",
        match["msg"].strip(),
        "rust",
        location=Frame(match["file"].strip(), int(match["line"])),
        status=hints.exit_code,
    )
