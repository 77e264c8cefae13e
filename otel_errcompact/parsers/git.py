"""Parser for git's errors, where the decisive line is often not the last one.

=================================  ==========================================================
what git printed                   the cause kept
=================================  ==========================================================
``! [rejected] main -> main        the rejected ref and the reason (``fetch first``,
(fetch first)`` above ``error:     ``non-fast-forward``), not the generic ``failed to push``
failed to push some refs``
``CONFLICT (content): Merge        the first conflict (file included) and, for a rebase or
conflict in app.py``               cherry-pick, the commit that could not be applied
``fatal: …``                       the first ``fatal:`` line (git stops at the first)
``error: …``                       the last ``error:`` line (git's summary of the ones above),
                                   unless it is a bare summary (``failed to push some refs``,
                                   ``Please commit or stash them.``): then the one before it;
                                   a line ending in ``:`` takes the first file listed under it
``There is no tracking             that sentence, not the ``git branch --set-upstream-to`` advice
information …``                    after it
=================================  ==========================================================

``hint:`` lines are advice, never the cause. The type is ``git`` whether or not the caller passed the
command, so a framed and an unframed report of one failure share a key.
"""

from __future__ import annotations

import re

from otel_errcompact.parsers._base import Hints, Parsed

__all__ = ["MARKERS", "parse"]

MARKERS = ("fatal: ", "error: ", "[rejected]", "CONFLICT (", "There is no tracking information")
_REJECTED = re.compile(r"^\s*!\s\[(?:remote )?rejected\]\s+(?P<ref>.+?)\s*$", re.M)
_CONFLICT = re.compile(r"^CONFLICT \([^)]*\): .+$", re.M)
_NOT_APPLIED = re.compile(r"^(?:error: )?could not apply (?P<sha>[0-9a-f]{5,40})\b", re.M)
_FATAL = re.compile(r"^fatal: (?P<msg>.+)$", re.M)
_ERROR = re.compile(r"^error: (?P<msg>.+)$((?:\n\t.+)*)", re.M)
# Lines that only sum up the error lines above them (the cause is in those).
_SUMMARY = re.compile(r"^(?:failed to push some refs\b|Please commit or stash them\.?$)")
_NO_TRACKING = re.compile(r"^There is no tracking information for the current branch\.", re.M)
# Without the command, claim ``fatal:``/``error:`` text only when it speaks git's own vocabulary: other
# tools print ``error:`` lines too.
_GIT_WORDS = ("git", "[rejected]", "CONFLICT (", "hint: ", "pathspec", "refs/", "does not apply", "could not apply",
              "rebase", "fast-forward", "HEAD")


def parse(text: str, hints: Hints) -> Parsed | None:
    """Digest git's failure; ``None`` when the text does not look like git's."""
    if not any(marker in text for marker in MARKERS):
        return None
    from_git = bool(hints.command and hints.command.lstrip().startswith("git"))
    if not from_git and not any(word in text for word in _GIT_WORDS):
        return None
    rejected = _REJECTED.search(text)
    if rejected is not None:
        return _parsed(f"! [rejected] {' '.join(rejected['ref'].split())}", hints)
    conflicts = _CONFLICT.findall(text)
    if conflicts:
        cause = conflicts[0]
        if len(conflicts) > 1:
            cause += f" (+{len(conflicts) - 1} more)"
        applied = _NOT_APPLIED.search(text)
        if applied is not None:
            cause += f"; could not apply {applied['sha']}"
        return _parsed(cause, hints, key_text=conflicts[0] + ("; could not apply" if applied else ""))
    fatal = _FATAL.search(text)
    if fatal is not None:
        return _parsed(fatal["msg"].strip(), hints)
    errors = _ERROR.findall(text)
    if errors:
        causes = [e for e in errors if not _SUMMARY.match(e[0].strip())] or errors
        message, listed = causes[-1]
        return _parsed(_with_first_listed(message.strip(), listed), hints)
    tracking = _NO_TRACKING.search(text)
    if tracking is not None:
        return _parsed(tracking.group(0), hints)
    return None


def _with_first_listed(message: str, listed: str) -> str:
    """``Your local changes to the following files would be overwritten by checkout:`` and the files
    listed under it (tab-indented): the first file named, and how many more."""
    if not message.endswith(":"):
        return message
    files = [line.strip() for line in listed.split("\n") if line.strip()]
    if not files:
        return message
    return f"{message} {files[0]}" + (f" (+{len(files) - 1} more)" if len(files) > 1 else "")


def _parsed(cause: str, hints: Hints, key_text: str | None = None) -> Parsed:
    return Parsed("git", cause, "git", status=hints.exit_code, key_text=key_text)
