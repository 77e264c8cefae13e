"""Parser for pytest's failure report: the ``FAILURES`` / ``ERRORS`` sections and the short summary.

pytest output embeds Python tracebacks, so this parser runs before the Python one; it claims text only
when pytest's own markers are present (``= FAILURES =``, ``= ERRORS =``, ``short test summary info`` or
a ``3 failed, 1 passed in 0.5s`` result line), never a plain traceback.

The digest describes the first failing test in report order:

* type: the exception class from the ``E   `` lines (``KeyError``), from the ``file.py:7: KeyError``
  line of the long traceback style, ``AssertionError`` for a bare ``E   assert …``, else ``Failed``
  as pytest itself calls an unexplained failure;
* cause: the exception message, then the test id and the count of other failures:
  ``'missing_key' (test_math.py::test_lookup; +2 more failed)``; the count is not keyed (fixing another
  test must not change the key of this one);
  a module that failed to import while pytest collected it says so (``No module named 'x' (collecting
  test_client.py)``), so a collection error never shares a key with the same exception inside a test;
* location: the innermost frame of the user's own code (``test_math.py:7 in lookup``), not pytest's or
  the standard library's; ``func`` comes from ``in name`` (``--tb=short``) or from the ``def`` line of
  the source pytest shows (the default long style).
"""

from __future__ import annotations

import re

from otel_errcompact.parsers._base import Frame, Hints, Parsed, cut, innermost_in_app, is_library_path

__all__ = ["declines", "parse"]

_FORMAT = "pytest"
_MAX_LINES = 6000
_MAX_MESSAGE_CHARS = 180

_MARKERS = ("= FAILURES =", "= ERRORS =", "short test summary info")
MARKERS = (*_MARKERS, " failed", " error")  # see parsers/__init__.py; an exit code tries every parser
# "3 failed, 1 passed in 0.56s", "1 passed, 1 error in 0.6s", with or without the ===== frame.
_RESULT = re.compile(r"^=*\s?\d+\s[a-z]+(?:,\s\d+\s[a-z]+)*\sin\s[\d.]+s\b", re.M)
_RESULT_COUNT = re.compile(r"(?P<count>\d+)\s(?P<what>failed|errors?)\b")
_SECTION = re.compile(r"^={3,}\s(?P<title>[^=\n]*?)\s={3,}$")
_TEST_HEADER = re.compile(r"^_{3,}\s(?P<name>.+?)\s_{3,}$")
_CAPTURED = re.compile(r"^-{3,}\s(?:Captured|captured)\s")
_LOCATION = re.compile(r"^(?P<file>\S+?):(?P<line>\d+):(?:\s(?P<rest>.*))?$")
_E_LINE = re.compile(r"^E(?:\s(?P<text>.*))?$")
_DEF = re.compile(r"^\s*(?:>\s+)?(?:async\s+)?def\s+(?P<name>[A-Za-z_]\w*)\s*\(")
_SUMMARY = re.compile(r"^(?P<kind>FAILED|ERROR)\s(?P<id>\S+)(?:\s-\s(?P<msg>.*))?$")
_EXC = re.compile(r"^(?P<type>(?:[A-Za-z_]\w*\.)*(?P<short>[A-Za-z_]\w*))(?::(?:\s(?P<msg>.*))?)?$")
_MISSING_FIXTURE = re.compile(r"fixture '[^']+' not found")
_HEADER_PREFIXES = ("ERROR at setup of ", "ERROR at teardown of ", "ERROR collecting ")


def declines(text: str) -> bool:
    """True when :func:`parse` returns ``None`` for ``text`` at its first test: no section marker, and
    either no ``failed`` or ``error`` at all or no line of pytest's closing result line's shape.

    The second test matters: a traceback's source lines say `` error`` and `` failed`` all the time
    (``except OSError as error:``, ``errors.fail(order)``), and a text this sends the whole way is
    parsed several times over. It looks at every line where :func:`parse` looks at the last 50, so it
    declines a subset of what :func:`parse` declines; and a text split at a line boundary (as
    :func:`~otel_errcompact.structured.parse_first` splits it) is declined only when both parts are."""
    for marker in _MARKERS:  # a plain loop: a generator costs more than these short tests
        if marker in text:
            return False
    if " failed" not in text and " error" not in text:
        return True
    return not any(_is_result_line(line) for line in text.splitlines())


