"""Parser for Go panics, fatal runtime errors, ``go build`` / ``go vet`` compile errors and ``go test``
failures.

A panic prints ``panic: <value>`` (``panic: runtime error: …`` for the runtime's own errors, a
``[signal SIGSEGV …]`` line for nil dereferences), a blank line, then per goroutine ``goroutine 1
[running]:`` and pairs of lines, innermost first: ``main.lookup(...)`` and ``\\t/src/main.go:8 +0x1d``.
``fatal error: …`` (deadlock, concurrent map writes) has the same shape.

Types, in the runtime's own words:

* ``panic`` for every panic value, the runtime's own included: ``panic: runtime error: index out of range
  [5] with length 3`` keeps ``runtime error: …`` in its cause, so the digest reads like the panic line;
  any other panic value (``panic(fmt.Sprintf(…))``, ``panic(err)``, a nil map write) is the cause;
* ``fatal error`` for ``fatal error: all goroutines are asleep - deadlock!``;
* ``go build error`` / ``go vet error`` for compiler diagnostics ``./main.go:5:2: undefined: foo``
  (location: the first diagnostic's own position; cause: its message). These are handled here rather
  than by the gcc-style parser because Go's diagnostics carry no ``error:`` label.
* ``go test FAIL`` for a failing test (``--- FAIL: TestAdd (0.00s)`` and the ``t.Errorf`` / ``t.Fatalf``
  line ``calc_test.go:7: Add(2, 3) = -1, want 5``, printed under it, or above it with ``-v``): the
  location is that line's position in the test (subtest) it belongs to, the cause its message. Of several
  failing tests the first by name is reported: parallel tests finish, and print, in any order, and the
  report must not change with it. The count of the others is shown but not keyed (fixing one test must not
  change the key of another).

Frames in ``GOROOT`` (``…/go/src/``, ``…/go-1.19/src/``, and any directory the ``runtime.`` frames
reveal as ``GOROOT``), the module cache and ``vendor/`` are not in-app. For a re-panic from a deferred
function (``panic: x [recovered]``), the first panic is the cause and its location is found below the
runtime's ``panic(…)`` frame, not in the deferred handler.

>>> from otel_errcompact.parsers._base import Hints
>>> raw = "panic: boom\\n\\ngoroutine 1 [running]:\\nmain.main()\\n\\t/src/app/main.go:9 +0x25\\n"
>>> p = parse(raw, Hints())
>>> p.type, p.cause, str(p.frames[-1].line)
('panic', 'boom', '9')
"""

from __future__ import annotations

import re

from otel_errcompact.parsers._base import Frame, Hints, Parsed

__all__ = ["parse"]
MARKERS = ("goroutine ", ".go:", "--- FAIL: ")  # see parsers/__init__.py

_MAX_LINE = 2000
_MAX_FRAMES = 400

_PANIC = re.compile(r"^(?P<kind>panic|fatal error): (?P<value>.*)$")
_GOROUTINE = re.compile(r"^goroutine \d+ \[[^\]\n]*\]:$")
_POSITION = re.compile(r"^\t(?P<file>\S.*?):(?P<line>\d+)(?: \+0x[0-9a-f]+)?$")
_CREATED_BY = re.compile(r"^created by (?P<func>\S+)")
_DIAGNOSTIC = re.compile(
    r"^(?P<vet>vet: )?(?P<file>[^\s:][^:\n]*\.go):(?P<line>\d+):(?:(?P<col>\d+):)? (?P<msg>.+)$"
)
# go test: ``--- FAIL: TestAdd (0.00s)`` (subtests indented), ``=== RUN   TestAdd`` (``-v``, also ``CONT``
# and ``NAME`` when parallel tests resume) and a test's own line ``    calc_test.go:7: Add(2, 3) = -1``.
_TEST_FAIL = re.compile(r"^\s*--- FAIL: (?P<name>\S+) \(")
_TEST_START = re.compile(r"^=== (?:RUN|CONT|NAME)\s+(?P<name>\S+)")
_TEST_LINE = re.compile(r"^(?P<indent>\s+)(?P<file>[^\s:]+\.go):(?P<line>\d+): ?(?P<msg>.*)$")
_GOROOT_RUNTIME = re.compile(r"^(?P<root>.*)[\\/]src[\\/]runtime[\\/][^\\/]+\.go$")
# GOROOT (``/usr/local/go/src/``, ``/usr/lib/go-1.19/src/``, Homebrew's ``libexec/src/``) holds packages
# whose first path element has no dot (``net/http``); a GOPATH ``~/go/src/github.com/me/app`` is user code.
_LIBRARY_PATH = re.compile(
    r"[\\/](?:go|golang|go-?\d[\w.\-]*|libexec)[\\/]src[\\/](?![^\\/]*\.)"
    r"|[\\/]pkg[\\/]mod[\\/]|[\\/]vendor[\\/]"
)


def parse(text: str, hints: Hints) -> Parsed | None:
    """Recognise a Go panic or compile error; ``None`` for anything else."""
    if "goroutine " in text and ("panic: " in text or "fatal error: " in text):
        parsed = _parse_panic(text.splitlines())
        if parsed is not None:
            return parsed
    if "--- FAIL: " in text:
        parsed = _parse_test(text.splitlines())
        if parsed is not None:
            return parsed
    if ".go:" in text:
        return _parse_build(text.splitlines(), hints)
    return None


