"""Pre-stage: take off the framing around an error before any parser sees it.

Agent harnesses, loggers and transports wrap a tool's real output: an ``ERROR:`` banner, a
``<tool_use_error>`` tag, an ``Exit code N`` header, ``<returncode>``/``<output>`` sections, a reminder
appended after the error, log timestamps on every line, a JSON string with literal ``\\n`` escapes. Left on,
a framing line can be picked as the cause and unrelated failures share its key.

Each module here undoes one kind of framing with one function ``unwrap(text, hints) -> (text, hints) | None``:
``None`` when its framing is absent (check a cheap marker before any regular expression), otherwise the
inner text and the hints, enriched with what the framing said (an exit code, a command). The compactor runs
:data:`UNWRAPPERS` in order, again and again until none applies (framing nests: a JSON-escaped traceback
inside a harness tag), at most :data:`MAX_PASSES` times. Adding a kind of framing is one new module and one
line in ``UNWRAPPERS``. Unwrappers never raise and never return empty text for non-empty input.
"""

from __future__ import annotations

import logging
from collections.abc import Callable

from otel_errcompact.parsers._base import Hints
from otel_errcompact.unwrap import harness, json_escaped, lint_gate, log_prefix, reindent

__all__ = ["MAX_PASSES", "UNWRAPPERS", "Unwrapper", "unwrap"]

_log = logging.getLogger("otel_errcompact")

Unwrapper = Callable[[str, Hints], "tuple[str, Hints] | None"]

UNWRAPPERS: tuple[tuple[str, Unwrapper], ...] = (
    ("harness", harness.unwrap),
    ("lint-gate", lint_gate.unwrap),
    ("json-escaped", json_escaped.unwrap),
    ("log-prefix", log_prefix.unwrap),
    ("reindent", reindent.unwrap),
)
"""``(name, unwrap)`` pairs, tried in order on every pass."""

MAX_PASSES = 8
"""Framing nests a few levels deep at most; the bound keeps hostile input from looping."""


def unwrap(
    text: str, hints: Hints, unwrappers: tuple[tuple[str, Unwrapper], ...] = UNWRAPPERS
) -> tuple[str, Hints]:
    """Strip every layer of framing :data:`UNWRAPPERS` recognise; the text unchanged when none applies."""
    for _ in range(MAX_PASSES):
        for _name, step in unwrappers:
            try:
                result = step(text, hints)
            except Exception:  # an unwrapper bug must not lose the error: parse it as it came
                _log.debug("otel-errcompact: unwrapper %r failed", step, exc_info=True)
                result = None
            if result is not None and result[0].strip() and result[0] != text:
                text, hints = result
                break
        else:
            return text, hints
    return text, hints
