"""Parser for apt-get / apt-cache errors: the ``E:`` line, or the fetch failure that caused it.

apt prints progress (``Reading package lists...``), warnings (``W:``) and errors (``E:``). When an index
could not be fetched (``W: Failed to fetch http://host/… Could not resolve 'host'``, ``Temporary failure
resolving``), that failure is the root cause and the ``E: Unable to locate package`` that follows is its
consequence: the digest shows both but keys on the fetch failure only, so the class does not change with
the package the agent tried next. Otherwise the first ``E:`` line is the cause.
"""

from __future__ import annotations

import re

from otel_errcompact.parsers._base import Hints, Parsed

__all__ = ["MARKERS", "parse"]

MARKERS = ("E: ", "Err:")
_E = re.compile(r"^E: (?P<msg>.+)$", re.M)
_FETCH = re.compile(r"^(?:W|E): Failed to fetch (?P<url>\S+)\s+(?P<reason>.+)$", re.M)
_ERR = re.compile(r"^Err:\d+ (?P<url>\S+).*\n\s+(?P<reason>.+)$", re.M)
_GENERIC = ("Some index files failed to download", "Unable to correct problems")


def parse(text: str, hints: Hints) -> Parsed | None:
    """Digest apt's failure; ``None`` without an ``E:`` line or a fetch failure."""
    if "E: " not in text and "Err:" not in text:
        return None
    errors = [m["msg"].strip() for m in _E.finditer(text)]
    fetch = _FETCH.search(text) or _ERR.search(text)
    if fetch is not None:
        reason = " ".join(fetch["reason"].split())
        specific = [e for e in errors if not e.startswith(_GENERIC)]
        cause = f"{reason}; then: {specific[0]}" if specific else reason
        return Parsed("apt", cause, "apt", status=hints.exit_code, key_text=reason)
    if not errors:
        return None
    specific = [e for e in errors if not e.startswith(_GENERIC)] or errors
    return Parsed("apt", specific[0], "apt", status=hints.exit_code)
