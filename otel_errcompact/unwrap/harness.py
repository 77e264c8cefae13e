"""Take off what agent harnesses put around a tool's output before they hand it to the model.

Recognised, each from the harness's own source:

==========================================================  =============================================
framing                                                     harness
==========================================================  =============================================
``<returncode>N</returncode>`` + ``<output>…</output>``      mini-swe-agent's observation template (also
(``<output_head>``/``<output_tail>``, ``<exception>``)        its head/tail form for long output)
``[The command completed with exit code N.]``,              OpenHands' terminal (``TerminalObservation``)
``[Command finished with exit code N]``,
``[Current working directory: …]``, ``[Python interpreter:
…]``, ``[Jupyter current working directory: …]``
``Exit code N`` as the first line                           Claude Code's Bash tool
``<tool_use_error>…</tool_use_error>``                      Claude Code's tools refusing a call
a first line that is only a banner: ``ERROR:``,             OpenHands' file editors (``openhands-aci``,
``[An error occurred during execution.]``                   ``openhands-tools``)
trailing reminders addressed to the model (``DO NOT          SWE-agent-style edit tools
re-run the same failed edit command…``, ``Your changes
have NOT been applied…``)
==========================================================  =============================================

An exit code the framing states goes into ``Hints.exit_code`` (when the caller gave none), so the shell
parser classifies the inner output exactly as if the caller had passed the code: a framed and an unframed
run of one failure get one key. A framing line never reaches a parser, so it is never the cause.
"""

from __future__ import annotations

import dataclasses
import re

from otel_errcompact.parsers._base import Hints

__all__ = ["declines", "unwrap"]

# Cheap substring checks first: most errors carry no framing at all. Framing opens the text (tags,
# headers, banners) or closes it (trailers, reminders), so each set is looked for only at its end.
_HEAD_MARKERS = ("<returncode>", "<exception>", "<tool_use_error>", "Exit code", "ERROR:", "[An error occurred")
_TAIL_MARKERS = ("exit code", "</output", "</tool_use_error>", "[Current working", "[Python interpreter",
                 "[Jupyter", "DO NOT", "NOT been applied")

_HEAD = 200
_TAIL = 400
_TAGS = ("returncode", "output", "output_head", "output_tail", "exception", "tool_use_error")
_EXIT_HEADER = re.compile(r"\AExit code (?P<code>-?\d{1,4})[ \t]*(?:\n|\Z)")
# Trailer lines OpenHands' terminal appends, any order, each on its own line.
_TRAILER = re.compile(
    r"^\[(?:The command completed with exit code (?P<a>-?\d+)\.?[^\]\n]*"
    r"|Command finished with exit code (?P<b>-?\d+)"
    r"|(?:Jupyter )?(?:[Cc]urrent working directory|Python interpreter): [^\]\n]*"
    r"|Previous command outputs are truncated\.[^\]\n]*)\]$",
    re.M,
)
_BANNERS = frozenset({"ERROR:", "Error:", "ERROR", "[An error occurred during execution.]",
                      "[An error occurred during execution]"})
# A reminder addresses the model in the imperative and names nothing about the failure itself.
_REMINDER = re.compile(
    r"^(?:DO NOT\b|Do not re-?run\b|Your changes have NOT been applied\b|You either need to\b"
    r"|Please (?:fix|try|correct|review|read)\b|Running it again will\b).*$"
)


def unwrap(text: str, hints: Hints) -> tuple[str, Hints] | None:
    """The text inside one harness's framing and the exit code it stated; ``None`` without framing."""
    if declines(text):
        return None
    inner, code = _tags(text)
    if inner is None:
        inner, code = _exit_header(text)
    if inner is None:
        inner, code = _trailers(text)
    if inner is None:
        inner = text
    inner = _strip_banner_and_reminders(inner)
    if inner == text or not inner.strip():
        return None
    if code is not None and hints.exit_code is None:
        hints = dataclasses.replace(hints, exit_code=code)
    return inner, hints


