"""The python parser's fast path for the common shape of a traceback (``parse_plain``) and the structured
fast path built on it (``parse_exception``) answer exactly what the line-by-line parser answers.

Every traceback here is printed by CPython for code that really ran; the corpus texts are the agent-error
corpus in ``benchmarks/agent_corpus``. Where a fast path answers, its type, cause and location must equal
those of the full parser; where the full parser treats a shape specially, the fast path must decline.
"""

from __future__ import annotations

import json
import linecache
import sys
import traceback
from collections.abc import Iterator
from pathlib import Path
from types import ModuleType

import pytest

from otel_errcompact._sanitize import sanitize
from otel_errcompact.compactor import Compactor
from otel_errcompact.parsers import Hints, Parsed
from otel_errcompact.parsers import python as python_parser
from otel_errcompact.structured import parse_exception
from otel_errcompact.unwrap import unwrap
from tests.deeperrors import deep_app, deep_exception, deep_traceback
from tests.realerrors import python_error

CORPUS = Path(__file__).resolve().parents[2] / "benchmarks" / "agent_corpus"

# Shapes the full parser treats specially, each raised by real code.
SHAPES = {
    "chained": "def load(c):\n    return c['db']\n\ntry:\n    load({})\nexcept KeyError as exc:\n"
    "    raise RuntimeError('config load failed') from exc\n",
    "during_handling": "try:\n    {}['k']\nexcept KeyError:\n    1 / 0\n",
    "from_none_root": "err = KeyError('sku-7')\ntry:\n    raise ValueError('wrapper') from err\nexcept ValueError:\n"
    "    raise\n",
    "group": "raise ExceptionGroup('batch failed', [ValueError('bad id 7'), KeyError('sku')])\n",
    "syntax": "compile('def f(:\\n    pass\\n', 'gen.py', 'exec')\n",
    "note": "e = ValueError('bad amount 12')\ne.add_note('Hint: while pricing order 12')\nraise e\n",
    "multiline": "raise ValueError('first line\\nSecond: line')\n",
    "bare_assert": "def check(resp):\n    assert resp['status'] == 200\n\ncheck({'status': 500})\n",
    "logged_then_fatal": "import logging, sys\nlogging.basicConfig(stream=sys.stderr)\n"
    "try:\n    {}['first']\nexcept KeyError:\n    logging.exception('handled')\nraise KeyError('second')\n",
}
PLAIN = {
    "key": "def load(users, name):\n    return users[name]\n\nload({}, 'alice')\n",
    "bare": "def stop():\n    raise StopIteration\n\nstop()\n",
    "empty_message": "raise ValueError('')\n",
    "library_innermost": "import json\n\ndef read(text):\n    return json.loads(text)\n\nread('{')\n",
    "module_qualified": "import sqlite3\nsqlite3.connect(':memory:').execute('SELECT * FROM orders_7')\n",
}


def _full(text: str) -> Parsed | None:
    units = python_parser._units(text)
    return python_parser._digest(units) if units else None


def _same(fast: Parsed, full: Parsed | None) -> bool:
    return full is not None and (fast.type, fast.cause, fast.location) == (full.type, full.cause, full.location)


def _corpus_texts() -> Iterator[str]:
    for path in sorted(CORPUS.glob("*.jsonl")):
        if path.name.endswith(".pairs.jsonl"):
            continue
        for line in path.read_text(encoding="utf-8").splitlines():
            if line.strip():
                text = json.loads(line)["text"]
                yield text
                yield unwrap(sanitize(text)[0], Hints())[0]  # what the parsers see inside the compactor


@pytest.fixture(scope="module")
def app(tmp_path_factory: pytest.TempPathFactory) -> ModuleType:
    return deep_app(tmp_path_factory.mktemp("deep"))


@pytest.fixture(scope="module")
def shapes(tmp_path_factory: pytest.TempPathFactory) -> dict[str, str]:
    folder = tmp_path_factory.mktemp("shapes")
    return {name: python_error(folder, source, name=f"{name}.py") for name, source in {**SHAPES, **PLAIN}.items()}


def test_the_fast_path_answers_what_the_full_parser_answers(app: ModuleType, shapes: dict[str, str]) -> None:
    texts = [*_corpus_texts(), *shapes.values(), *(deep_traceback(app, order) for order in range(25))]
    answered = 0
    for text in texts:
        fast = python_parser.parse_plain(text)
        if fast is not None:
            answered += 1
            assert _same(fast, _full(text)), text
    assert answered >= 60  # the corpus's plain tracebacks, the plain shapes and the deep ones


