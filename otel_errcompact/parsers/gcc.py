"""Parser for gcc / g++ (and clang, which shares the format) diagnostics and for linker failures.

Naming, chosen so the dedup key stays stable from one run to the next:

* a compile error is ``gcc error`` for C sources and ``g++ error`` for C++ (decided from the file
  extensions and the C++ signatures in ``In function 'int main()':`` lines); when the caller says the
  command was clang, ``clang error`` / ``clang++ error``;
* a link failure (``undefined reference to 'missing_fn'``, ``collect2: error: ld returned 1 exit
  status``, ``cannot find -lfoo``) is ``ld error``.

The cause is the first error's message with gcc's typographic quotes turned into ASCII ones (the locale
decides which quotes gcc prints; the key must not), plus ``(+N more)`` when more errors followed (not
keyed: fixing another error must not change the key of this one). The
location is the first error's ``file:line``; ``func`` comes from the ``In function 'x':`` context line.
An error inside a system header (a template from the STL) is located where the user's code instantiated
it: gcc's ``main.cpp:12:14:   required from here``, clang's ``… requested here`` note.
Warnings and notes never become the digest: a run with only warnings is not this parser's business.
"""

from __future__ import annotations

import re
from pathlib import PurePath

from otel_errcompact.parsers._base import Frame, Hints, Parsed, is_library_path

__all__ = ["parse"]
MARKERS = ("error", "Undefined symbols")  # see parsers/__init__.py

_FORMAT = "gcc"
_MAX_LINES = 4000

_QUOTES = str.maketrans({"\u2018": "'", "\u2019": "'", "\u201c": '"', "\u201d": '"', "`": "'"})

# file:line[:col]: severity: message. The file part excludes ':' (bar an optional drive letter), so the
# lazy match cannot backtrack across the line.
_DIAG = re.compile(
    r"^(?P<file>(?:[A-Za-z]:)?[^:\n]+?):(?P<line>\d+):(?:(?P<col>\d+):)?\s"
    r"(?P<sev>fatal error|error|warning|note):\s(?P<msg>.*)$"
)
# "a.c: In function 'main':", "c.cpp: In member function 'int S::get() const':", "a.c: At top level:".
_CONTEXT = re.compile(
    r"^(?P<file>(?:[A-Za-z]:)?[^:\n]+?):\s(?:In\s[a-z ]*?(?:function|constructor|destructor)"
    r"(?:\s[\u2018'`](?P<sig>[^\u2019'\n]*)[\u2019'])?|(?P<top>At top level)):\s*$"
)
# Errors from the driver or a helper that carry no position: "cc1: fatal error: x.c: No such file…",
# "collect2: error: ld returned 1 exit status", "clang: error: linker command failed…".
_TOOL_ERROR = re.compile(
    r"^(?P<tool>(?:[\w.+-]*-)?(?:gcc|g\+\+|cc|c\+\+|cc1|cc1plus|clang|clang\+\+|collect2)(?:-[\d.]+)?)"
    r":\s(?:fatal\s)?error:\s(?P<msg>.*)$"
)
_LINK_KEYWORDS = re.compile(
    r"undefined reference to |multiple definition of |cannot find -l"
    r"|Undefined symbols for architecture"
)
_LINKER_PREFIX = re.compile(r"^(?:\S*/)?(?:ld|ld\.\w+|ld64(?:\.lld)?|lld)(?:\.exe)?:(?:\s|$)(?:error:\s)?")
_LINK_IN_FUNCTION = re.compile(r"in function [\u2018'`](?P<func>[^\u2019'\n]+)[\u2019']:\s*$")
_LINK_WHERE = re.compile(r"^(?P<file>(?:[A-Za-z]:)?[^:\n]+?)(?::(?P<line>\d+))?(?::\([^)\n]*\))?:?$")
_MACH_O_SYMBOL = re.compile(r'^\s+"(?P<sym>[^"\n]+)", referenced from:')
# A template instantiated from user code: gcc prints the chain above the error and marks the user's line
# ``main.cpp:12:14:   required from here``; clang marks it in a note after the error (``requested here``).
_REQUIRED_HERE = re.compile(r"^(?P<file>(?:[A-Za-z]:)?[^:\n]+?):(?P<line>\d+):(?:\d+:)?\s+required from here\s*$")
_REQUESTED_HERE = re.compile(
    r"^(?P<file>(?:[A-Za-z]:)?[^:\n]+?):(?P<line>\d+):(?:\d+:)?\s+note:\s+in instantiation of .* requested here$"
)
_SYSTEM_HEADER = re.compile(r"^/usr/(?:local/)?(?:include|lib)/|[\\/]include[\\/]c\+\+[\\/]|[\\/]bits[\\/]")
_SKIP_EXTENSIONS = frozenset({".py", ".pyi", ".java", ".rs", ".go", ".ts", ".tsx", ".js", ".swift"})
_CXX_EXTENSIONS = frozenset(
    {".cc", ".cpp", ".cxx", ".c++", ".cp", ".hpp", ".hh", ".hxx", ".h++", ".ii", ".tcc", ".ipp", ".ixx"}
)
_OBJECT_EXTENSIONS = frozenset({".o", ".obj", ".a", ".so", ".lo", ".dylib", ".lib"})