def declines(text: str) -> bool:
    """True when :func:`unwrap` returns ``None`` for ``text`` (no framing marker at either end): the test it
    starts with, for a caller that wants to know before running the other unwrappers."""
    return not _framed(text[:_HEAD], text[-_TAIL:])


def _framed(head: str, tail: str) -> bool:
    """A marker of framing at the head or the tail (plain loops: cheaper than generators for these tests).
    A group of markers is looked for only where its gate occurs (see :func:`_gated`)."""
    for gate, markers in _HEAD_GROUPS:
        if gate in head:
            for marker in markers:
                if marker in head:
                    return True
    for gate, markers in _TAIL_GROUPS:
        if gate in tail:
            for marker in markers:
                if marker in tail:
                    return True
    return False


def _gated(markers: tuple[str, ...]) -> tuple[tuple[str, tuple[str, ...]], ...]:
    """``markers`` grouped under a gate each of them holds: ``<``, ``[`` or ``NOT`` (a one-character gate
    is one ``memchr``, and most error text holds no such character near its ends), else ``""``, which
    every text holds. A text without the gate holds none of its markers, so the test is unchanged."""
    groups: dict[str, list[str]] = {}
    for marker in markers:
        gate = next((g for g in ("<", "[", "NOT") if g in marker), "")
        groups.setdefault(gate, []).append(marker)
    return tuple((gate, tuple(members)) for gate, members in groups.items())


_HEAD_GROUPS = _gated(_HEAD_MARKERS)
_TAIL_GROUPS = _gated(_TAIL_MARKERS)


def _tags(text: str) -> tuple[str | None, int | None]:
    if "</" not in text:
        return None, None
    parts: dict[str, str] = {}
    for tag in _TAGS:
        body = _tag_body(text, tag)
        if body is not None:
            parts[tag] = body
    if not parts:
        return None, None
    code = _int(parts.get("returncode"))
    if "tool_use_error" in parts:
        return parts["tool_use_error"], code
    body = parts.get("output")
    if body is None and ("output_head" in parts or "output_tail" in parts):
        body = f"{parts.get('output_head', '')}\n{parts.get('output_tail', '')}"
    if body is None:
        body = parts.get("exception")
    elif "exception" in parts:
        body = f"{body}\n{parts['exception']}"
    if body is None:
        return None, None
    return body, code


def _tag_body(text: str, tag: str) -> str | None:
    """The text between the first ``<tag>`` and the last ``</tag>``: two linear scans, whatever the input."""
    opening = f"<{tag}>"
    start = text.find(opening)
    if start < 0:
        return None
    end = text.rfind(f"</{tag}>")
    if end < start:
        return None
    body = text[start + len(opening) : end]
    return body[1:] if body.startswith("\n") else body


def _exit_header(text: str) -> tuple[str | None, int | None]:
    match = _EXIT_HEADER.match(text) if text.startswith("Exit code") else None
    if match is None:
        return None, None
    return text[match.end():], _int(match["code"])


def _trailers(text: str) -> tuple[str | None, int | None]:
    if "[" not in text:
        return None, None
    code: int | None = None
    found = False

    def drop(match: re.Match[str]) -> str:
        nonlocal code, found
        found = True
        code = _int(match["a"] or match["b"]) if code is None else code
        return ""

    inner = _TRAILER.sub(drop, text)
    return (inner.rstrip("\n") if found else None), code


def _strip_banner_and_reminders(text: str) -> str:
    lines = text.strip("\n").split("\n")
    while lines and lines[0].strip() in _BANNERS and len(lines) > 1:
        lines.pop(0)
    while len(lines) > 1 and (not lines[-1].strip() or _REMINDER.match(lines[-1].strip())):
        lines.pop()
    return "\n".join(lines)


def _int(value: str | None) -> int | None:
    if value is None:
        return None
    try:
        return int(value.strip())
    except ValueError:
        return None
