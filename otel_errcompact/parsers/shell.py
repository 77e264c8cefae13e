"""Parser for failed shell commands: the exit code, the command, and the one stderr line that tells why.

Shell output has no structure to parse, so this parser is the last format in ``PARSERS``: it answers when
the caller reports a non-zero ``hints.exit_code`` (whatever the text), or when the text holds an error
only a shell or a coreutils-style tool prints (``command not found``, ``: No such file or directory``,
``Permission denied``, ``unbound variable``). Otherwise it returns ``None``.

Types (``Parsed.status`` carries the exit code as given; Python reports a signal as a negative code):

====================  ========================================================================
type                  when
====================  ========================================================================
``Timeout``           exit 124: ``timeout(1)`` expired
``Killed``            SIGKILL (137 or -9), typically the OOM killer or a hard kill
``Terminated``        SIGTERM (143 or -15); other signals: ``Interrupted`` (INT), ``Aborted``
                      (ABRT), ``Segfault`` (SEGV), ``BrokenPipe`` (PIPE), else ``signal SIGxxx``
``BadInterpreter``    the program was found but what runs it was not: its ``#!`` interpreter (bash's
                      ``bad interpreter: …``, bash 5.2's ``cannot execute: required file not found``,
                      which also means a missing dynamic loader); dash says ``not found`` as for a
                      missing command, so its line is read as one
``CommandNotFound``   ``nosuchcmd: command not found`` (bash, zsh, dash's ``: not found``), or
                      exit 127
``PermissionDenied``  ``Permission denied``, or exit 126 (found but not executable)
``UnboundVariable``   ``set -u`` met an unset variable
``ShellSyntaxError``  bash/sh could not parse the command
``NoSuchFile``        the telling line says ``No such file or directory``
``exit N``            any other non-zero exit: the exit code *is* the class
====================  ========================================================================

The cause is the telling line with the shell's ``bash: line 1:`` prefix removed. The telling line is the
one naming the failure most specifically (``cannot``/``denied``/``not found``/``No such file`` beat a
bare ``error``, which beats other lines, which beat advice and summaries of other lines (``Use …``,
``As a reminder …``, ``… aborted due to compilation errors``); ties go to the last, since a failing
tool's summary comes last; curl's numbered ``curl: (60) …`` report counts as specific, whatever the
explanation after it says); progress lines (``45%``, ``[3/10]``, ``Downloading…``) and pointer lines (the
``^--- error here`` sqlite3 prints under the statement it quotes) are never chosen.
When that line does not name the program, the command (first line, cut to 60 characters) is put in
front so the agent knows what failed; with no output at all the cause is ``<command>: exited with
status N``, never empty. A signal's cause is ``<command>: killed by SIGxxx``, except for a process that
aborted itself (SIGABRT), which says why first: its telling line is the cause (``std::runtime_error:
<what()>`` for an uncaught C++ exception, the failed ``assert()``), without the shell's ``Aborted`` line.

>>> parse("", Hints(exit_code=1, command="false")).cause
'false: exited with status 1'
"""

from __future__ import annotations

import re
import signal

from otel_errcompact.parsers._base import Hints, Parsed, cut, may_search

__all__ = ["names_the_failure", "parse", "telling_line"]

_MAX_LINES = 200  # the telling line of a failing command sits near the end of its output
_MAX_LINE = 300
_MAX_COMMAND = 60

_MARKERS = ("command not found", ": not found", "No such file or directory", "Permission denied",
            "unbound variable", "bad interpreter", "required file not found")
MARKERS = _MARKERS  # see parsers/__init__.py; an exit code tries every parser
_SHELL_PREFIX = re.compile(
    r"^(?:\S*/)?(?:bash|sh|dash|zsh|ksh|ash|mksh)(?:\[\d+\])?:\s*(?:-c:\s*)?(?:line\s+)?(?:\d+:\s*)?"
)
_NOT_FOUND = re.compile(
    r"(?P<cmd>[^\s:]+): (?:command )?not found$|^command not found: (?P<zsh>\S+)$"
)
# A script's interpreter is missing or cannot run: bash 5.1 and earlier print ``./x.sh: /usr/bin/interp: bad
# interpreter: No such file or directory``, bash 5.2 ``./x.sh: cannot execute: required file not found``. A
# missing one exits 127 as a command not on PATH does, but the cure differs (the ``#!`` line, not PATH).
_BAD_INTERPRETER = ("bad interpreter", "cannot execute: required file not found")
# How the shells themselves word a parse error: bash's ``syntax error near unexpected token `)'``, ``syntax
# error: unexpected end of file``, ``unexpected EOF while looking for matching `"'``, dash's ``Syntax error:
# Unterminated quoted string``, zsh's ``parse error near `)'``. A tool's own syntax error (sqlite3's ``near
# "selec": syntax error``, jq's ``syntax error, unexpected $end``, gzip's ``unexpected end of file``) is not
# the shell's: it falls to ``exit N`` with the tool's line.
_SYNTAX = re.compile(
    r"(?i)syntax error(?::| near unexpected token)|unexpected EOF while looking for matching|parse error near `"
)
_SYNTAX_WORDS = ("syntax error", "unexpected eof", "parse error")  # each alternative of _SYNTAX holds one
# Phrases that name a failure specifically, then generic failure words, matched on the lower-cased line
# with plain substring tests: a handful of ``in`` checks is far cheaper than one alternation regex.
_STRONG = ("command not found", ": not found", "permission denied", "no such file", "unbound variable",
           "syntax error", "cannot", "can't", "not found", "denied", "refused", "fatal", "killed",
           "out of memory", "not installed", "no matching")