def parse(text: str, hints: Hints) -> Parsed | None:
    """Digest the first failing test of a pytest run; ``None`` unless pytest's markers are present."""
    if not any(marker in text for marker in _MARKERS):
        if " failed" not in text and " error" not in text:
            return None
        if _result_total(text.splitlines()[-50:]) == 0:
            return None
    lines = text.splitlines()[:_MAX_LINES]
    sections = _failure_sections(lines)
    summary = [m for m in (_SUMMARY.match(line) for line in lines if line[:1] in "FE") if m is not None]
    total = _result_total(lines) or len(summary) or len(sections)
    if sections:
        name, body = sections[0]
        frames, exc_lines, long_type = _read_section(body)
    else:
        name, long_type = "", None
        exc_lines, frames = _loose_e_lines(lines)
    type_, message = _exception(exc_lines, long_type)
    if type_ is None and _MISSING_FIXTURE.fullmatch(message):
        type_ = "FixtureLookupError"  # pytest's own class for it; its E line names the fixture, not the type
    test_id = _test_id(name, summary)
    if type_ is None and summary:
        # --tb=no: only the summary line says what went wrong.
        first_summary = _matching_summary(name, summary) or summary[0]
        type_, message = _exception([first_summary["msg"] or ""], None)
    if type_ is None and not sections and not summary and total == 0:
        return None
    if test_id is None and not frames and type_ is None and total == 0:
        return None
    if test_id and name.startswith("ERROR collecting "):
        # A module that failed to import is not a failing test: keep the two apart in line and key.
        test_id = f"collecting {test_id}"
    location = innermost_in_app(frames)
    if location is None and test_id:
        location = Frame(test_id.removeprefix("collecting ").split("::", 1)[0])
    if not message and test_id is None:
        message = _result_text(lines)
    return Parsed(
        type_ or "Failed",
        _cause(message, test_id, max(total, 1) - 1 if test_id else 0),
        _FORMAT,
        frames=frames,
        location=location,
        key_text=_cause(message, test_id, 0),  # fixing another test must not change this one's key
    )


def _failure_sections(lines: list[str]) -> list[tuple[str, list[str]]]:
    """``(test name, lines)`` for every test reported under ``FAILURES`` or ``ERRORS``, in order."""
    sections: list[tuple[str, list[str]]] = []
    inside = False
    current: list[str] | None = None
    for line in lines:
        section = _SECTION.match(line) if line.startswith("===") else None
        if section is not None:
            inside = section["title"] in ("FAILURES", "ERRORS")
            current = None
            continue
        if not inside:
            continue
        header = _TEST_HEADER.match(line) if line.startswith("___") else None
        if header is not None:
            current = []
            sections.append((header["name"], current))
        elif current is not None:
            current.append(line)
    return sections


def _read_section(body: list[str]) -> tuple[tuple[Frame, ...], list[str], str | None]:
    """Frames (outermost first), the last block of ``E`` lines and the long style's exception type."""
    frames: list[Frame] = []
    blocks: list[list[str]] = []
    in_block = False
    pending_def: str | None = None
    long_type: str | None = None
    for line in body:
        if _CAPTURED.match(line):
            break  # captured stdout/log: the program's own text, not the report
        e_line = _E_LINE.match(line) if line[:1] == "E" else None
        if e_line is not None:
            if not in_block:
                blocks.append([])
                in_block = True
            blocks[-1].append(e_line["text"] or "")
            continue
        in_block = False
        definition = _DEF.match(line) if "def" in line else None
        if definition is not None:
            # The first def of a block is the function pytest is showing; later ones are nested.
            pending_def = pending_def or definition["name"]
            continue
        location = _LOCATION.match(line) if ":" in line and not line[:1].isspace() else None
        if location is None:
            continue
        rest = (location["rest"] or "").strip()
        if rest.startswith("in "):
            func: str | None = rest[3:].strip() or None
        else:
            func = pending_def
            if rest and _EXC.fullmatch(rest):
                long_type = rest.rsplit(".", 1)[-1]
        file = location["file"]
        frames.append(Frame(file, int(location["line"]), func, in_app=not is_library_path(file)))
        pending_def = None
    return tuple(frames), (blocks[-1] if blocks else []), long_type


