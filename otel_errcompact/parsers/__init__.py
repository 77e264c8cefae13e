"""Format parsers, tried in order; the first that recognises the text wins.

Each module holds one format and one function ``parse(text, hints) -> Parsed | None``. Adding a format
is one new module and one line in ``PARSERS``. Order matters where formats nest: pytest output embeds
Python tracebacks, so it is tried first; the JVM, node and Go parsers come before the HTTP parser because
their stack traces can quote a status code; a command-line usage error (``usage: …`` then ``prog: error:
…``) is claimed before mypy, whose line-less ``file.py: error: …`` looks alike; compiler parsers come
before the shell parser because a failing compiler also exits non-zero; Maven's comes before the JVM's
because with ``-e`` its error line is followed by a Java stack trace of Maven's own. ``fallback`` is not in
the tuple: the compactor uses it (or an LLM summariser, when one is configured) only when no parser matched.

A parser module may also define ``MARKERS: tuple[str, ...]``: substrings at least one of which occurs in
every text the parser can recognise. The compactor may skip a parser none of whose markers occur, so a
marker list must err on the side of too many. A module without ``MARKERS`` is always tried. Markers are
matched ignoring case, and every parser is tried when the caller passes an exit code or a command (a
parser may recognise a failure by those hints alone). Framing put
around an error by harnesses and loggers is taken off before parsing (``otel_errcompact.unwrap``).
"""

from __future__ import annotations

from otel_errcompact.parsers import (
    apt,
    cmake,
    editor,
    gcc,
    git,
    go,
    http,
    ipython,
    javac,
    jvm,
    linter,
    make,
    maven,
    mypy,
    node,
    node_test,
    npm,
    pip,
    pytest_report,
    python,
    rust_panic,
    rustc,
    shell,
    toolnode,
    tsc,
    unittest_report,
    usage,
    yq,
)
from otel_errcompact.parsers._base import Frame, Hints, Parsed, Parser, innermost_in_app, is_library_path

PARSERS: tuple[tuple[str, Parser], ...] = (
    ("pytest", pytest_report.parse),
    ("unittest", unittest_report.parse),
    ("linter", linter.parse),
    ("ipython", ipython.parse),
    ("python", python.parse),
    ("maven", maven.parse),
    ("jvm", jvm.parse),
    ("node-test", node_test.parse),
    ("node", node.parse),
    ("go", go.parse),
    ("usage", usage.parse),
    ("mypy", mypy.parse),
    ("gcc", gcc.parse),
    ("javac", javac.parse),
    ("rust-panic", rust_panic.parse),
    ("rustc", rustc.parse),
    ("tsc", tsc.parse),
    ("cmake", cmake.parse),
    ("make", make.parse),
    ("npm", npm.parse),
    ("pip", pip.parse),
    ("apt", apt.parse),
    ("yq", yq.parse),
    ("git", git.parse),
    ("editor", editor.parse),
    ("toolnode", toolnode.parse),
    ("http", http.parse),
    ("shell", shell.parse),
)
"""``(kind, parse)`` pairs in the order the compactor tries them. ``kind`` is what ``Hints.kind`` names."""

__all__ = ["PARSERS", "Frame", "Hints", "Parsed", "Parser", "innermost_in_app", "is_library_path"]
