"""Test-runner output from real runs: ``node --test``, pytest, unittest and Django's test runner.
Run: ``python gen_testrunner.py``.

Each scenario is a small test file written to a temp folder and run with the real runner; repeats add
passing tests and setup lines, so counts, durations and line numbers vary within a class. Near-miss pairs
differ in the failing test's name, the test file, the class whose ``setUpClass`` failed, or whether pytest
failed while collecting or while running a test.
"""

from __future__ import annotations

import os
import tempfile
import textwrap
from pathlib import Path

from _gen import Record, Run, run, write_family

FAMILY = "testrunner"
REPEATS = 4


def write(folder: Path, name: str, source: str) -> None:
    path = folder / name
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(textwrap.dedent(source).lstrip("\n"))


def node_case(i: int, test_name: str, file: str, body: str) -> str:
    passing = "".join(f"test('passes {n}', () => {{ assert.equal({n}, {n}); }});\n" for n in range(8 + 4 * i))
    return (f"const test = require('node:test');\nconst assert = require('node:assert');\n{passing}"
            f"test('{test_name}', () => {{\n  {body}\n}});\n")


def main() -> None:
    records: list[Record] = []

    def add(name: str, label: str, result: Run, tokens: list[str], source: str) -> None:
        assert result.returncode != 0, (name, result)
        records.append(Record(f"{FAMILY}/{name}", "test-runner", source, result.output, label, tokens,
                              result.returncode, result.command))

    # The interpreter on PATH, as an agent's shell finds it (pytest -v prints its path in the header).
    py = os.environ.get("CORPUS_PYTHON", "python3")
    for i in range(REPEATS):
        for test_name, file, body, tokens in (
            ("adds numbers", "math.test.js", f"assert.strictEqual(1 + {i}, {i + 2});",
             ["adds numbers", "math.test.js", "strictly equal"]),
            ("parses dates", "math.test.js", f"assert.strictEqual(1 + {i}, {i + 2});",
             ["parses dates", "math.test.js", "strictly equal"]),
            ("adds numbers", "calc.test.js", f"assert.strictEqual(1 + {i}, {i + 2});",
             ["adds numbers", "calc.test.js", "strictly equal"]),
            ("loads user", "user.test.js", f"const u = undefined; return u.name{(i % 2 and '') or ''};",
             ["loads user", "user.test.js", "Cannot read properties of undefined", "'name'"]),
        ):
            with tempfile.TemporaryDirectory() as tmp:
                d = Path(tmp)
                write(d, file, node_case(i, test_name, file, body))
                slug = f"{test_name.replace(' ', '-')}-{file.split('.')[0]}"
                # TAP is what a tool gets when output is not a terminal; spec is what a terminal shows.
                reporter = "tap" if i % 2 == 0 else "spec"
                add(f"node-{slug}-{i}", f"node-test-{slug}",
                    run(["node", "--test", f"--test-reporter={reporter}", file], d), tokens,
                    "node --test with the TAP (even repeats) or spec reporter")

        pad = "".join(f"SETTING_{n} = {n}\n" for n in range(i))
        with tempfile.TemporaryDirectory() as tmp:
            d = Path(tmp)
            write(d, "test_client.py", f"import requestsx\n{pad}\ndef test_get():\n    assert requestsx\n")
            add(f"pytest-collect-client-{i}", "pytest-collect-test_client-requestsx",
                run([py, "-m", "pytest", "-q", "-p", "no:cacheprovider"], d),
                ["requestsx", "test_client.py", "collecting"], "pytest with a test file whose import fails")
        with tempfile.TemporaryDirectory() as tmp:
            d = Path(tmp)
            write(d, "test_client.py",
                  f"{pad}\ndef test_get():\n    import requestsx\n    assert requestsx\n"
                  + "".join(f"\ndef test_ok_{n}():\n    assert True\n" for n in range(10 + 5 * i)))
            verbosity = "-v" if i % 2 else "-q"
            add(f"pytest-fail-client-{i}", "pytest-fail-test_client-requestsx",
                run([py, "-m", "pytest", verbosity, "-p", "no:cacheprovider"], d),
                ["requestsx", "test_get"], "pytest with a test whose import fails inside the test")
        with tempfile.TemporaryDirectory() as tmp:
            d = Path(tmp)
            write(d, "test_orders.py", f"import ordersx\n{pad}\ndef test_total():\n    assert ordersx\n")
            add(f"pytest-collect-orders-{i}", "pytest-collect-test_orders-ordersx",
                run([py, "-m", "pytest", "-q", "-p", "no:cacheprovider"], d),
                ["ordersx", "test_orders.py"], "pytest with a test file whose import fails")

        for cls, exc in (("TestUsers", "ValueError('fixture database missing')"),
                         ("TestOrders", "ValueError('fixture database missing')")):
            with tempfile.TemporaryDirectory() as tmp:
                d = Path(tmp)
                write(d, "test_app.py", f"""
                    import unittest
                    {pad.strip() and "# " + pad.splitlines()[0]}

                    class {cls}(unittest.TestCase):
                        @classmethod
                        def setUpClass(cls):
                            raise {exc}

                        def test_one(self):
                            pass
                    """ + "".join(f"""
                    class TestOk{n}(unittest.TestCase):
                        def test_ok(self):
                            self.assertTrue(True)
                    """ for n in range(6 + 3 * i)))
                add(f"unittest-setupclass-{cls}-{i}", f"unittest-setUpClass-{cls}",
                    run([py, "-m", "unittest", "-v", "test_app"], d),
                    ["setUpClass", cls, "fixture database missing"], "python -m unittest, setUpClass raises")
        for test in ("test_total", "test_tax"):
            with tempfile.TemporaryDirectory() as tmp:
                d = Path(tmp)
                write(d, "test_calc.py", f"""
                    import unittest

                    class TestCalc(unittest.TestCase):
                        def {test}(self):
                            self.assertEqual(sum([1, {i}]), {i + 2})
                    """ + "".join(f"""
                        def test_ok_{n}(self):
                            self.assertTrue({n} >= 0)
                    """ for n in range(6 + 3 * i)))
                add(f"unittest-fail-{test}-{i}", f"unittest-fail-{test}",
                    run([py, "-m", "unittest", "-v", "test_calc"], d), [test, "AssertionError"],
                    "python -m unittest, an assertEqual fails")
        for cls in ("UserApiTests", "OrderApiTests"):
            with tempfile.TemporaryDirectory() as tmp:
                d = Path(tmp)
                write(d, "settings.py", f"""
                    SECRET_KEY = "test-only-{i}"
                    INSTALLED_APPS = ["shop"]
                    DATABASES = {{"default": {{"ENGINE": "django.db.backends.sqlite3", "NAME": ":memory:"}}}}
                    USE_TZ = True
                    """)
                write(d, "shop/__init__.py", "")
                write(d, "shop/tests.py", f"""
                    from django.test import TestCase

                    class {cls}(TestCase):
                        @classmethod
                        def setUpTestData(cls):
                            cls.token = {{"user": {i}}}["api_token"]

                        def test_list(self):
                            self.assertTrue(self.token)
                    """)
                add(f"django-setup-{cls}-{i}", f"django-setUpClass-{cls}",
                    run([py, "-m", "django", "test", "--settings=settings", "shop"], d),
                    [cls, "KeyError", "'api_token'"], "Django's test runner, setUpTestData raises")

    def rid(prefix: str, i: int = 0) -> str:
        return f"{FAMILY}/{prefix}-{i}"

    pairs = [(rid("node-adds-numbers-math"), rid("node-parses-dates-math"), "test name differs"),
             (rid("node-adds-numbers-math", 1), rid("node-adds-numbers-calc", 1), "test file differs"),
             (rid("pytest-collect-client"), rid("pytest-fail-client"), "collection error vs test failure"),
             (rid("pytest-collect-client", 2), rid("pytest-collect-orders", 2), "module and file differ"),
             (rid("unittest-setupclass-TestUsers"), rid("unittest-setupclass-TestOrders"), "class differs"),
             (rid("unittest-fail-test_total", 3), rid("unittest-fail-test_tax", 3), "test differs"),
             (rid("django-setup-UserApiTests"), rid("django-setup-OrderApiTests"), "class differs")]
    write_family(FAMILY, records, pairs)


if __name__ == "__main__":
    main()
