"""Raw error in, one-line :class:`~otel_errcompact.digest.Digest` out.

The compactor runs the format parsers in order (the first that recognises the text wins), falls back to
an optional summariser for text no parser understands, and then to a heuristic that picks the most
error-like line.

Fast paths, because this runs on the agent's thread for every failed tool call:

- parsers are chosen by their ``MARKERS`` (see :mod:`otel_errcompact.parsers`), lazily: a parser's
  markers are looked for (ignoring case) only when the walk reaches it, and a parser none of whose
  markers occurs is skipped. Parsers without markers are always tried, the order is kept, and when the
  caller passes an exit code or a command every parser is tried (some recognise text by those hints
  alone);
- where the walk reaches the built-in python parser, the common shape of a traceback is read with a
  few scans (:func:`otel_errcompact.parsers.python.parse_plain`) before the line-by-line parser runs; it
  gives exactly the full parser's digest;
- a text that is such a traceback from its first line, with no hints, skips the unwrappers and the parsers
  ahead of python that provably decline it (:func:`otel_errcompact.structured.parse_first`; any sign that
  one of them might take it sends the text the whole way), also once unwrapping has uncovered such a
  traceback; what depends only on the traceback's body above its last line (the header and the frames,
  the same for every failure of one code path) is read once per body;
- work that repeats across the distinct failures of one code path is remembered in small bounded
  dicts keyed on exactly what it depends on: a frame's location and key part (by the frame object),
  which masking guards hold and which secret anchors occur (by the short message with its digits
  folded, which no guard or anchor tells apart; see :mod:`otel_errcompact.normalize` and
  :mod:`otel_errcompact.redact`);
- digests are cached: short texts by the text itself, texts over 16 KB by a hash of their sanitised
  form (what the parsers see), both in one bounded LRU.

It chooses the location (innermost frame of the user's own code), redacts secrets, bounds every field,
and builds the dedup key. It never raises: whatever goes wrong, the caller gets a digest.
"""

from __future__ import annotations

import dataclasses
import functools
import hashlib
import logging
import sys
import threading
import weakref
from collections import OrderedDict
from collections.abc import Iterator, Sequence
from typing import Protocol, runtime_checkable

from otel_errcompact._checks import check_integer, check_seconds
from otel_errcompact._forked import new_locks_in_child
from otel_errcompact._sanitize import prompt_text, sanitize, strip_invisible
from otel_errcompact.classify import is_retryable
from otel_errcompact.digest import DedupKey, Digest, Location, new_digest, new_location, short_file
from otel_errcompact.exceptions import ConfigurationError
from otel_errcompact.normalize import normalize_message
from otel_errcompact.parsers import PARSERS, Frame, Hints, Parsed, Parser, innermost_in_app
from otel_errcompact.parsers import fallback as _fallback
from otel_errcompact.parsers import ipython as _ipython
from otel_errcompact.parsers import linter as _linter
from otel_errcompact.parsers import pytest_report as _pytest_report
from otel_errcompact.parsers import python as _python
from otel_errcompact.parsers import unittest_report as _unittest_report
from otel_errcompact.parsers._base import cut
from otel_errcompact.recovery.classify import classify_text, with_raw_text
from otel_errcompact.redact import on_patterns_change
from otel_errcompact.structured import parse_first
from otel_errcompact.summary import Summaries
from otel_errcompact.unwrap import unwrap

__all__ = ["MAX_CAUSE_CHARS", "Compactor", "Summarizer", "compact_text"]

_log = logging.getLogger("otel_errcompact")

MAX_CAUSE_CHARS = 240
"""A digest's cause is cut to this many characters; the head of a cause names it."""
_MAX_TYPE_CHARS = 80
_CACHEABLE_CHARS = 16_384
_MAX_NAME_CHARS = 80


@runtime_checkable
class Summarizer(Protocol):
    """An optional fallback (typically a small LLM call) for errors no parser understands.

    Called with sanitised, size-bounded raw text whose secrets are masked, on a thread of its own; returns a
    :class:`Parsed`, or a string of the form ``"Type: cause"``, or ``None`` to let the heuristic fallback
    answer. It is asked once per error (texts that differ only in timestamps, temporary folders, ports or
    request ids share an answer) and waited for at most ``Compactor(summary_timeout_s=...)``. Its answer is
    what the digest shows; the dedup key and the error's class stay the heuristic digest's, so a model's
    wording never splits or merges classes (see :mod:`otel_errcompact.summary`).
    """

    def __call__(self, text: str) -> Parsed | str | None: ...