def _loose_e_lines(lines: list[str]) -> tuple[list[str], tuple[Frame, ...]]:
    """The first run of ``E`` lines and the ``file:line:`` after it (``--tb=line`` prints no sections)."""
    found: list[str] = []
    for index, line in enumerate(lines):
        e_line = _E_LINE.match(line) if line[:1] == "E" else None
        if e_line is not None:
            found.append(e_line["text"] or "")
        elif found:
            for after in lines[index : index + 4]:
                location = _LOCATION.match(after) if ":" in after else None
                if location is not None:
                    file = location["file"]
                    return found, (Frame(file, int(location["line"]), None, not is_library_path(file)),)
            break
    return found, ()


def _exception(e_lines: list[str], long_type: str | None) -> tuple[str | None, str]:
    """``(type, message)`` from the first meaningful ``E`` line (``KeyError: 'k'``, ``assert 2 == 3``)."""
    first = next((line.strip() for line in e_lines if line.strip()), "")
    if not first:
        return long_type, ""
    if first == "assert" or first.startswith("assert "):
        return long_type or "AssertionError", first
    match = _EXC.match(first)
    if match is not None and match["short"][:1].isupper():
        return match["short"], (match["msg"] or "").strip()
    return long_type, first


def _test_id(name: str, summary: list[re.Match[str]]) -> str | None:
    chosen = _matching_summary(name, summary)
    if chosen is not None:
        return chosen["id"]
    if summary:
        return summary[0]["id"]
    for prefix in _HEADER_PREFIXES:
        if name.startswith(prefix):
            return name[len(prefix) :] or None
    return name or None


def _matching_summary(name: str, summary: list[re.Match[str]]) -> re.Match[str] | None:
    """The summary line for the test a section header names (``TestK.test_m`` ↔ ``f.py::TestK::test_m``)."""
    if not name:
        return None
    for prefix in _HEADER_PREFIXES:
        if name.startswith(prefix):
            name = name[len(prefix) :]
            break
    for entry in summary:
        test_id = entry["id"]
        dotted = test_id.replace("::", ".")
        if test_id == name or dotted.endswith("." + name) or test_id.endswith("::" + name):
            return entry
    return None


def _is_result_line(line: str) -> bool:
    """True for a line of the shape of pytest's closing result line (the substring test first: cheap)."""
    return " in " in line and _RESULT.match(line) is not None


def _result_total(lines: list[str]) -> int:
    """failed + errors from pytest's closing result line (``3 failed, 1 passed, 1 error in 0.5s``)."""
    for line in reversed(lines[-50:]):
        if _is_result_line(line):
            return sum(int(m["count"]) for m in _RESULT_COUNT.finditer(line))
    return 0


def _result_text(lines: list[str]) -> str:
    """``3 failed, 1 passed`` from the closing result line, for a run that printed nothing else."""
    for line in reversed(lines[-50:]):
        if _is_result_line(line):
            return line.strip("= ").rsplit(" in ", 1)[0]
    return ""


def _cause(message: str, test_id: str | None, more: int) -> str:
    message = " ".join(message.split())
    message = cut(message, _MAX_MESSAGE_CHARS)
    extra = [part for part in (test_id, f"+{more} more failed" if more > 0 else None) if part]
    if not extra:
        return message or "test failed"
    suffix = "; ".join(extra)
    return f"{message} ({suffix})" if message else suffix
