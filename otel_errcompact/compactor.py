"""Raw error in, one-line :class:`~otel_errcompact.digest.Digest` out.

The compactor runs the format parsers in order (the first that recognises the text wins), falls back to
an optional summariser for text no parser understands, and then to a heuristic that picks the most
error-like line. It chooses the location (innermost frame of the user's own code), redacts secrets,
bounds every field, and builds the dedup key. It never raises: whatever goes wrong, the caller gets a
digest.
"""

from __future__ import annotations

import hashlib
import logging
import re
import threading
from collections import OrderedDict
from collections.abc import Sequence
from typing import Protocol, runtime_checkable

from otel_errcompact._sanitize import sanitize
from otel_errcompact.classify import is_retryable
from otel_errcompact.digest import DedupKey, Digest, Location, short_file
from otel_errcompact.normalize import normalize_message
from otel_errcompact.parsers import PARSERS, Frame, Hints, Parsed, Parser, innermost_in_app
from otel_errcompact.parsers import fallback as _fallback
from otel_errcompact.parsers._base import clip
from otel_errcompact.recovery.classify import classify_text, with_raw_text
from otel_errcompact.redact import neutralize_delimiters, redact
from otel_errcompact.unwrap import unwrap

__all__ = ["MAX_CAUSE_CHARS", "Compactor", "Summarizer", "compact_text"]

_log = logging.getLogger("otel_errcompact")

MAX_CAUSE_CHARS = 240
"""A digest's cause is cut to this many characters; the head of a cause names it."""
_MAX_TYPE_CHARS = 80
_CACHEABLE_CHARS = 16_384
_MAX_NAME_CHARS = 80
_WS = re.compile(r"\s+")
_SUMMARY_LINE = re.compile(r"^\s*\[?([A-Za-z_][\w.\- ]{0,79}?)\]?\s*[:\-]\s*(.+)$", re.S)


@runtime_checkable
class Summarizer(Protocol):
    """An optional fallback (typically a small LLM call) for errors no parser understands.

    Called with sanitised, size-bounded raw text; returns a :class:`Parsed`, or a string of the form
    ``"Type: cause"``, or ``None`` to let the heuristic fallback answer. Results are cached by content
    hash, so the same raw text always yields the same digest (and dedup key) without a second call.
    """

    def __call__(self, text: str) -> Parsed | str | None: ...


def _safe(text: str, limit: int) -> str:
    """Redacted, delimiter-safe, whitespace-folded text, cut generously (bounded cost) but not clipped."""
    return _WS.sub(" ", neutralize_delimiters(redact(text[: limit * 4]))).strip()


def _clean(text: str, limit: int) -> str:
    # Redact before the final cut, so a secret that straddles the cut is already masked.
    return clip(_safe(text, limit), limit)


