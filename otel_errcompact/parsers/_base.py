"""The contract every format parser follows, and the frame helpers they share.

A parser is a plain function ``parse(text, hints) -> Parsed | None``. It returns ``None`` quickly when
the text is not its format (check a cheap marker before running any regular expression), and otherwise
the exception type, the root cause and the frames it found. Parsers never raise on odd input: the
compactor guards them, but a parser that raises is a bug.

The compactor hands parsers text that is already decoded, stripped of ANSI escapes and control
characters, and bounded in size (see ``otel_errcompact._sanitize``), so parsers need not repeat that.
"""

from __future__ import annotations

import functools
import os
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from otel_errcompact._frozen import fast_constructor

__all__ = [
    "Frame",
    "Hints",
    "Parsed",
    "Parser",
    "clip",
    "cut",
    "innermost_in_app",
    "is_library_path",
    "may_search",
]


@dataclass(frozen=True, slots=True)
class Hints:
    """What the caller knows about the failure besides its text.

    ``kind`` names a format (``"python"``, ``"http"``, ``"shell"`` …) and makes the compactor try that
    parser first; ``exit_code`` and ``command`` come from a process that failed.
    """

    exit_code: int | None = None
    command: str | None = None
    kind: str | None = None


@dataclass(frozen=True, slots=True)
class Frame:
    """One stack frame (or one compiler diagnostic position).

    ``in_app`` is False for the standard library, site-packages, node internals, the JDK and the Go
    runtime: the digest's location is the innermost frame where ``in_app`` is True.
    """

    file: str
    line: int | None = None
    func: str | None = None
    in_app: bool = True


@dataclass(frozen=True, slots=True)
class Parsed:
    """What a parser extracted from one raw error.

    ``type`` is the error class as the runtime names it (``KeyError``, ``HTTP 429``, ``gcc error``,
    ``CommandNotFound``); ``cause`` is the root-cause text and must keep the token that names the cause
    (the key, table, module, field, file name, status code). ``frames`` run outermost first, innermost
    last; ``location`` overrides the compactor's choice of frame when the parser knows better (a compiler
    diagnostic's own position). ``retryable`` is ``None`` when the parser has no opinion; the compactor
    then decides from the type and status. ``status`` is the HTTP status or the process exit code.
    ``key_text`` is the text the dedup key is built from when it differs from ``cause``: a parser that
    shortens part of a composed cause for display (at a cut that moves with variable data) passes the
    uncut text here so the key stays stable. ``keyed_as`` is the parse the dedup key, the retryability and
    the error class are built from when they must not follow this one: a summariser's answer is keyed as the
    heuristic parse of the same text, so a model's wording never splits or merges classes.
    """

    type: str
    cause: str
    format: str
    frames: tuple[Frame, ...] = ()
    location: Frame | None = None
    retryable: bool | None = None
    status: int | None = None
    key_text: str | None = None
    keyed_as: Parsed | None = None


new_parsed = fast_constructor(Parsed)
"""``Parsed(...)`` with every field given by keyword, at about half the cost (see
:mod:`otel_errcompact._frozen`): for the parses made once per distinct error on the common path."""

Parser = Callable[[str, Hints], "Parsed | None"]

# Paths that belong to an interpreter, a runtime or an installed dependency rather than to the user's
# own code. Matched against the frame's file as printed by the runtime.
_LIBRARY_PATH = re.compile(
    r"""
    (?:^|[\\/])(?:site|dist)-packages[\\/]         # pip-installed Python packages
    | (?:^|[\\/])lib[\\/]python\d+(?:\.\d+)?[\\/]  # the Python standard library
    | ^<frozen\s                                   # frozen stdlib modules (<frozen runpy>)
    | ^[^\\/<:]+[\\/][^:]*\.(?:pyx|pxi|pxd)$      # a compiled extension's Cython source, by the relative
                                                   # path it was built from (pandas/_libs/parsers.pyx)
    | (?:^|[\\/])node_modules[\\/]                 # npm packages
    | ^node:                                       # node:internal/…, node:fs
    | ^internal[\\/]                               # node's internal modules in older releases
    | (?:^|[\\/])go[\\/]src[\\/](?![^\\/]*\.)        # the Go standard library (not GOPATH's host/…)
    | (?:^|[\\/])pkg[\\/]mod[\\/]                   # the Go module cache
    | (?:^|[\\/])\.cargo[\\/]registry[\\/]          # Rust crates
    | (?:^|[\\/])rustc[\\/][0-9a-f]{7,}[\\/]         # the Rust standard library
    """,
    re.VERBOSE,
)


# The tool boundary's own frames sit between the agent and the tool in every wrapped call, and the
# framework bridges' between the framework and the boundary (the Agents SDK bridge hands the tool's exception
# on from its own frame): never the user's code, even where the library is not in site-packages.
_PACKAGE_DIR = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
_BOUNDARY_FILE = os.path.join(_PACKAGE_DIR, "boundary.py")
_BRIDGES_DIR = os.path.join(_PACKAGE_DIR, "integrations", "")


# Every alternative above contains one of these; a path with none of them skips the regex entirely.
_MARKERS = ("packages", "python", "<frozen", "node", "internal", "go", "pkg", "cargo", "rustc", ".pyx", ".pxi",
            ".pxd")


@functools.lru_cache(maxsize=4096)
def is_library_path(path: str) -> bool:
    """True when ``path`` belongs to a runtime, standard library or installed dependency, or to
    otel-errcompact's tool boundary and framework bridges (which sit between the agent and the tool's own
    frames).

    >>> is_library_path("/usr/lib/python3.11/json/decoder.py")
    True
    >>> is_library_path("/home/me/agent/tools.py")
    False
    """
    if path == _BOUNDARY_FILE or path.startswith(_BRIDGES_DIR):
        return True
    if not any(marker in path for marker in _MARKERS):
        return False
    return _LIBRARY_PATH.search(path) is not None


def innermost_in_app(frames: Sequence[Frame]) -> Frame | None:
    """The innermost frame of the user's own code, else the innermost frame, else ``None``."""
    for frame in reversed(frames):
        if frame.in_app:
            return frame
    return frames[-1] if frames else None


_WS = re.compile(r"\s+")


def clip(text: str, limit: int) -> str:
    """``text`` with runs of white space folded, cut to ``limit`` characters with an ellipsis.

    >>> clip("no such   table:  orders", 12)
    'no such tab…'
    """
    return cut(_WS.sub(" ", text).strip(), limit)


def cut(text: str, limit: int) -> str:
    """``text`` cut to ``limit`` characters with an ellipsis, as it is (:func:`clip` folds it first)."""
    return text if len(text) <= limit else text[: limit - 1].rstrip() + "…"


def may_search(pattern: re.Pattern[str], words: tuple[str, ...], text: str) -> bool:
    """``pattern.search(text)``, skipped for ASCII text without any of ``words`` (outside ASCII, ignoring
    case can match other letters, so the pattern decides)."""
    if text.isascii():
        lowered = text.lower()
        for word in words:
            if word in lowered:
                break
        else:
            return False
    return pattern.search(text) is not None
