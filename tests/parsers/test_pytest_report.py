"""The pytest report parser, on reports printed by real ``python -m pytest`` runs in tmp_path."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from otel_errcompact.compactor import compact_text
from otel_errcompact.digest import Digest
from otel_errcompact.parsers import pytest_report
from otel_errcompact.parsers._base import Hints
from tests.realerrors import python_error, run, write

MATH_TESTS = """
    import json
    {pad}
    def add(a, b):
        return a + b - 1

    def lookup(d):
        return d["{key}"]

    def test_add():
        assert add({x}, 2) == {x} + 2

    def test_lookup():
        assert lookup({{"a": 1}}) == 1

    def test_ok():
        assert True

    def test_json():
        json.loads("{{bad")
"""


def _pytest(folder: Path, source: str, *flags: str, name: str = "test_math.py",
            expect_failure: bool = True) -> tuple[str, Digest]:
    folder.mkdir(parents=True, exist_ok=True)
    write(folder, name, source)
    # Installed plugins (phoenix's pulls in a web server) only slow the inner run down; the report format
    # is pytest's own.
    result = run([sys.executable, "-m", "pytest", "-p", "no:cacheprovider", *flags, name], cwd=folder,
                 env={"PYTEST_DISABLE_PLUGIN_AUTOLOAD": "1"})
    if expect_failure:
        assert result.returncode != 0, result.output
    return result.output, compact_text(result.output, exit_code=result.returncode)


def _math(pad: str = "", key: str = "missing_key", x: int = 1) -> str:
    return MATH_TESTS.format(pad=pad, key=key, x=x)


@pytest.mark.parametrize("tb", ["auto", "short", "long"])
def test_first_failure_is_digested(tmp_path: Path, tb: str) -> None:
    raw, d = _pytest(tmp_path, _math(), f"--tb={tb}")
    assert "= FAILURES =" in raw and "3 failed, 1 passed" in raw
    assert (d.type, d.format, d.retryable) == ("AssertionError", "pytest", False)
    assert d.cause == "assert 2 == (1 + 2) (test_math.py::test_add; +2 more failed)"
    assert d.location is not None
    assert (d.location.file, d.location.line, d.location.func) == ("test_math.py", 10, "test_add")


def test_exception_type_and_message_come_from_the_e_lines(tmp_path: Path) -> None:
    source = _math().replace("def test_add", "def _skip_add")
    raw, d = _pytest(tmp_path, source)
    assert "E       KeyError: 'missing_key'" in raw
    assert d.type == "KeyError"
    assert d.cause == "'missing_key' (test_math.py::test_lookup; +1 more failed)"
    # innermost frame of the user's code: the helper that raised, not the test that called it
    assert d.location is not None
    assert (d.location.file, d.location.line, d.location.func) == ("test_math.py", 7, "lookup")


def test_short_traceback_style_gives_the_same_digest(tmp_path: Path) -> None:
    source = _math().replace("def test_add", "def _skip_add")
    _, auto = _pytest(tmp_path / "a", source)
    raw, short = _pytest(tmp_path / "b", source, "--tb=short")
    assert "test_math.py:7: in lookup" in raw
    assert short.line == auto.line
    assert short.key == auto.key


def test_library_frames_are_not_the_location(tmp_path: Path) -> None:
    source = _math().replace("def test_add", "def _skip_add").replace("def test_lookup", "def _skip_lookup")
    raw, d = _pytest(tmp_path, source)
    assert "json/decoder.py" in raw  # the innermost frame is in the standard library
    assert d.type == "JSONDecodeError"
    assert "Expecting property name" in d.cause and "test_math.py::test_json" in d.cause
    assert d.location is not None
    assert (d.location.file, d.location.line, d.location.func) == ("test_math.py", 19, "test_json")


def test_key_is_stable_across_runs_and_distinct_per_cause(tmp_path: Path) -> None:
    _, first = _pytest(tmp_path / "a", _math())
    _, again = _pytest(tmp_path / "b", _math(pad="\n\n\n", x=40))
    assert again.location is not None and again.location.line == 13  # the lines really moved
    assert "assert 41 == (40 + 2)" in again.cause
    assert first.key == again.key

    only_lookup = _math().replace("def test_add", "def _skip_add")
    _, key_a = _pytest(tmp_path / "c", only_lookup)
    _, key_b = _pytest(tmp_path / "d", only_lookup.replace("missing_key", "other_key"))
    assert "'other_key'" in key_b.cause
    assert key_a.key != key_b.key


def test_fixing_another_test_keeps_the_key_of_the_first(tmp_path: Path) -> None:
    """``+1 more failed`` is shown but not keyed: once the other test passes, the unchanged first failure
    keeps its key; another first failure has another."""
    source = """
        def test_a():
            {{}}["{key}"]

        def test_b():
            assert 1 == {b}
    """
    _, both = _pytest(tmp_path / "both", source.format(key="user_id", b=2))
    _, alone = _pytest(tmp_path / "alone", source.format(key="user_id", b=1))
    _, other = _pytest(tmp_path / "other", source.format(key="order_id", b=1))
    assert both.cause == "'user_id' (test_math.py::test_a; +1 more failed)"
    assert alone.cause == "'user_id' (test_math.py::test_a)"
    assert both.key == alone.key
    assert other.key != alone.key


def test_tb_line_and_tb_no_still_name_the_cause(tmp_path: Path) -> None:
    source = _math().replace("def test_add", "def _skip_add")
    raw_line, line_style = _pytest(tmp_path / "a", source, "--tb=line", "-q")
    assert "_ test_lookup _" not in raw_line  # no per-test sections in this style
    assert line_style.type == "KeyError"
    assert line_style.cause == "'missing_key' (test_math.py::test_lookup; +1 more failed)"
    assert line_style.location is not None and line_style.location.line == 7

    raw_no, no_tb = _pytest(tmp_path / "b", source, "--tb=no", "-q")
    assert "= FAILURES =" not in raw_no
    assert no_tb.type == "KeyError"
    assert no_tb.cause == "'missing_key' (test_math.py::test_lookup; +1 more failed)"
    assert no_tb.location is not None and no_tb.location.file == "test_math.py"


def test_collection_error_names_the_module(tmp_path: Path) -> None:
    source = """
        import zz_no_such_module
        def test_a():
            pass
    """
    raw, d = _pytest(tmp_path, source, name="test_col.py")
    assert "= ERRORS =" in raw and "ERROR collecting" in raw
    assert d.type == "ModuleNotFoundError"
    assert d.cause == "No module named 'zz_no_such_module' (collecting test_col.py)"
    assert d.location is not None and (d.location.file, d.location.line) == ("test_col.py", 1)


def test_fixture_error_and_class_test_ids(tmp_path: Path) -> None:
    source = """
        import pytest

        @pytest.fixture
        def db():
            raise ConnectionError("database refused the connection")

        def test_query(db):
            pass

        class TestCart:
            def test_total(self):
                assert {"a": 1} == {"a": 2}
    """
    raw, d = _pytest(tmp_path, source, name="test_fix.py")
    assert "ERROR at setup of test_query" in raw and "1 failed, 1 error" in raw
    assert d.type == "ConnectionError"
    assert d.cause == "database refused the connection (test_fix.py::test_query; +1 more failed)"
    assert d.location is not None and (d.location.line, d.location.func) == (5, "db")

    _, cls = _pytest(tmp_path / "cls", source.replace('raise ConnectionError("database refused the connection")',
                                                      "return 1"), name="test_fix.py")
    assert cls.type == "AssertionError"
    assert cls.cause == "assert {'a': 1} == {'a': 2} (test_fix.py::TestCart::test_total)"
    assert cls.location is not None and cls.location.func == "test_total"


def test_plain_python_traceback_is_not_claimed(tmp_path: Path) -> None:
    raw = python_error(tmp_path, """
        def test_lookup():
            return {"a": 1}["failed"]
        test_lookup()
    """)
    assert raw.startswith("Traceback (most recent call last):")
    assert pytest_report.parse(raw, Hints()) is None


def test_passing_run_is_not_claimed(tmp_path: Path) -> None:
    raw, _ = _pytest(tmp_path, "def test_ok():\n    assert 1 + 1 == 2\n", "-rA", expect_failure=False)
    assert "1 passed" in raw and "short test summary info" in raw
    assert pytest_report.parse(raw, Hints()) is None


@pytest.mark.timeout(60)  # a hang guard against catastrophic backtracking; speed is measured in benchmarks/
def test_parser_stays_fast_on_huge_output(tmp_path: Path) -> None:
    body = "\n".join(
        f"def test_case_{i}():\n    assert {i} == {i + 1}\n" for i in range(300)
    )
    raw, d = _pytest(tmp_path, body)
    assert "300 failed" in raw
    assert d.cause == "assert 0 == 1 (test_math.py::test_case_0; +299 more failed)"
    hostile = raw + "E" * 60_000 + "\n" + ":" * 60_000 + "1:" * 5000 + "\n"
    parsed = pytest_report.parse(hostile, Hints())
    assert parsed is not None and parsed.type == "AssertionError"


def test_a_missing_fixture_is_named(tmp_path: Path) -> None:
    """pytest's E line for a fixture nobody defines names the fixture, not a type: the fixture is the
    cause, and two missing fixtures are two classes."""
    digests = {}
    for fixture in ("db_session", "redis_client"):
        raw, digests[fixture] = _pytest(tmp_path / fixture, f"def test_a({fixture}):\n    pass\n", name="test_fix.py")
        assert f"fixture '{fixture}' not found" in raw
    d = digests["db_session"]
    assert d.type == "FixtureLookupError", d.line
    assert d.cause == "fixture 'db_session' not found (test_fix.py::test_a)", d.cause
    assert d.key != digests["redis_client"].key
