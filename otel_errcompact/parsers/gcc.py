"""Parser for gcc output. (Being written.)"""

from __future__ import annotations

from otel_errcompact.parsers._base import Hints, Parsed


def parse(text: str, hints: Hints) -> Parsed | None:
    return None