def test_the_fast_path_takes_the_plain_shapes_and_declines_the_special_ones(shapes: dict[str, str]) -> None:
    for name in PLAIN:
        assert python_parser.parse_plain(shapes[name]) is not None, name
    for name in SHAPES:
        assert python_parser.parse_plain(shapes[name]) is None, name


def test_a_line_at_column_0_inside_the_frames_sends_the_text_to_the_full_parser(app: ModuleType) -> None:
    text = deep_traceback(app, 3)
    lines = text.splitlines(keepends=True)
    # A log line another thread wrote between two frames: the full parser may read it as an exception.
    interleaved = "".join([*lines[:5], "Warning: cache miss\n", *lines[5:]])
    assert python_parser.parse_plain(interleaved) is None
    assert python_parser.parse_plain(text) is not None


def test_structured_fields_give_the_full_parsers_answer(app: ModuleType) -> None:
    for order in range(25):
        exc = deep_exception(app, order)
        text = "".join(traceback.format_exception(exc))
        kind = type(exc)
        name = kind.__qualname__ if kind.__module__ == "builtins" else f"{kind.__module__}.{kind.__qualname__}"
        fast = parse_exception(text, name, str(exc))
        assert fast is not None and _same(fast, _full(text)), text


def _windows_traceback() -> str:
    """A real traceback whose innermost frame is CPython's own library on Windows: the standard library's
    JSON decoder and an application module, compiled under Windows paths (as a Windows run prints them)."""
    library = r"C:\Program Files\Python311\Lib\json\loader.py"
    application = r"C:\Users\dev\shop\app.py"
    sources = {
        library: "def decode(text):\n    raise ValueError(f'Expecting value: {text!r}')\n",
        application: "def load(decode):\n    return decode('{')\n",
    }
    namespaces: dict[str, dict[str, object]] = {}
    for name, source in sources.items():
        linecache.cache[name] = (len(source), None, source.splitlines(True), name)
        namespaces[name] = {"__name__": name}
        exec(compile(source, name, "exec"), namespaces[name])
    try:
        namespaces[application]["load"](namespaces[library]["decode"])  # type: ignore[operator]
    except ValueError:
        return traceback.format_exc()
    raise AssertionError("the decoder did not fail")


def test_a_windows_standard_library_frame_is_library_code_on_every_path() -> None:
    text = _windows_traceback()
    full = _full(text)
    assert full is not None and full.location is not None and full.location.file.endswith("app.py")
    fast = python_parser.parse_plain(text)
    assert fast is not None and _same(fast, full)
    structured = parse_exception(text, "ValueError", "Expecting value: '{'")
    assert structured is not None and _same(structured, full)
    digest = Compactor(digest_cache_size=0).compact(text, exception_type="ValueError",
                                                    exception_message="Expecting value: '{'")
    assert digest.location is not None and digest.location.func == "load"


@pytest.mark.skipif(sys.version_info < (3, 11), reason="exception notes need Python 3.11")
def test_the_compactor_gives_one_digest_whatever_path_it_takes(shapes: dict[str, str]) -> None:
    fast = Compactor(digest_cache_size=0)
    full_only = Compactor(((kind, lambda text, hints, p=p: p(text, hints)) for kind, p in fast._parsers),
                          digest_cache_size=0)  # the same parsers behind wrappers: no fast path is taken
    for text in shapes.values():
        assert fast.compact(text) == full_only.compact(text), text


def test_a_remembered_body_gives_the_answer_of_the_whole_text(app: ModuleType) -> None:
    """``parse_first`` reads the body above the last line once per body; the last line is read every time,
    so a message that holds what a parser ahead of python looks for still sends the text the whole way."""
    from otel_errcompact.parsers import linter, pytest_report
    from otel_errcompact.structured import parse_first

    body = deep_traceback(app, 0).rstrip("\n").rsplit("\n", 1)[0] + "\n"
    last_lines = ["KeyError: 'order-1'", "KeyError: '3 failed in 0.5s'", "KeyError: 'x:12 y'",
                  "Traceback (most recent call last):", "ValueError: an error occurred", "StopIteration",
                  "  KeyError: 'indented'", "ValueError: short test summary info"]
    for _ in range(2):  # the first round reads the body, the second takes it from memory
        for last in last_lines:
            text = f"{body}{last}\n"
            fast = python_parser.parse_plain(text)
            whole_way = fast is None or not linter.declines_unbulleted(text) or not pytest_report.declines(text)
            answer = parse_first(text)
            if whole_way:
                assert answer is None, last
            else:
                assert answer is not None and _same(answer, _full(text)), last
                assert answer.location == fast.location
    broken = body.replace('  File "', 'File "', 1)  # a line at column 0 in the body: never the plain shape
    for _ in range(2):
        assert parse_first(f"{broken}KeyError: 'order-1'\n") is None
