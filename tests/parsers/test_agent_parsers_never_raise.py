"""The agent-tool parsers and unwrappers never raise, whatever mix of their own markers they are fed.

The compactor would catch a parser's exception and fall back, which would hide the bug: these call the
parsers directly, on text built from the very markers that make them look deeper.
"""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from otel_errcompact.parsers import (
    apt,
    cmake,
    editor,
    git,
    linter,
    make,
    node_test,
    npm,
    pip,
    toolnode,
    unittest_report,
    usage,
)
from otel_errcompact.parsers._base import Hints
from otel_errcompact.unwrap import harness, lint_gate

FRAGMENTS = [
    "<returncode>", "</returncode>", "<output>", "</output>", "<tool_use_error>", "</tool_use_error>", "Exit code 2",
    "[Command finished with exit code 1]", "[The command completed with exit code 7.]", "ERROR:", "DO NOT re-run",
    "Your proposed edit has introduced new syntax error(s).", "ERRORS:", "[File: /w/a.py (3 lines total)]",
    "This is how your edit would have looked if applied", "- E999 IndentationError: unexpected indent",
    "a.py:1:2: F821 undefined name 'x'", " --> a.py:3:4", "  4:31  error  'x' is not defined  no-undef",
    "/w/client.js", "make: *** [Makefile:6: build] Error 1", "make: *** No rule to make target 'x'.  Stop.",
    "CMake Error at CMakeLists.txt:4 (find_package):", "  By not providing", "E: Unable to locate package x",
    "W: Failed to fetch http://h/x  Could not resolve 'h'", "Err:1 http://h", "ERROR: No matching distribution",
    "npm error code ERESOLVE", "npm error Found: a@1", "npm error Could not resolve dependency:",
    " ! [rejected]        main -> main (fetch first)", "CONFLICT (content): Merge conflict in a.py",
    "error: could not apply 1234567... x", "fatal: not a git repository", "not ok 1 - t", "  ---", "  ...",
    "  error: |-", "  stack: |-", "    at x (/w/a.test.js:1:2)", "=" * 70, "-" * 70, "ERROR: setUpClass (a.B)",
    "Traceback (most recent call last):", '  File "a.py", line 1, in f', "ValueError: x", "Ran 1 test in 0.1s",
    "FAILED (errors=1)", "old_str `", "Invalid `path` parameter: /x.", "Parameter `old_str` is required",
    "usage: t.py [-h] n", "t.py: error: argument n: invalid int value: 'x'", "usage: ", ": error: ",
    "Error invoking tool 't' with kwargs {'a': 1} with error:", " Please fix the error and try again.",
    "a: Field required",
    "`", "[", "]", ":", "", " ", "\t", "é", "\\n",
]
PARSERS = [apt.parse, cmake.parse, editor.parse, git.parse, linter.parse, make.parse, node_test.parse, npm.parse,
           pip.parse, toolnode.parse, unittest_report.parse, usage.parse]
UNWRAPPERS = [harness.unwrap, lint_gate.unwrap]

texts = st.lists(st.sampled_from(FRAGMENTS), max_size=40).map("\n".join)
hints = st.builds(Hints, exit_code=st.none() | st.integers(-300, 300), command=st.none() | st.sampled_from(
    ["git push", "make", "pip install x", "npm install", "flake8 a.py"]))


@settings(max_examples=300, deadline=None)
@given(texts, hints)
def test_parsers_never_raise(text: str, hint: Hints) -> None:
    for parse in PARSERS:
        result = parse(text, hint)
        assert result is None or (result.type and isinstance(result.cause, str))


@settings(max_examples=300, deadline=None)
@given(texts, hints)
def test_unwrappers_never_raise_nor_empty_the_text(text: str, hint: Hints) -> None:
    for unwrap in UNWRAPPERS:
        result = unwrap(text, hint)
        assert result is None or result[0].strip()
