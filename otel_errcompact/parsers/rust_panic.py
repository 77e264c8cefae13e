"""Parser for a Rust program's panic: ``thread 'main' (4242) panicked at src/main.rs:2:5:`` and its message.

Rust 1.73 and later print the position, then the message on the next line; earlier releases print the
message first (``thread 'main' panicked at 'index out of bounds…', src/main.rs:2:5``); since 1.92 the
thread's id follows its name. The digest is ``[panic] at src/main.rs:2: <message>``: the message names
the cause (the index and length, the ``unwrap`` on ``None``, the ``expect`` text), the position is the
panicking line in the program's own code (a panic inside the standard library names the caller's line).
The ``RUST_BACKTRACE`` note and the backtrace after it are never the cause.

``cargo test`` (libtest) prints each failing test's output under ``---- tests::adds stdout ----``, in the
order the tests finished (they run in parallel). The digest names the test as the location's function
(``[panic] at lib.rs:8 in tests::adds: assertion `left == right` failed``: every ``assert_eq!`` says the
same, the test tells them apart) and reports the first failing test by name, as libtest's closing
``failures:`` list does, so the report does not change with the order the tests finished in. The count of
the other failing tests is shown but not keyed.
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
# libtest's header over one failing test's output: ``---- tests::adds stdout ----``.
_TEST_OUTPUT = re.compile(r"^---- (?P<name>[^\n]{1,500}) stdout ----$", re.M)


def parse(text: str, hints: Hints) -> Parsed | None:
    """Digest a Rust panic; ``None`` when the text holds none.

    >>> parse("thread 'main' (7) panicked at src/main.rs:2:5:\\nattempt to subtract with overflow\\n", Hints()).cause
    'attempt to subtract with overflow'
    """
    if "panicked at" not in text:
        return None
    if " stdout ----" in text:
        failed = _failed_test(text, hints)
        if failed is not None:
            return failed
    match = _panic(text, 0, len(text))
    if match is None:
        return None
    return Parsed(
        "panic",
        match["msg"].strip(),
        "rust",
        location=Frame(match["file"].strip(), int(match["line"])),
        status=hints.exit_code,
    )


def _panic(text: str, start: int, end: int) -> re.Match[str] | None:
    return _NEW.search(text, start, end) or _OLD.search(text, start, end)


def _failed_test(text: str, hints: Hints) -> Parsed | None:
    """The first failing test by name that panicked, located in that test; ``None`` when no test's output
    holds a panic."""
    sections = list(_TEST_OUTPUT.finditer(text))
    ends = [section.start() for section in sections[1:]] + [len(text)]
    tests = sorted((section["name"], section.end(), end) for section, end in zip(sections, ends, strict=True))
    for name, start, end in tests:
        match = _panic(text, start, end)
        if match is None:
            continue
        message = match["msg"].strip()
        more = len({test[0] for test in tests}) - 1
        return Parsed(
            "panic",
            f"{message} (+{more} more failed)" if more > 0 else message,
            "rust",
            location=Frame(match["file"].strip(), int(match["line"]), name),
            status=hints.exit_code,
            key_text=message,
        )
    return None