def _safe(text: str, limit: int) -> str:
    """Prompt-safe (see :func:`prompt_text`), whitespace-folded text, cut generously (bounded cost) but
    not clipped. (``split``/``join`` folds exactly the white space ``\\s+`` would, and strips the ends.)"""
    return " ".join(prompt_text(text[: limit * 4]).split())


def _clean(text: str, limit: int) -> str:
    # Types, files and function names repeat from one error to the next: short ones are cached.
    return _clean_cached(text, limit) if len(text) <= 1024 else _clean_uncached(text, limit)


def _clean_uncached(text: str, limit: int) -> str:
    # Redact before the final cut, so a secret that straddles the cut is already masked.
    return cut(_safe(text, limit), limit)


_clean_cached = functools.lru_cache(maxsize=4096)(_clean_uncached)


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
        summary_timeout_s: float = 2.0,
    ) -> None:
        check_seconds("Compactor", "summary_timeout_s", summary_timeout_s, zero=False)
        check_integer("Compactor", "summary_cache_size", summary_cache_size, 0)
        check_integer("Compactor", "digest_cache_size", digest_cache_size, 0)
        if summarizer is not None and not callable(summarizer):  # else it fails on the summary thread, unseen
            raise ConfigurationError(f"Compactor.summarizer={summarizer!r}: expected a function of the error's text")
        self._parsers = tuple(parsers)
        self._by_kind = dict(self._parsers)
        all_markers = tuple(_markers_of(parser) for _, parser in self._parsers)
        # Each marker with a rare character of it (its gate, "" when it has none): a one-character search
        # (memchr) rules most markers out before the marker itself is searched for.
        self._walk = tuple(
            (parser, None if markers is None else tuple((_gate(m), m) for m in markers))
            for (_, parser), markers in zip(self._parsers, all_markers, strict=True)
        )
        # The default parsers ahead of python, in their order: a plain traceback may skip them when they
        # provably decline it (see ``_plain_first``).
        self._python_leads = tuple(parser for _, parser in self._parsers[:5]) == _PYTHON_LEADS
        self._summaries = (
            Summaries(summarizer, cache_size=summary_cache_size, timeout_s=summary_timeout_s)
            if summarizer is not None
            else None
        )
        self._cache_lock = threading.Lock()
        new_locks_in_child(self, "_cache_lock")
        # Agents repeat the very same failure; an exact repeat of a recent raw error skips the parsers.
        self._digests: OrderedDict[tuple[object, int | None, str | None, str | None], Digest] = OrderedDict()
        self._digest_cache_size = digest_cache_size
        _COMPACTORS.add(self)  # its digests are forgotten when the redaction patterns change

    def compact(
        self,
        raw: str | bytes | None,
        *,
        exit_code: int | None = None,
        command: str | None = None,
        kind: str | None = None,
        exception_type: str | None = None,
        exception_message: str | None = None,
    ) -> Digest:
        """Compact one raw error. Never raises.

        ``exit_code`` and ``command`` describe a failed process; ``kind`` names the format when the caller
        knows it (``"python"``, ``"http"``, ``"shell"``, ``"gcc"`` …) and makes that parser go first.
        ``exception_type`` and ``exception_message`` (an OTel ``exception`` event's fields, when ``raw`` is
        its stack trace) are accepted from callers that hold them but change nothing: the traceback's own
        last line names the same type and message, and a plain traceback takes the fast path either way.
        """
        raw_chars = 0
        try:
            cache_key: tuple[object, int | None, str | None, str | None] | None = (
                (raw, exit_code, command, kind)
                if isinstance(raw, str) and len(raw) <= _CACHEABLE_CHARS and self._digest_cache_size
                else None
            )
            if cache_key is not None:
                cached = self._cached(cache_key)
                if cached is not None:
                    return cached
            text, raw_chars = sanitize(raw)
            if command:  # a hint reaches the digest too: no escapes, controls or invisibles from it
                command = strip_invisible(str(command)[:4096])
            if cache_key is None and self._digest_cache_size:
                # Long texts: the parsers only ever see the sanitised (bounded) text, so its hash and
                # the raw size determine the digest.
                content = hashlib.blake2b(text.encode("utf-8", "surrogatepass"), digest_size=16).digest()
                cache_key = ((content, raw_chars), exit_code, command, kind)
                cached = self._cached(cache_key)
                if cached is not None:
                    return cached
            hints = (
                _NO_HINTS
                if exit_code is None and command is None and kind is None
                else Hints(exit_code=exit_code, command=command, kind=kind)
            )
            parsed = self._plain_first(text, hints)
            if parsed is None:
                unwrapped, hints = unwrap(text, hints)
                # What unwrapping uncovered (a JSON-escaped or log-prefixed traceback) may be a plain one:
                # the walk would give the same answer (see ``_plain_first``). Nothing uncovered (the same
                # text back) was asked already.
                parsed = (self._plain_first(unwrapped, hints) if unwrapped is not text else None) or self._parse(
                    unwrapped, hints
                )
                text = unwrapped
            digest = with_raw_text(self.from_parsed(parsed, hints, raw_chars), text)
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

    def _forget_digests(self) -> None:
        with self._cache_lock:
            self._digests.clear()

    def _cached(self, key: tuple[object, int | None, str | None, str | None]) -> Digest | None:
        with self._cache_lock:
            cached = self._digests.get(key)
            if cached is not None:
                self._digests.move_to_end(key)
            return cached

    __call__ = compact

    def _parse(self, text: str, hints: Hints) -> Parsed:
        first = self._by_kind.get(hints.kind) if hints.kind else None
        if first is not None:
            parsed = self._run(first, text, hints)
            if parsed is not None:
                return parsed
        for index in self._worth_trying(text, hints):
            parser = self._walk[index][0]
            if parser is first:
                continue
            parsed = self._run(parser, text, hints)
            if parsed is not None:
                return parsed
        heuristic = _fallback.parse(text, hints)
        if self._summaries is not None and text.strip():
            summary = self._summaries.ask(text)
            if summary is not None:
                return dataclasses.replace(summary, keyed_as=heuristic)
        return heuristic

    def _worth_trying(self, text: str, hints: Hints) -> Iterator[int]:
        """Indexes of the parsers worth trying on ``text``, in order, found lazily: a parser's markers are
        looked for only when the walk reaches it (see the module docstring)."""
        every = hints.exit_code is not None or hints.command is not None
        low: str | None = None
        for index, (_, markers) in enumerate(self._walk):
            if markers is not None and not every:
                if low is None:
                    low = text.lower()
                for gate, marker in markers:
                    if gate in low and marker in low:
                        break
                else:
                    continue
            yield index

    def _plain_first(self, text: str, hints: Hints) -> Parsed | None:
        """A plain traceback's digest without the unwrappers and parsers that provably decline it
        (:func:`~otel_errcompact.structured.parse_first`); ``None``: take the whole way. Only for the
        default order ahead of python and without hints (with them every parser is tried).

        Also asked after unwrapping: there the walk (:meth:`_parse`, without hints) would try the parsers
        ahead of python, which parse_first proves decline the text, then python, whose fast path
        (:func:`~otel_errcompact.parsers.python.parse_plain`) gives parse_first's answer."""
        if not self._python_leads or hints.kind or hints.exit_code is not None or hints.command is not None:
            return None
        try:
            return parse_first(text)
        except Exception:
            _log.debug("otel-errcompact: python fast path failed", exc_info=True)
            return None

    def _run(self, parser: Parser, text: str, hints: Hints) -> Parsed | None:
        """``parser`` on ``text``; the built-in python parser's common shape through its fast path, which
        gives the same digest (see the module docstring)."""
        if parser is _python.parse:
            try:
                fast = _python.parse_plain(text)
            except Exception:
                _log.debug("otel-errcompact: python fast path failed", exc_info=True)
                fast = None
            if fast is not None:
                return fast
        return self._try(parser, text, hints)

    def _candidates(self, text: str, hints: Hints) -> list[int]:
        """Indexes of the parsers :meth:`_parse` may try on ``text``, in order, all at once (for inspection)."""
        return list(self._worth_trying(text, hints))

    @staticmethod
    def _try(parser: Parser, text: str, hints: Hints) -> Parsed | None:
        try:
            return parser(text, hints)
        except Exception:
            _log.debug("otel-errcompact: parser %r failed", parser, exc_info=True)
            return None

    @staticmethod
    def from_parsed(parsed: Parsed, hints: Hints, raw_chars: int) -> Digest:
        """Turn a :class:`Parsed` (from a parser, a summariser or a caller that knows the error's
        structure) into a digest: location choice, redaction, bounds, retryability and the dedup key.
        With ``parsed.keyed_as``, the key, the retryability and the error class are that parse's."""
        if parsed.keyed_as is not None:
            told = Compactor.from_parsed(dataclasses.replace(parsed, keyed_as=None), hints, raw_chars)
            keyed = Compactor.from_parsed(parsed.keyed_as, hints, raw_chars)
            return dataclasses.replace(
                told,
                key_parts=keyed.key_parts,
                retryable=keyed.retryable,
                error_class=keyed.error_class,
                retry_after_s=keyed.retry_after_s,
            )
        type_ = _clean(parsed.type, _MAX_TYPE_CHARS) or "Error"
        # The key is built from the whole (redacted) cause, not the displayed cut: a shorter variable part
        # early in a long message would otherwise move the cut and split one failure into two classes.
        full_cause = _safe(parsed.cause, MAX_CAUSE_CHARS)
        cause = cut(full_cause, MAX_CAUSE_CHARS) or "(no message)"
        frame: Frame | None = parsed.location or innermost_in_app(parsed.frames)
        location, where, shown = _placed(frame) if frame is not None and frame.file else (None, "", "")
        status = parsed.status if parsed.status is not None else hints.exit_code
        retryable = (
            parsed.retryable
            if parsed.retryable is not None
            else is_retryable(type_, cause, status, parsed.format)
        )
        klass = classify_text(type_, full_cause, status, parsed.format, retryable)
        retryable = klass.retryable
        key_source = full_cause if parsed.key_text is None else _safe(parsed.key_text, MAX_CAUSE_CHARS)
        key = DedupKey.build(type_, where, normalize_message(key_source or cause))
        line = f"[{type_}] at {shown}: {cause}" if location is not None else f"[{type_}]: {cause}"
        return new_digest(
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


def _place(frame: Frame) -> tuple[Location, str, str]:
    """The digest's location for ``frame`` (a frame with a file), the ``where`` of its dedup key (file
    name and function) and the location as the digest's line shows it."""
    location = new_location(
        file=_clean(frame.file, 400),
        line=frame.line,
        func=_clean(frame.func, _MAX_NAME_CHARS) if frame.func else None,
    )
    where = short_file(location.file)
    if location.func:
        where = f"{where}:{location.func}"
    return location, where, str(location)


# Frames placed lately, by identity: a parser that remembers a code path's frame (the plain traceback's
# body, see :mod:`otel_errcompact.structured`) hands the very same frame object again. Each entry holds its
# frame, so the id cannot be reused while the entry lives; frames are immutable, so the answer stands.
_PLACED: dict[int, tuple[Frame, tuple[Location, str, str]]] = {}
_PLACED_SIZE = 256


def _placed(frame: Frame) -> tuple[Location, str, str]:
    """:func:`_place`, remembered for the frames placed lately (a race at worst places a frame twice)."""
    entry = _PLACED.get(id(frame))
    if entry is not None and entry[0] is frame:
        return entry[1]
    placed = _place(frame)
    if len(_PLACED) >= _PLACED_SIZE:
        _PLACED.clear()  # whole: cheaper than bookkeeping, and a placement costs about a microsecond
    _PLACED[id(frame)] = (frame, placed)
    return placed


_COMPACTORS: weakref.WeakSet[Compactor] = weakref.WeakSet()


def _forget_redacted() -> None:
    """The redaction patterns changed: every digest, cleaned name and location made with the patterns
    before is forgotten (see :func:`otel_errcompact.redact.on_patterns_change`)."""
    _clean_cached.cache_clear()
    _PLACED.clear()
    for compactor in tuple(_COMPACTORS):
        compactor._forget_digests()


on_patterns_change(_forget_redacted)

_NO_HINTS = Hints()  # immutable: one for every call without hints
_PYTHON_LEADS = (
    _pytest_report.parse, _unittest_report.parse, _linter.parse, _ipython.parse, _python.parse
)
_RARE = "=!*[]`#|%$@~^{}<>✖\t_(."


def _gate(marker: str) -> str:
    """A character of ``marker`` that error text seldom holds, or ``""`` (always present) when it has none."""
    return next((char for char in marker if char in _RARE), "")


def _markers_of(parser: Parser) -> tuple[str, ...] | None:
    """The lowercased ``MARKERS`` of the module that defines ``parser``; ``None``: always try it."""
    module = sys.modules.get(getattr(parser, "__module__", "") or "")
    markers = getattr(module, "MARKERS", None)
    if not markers or not isinstance(markers, tuple):
        return None
    return tuple(dict.fromkeys(str(marker).lower() for marker in markers))


_DEFAULT = Compactor()


def compact_text(
    raw: str | bytes | None,
    *,
    exit_code: int | None = None,
    command: str | None = None,
    kind: str | None = None,
    exception_type: str | None = None,
    exception_message: str | None = None,
) -> Digest:
    """Compact one raw error with the default parsers. Never raises.

    >>> d = compact_text("Traceback (most recent call last):\\n"
    ...                  '  File "app.py", line 42, in load_user\\n'
    ...                  "    return users[user_id]\\n"
    ...                  "KeyError: 'user_id'\\n")
    >>> d.line
    "[KeyError] at app.py:42 in load_user: 'user_id'"
    """
    return _DEFAULT.compact(
        raw,
        exit_code=exit_code,
        command=command,
        kind=kind,
        exception_type=exception_type,
        exception_message=exception_message,
    )