def parse(text: str, hints: Hints) -> Parsed | None:
    """Digest the first compile error (or, failing that, the first link error) in gcc-style output.

    >>> parse("x.c:3:5: error: 'y' undeclared (first use in this function)\\n", Hints()).cause
    "'y' undeclared (first use in this function)"
    """
    if "error" not in text and "Undefined symbols" not in text:
        return None
    lines = text.splitlines()[:_MAX_LINES]
    compiled = _compile_error(lines, hints)
    if compiled is not None:
        return compiled
    return _link_error(lines)


def _compile_error(lines: list[str], hints: Hints) -> Parsed | None:
    first: tuple[str, int, str, str | None] | None = None  # file, line, message, func
    errors = 0
    cxx = _command_is_cxx(hints.command)
    context_file: str | None = None
    context_func: str | None = None
    tool_message: str | None = None
    user_site: Frame | None = None  # where user code instantiated the template the first error is in
    for line in lines:
        if "here" in line and (first is None or user_site is None):
            site = _REQUIRED_HERE.match(line) if first is None else _REQUESTED_HERE.match(line)
            if site is not None and not _SYSTEM_HEADER.search(site["file"]):
                user_site = Frame(site["file"], int(site["line"]), None, in_app=True)
                continue
        if ": " not in line:
            continue
        diag = _DIAG.match(line)
        if diag is not None:
            file = diag["file"]
            suffix = PurePath(file).suffix
            if suffix in _SKIP_EXTENSIONS:
                continue
            if suffix in _CXX_EXTENSIONS:
                cxx = True
            if diag["sev"] in ("error", "fatal error"):
                errors += 1
                if first is None:
                    func = context_func if context_file == file else None
                    first = (file, int(diag["line"]), diag["msg"], func)
            continue
        context = _CONTEXT.match(line)
        if context is not None:
            context_file = context["file"]
            sig = context["sig"]
            if sig and "(" in sig:
                cxx = True
            context_func = _function_name(sig) if sig and not context["top"] else None
            continue
        tool = _TOOL_ERROR.match(line)
        if tool is not None and tool["tool"] != "collect2" and tool_message is None:
            if "linker command failed" not in tool["msg"]:
                tool_message = tool["msg"]
            if "++" in tool["tool"] or tool["tool"].endswith("cc1plus"):
                cxx = True
    type_ = _type_name(cxx, hints.command)
    if first is not None:
        file, line_no, message, func = first
        keyed = _ascii_quotes(message)
        cause = _with_more(keyed, errors - 1)
        if user_site is not None and (_SYSTEM_HEADER.search(file) or is_library_path(file)):
            # An error inside a standard header is the user's: point at the line that instantiated it.
            return Parsed(type_, cause, _FORMAT, location=user_site, key_text=keyed)
        return Parsed(type_, cause, _FORMAT, location=Frame(file, line_no, func, in_app=True), key_text=keyed)
    if tool_message is not None:
        return Parsed(type_, _ascii_quotes(tool_message), _FORMAT)
    return None