# Lines that advise or sum up (``Use dpkg --info …``, cargo's ``As a reminder, you're using offline
# mode…``, perl's ``Execution of x.pl aborted due to compilation errors.``): the cause is in another line.
_ADVICE = re.compile(
    r"(?i)^(?:use|try|see|run|please|hint|note|to fix|did you mean|as a reminder)\b(?! of\b)"
    r"|aborted due to compilation errors"
)
_WEAK = ("error", "err!", "fail", "invalid", "unable", "could not", "couldn't", "timed out", "exception",
         "missing", "abort", "unexpected", "not allowed", "forbidden", "unknown", "illegal")
_PROGRESS_START = re.compile(
    r"\[[#=>\-. ]*\]|\[?\d+/\d+\]?\s"
    r"|(?:progress|downloading|fetching|building|compiling|running|step|done)\b",
    re.IGNORECASE,
)
_PERCENT = re.compile(r"\d%")
# curl's one report of its failure, numbered by its exit code (``curl: (60) SSL certificate problem: …``):
# the paragraph of explanation it may print after it (``curl failed to verify the legitimacy of …``) says
# ``failed`` where the report need not.
_CURL_REPORT = "curl: ("
_CURL_CODE = re.compile(r"curl: \(\d{1,3}\) ")
# How a line that points at a spot in the line above it starts (``^--- error here``, ``~~~^``); a lone ``~``
# may start a path.
_POINTER = ("^", "~~", "~^")
_SIGNAL_TYPES: dict[int, str] = {
    int(signal.SIGKILL): "Killed",
    int(signal.SIGTERM): "Terminated",
    int(signal.SIGINT): "Interrupted",
    int(signal.SIGABRT): "Aborted",
    int(signal.SIGSEGV): "Segfault",
    int(signal.SIGPIPE): "BrokenPipe",
}
# bash's ``12345 Aborted (core dumped) ./svc`` (its ``bash: line 1:`` prefix removed), sh's ``Aborted``,
# zsh's ``abort ./svc``; not a program's own ``abort: <reason>``.
_ABORT_REPORT = re.compile(r"(?i)(?:\d+\s+)?abort(?:ed)?\b(?!:)")
_THROWN = re.compile(r"terminate called after throwing an instance of '(?P<type>[^']{1,200})'")
_WHAT = "what():"
_SHELL_WRAPPER = re.compile(r"^\s*(?:\S*/)?(?:bash|sh|dash|zsh|ksh)\s+(?:-[a-z]*c[a-z]*)\s+")
_ASSIGNMENT = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*=")
_WRAPPERS = frozenset({"sudo", "env", "exec", "time", "nohup", "nice", "command", "builtin"})


def parse(text: str, hints: Hints) -> Parsed | None:
    """Digest a failed command; ``None`` without a non-zero exit code or a shell error in the text."""
    code = hints.exit_code
    if not code and not any(marker in text for marker in _MARKERS):
        return None
    lines = _lines(text)
    script = _unwrap(hints.command or "")
    command = _short_command(script)
    program = _program(script)
    telling = _telling_line(lines)

    sig = _signal(code)
    if code == 124:
        return Parsed("Timeout", _join(command, "timed out"), "shell", status=code)
    if sig is not None:
        name = _signal_name(sig)
        type_ = _SIGNAL_TYPES.get(sig, f"signal {name}")
        said = _abort_message(lines) if sig == signal.SIGABRT else ""
        if said:
            return Parsed(type_, said if program and program in said else _join(command, said), "shell",
                          status=code)
        return Parsed(type_, _join(command, f"killed by {name}"), "shell", status=code)

    if telling:
        classified = _classify(telling)
        if classified is not None:
            return Parsed(classified, telling, "shell", status=code)
    if code == 127:
        return Parsed("CommandNotFound", f"{program or command or 'command'}: command not found", "shell",
                      status=code)
    if code == 126:
        return Parsed("PermissionDenied", _join(command, "found but not executable"), "shell", status=code)
    if not code:
        return None  # a marker in text the classifier did not confirm, and no failure reported
    if not telling:
        return Parsed(f"exit {code}", _join(command, f"exited with status {code}"), "shell", status=code)
    if program and program not in telling:
        telling = _join(command, telling)
    return Parsed(f"exit {code}", telling, "shell", status=code)


