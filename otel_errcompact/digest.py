"""The values the compactor produces: a one-line :class:`Digest` and the :class:`DedupKey` behind it."""

from __future__ import annotations

import functools
import hashlib
import ntpath
import posixpath
import re
from dataclasses import asdict, dataclass
from typing import Any

from otel_errcompact._frozen import fast_constructor

__all__ = ["DedupKey", "Digest", "Location", "line_parts", "short_file"]


@functools.lru_cache(maxsize=4096)  # the same files fail again and again; callers pass bounded paths
def short_file(path: str) -> str:
    """The file name a digest shows: the last component of a POSIX or Windows path.

    Agents run in temp dirs and containers whose directories differ between runs; the file name and the
    function name together identify the place without leaking the layout of the machine.
    """
    return ntpath.basename(posixpath.basename(path)) or path


@dataclass(frozen=True, slots=True)
class Location:
    """Where the error happened in the user's own code (or the compiler diagnostic's position)."""

    file: str
    line: int | None = None
    func: str | None = None

    def __str__(self) -> str:
        where = short_file(self.file)
        if self.line is not None:
            where = f"{where}:{self.line}"
        if self.func:
            where = f"{where} in {self.func}"
        return where


@dataclass(frozen=True, slots=True)
class DedupKey:
    """The components a dedup key is built from, and the short hash of them.

    Line numbers are left out on purpose: an agent that edits the file it is debugging shifts every line
    below the edit, and the same failure must keep its class (and its ×N counter) across such edits.
    The file and function stay, so the same message raised from two functions is two classes.
    """

    type: str
    where: str
    message: str
    hash: str

    @classmethod
    def build(cls, type_: str, where: str, message: str) -> DedupKey:
        material = f"{type_}\x1f{where}\x1f{message}".encode("utf-8", "replace")
        hash_ = hashlib.blake2b(material, digest_size=8).hexdigest()
        if cls is DedupKey:  # every digest builds one: the constructor that skips the frozen __setattr__
            return new_key(type=type_, where=where, message=message, hash=hash_)
        return cls(type_, where, message, hash_)

    def explain(self) -> str:
        """A human-readable account of what went into the key and what was left out."""
        return (
            f"key {self.hash}\n"
            f"  type:     {self.type!r}\n"
            f"  where:    {self.where or '(no in-app location)'!r}  (file + function; line numbers ignored)\n"
            f"  message:  {self.message!r}  (variable parts masked)\n"
        )


@dataclass(frozen=True, slots=True)
class Digest:
    """One raw error, compacted: ``[Type] at file:line in func: root cause``.

    ``raw_chars`` is the size of the raw error this digest replaces (characters, or bytes for binary
    input); the raw text itself is not kept here: it belongs to the trajectory record.

    ``error_class`` is what recovery acts on (``transient``, ``rate_limited``, ``prompt_too_long``,
    ``output_truncated``, ``permanent``, ``aborted``; see :mod:`otel_errcompact.recovery.classify`);
    ``retryable`` is True exactly for ``transient`` and ``rate_limited``. ``retry_after_s`` is the wait
    the failure asked for (``Retry-After``, ``retry-after-ms``, ``try again in 6s``), when it did.
    """

    type: str
    cause: str
    location: Location | None
    format: str
    retryable: bool
    status: int | None
    key_parts: DedupKey
    raw_chars: int
    line: str
    error_class: str = "permanent"
    retry_after_s: float | None = None

    @property
    def key(self) -> str:
        """The stable dedup key: equal for two occurrences of the same failure."""
        return self.key_parts.hash

    def explain(self) -> str:
        """What the dedup key was built from (see :meth:`DedupKey.explain`)."""
        return self.key_parts.explain()

    def to_dict(self) -> dict[str, Any]:
        """A JSON-ready mapping of every field, the key's components included."""
        data = asdict(self)
        data["key"] = self.key
        return data

    def __str__(self) -> str:
        return self.line


new_location = fast_constructor(Location)
new_key = fast_constructor(DedupKey)
new_digest = fast_constructor(Digest)
"""``Location(...)``, ``DedupKey(...)`` and ``Digest(...)`` with every field given by keyword, at about half
the cost (see :mod:`otel_errcompact._frozen`): the compactor and the compacting process build one of each
per distinct error."""


# A digest's line (see Digest.line): "[type] at file:line in func: cause", the place optional.
_LINE_PARTS = re.compile(r"\A\[(?P<type>[^\]\n]{1,200})\](?: at (?P<where>[^\n]*?))?: (?P<cause>.*)\Z", re.S)


def line_parts(line: str) -> tuple[str, str, str] | None:
    """A digest line's type, place (``""`` when it names none) and cause, read back from its text; None for
    text not of that form. For a line whose digest is gone: one in an agent's history, or one a fleet's
    shared breaker keeps.

    >>> line_parts("[KeyError] at app.py:42 in load_user: 'user_id'")
    ('KeyError', 'app.py:42 in load_user', "'user_id'")
    >>> line_parts("[HTTP 503]: upstream unavailable")
    ('HTTP 503', '', 'upstream unavailable')
    """
    parts = _LINE_PARTS.match(line)
    return None if parts is None else (parts["type"], parts["where"] or "", parts["cause"])
