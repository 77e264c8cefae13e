"""Compact the tool errors already sitting in a message list (OpenAI or Anthropic shape).

A plain agent loop appends every tool result to its messages, raw tracebacks included, and sends the
whole list on every turn. :func:`compact_messages` rewrites such a history after the fact, with no
OpenTelemetry and no live state: each tool result that holds a raw error becomes its digest line, and a
class that failed before carries its running count, exactly as the live tool boundary would have written
it::

    Error: [OperationalError] at orders.py:21 in count_orders: no such table: orders (×3)

Guarantees, because a history is the one thing an agent cannot afford to have corrupted:

- a new list is returned; the input (and every dict inside it) is left untouched;
- only the *content* of error tool results changes: every message, every tool call and every tool result
  stays where it was, with its ids, so tool-call / tool-result pairing stays valid for both APIs;
- it is idempotent: a digest line is recognised and kept (its count is carried on), so compacting a
  compacted list changes nothing, and compacting a list that grew since continues the counts.

Shapes understood:

- ``format="openai"``: Chat Completions ``{"role": "tool", "tool_call_id": …, "content": str | [parts]}``
  and Responses ``{"type": "function_call_output", "call_id": …, "output": str | [parts]}`` items;
- ``format="anthropic"``: ``tool_result`` blocks inside ``user`` messages (``is_error`` or error-shaped
  content), with ``content`` a string or a list of blocks (non-text blocks are kept).
- in either format, LangChain message objects: a ``ToolMessage``'s content (a string or a list of content
  blocks; ``status="error"`` or error-shaped content) is compacted in a copy of the message; other message
  objects are passed through as they are.

A result is an error when the API marks it so (Anthropic's ``is_error``) or when one of the format parsers
recognises its text (a traceback, a compiler or HTTP error, a failed command …); other results are never
touched.
"""

from __future__ import annotations

import copy
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

from otel_errcompact._sanitize import sanitize
from otel_errcompact.compactor import Compactor, compact_text
from otel_errcompact.digest import line_parts
from otel_errcompact.normalize import normalize_message
from otel_errcompact.parsers import PARSERS, Hints
from otel_errcompact.unwrap import unwrap

__all__ = ["MessageFormat", "compact_messages", "digest_text", "is_raw_error"]

MessageFormat = Literal["openai", "anthropic"]

# What a digest line looks like once it is in a tool result (see digest_text): recognised on a second
# pass so that compaction is idempotent.
_DIGEST_TEXT = re.compile(
    r"\AError: (?P<line>\[[^\]\n]{1,200}\][^\n]*?)(?: \(×(?P<count>\d+)\))?"
    r"(?P<breach> — error threshold breached: stop retrying this step\.)?\Z"
)
_MAX_SCAN_CHARS = 200_000


def digest_text(line: str, count: int) -> str:
    """The tool-result text for a digest line seen ``count`` times: ``Error: <line>`` plus ``(×N)``."""
    return f"Error: {line}" + (f" (×{count})" if count > 1 else "")


def is_raw_error(text: str) -> bool:
    """True when one of the format parsers recognises ``text`` as an error (the fallback is not asked:
    it finds an "error-like" line in anything)."""
    if not text or not text.strip() or _DIGEST_TEXT.match(text.strip()):
        return False
    try:
        clean, _ = sanitize(text[:_MAX_SCAN_CHARS])
        clean, hints = unwrap(clean, Hints())
        for _, parse in PARSERS:
            try:
                if parse(clean, hints) is not None:
                    return True
            except Exception:
                continue
    except Exception:
        return False
    return False


@dataclass
class _Counts:
    """Running counts per error class while one list is rewritten.

    Raw errors are counted by their dedup key. A digest line already in the list (from an earlier pass or
    from the live tool boundary) no longer has its raw error, so it is matched by the class its line tells
    (:func:`_line_class`): a raw error of that class continues its count, also when the value it was called
    with differs from the one the line shows.
    """

    compact: Any
    by_key: dict[str, int] = field(default_factory=dict)
    key_of_class: dict[str, str] = field(default_factory=dict)
    alias: dict[str, str] = field(default_factory=dict)

    def raw(self, text: str) -> str:
        digest = self.compact(text)
        line_class = _line_class(digest.line)
        key = self.alias.get(digest.key) or self._listed(line_class) or digest.key
        self.alias[digest.key] = key
        self.key_of_class.setdefault(line_class, key)
        self.by_key[key] = self.by_key.get(key, 0) + 1
        return digest_text(digest.line, self.by_key[key])

    def compacted(self, line: str, count: int) -> None:
        key = self.key_of_class.setdefault(_line_class(line), _LISTED + line)
        self.by_key[key] = max(self.by_key.get(key, 0) + 1, count)

    def _listed(self, line_class: str) -> str | None:
        """The class a digest line already in the list counts ``line_class`` in, if one does. Two raw
        errors are never merged here: their keys say whether they are one class."""
        key = self.key_of_class.get(line_class)
        return key if key is not None and key.startswith(_LISTED) else None


