"""Parser for npm's errors: the ``npm error code X`` and the line that says what could not be done.

npm (``npm ERR!`` up to v9, ``npm error`` from v10) prints an error code, a few lines of explanation and
boilerplate (where the log is, how to retry). The digest is typed by the code (``npm ERESOLVE``, ``npm
E404``, ``npm ETARGET``) and keeps:

* ERESOLVE: the dependency that could not be resolved and what was found instead (``peer
  widget@"^1.0.0" from widget-plugin@1.0.0; found widget@2.0.0``), both naming the conflicting
  ``package@version``; the root project's own name and version are left out;
* EBADENGINE: the package and the engine it requires (``Not compatible with your version of node/npm:
  a@1.0.0; Required: {"node":">=22"}``);
* anything else: the first explanatory line that is not boilerplate (``404 Not Found - GET …/left-padx``,
  ``No matching version found for leftpad@9.9.9``, ``Missing script: "bild"``).
"""

from __future__ import annotations

import re

from otel_errcompact.parsers._base import Hints, Parsed

__all__ = ["MARKERS", "parse"]

MARKERS = ("npm ERR!", "npm error")
_PREFIX = re.compile(r"^npm (?:ERR!|error)(?: |$)")
_CODE = re.compile(r"^code (?P<code>E[A-Z0-9_]+)$")
_BOILERPLATE = ("A complete log of this run", "Note that you can", "In most cases you", "For a full report",
                "Fix the upstream dependency", "To see a list of scripts", "Did you mean", "npm run", "npm test",
                "Log files were not written", "You can rerun", "this command with --force", "See ",
                "tarball, folder, http url", "JSON.parse Failed to parse JSON data", "JSON.parse Note:",
                "While resolving:", "code ", "errno ", "syscall ", "path ", "Could not resolve dependency:",
                "Conflicting peer dependency:", "node_modules/", "/")
_LOG_TITLE = re.compile(r"^(?:notarget|JSON\.parse|enoent)\s+")


def parse(text: str, hints: Hints) -> Parsed | None:
    """Digest npm's failure; ``None`` without npm's error prefix."""
    if "npm ERR!" not in text and "npm error" not in text:
        return None
    lines = [_PREFIX.sub("", ln).strip() for ln in text.splitlines() if _PREFIX.match(ln)]
    if not lines:
        return None
    code = next((m["code"] for m in map(_CODE.match, lines) if m is not None), None)
    type_ = f"npm {code}" if code else "npm error"
    if code == "ERESOLVE":
        cause = _eresolve(lines)
        if cause:
            return Parsed(type_, cause, "npm", status=hints.exit_code)
    if code == "EBADENGINE":
        cause = _ebadengine(lines)
        if cause:
            return Parsed(type_, cause, "npm", status=hints.exit_code)
    for line in lines:
        if line and not line.startswith(_BOILERPLATE):
            # npm's log title (``404``, ``notarget``, ``JSON.parse``) repeats the code; a JSON error's
            # ``while parsing '…'`` is an excerpt of the input, not the cause.
            line = _LOG_TITLE.sub("", line).split(" while parsing ", 1)[0]
            return Parsed(type_, line, "npm", status=hints.exit_code)
    return Parsed(type_, code or lines[0] or "npm failed", "npm", status=hints.exit_code)


def _ebadengine(lines: list[str]) -> str:
    """``Not compatible with your version of node/npm: a@1.0.0; Required: {"node":">=22"}``: the package and
    the engine it requires (npm's ``engine Unsupported engine`` title names neither)."""
    package = required = ""
    for line in lines:
        body = re.sub(r"^(?:engine|notsup)\s+", "", line)
        if body.startswith("Not compatible with your version of node/npm:") and not package:
            package = body
        elif body.startswith("Required:") and not required:
            required = " ".join(body.split())
    return f"{package}; {required}" if package and required else package


def _eresolve(lines: list[str]) -> str:
    found = needed = ""
    for index, line in enumerate(lines):
        if line.startswith("Found: ") and not found:
            found = line[len("Found: "):]
        if line.startswith(("Could not resolve dependency:", "Conflicting peer dependency:")):
            needed = next((ln for ln in lines[index + 1:] if ln), "")
            break
    if not needed:
        return ""
    return f"could not resolve {needed}; found {found}" if found else f"could not resolve {needed}"
