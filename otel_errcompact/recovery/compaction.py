"""Reactive compaction of a conversation after "prompt too long", valid for OpenAI and Anthropic messages.

What it does, oldest first, leaving the newest ``keep_recent`` tool results untouched (they are the
expensive ones to regenerate, and what the model is working with):

- an older tool result that is an error (Anthropic ``is_error``, or text that reads as an error) becomes
  its one-line digest with a running count (``[KeyError] at app.py:42 in load: 'id' (×3)``);
- an older successful tool result longer than ``max_result_chars`` keeps its head and says how much was cut;
- older assistant text goes through the user's ``summarizer`` when one is given, redacted first (by
  :func:`~otel_errcompact.redact.redact`, as :class:`~otel_errcompact.compactor.Compactor` redacts what its
  summariser gets): the summariser is usually a call to a hosted model, and an assistant's text often
  quotes the error a tool returned, with the password or token in it.

Nothing is removed or reordered, and tool-call ids are never touched, so every ``tool_calls`` /
``tool_use`` keeps its matching ``tool`` / ``tool_result``: the pairing both APIs insist on stays valid.
The input is not modified; a new list is returned.
"""

from __future__ import annotations

import copy
import logging
import re
from collections.abc import Callable, Sequence
from typing import Any

from otel_errcompact.redact import redact

__all__ = ["compact_messages"]

_log = logging.getLogger("otel_errcompact")

# A tool result that reads as an error: it begins as error text does ("Error: …", a traceback, a digest
# "[KeyError] at …" or "[HTTP 503]: …", the Agents SDK's "An error occurred …"), or holds a traceback or an
# exception's own line ("ValueError: …" at a line's start) further in. Not a bracketed log level
# ("[INFO] build OK"), nor an error type named inside prose or code ("Raises ValueError: when …").
_ERRORISH = re.compile(
    r"(?i)^\s*(?:error\b|exception\b|fatal\b|failed\b|an error occurred\b|traceback \(most recent call last\)"
    r"|\[[\w .]+\](?: at |: ))"
    r"|traceback \(most recent call last\)"
    r"|(?m:^[\w.]*(?:Error|Exception): )"
)


def _text_of(content: Any) -> str | None:
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        parts = [b.get("text", "") for b in content if isinstance(b, dict) and b.get("type") == "text"]
        return "\n".join(p for p in parts if p) if parts else None
    return None


def _tool_results(messages: list[dict[str, Any]]) -> list[tuple[dict[str, Any], bool]]:
    """Every tool result in order: the dict holding its content, and whether the API flagged an error."""
    found: list[tuple[dict[str, Any], bool]] = []
    for m in messages:
        if m.get("role") == "tool":
            found.append((m, False))
        elif m.get("role") == "user" and isinstance(m.get("content"), list):
            for block in m["content"]:
                if isinstance(block, dict) and block.get("type") == "tool_result":
                    found.append((block, bool(block.get("is_error"))))
    return found


def compact_messages(
    messages: Sequence[dict[str, Any]],
    *,
    keep_recent: int = 4,
    max_result_chars: int = 2000,
    summarizer: Callable[[str], str] | None = None,
) -> list[dict[str, Any]]:
    """A compacted copy of ``messages`` (see the module docstring).

    >>> msgs = [{"role": "tool", "tool_call_id": "c1", "content": "Traceback (most recent call last):\\n"
    ...          '  File "app.py", line 3, in load\\nKeyError: \\'id\\''}]
    >>> compact_messages(msgs, keep_recent=0)[0]["content"]
    "[KeyError] at app.py:3 in load: 'id'"
    """
    from otel_errcompact.compactor import compact_text  # here: the compactor imports recovery.classify

    out = copy.deepcopy(list(messages))
    results = _tool_results(out)
    older = results[: max(0, len(results) - keep_recent)]
    counts: dict[str, int] = {}
    for holder, flagged in older:
        text = _text_of(holder.get("content"))
        if text is None:
            continue
        if flagged or _ERRORISH.search(text[:4096]):
            digest = compact_text(text[4:] if text.startswith("Error: [") else text)
            counts[digest.key] = counts.get(digest.key, 0) + 1
            n = counts[digest.key]
            holder["content"] = digest.line + (f" (×{n})" if n > 1 else "")
        elif len(text) > max_result_chars:
            holder["content"] = f"{text[:max_result_chars]}… [{len(text) - max_result_chars} chars compacted]"
    if summarizer is not None:
        for m in out[: _cutoff(out, older)]:
            if m.get("role") != "assistant":
                continue
            _summarize_text(m, summarizer)
    return out


def _cutoff(out: list[dict[str, Any]], older: list[tuple[dict[str, Any], bool]]) -> int:
    """Messages before this index are "old": up to the message holding the newest compacted result."""
    if not older:
        return 0
    holder = older[-1][0]
    for i, m in enumerate(out):
        if m is holder or (isinstance(m.get("content"), list) and any(b is holder for b in m["content"])):
            return i
    return 0


def _summarize_text(message: dict[str, Any], summarizer: Callable[[str], str]) -> None:
    """Replace the message's text by the summariser's answer for it, redacted (see the module docstring)."""
    try:
        content = message.get("content")
        if isinstance(content, str) and content.strip():
            message["content"] = str(summarizer(redact(content)))
        elif isinstance(content, list):
            for block in content:
                if isinstance(block, dict) and block.get("type") == "text" and block.get("text"):
                    block["text"] = str(summarizer(redact(block["text"])))
    except Exception:  # a summariser bug leaves the text as it was
        _log.debug("otel-errcompact: summarizer failed during compaction", exc_info=True)