class Compactor:
    """Configurable compaction: parser order, an optional summariser, and its cache size.

    >>> Compactor().compact("ZeroDivisionError: division by zero").line
    '[ZeroDivisionError]: division by zero'
    """

    def __init__(
        self,
        parsers: Sequence[tuple[str, Parser]] = PARSERS,
        *,
        summarizer: Summarizer | None = None,
        summary_cache_size: int = 1024,
        digest_cache_size: int = 512,
    ) -> None:
        self._parsers = tuple(parsers)
        self._by_kind = dict(self._parsers)
        self._summarizer = summarizer
        self._cache: OrderedDict[str, Parsed | None] = OrderedDict()
        self._cache_size = summary_cache_size
        self._cache_lock = threading.Lock()
        # Agents repeat the very same failure; an exact repeat of a recent raw error skips the parsers.
        self._digests: OrderedDict[tuple[str, int | None, str | None, str | None], Digest] = OrderedDict()
        self._digest_cache_size = digest_cache_size

    def compact(
        self,
        raw: str | bytes | None,
        *,
        exit_code: int | None = None,
        command: str | None = None,
        kind: str | None = None,
    ) -> Digest:
        """Compact one raw error. Never raises.

        ``exit_code`` and ``command`` describe a failed process; ``kind`` names the format when the caller
        knows it (``"python"``, ``"http"``, ``"shell"``, ``"gcc"`` …) and makes that parser go first.
        """
        raw_chars = 0
        try:
            cache_key = (
                (raw, exit_code, command, kind)
                if isinstance(raw, str) and len(raw) <= _CACHEABLE_CHARS and self._digest_cache_size
                else None
            )
            if cache_key is not None:
                with self._cache_lock:
                    cached = self._digests.get(cache_key)
                    if cached is not None:
                        self._digests.move_to_end(cache_key)
                        return cached
            text, raw_chars = sanitize(raw)
            hints = Hints(exit_code=exit_code, command=command, kind=kind)
            text, hints = unwrap(text, hints)
            digest = with_raw_text(self.from_parsed(self._parse(text, hints), hints, raw_chars), text)
            if cache_key is not None:
                with self._cache_lock:
                    self._digests[cache_key] = digest
                    if len(self._digests) > self._digest_cache_size:
                        self._digests.popitem(last=False)
            return digest
        except Exception:  # a parser bug must not become the host's problem
            _log.debug("otel-errcompact: compaction failed; using a plain digest", exc_info=True)
            if isinstance(raw, (bytes, bytearray, memoryview)):
                first = bytes(raw[: MAX_CAUSE_CHARS * 4]).decode("utf-8", "replace")
            else:
                first = str(raw)[: MAX_CAUSE_CHARS * 4] if raw is not None else ""
            first = first.strip().splitlines()[0] if first.strip() else ""
            parsed = Parsed("Error", first or "(unparseable error)", "fallback", status=exit_code)
            return self.from_parsed(parsed, Hints(exit_code=exit_code), raw_chars)

    __call__ = compact

    def _parse(self, text: str, hints: Hints) -> Parsed:
        first = self._by_kind.get(hints.kind) if hints.kind else None
        if first is not None:
            parsed = self._try(first, text, hints)
            if parsed is not None:
                return parsed
        for _, parser in self._parsers:
            if parser is first:
                continue
            parsed = self._try(parser, text, hints)
            if parsed is not None:
                return parsed
        if self._summarizer is not None and text.strip():
            summary = self._summarize(text)
            if summary is not None:
                return summary
        return _fallback.parse(text, hints)

    @staticmethod
    def _try(parser: Parser, text: str, hints: Hints) -> Parsed | None:
        try:
            return parser(text, hints)
        except Exception:
            _log.debug("otel-errcompact: parser %r failed", parser, exc_info=True)
            return None

    def _summarize(self, text: str) -> Parsed | None:
        digest = hashlib.blake2b(text.encode("utf-8", "replace"), digest_size=16).hexdigest()
        with self._cache_lock:
            if digest in self._cache:
                self._cache.move_to_end(digest)
                return self._cache[digest]
        try:
            answer = self._summarizer(text) if self._summarizer is not None else None
        except Exception:
            _log.debug("otel-errcompact: summarizer failed", exc_info=True)
            answer = None
        parsed = _from_summary(answer)
        with self._cache_lock:
            self._cache[digest] = parsed
            while len(self._cache) > self._cache_size:
                self._cache.popitem(last=False)
        return parsed

    @staticmethod
    def from_parsed(parsed: Parsed, hints: Hints, raw_chars: int) -> Digest:
        """Turn a :class:`Parsed` (from a parser, a summariser or a caller that knows the error's
        structure) into a digest: location choice, redaction, bounds, retryability and the dedup key."""
        type_ = _clean(parsed.type, _MAX_TYPE_CHARS) or "Error"
        # The key is built from the whole (redacted) cause, not the displayed cut: a shorter variable part
        # early in a long message would otherwise move the cut and split one failure into two classes.
        full_cause = _safe(parsed.cause, MAX_CAUSE_CHARS)
        cause = clip(full_cause, MAX_CAUSE_CHARS) or "(no message)"
        frame: Frame | None = parsed.location or innermost_in_app(parsed.frames)
        location = (
            Location(
                file=_clean(frame.file, 400),
                line=frame.line,
                func=_clean(frame.func, _MAX_NAME_CHARS) if frame.func else None,
            )
            if frame is not None and frame.file
            else None
        )
        status = parsed.status if parsed.status is not None else hints.exit_code
        retryable = (
            parsed.retryable
            if parsed.retryable is not None
            else is_retryable(type_, cause, status, parsed.format)
        )
        klass = classify_text(type_, full_cause, status, parsed.format, retryable)
        retryable = klass.retryable
        where = ""
        if location is not None:
            where = short_file(location.file)
            if location.func:
                where = f"{where}:{location.func}"
        key_source = full_cause if parsed.key_text is None else _safe(parsed.key_text, MAX_CAUSE_CHARS)
        key = DedupKey.build(type_, where, normalize_message(key_source or cause))
        line = f"[{type_}] at {location}: {cause}" if location is not None else f"[{type_}]: {cause}"
        return Digest(
            type=type_,
            cause=cause,
            location=location,
            format=parsed.format,
            retryable=retryable,
            status=status,
            key_parts=key,
            raw_chars=raw_chars,
            line=line,
            error_class=klass.error_class,
            retry_after_s=klass.retry_after_s,
        )


def _from_summary(answer: Parsed | str | None) -> Parsed | None:
    if answer is None or isinstance(answer, Parsed):
        return answer
    text = str(answer).strip()
    if not text:
        return None
    match = _SUMMARY_LINE.match(text)
    if match:
        return Parsed(match.group(1).strip(), match.group(2).strip(), "summary")
    return Parsed("Error", text, "summary")


_DEFAULT = Compactor()


def compact_text(
    raw: str | bytes | None,
    *,
    exit_code: int | None = None,
    command: str | None = None,
    kind: str | None = None,
) -> Digest:
    """Compact one raw error with the default parsers. Never raises.

    >>> d = compact_text("Traceback (most recent call last):\\n"
    ...                  '  File "app.py", line 42, in load_user\\n'
    ...                  "    return users[user_id]\\n"
    ...                  "KeyError: 'user_id'\\n")
    >>> d.line
    "[KeyError] at app.py:42 in load_user: 'user_id'"
    """
    return _DEFAULT.compact(raw, exit_code=exit_code, command=command, kind=kind)