def _parse_panic(lines: list[str]) -> Parsed | None:
    kind = value = ""
    start = -1
    for index, line in enumerate(lines):
        if len(line) > _MAX_LINE:
            continue
        match = _PANIC.match(line)
        if match:
            kind, value, start = match.group("kind"), match.group("value").strip(), index
            break
    if start < 0:
        return None
    recovered = value.endswith(" [recovered]")
    value = value.removesuffix(" [recovered]").strip()
    goroutine = next(
        (i for i in range(start + 1, min(len(lines), start + 200)) if _GOROUTINE.match(lines[i])), None
    )
    if goroutine is None:
        return None
    frames = _frames(lines, goroutine + 1)
    if recovered:
        # Frames inside the runtime's ``panic(…)`` are the deferred handler that re-panicked; the
        # first panic happened in the frames outside it.
        below = [i for i, f in enumerate(frames) if f.func == "panic" and not f.in_app]
        if below and any(f.in_app for f in frames[: below[0]]):
            frames = frames[: below[0]]
    if kind == "fatal error":
        type_, cause = "fatal error", value
    else:
        type_, cause = "panic", value
    return Parsed(type_, cause or type_, "go", frames=tuple(frames))


def _frames(lines: list[str], start: int) -> list[Frame]:
    """The first goroutine's frames, outermost first."""
    pairs: list[tuple[str, str, int]] = []
    func: str | None = None
    for line in lines[start : start + 2 * _MAX_FRAMES]:
        if not line.strip() or len(line) > _MAX_LINE:
            break
        position = _POSITION.match(line) if line.startswith("\t") else None
        if position is not None:
            if func is not None:
                pairs.append((func, position.group("file"), int(position.group("line"))))
            func = None
            continue
        created = _CREATED_BY.match(line)
        if created:
            func = created.group("func")
            continue
        paren = line.rfind("(")
        func = line[:paren] if paren > 0 else line.strip()
    goroot = {m.group("root") for _, f, _ in pairs if (m := _GOROOT_RUNTIME.match(f))}
    frames = [
        Frame(file=file, line=line_no, func=name, in_app=_in_app(name, file, goroot))
        for name, file, line_no in pairs
    ]
    frames.reverse()
    return frames


def _in_app(func: str, file: str, goroot: set[str]) -> bool:
    if func.startswith("runtime.") or func == "panic" or _LIBRARY_PATH.search(file):
        return False
    return not any(file.startswith(root + "/src/") for root in goroot)


def _parse_build(lines: list[str], hints: Hints) -> Parsed | None:
    """``./main.go:7:14: undefined: foo`` (after a ``# package`` line), reported at its own position."""
    seen_package = False
    for line in lines:
        if len(line) > _MAX_LINE:
            continue
        if line.startswith("# "):
            seen_package = True
            continue
        match = _DIAGNOSTIC.match(line)
        if match is None:
            continue
        # ``go build``, ``go run``, ``go vet`` and ``go test`` all print ``# package`` above their
        # diagnostics; without it, ``main.go:42: msg`` is more likely a ``log.Lshortfile`` line.
        if not seen_package and hints.kind != "go":
            return None
        type_ = "go vet error" if match.group("vet") else "go build error"
        where = Frame(file=match.group("file"), line=int(match.group("line")))
        return Parsed(type_, match.group("msg").strip(), "go", frames=(where,), location=where)
    return None


def _parse_test(lines: list[str]) -> Parsed | None:
    """A ``go test`` run's failing test: its first own line (position and message), see the module
    docstring; ``None`` when no test failed."""
    failed: list[str] = []
    said: dict[str, tuple[Frame, str]] = {}  # each test's first line
    current = ""
    for index, line in enumerate(lines):
        if len(line) > _MAX_LINE:
            continue
        started = _TEST_START.match(line) if line.startswith("=== ") else None
        if started is not None:
            current = started.group("name")
            continue
        failure = _TEST_FAIL.match(line) if "--- FAIL: " in line else None
        if failure is not None:
            current = failure.group("name")
            failed.append(current)
            continue
        own = _TEST_LINE.match(line) if current and current not in said and line[:1].isspace() else None
        if own is not None:
            message = own.group("msg").strip() or _continued(lines, index, len(own.group("indent")))
            said[current] = (Frame(own.group("file"), int(own.group("line")), current), message)
    if not failed:
        return None
    # A test fails when one of its subtests does: the subtests are the failures.
    parents = {name.rsplit("/", 1)[0] for name in failed if "/" in name}
    leaves = sorted({name for name in failed if name not in parents})
    first = next((name for name in leaves if name in said), leaves[0])
    if first not in said:
        return Parsed("go test FAIL", f"{first} failed", "go")  # t.Fail() says nothing
    where, message = said[first]
    more = len(leaves) - 1
    shown = f"{message} (+{more} more failed)" if more > 0 else message
    return Parsed("go test FAIL", shown, "go", frames=(where,), location=where, key_text=message)


def _continued(lines: list[str], at: int, indent: int) -> str:
    """The line after an empty ``calc_test.go:7:`` line, indented under it (a message starting with a
    line break)."""
    following = lines[at + 1] if at + 1 < len(lines) else ""
    deeper = len(following) - len(following.lstrip()) > indent
    return following.strip()[:_MAX_LINE] if deeper else ""
