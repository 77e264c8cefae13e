"""Render error classes as the ``[RECENT ERRORS]`` block an agent reads in its next prompt.

The format follows the Factor 9 note: nothing at all when nothing failed (zero failures, zero tokens),
otherwise a bounded block::

    [RECENT ERRORS]
    2 tool failure(s), 1 distinct:
      - [KeyError] at app.py:42 in load_user: 'user_id' (×2)
    Consider: retry with different input, skip the failing step, or request human help.
    [/RECENT ERRORS]

After a breach the listed line that escalated is marked, and the digest is not quoted a second time::

      - [KeyError] at app.py:42 in load_user: 'user_id' (×3) ← Escalated: 3 times in a row (threshold 3)
    Stop retrying the failing step: it breached its error threshold. Request human help or end the task.

Every line is made safe here as well as in the compactor (a digest may be built by other code): control
characters and newlines are removed, and nothing in a line can open or close the block.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass

from otel_errcompact._sanitize import prompt_text

__all__ = ["BLOCK_CLOSE", "BLOCK_OPEN", "CONSIDER", "RenderedClass", "render_block"]

BLOCK_OPEN = "[RECENT ERRORS]"
BLOCK_CLOSE = "[/RECENT ERRORS]"
CONSIDER = "Consider: retry with different input, skip the failing step, or request human help."
_STOP = "Stop retrying the failing step: it breached its error threshold. Request human help or end the task."
_UNSAFE = re.compile("[\x00-\x1f\x7f-\x9f\u2028\u2029\u202a-\u202e\u2066-\u2069]+")


@dataclass(frozen=True, slots=True)
class RenderedClass:
    """One line of the block: a digest line, how often that class occurred and with how many different
    data values (``values`` > 1 renders ``(×3, 3 different values)``: changing the input did not help),
    ``values_capped`` when that count stopped at its bound (rendered ``16+``), and, for the class that
    breached a threshold, why (``3 times in a row (threshold 3)``)."""

    line: str
    count: int
    values: int = 0
    values_capped: bool = False
    escalated: str | None = None


def _safe(text: str) -> str:
    return prompt_text(_UNSAFE.sub(" ", text)).strip()


def _suffix(entry: RenderedClass) -> str:
    if entry.count <= 1:
        return ""
    if entry.values > 1:
        plus = "+" if entry.values_capped else ""
        return f" (×{entry.count}, {entry.values}{plus} different values)"
    return f" (×{entry.count})"


def render_block(
    classes: Sequence[RenderedClass],
    *,
    total: int,
    distinct: int,
    hidden_classes: int = 0,
    hidden_failures: int = 0,
    escalation: str | None = None,
    max_chars: int = 2000,
) -> str:
    """Build the block; ``""`` when ``total`` is zero. The result never exceeds ``max_chars``.

    >>> print(render_block([RenderedClass("[KeyError] at app.py:42 in load_user: 'user_id'", 2)],
    ...                    total=2, distinct=1))
    [RECENT ERRORS]
    2 tool failure(s), 1 distinct:
      - [KeyError] at app.py:42 in load_user: 'user_id' (×2)
    Consider: retry with different input, skip the failing step, or request human help.
    [/RECENT ERRORS]
    """
    if total <= 0:
        return ""
    head = [BLOCK_OPEN, f"{total} tool failure(s), {distinct} distinct:"]
    escalated = _safe(f"Escalated: {escalation}") if escalation else None
    if escalated is not None and len(escalated) > max(80, max_chars // 4):
        # The sentence repeats a digest line that is already listed; its head says why.
        escalated = escalated[: max(80, max_chars // 4) - 1].rstrip() + "…"
    marked = any(entry.escalated for entry in classes)
    closing = [_STOP if escalation or marked else CONSIDER, BLOCK_CLOSE]

    budget = max_chars - sum(len(s) + 1 for s in head + closing)
    if escalated is not None:
        budget -= len(escalated) + 1
    # Room for one "and N more" line, so dropping lines to fit never loses the count of what was dropped.
    budget -= 60
    per_line = max(80, budget // max(1, min(len(classes), 8)))
    lines: list[str] = []
    counts: list[int] = []
    for entry in classes:
        text = _safe(entry.line)
        suffix = _suffix(entry)
        if entry.escalated:
            suffix += f" ← Escalated: {_safe(entry.escalated)}"
        if len(text) + len(suffix) + 4 > per_line:
            text = text[: max(10, per_line - len(suffix) - 5)].rstrip() + "…"
        line = f"  - {text}{suffix}"
        if len(line) + 1 > budget:
            hidden_classes += 1
            hidden_failures += entry.count
            continue
        budget -= len(line) + 1
        lines.append(line)
        counts.append(entry.count)

    def assemble() -> str:
        fold = (
            [f"  … and {hidden_classes} more distinct error(s) ({hidden_failures} failure(s))"]
            if hidden_classes > 0 and fold_shown
            else []
        )
        esc = [escalated] if escalated is not None else []
        return "\n".join(head + lines + fold + esc + closing)

    # The escalation sentence embeds a digest line of any length: shorten what is left over until the
    # block fits. Order of sacrifice: the escalation sentence's tail, class lines (counted in the "and N
    # more" line), the escalation sentence, and last the "and N more" line (the header keeps the totals).
    fold_shown = True
    block = assemble()
    while len(block) > max_chars:
        excess = len(block) - max_chars
        if escalated is not None and len(escalated) > 80:
            escalated = escalated[: max(79, len(escalated) - excess - 1)].rstrip() + "…"
        elif lines:
            lines.pop()
            hidden_classes += 1
            hidden_failures += counts.pop()
        elif escalated is not None:
            escalated = None
        elif fold_shown and hidden_classes > 0:
            fold_shown = False
        else:
            break
        block = assemble()
    return block