_LISTED = "line:"
"""The prefix of the classes started by a digest line already in the list (raw errors' keys are hex)."""
_LINE_NO = re.compile(r":\d+(?= in |\Z)")


def _line_class(line: str) -> str:
    """What a digest line says of its class, as its dedup key would: the type, the place without its line
    number, and the cause with its variable parts masked. Occurrences of one class called with other values
    show different lines and say the same here."""
    parts = line_parts(line)
    if parts is None:
        return line
    type_, where, cause = parts
    return f"[{type_}]\x1f{_LINE_NO.sub('', where)}\x1f{normalize_message(cause)}"


def compact_messages(
    messages: Sequence[Any],
    format: MessageFormat = "openai",
    *,
    compactor: Compactor | None = None,
) -> list[Any]:
    """A copy of ``messages`` whose raw tool errors are digest lines with running counts.

    >>> tb = 'Traceback (most recent call last):\\n  File "app.py", line 3, in f\\nKeyError: \\'k\\'\\n'
    >>> out = compact_messages([{"role": "tool", "tool_call_id": "c1", "content": tb}] * 2)
    >>> [m["content"] for m in out]
    ["Error: [KeyError] at app.py:3 in f: 'k'", "Error: [KeyError] at app.py:3 in f: 'k' (×2)"]
    """
    if format not in ("openai", "anthropic"):
        raise ValueError(f"format must be 'openai' or 'anthropic', got {format!r}")
    counts = _Counts(compactor.compact if compactor is not None else compact_text)
    out: list[Any] = []
    for message in messages:
        if not isinstance(message, Mapping):
            out.append(_message_object(message, counts))
            continue
        if format == "openai":
            out.append(_openai(message, counts))
        else:
            out.append(_anthropic(message, counts))
    return out


def _openai(message: Mapping[str, Any], counts: _Counts) -> Any:
    if message.get("role") == "tool":
        field_name = "content"
    elif message.get("type") == "function_call_output":
        field_name = "output"
    else:
        return copy.deepcopy(message)
    new = _content(message.get(field_name), counts, flagged=False)
    copied = copy.deepcopy(dict(message))
    if new is not None:
        copied[field_name] = new
    return copied


def _message_object(message: Any, counts: _Counts) -> Any:
    """A message that is an object: a LangChain ``ToolMessage`` (``type == "tool"``, in either format) gets
    a copy with its content compacted (``status="error"`` flags it as Anthropic's ``is_error`` does); any
    other object is not a message this function understands and is passed through as it is."""
    if getattr(message, "type", None) != "tool" or not callable(getattr(message, "model_copy", None)):
        return message
    new = _content(message.content, counts, flagged=getattr(message, "status", None) == "error")
    return message.model_copy(deep=True) if new is None else message.model_copy(update={"content": new}, deep=True)


def _anthropic(message: Mapping[str, Any], counts: _Counts) -> Any:
    copied = copy.deepcopy(dict(message))
    blocks = copied.get("content")
    if message.get("role") != "user" or not isinstance(blocks, list):
        return copied
    for i, block in enumerate(blocks):
        if not isinstance(block, dict) or block.get("type") != "tool_result":
            continue
        new = _content(block.get("content"), counts, flagged=block.get("is_error") is True)
        if new is not None:
            blocks[i] = {**block, "content": new}
    return copied


def _content(content: Any, counts: _Counts, *, flagged: bool) -> Any:
    """The replacement for a tool result's content, or None to keep it. Strings stay strings; a list of
    parts keeps its non-text parts and gets one text part with the digest."""
    if isinstance(content, str):
        return _text(content, counts, flagged=flagged)
    if not isinstance(content, list):
        return None
    texts = [p for p in content if isinstance(p, Mapping) and isinstance(p.get("text"), str)]
    if not texts:
        return None
    joined = "\n".join(str(p["text"]) for p in texts)
    new = _text(joined, counts, flagged=flagged)
    if new is None:
        return None
    part = {**texts[0], "text": new}
    kept = [copy.deepcopy(p) for p in content if not any(p is t for t in texts)]
    return [part, *kept]


def _text(text: str, counts: _Counts, *, flagged: bool) -> str | None:
    already = _DIGEST_TEXT.match(text.strip())
    if already is not None:
        counts.compacted(already.group("line"), int(already.group("count") or 1))
        return None
    if not (flagged or is_raw_error(text)):
        return None
    if not text.strip():
        return None
    return counts.raw(text)