def _link_error(lines: list[str]) -> Parsed | None:
    """The first undefined/duplicate symbol or missing library in linker output."""
    first: str | None = None
    where: Frame | None = None
    func: str | None = None
    errors = 0
    linker_seen = False
    mach_o = False
    for line in lines:
        if mach_o:
            symbol = _MACH_O_SYMBOL.match(line)
            if symbol is not None:
                errors += 1
                if first is None:
                    first = f"undefined symbol '{symbol['sym']}'"
                continue
            if not line.startswith((" ", "\t")):
                mach_o = False
        in_function = _LINK_IN_FUNCTION.search(line) if line.endswith(":") else None
        if in_function is not None:
            func = _ascii_quotes(in_function["func"])
            linker_seen = True
            continue
        keyword = _LINK_KEYWORDS.search(line)
        if keyword is not None:
            linker_seen = True
            if keyword.group(0).startswith("Undefined symbols"):
                mach_o = True
                continue
            errors += 1
            if first is None:
                first = _ascii_quotes(line[keyword.start() :].strip())
                where = _link_location(line[: keyword.start()], func)
            continue
        prefix = _LINKER_PREFIX.match(line)
        if prefix is not None:
            linker_seen = True
            # lld: "ld.lld: error: undefined symbol: missing_fn". A bare "undefined symbol" elsewhere is
            # the dynamic loader at run time, not a link step, so only the linker's own lines count.
            if "error:" in prefix.group(0):
                errors += 1
                if first is None:
                    first = _ascii_quotes(line[prefix.end() :])
        elif line.startswith("collect2:"):
            linker_seen = True
    if first is None:
        if not linker_seen:
            return None
        first = _first_tool_message(lines) or "link failed"
    cause = _with_more(first, errors - 1)
    return Parsed("ld error", cause, _FORMAT, location=where, key_text=first)


def _first_tool_message(lines: list[str]) -> str | None:
    for line in lines:
        match = _TOOL_ERROR.match(line)
        if match is not None:
            return _ascii_quotes(match["msg"])
    return None


def _link_location(prefix: str, func: str | None) -> Frame | None:
    """The source position ld prints before a message (``b.c:(.text+0xa):``, ``/src/b.c:2:``)."""
    prefix = _LINKER_PREFIX.sub("", prefix.lstrip()).strip()
    match = _LINK_WHERE.match(prefix)
    if match is None:
        return None
    file = match["file"].strip()
    if not file or PurePath(file).suffix in _OBJECT_EXTENSIONS or "(" in file:
        return None
    line = int(match["line"]) if match["line"] else None
    return Frame(file, line, func, in_app=not is_library_path(file))


def _function_name(signature: str) -> str:
    """``int ns::S::get(int) const`` → ``ns::S::get``; a C name passes through."""
    head = signature.split("(", 1)[0].strip()
    name = head.rsplit(" ", 1)[-1] if " " in head else head
    return name.lstrip("*&") or signature


def _type_name(cxx: bool, command: str | None) -> str:
    tool = _command_tool(command)
    if tool.startswith("clang"):
        return "clang++ error" if cxx or tool == "clang++" else "clang error"
    return "g++ error" if cxx else "gcc error"


def _command_tool(command: str | None) -> str:
    if not command:
        return ""
    first = command.strip().split(None, 1)[0] if command.strip() else ""
    return PurePath(first).name


def _command_is_cxx(command: str | None) -> bool:
    tool = _command_tool(command)
    return tool.endswith(("g++", "c++", "clang++")) or re.search(r"g\+\+-\d+$", tool) is not None


def _ascii_quotes(text: str) -> str:
    return text.translate(_QUOTES).strip()


def _with_more(cause: str, more: int) -> str:
    """Append the count of the other errors; the key is built without it (``Parsed.key_text``), so fixing
    another error does not change the key of this one."""
    return f"{cause} (+{more} more)" if more > 0 else cause
