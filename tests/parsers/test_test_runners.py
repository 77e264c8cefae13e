"""node --test, unittest, Django and pytest runs: the failing test's name and the cause survive."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from otel_errcompact.compactor import compact_text
from otel_errcompact.digest import Digest
from tests.realerrors import have, run, write


def _run(folder: Path, cmd: list[str]) -> Digest:
    result = run(cmd, cwd=folder)
    assert result.returncode != 0, result.output
    return compact_text(result.output, exit_code=result.returncode, command=" ".join(cmd))


@pytest.mark.skipif(not have("node"), reason="node is not installed")
def test_node_test_keeps_test_name_assertion_and_file_line(tmp_path: Path) -> None:
    write(tmp_path, "math.test.js", """
        const test = require('node:test');
        const assert = require('node:assert');
        test('passes', () => { assert.equal(1, 1); });
        test('adds numbers', () => {
          assert.strictEqual(1 + 1, 3);
        });
        """)
    d = _run(tmp_path, ["node", "--test", "math.test.js"])
    assert d.type == "AssertionError" and d.format == "node-test"
    assert "strictly equal" in d.cause and "(test 'adds numbers')" in d.cause
    assert d.location is not None and (d.location.file.endswith("math.test.js"), d.location.line) == (True, 5)
    write(tmp_path, "math.test.js", """
        const test = require('node:test');
        const assert = require('node:assert');
        test('parses dates', () => {
          assert.strictEqual(1 + 1, 3);
        });
        """)
    assert _run(tmp_path, ["node", "--test", "math.test.js"]).key != d.key


def test_unittest_setupclass_error_names_the_class(tmp_path: Path) -> None:
    keys = set()
    for cls in ("TestUsers", "TestOrders"):
        write(tmp_path, "test_app.py", f"""
            import unittest

            class {cls}(unittest.TestCase):
                @classmethod
                def setUpClass(cls):
                    raise ValueError('fixture database missing')

                def test_one(self):
                    pass
            """)
        d = _run(tmp_path, [sys.executable, "-m", "unittest", "test_app"])
        assert d.type == "ValueError" and d.format == "unittest"
        assert d.cause == f"fixture database missing [setUpClass (test_app.{cls})]"
        keys.add(d.key)
    assert len(keys) == 2


def test_django_setup_test_data_error(tmp_path: Path) -> None:
    pytest.importorskip("django")
    write(tmp_path, "settings.py", """
        SECRET_KEY = "test-only"
        INSTALLED_APPS = ["shop"]
        DATABASES = {"default": {"ENGINE": "django.db.backends.sqlite3", "NAME": ":memory:"}}
        """)
    write(tmp_path, "shop/__init__.py", "")
    write(tmp_path, "shop/tests.py", """
        from django.test import TestCase

        class UserApiTests(TestCase):
            @classmethod
            def setUpTestData(cls):
                cls.token = {}["api_token"]

            def test_list(self):
                self.assertTrue(self.token)
        """)
    d = _run(tmp_path, [sys.executable, "-m", "django", "test", "--settings=settings", "shop"])
    assert d.type == "KeyError" and "'api_token'" in d.cause and "UserApiTests" in d.cause
    assert d.location is not None and d.location.func == "setUpTestData"


def test_pytest_collection_error_is_not_a_test_failure(tmp_path: Path) -> None:
    write(tmp_path, "test_client.py", "import requestsx\n\ndef test_get():\n    assert requestsx\n")
    collect = _run(tmp_path, [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider"])
    write(tmp_path, "test_client.py", "def test_get():\n    import requestsx\n    assert requestsx\n")
    failure = _run(tmp_path, [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider"])
    assert "No module named 'requestsx'" in collect.cause and "collecting test_client.py" in collect.cause
    assert "collecting" not in failure.cause and "test_get" in failure.cause
    assert collect.key != failure.key


@pytest.mark.skipif(not have("node"), reason="node is not installed")
def test_node_test_spec_and_tap_reporters_agree(tmp_path: Path) -> None:
    write(tmp_path, "calc.test.js", """
        const test = require('node:test');
        const assert = require('node:assert');
        test('adds numbers', () => {
          assert.strictEqual(1 + 1, 3);
        });
        """)
    tap = _run(tmp_path, ["node", "--test", "--test-reporter=tap", "calc.test.js"])
    spec = _run(tmp_path, ["node", "--test", "--test-reporter=spec", "calc.test.js"])
    assert spec.line == tap.line
    assert spec.key == tap.key and "2 !== 3" in spec.cause
