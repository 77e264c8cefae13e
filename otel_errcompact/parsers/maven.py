"""Parser for Maven's offline resolution failures: the plugin, dependency or POM it could not get.

Maven ends a failed build with ``[ERROR]`` lines. When offline mode (``mvn -o``) stops it from fetching an
artifact the local repository lacks, the first one is long and names the artifact last:

    [ERROR] Failed to execute goal on project app: Could not resolve dependencies for project
    demo:app:jar:1.0: Cannot access central (<the repository URL>) in offline mode and the
    artifact com.google.guava:guava:jar:33.0.0-jre has not been downloaded from it before. -> [Help 1]

Cut to the digest's length that line keeps the project and loses the artifact, so every missing
dependency of a project reads alike. The digest says what could not be resolved (``plugin g:a:v``,
``dependencies of g:a:jar:v``, ``parent POM of …``, ``import POM``, ``build extension g:a:v``), then the
missing artifacts as Maven names them (``group:artifact:type:version``, the whole list when Maven gives
one), then why:

    could not resolve dependencies of demo:app:jar:1.0: com.google.guava:guava:jar:33.0.0-jre has not
    been downloaded from central before (offline mode)

A plugin whose own jar is missing is named once (``… plugin g:a:v: it has not been downloaded …``). Any
other Maven error is left to the parsers after this one. Type ``maven``; the status is the exit code the
caller gave.
"""

from __future__ import annotations

import re

from otel_errcompact.parsers._base import Hints, Parsed

__all__ = ["MARKERS", "parse"]

MARKERS = ("in offline mode",)
_LEVELS = ("[ERROR] ", "[FATAL] ")
_OFFLINE = re.compile(
    r"Cannot access (?P<repo>\S+) \(\S*\) in offline mode and the artifact (?P<artifact>\S+)"
    r" has not been downloaded from it before"
)
# ``The following artifacts could not be resolved: a:b:jar:1, c:d:jar:2: Cannot access …`` (newer resolvers
# add `` (absent)`` to each): coordinates hold colons but never a colon and a space.
_LIST = re.compile(r"The following artifacts could not be resolved: (?P<list>.+?): ")
# What Maven was resolving when it stopped, most specific first: a build extension is reported as a plugin.
_SUBJECTS: tuple[tuple[re.Pattern[str], str], ...] = (
    (re.compile(r"Unresolve?able build extension: Plugin (?P<name>\S+) "), "build extension"),
    (re.compile(r"Plugin (?P<name>\S+) or one of its dependencies could not be resolved"), "plugin"),
    (re.compile(r"Could not resolve dependencies for project (?P<name>\S+): "), "dependencies of"),
    (re.compile(r"Non-resolvable parent POM for (?P<name>\S+): "), "parent POM of"),
    (re.compile(r"Non-resolvable import POM(?P<name>)"), "import POM"),
)


def parse(text: str, hints: Hints) -> Parsed | None:
    """Digest the first ``[ERROR]`` line offline mode caused; ``None`` without one."""
    if "in offline mode" not in text:
        return None
    # Maven's error lines come after the whole build log: the search starts at the first offline failure.
    start = text.rfind("\n", 0, text.find("in offline mode")) + 1
    for line in text[start:].splitlines():
        if "in offline mode" in line and line.startswith(_LEVELS):
            offline = _OFFLINE.search(line)
            if offline is not None:
                return Parsed("maven", _cause(line, offline), "maven", status=hints.exit_code)
    return None


def _cause(line: str, offline: re.Match[str]) -> str:
    """``could not resolve <subject>: <artifacts> has not been downloaded from <repo> before (offline mode)``."""
    listed = _LIST.search(line)
    missing = list(dict.fromkeys(_coordinates(listed["list"]))) if listed is not None else []
    missing = missing or [offline["artifact"]]
    subject = _subject(line)
    named = ", ".join(missing)
    if subject and len(missing) == 1 and _same_artifact(subject, missing[0]):
        named = "it"  # the plugin's own jar: its name and version are in the subject already
    verb = "have" if len(missing) > 1 else "has"
    reason = f"{named} {verb} not been downloaded from {offline['repo']} before (offline mode)"
    return f"could not resolve {subject}: {reason}" if subject else reason


def _subject(line: str) -> str:
    """``plugin g:a:v``, ``dependencies of g:a:jar:v`` …: what Maven was resolving; ``""`` when unnamed."""
    for pattern, what in _SUBJECTS:
        match = pattern.search(line)
        if match is not None:
            return f"{what} {match['name']}" if match["name"] else what
    return ""


def _coordinates(listed: str) -> list[str]:
    """``a:b:jar:1 (absent), c:d:jar:2`` → ``["a:b:jar:1", "c:d:jar:2"]``: each item's first word."""
    words = (item.split(maxsplit=1) for item in listed.split(", "))
    return [item[0] for item in words if item and item[0].count(":") >= 2]


def _same_artifact(subject: str, coordinates: str) -> bool:
    """True when ``plugin g:a:v`` and ``g:a:jar:v`` are one artifact (group, artifact and version)."""
    name = subject.rsplit(" ", 1)[-1].split(":")
    parts = coordinates.split(":")
    return subject.startswith(("plugin ", "build extension ")) and name[:2] == parts[:2] and name[-1] == parts[-1]