def _lines(text: str) -> list[str]:
    """The last non-blank lines, shell prefix removed and each cut to a bounded length."""
    found: list[str] = []
    for raw in reversed(text.splitlines()):
        stripped = raw.strip()
        if not stripped:
            continue
        line = stripped[: _MAX_LINE * 4]
        if "sh" in line[:40]:
            line = _SHELL_PREFIX.sub("", line, count=1) or line
        found.append(line[:_MAX_LINE])
        if len(found) >= _MAX_LINES:
            break
    found.reverse()
    return found


def telling_line(lines: list[str]) -> str:
    """The line of ``lines`` that names the failure most specifically (see the module docstring)."""
    return _telling_line(lines)


def names_the_failure(line: str) -> bool:
    """Whether ``line`` names a failure specifically (``cannot``, ``No such file``, ``denied`` …), more than
    a bare ``error`` or ``failed`` does."""
    return _score(line) == 4


def _telling_line(lines: list[str]) -> str:
    best, best_score = "", 0
    for line in lines:
        score = _score(line)
        if score == 0:
            continue
        if score >= best_score:
            best, best_score = line, score
    return best


def _score(line: str) -> int:
    """4 for a specific failure phrase, 3 for a generic failure word, 2 for other text, 1 for advice or a
    summary of other lines, 0 for progress or a pointer (``^--- error here``: it marks a spot in the line
    above, and its word ``error`` would otherwise outrank the message above that)."""
    if line.startswith(_POINTER):
        return 0
    if line.startswith(_CURL_REPORT) and _CURL_CODE.match(line):
        return 4
    if _ADVICE.search(line):
        return 1
    lowered = line.lower()
    for phrase in _STRONG:
        if phrase in lowered:
            return 4
    for word in _WEAK:
        if word in lowered:
            return 3
    return 0 if _is_progress(line) else 2


def _is_progress(line: str) -> bool:
    """``45%``, ``[3/10] …``, ``Downloading …``, ``…``: a line that reports progress, not a failure."""
    return bool(
        ("%" in line and _PERCENT.search(line))
        or _PROGRESS_START.match(line)
        or line.endswith(("...", "…"))
    )


def _classify(line: str) -> str | None:
    if any(phrase in line for phrase in _BAD_INTERPRETER):
        return "BadInterpreter"  # first: its line also says ``No such file`` or ``Permission denied``
    # Each regex runs only where the words it needs occur: its scan backtracks at every position.
    not_found = _NOT_FOUND.search(line) if "not found" in line else None
    if not_found and (not_found.group("zsh") or "command not found" in line or line.count(":") == 1):
        return "CommandNotFound"
    if "unbound variable" in line:
        return "UnboundVariable"
    if may_search(_SYNTAX, _SYNTAX_WORDS, line):
        return "ShellSyntaxError"
    if "Permission denied" in line:
        return "PermissionDenied"
    if "No such file or directory" in line:
        return "NoSuchFile"
    return None


def _abort_message(lines: list[str]) -> str:
    """What a process that aborted itself said last: an uncaught C++ exception (``std::runtime_error:
    <what()>``), a failed ``assert()``, glibc's ``double free or corruption``. A process aborts itself for
    the reason it prints, unlike one killed from outside, whose last words are any log line. The shell's
    own report of the signal (``12345 Aborted (core dumped) ./svc``, a new pid each run) is left out."""
    said = [line for line in lines if not _ABORT_REPORT.match(line)]
    for at in range(len(said) - 2, -1, -1):
        thrown = _THROWN.match(said[at])
        if thrown is not None and said[at + 1].startswith(_WHAT):
            what = said[at + 1][len(_WHAT) :].strip()
            return f"{thrown.group('type')}: {what}" if what else thrown.group("type")
    return _telling_line(said)


def _signal(code: int | None) -> int | None:
    """The signal that ended the process: ``-N`` from ``subprocess``, ``128+N`` from a shell."""
    if code is None:
        return None
    if code < 0:
        return -code
    if 128 < code <= 128 + 64 and code != 255:
        return code - 128
    return None


def _signal_name(sig: int) -> str:
    try:
        return signal.Signals(sig).name
    except ValueError:
        return f"signal {sig}"


def _unwrap(command: str) -> str:
    """``bash -c 'make build'`` → ``make build``: the wrapper shell names nothing the agent wrote."""
    match = _SHELL_WRAPPER.match(command)
    if match is None:
        return command
    inner = command[match.end() :].strip()
    if len(inner) >= 2 and inner[0] == inner[-1] and inner[0] in "'\"":
        inner = inner[1:-1]
    return inner


def _short_command(command: str) -> str:
    first = " ".join(command.strip().splitlines()[0].split()) if command.strip() else ""
    return cut(first, _MAX_COMMAND)


def _program(command: str) -> str:
    """The program a command runs: ``ls`` for ``LC_ALL=C sudo /bin/ls -l``."""
    for word in command.split()[:8]:
        if _ASSIGNMENT.match(word) or word in _WRAPPERS:
            continue
        return word.rsplit("/", 1)[-1]
    return ""


def _join(command: str, message: str) -> str:
    return f"{command}: {message}" if command else message
