"""The Node/V8, JVM and Go parsers, on output printed by real node, java and go runs in a tmp folder."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from otel_errcompact.compactor import compact_text
from otel_errcompact.digest import Digest
from otel_errcompact.parsers import go, jvm, node
from otel_errcompact.parsers._base import Hints
from tests.realerrors import Run, have, run, write

needs_node = pytest.mark.skipif(not have("node"), reason="node is not installed on this machine")
needs_java = pytest.mark.skipif(
    not (have("java") and have("javac")), reason="a JDK (java + javac) is not installed on this machine"
)
needs_go = pytest.mark.skipif(not have("go"), reason="the go toolchain is not installed on this machine")


def _line_of(path: Path, needle: str) -> int:
    """1-based line number of the first source line containing ``needle``."""
    for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), start=1):
        if needle in line:
            return number
    raise AssertionError(f"{needle!r} not in {path}")


def _failed(result: Run) -> str:
    assert result.returncode != 0, f"expected a failure:\n{result.output}"
    return result.output


# --- Node.js ---------------------------------------------------------------------------------------------

GET_USER = """
    function getUser(users, id) {
      return users[id].name;
    }
    function main() {
      const users = {};
      console.log(getUser(users, {id}));
    }
    main();
"""


def _node(folder: Path, name: str, source: str) -> tuple[Path, str]:
    script = write(folder, name, source)
    return script, _failed(run(["node", str(script)], cwd=folder))


@needs_node
def test_node_type_error_in_user_function(tmp_path: Path) -> None:
    script, raw = _node(tmp_path, "app.js", GET_USER.replace("{id}", "42"))
    assert "Node.js v" in raw and "^" in raw  # the trailer and caret the parser must skip
    d = compact_text(raw)
    assert (d.type, d.format) == ("TypeError", "node")
    assert d.cause == "Cannot read properties of undefined (reading 'name')"
    assert d.location is not None
    assert (Path(d.location.file).name, d.location.line, d.location.func) == (
        "app.js", _line_of(script, "users[id].name"), "getUser"
    )
    assert d.line.startswith(f"[TypeError] at app.js:{d.location.line} in getUser: ")


@needs_node
def test_node_frames_run_outermost_first_and_mark_internals(tmp_path: Path) -> None:
    _, raw = _node(tmp_path, "app.js", GET_USER.replace("{id}", "42"))
    parsed = node.parse(raw, Hints())
    assert parsed is not None
    assert parsed.frames[-1].func == "getUser"
    internal = [f for f in parsed.frames if f.file.startswith("node:")]
    assert internal and not any(f.in_app for f in internal)


@needs_node
def test_node_module_not_found_keeps_module_name(tmp_path: Path) -> None:
    script, raw = _node(tmp_path, "req.js", "const lp = require('left-pad');\nconsole.log(lp('x', 3));\n")
    assert "MODULE_NOT_FOUND" in raw and "Require stack:" in raw
    d = compact_text(raw)
    assert d.type == "Error"
    assert d.cause == "Cannot find module 'left-pad'"
    assert d.location is not None and Path(d.location.file).name == "req.js"
    assert d.location.line == _line_of(script, "require('left-pad')")


@needs_node
def test_node_error_inside_a_package_is_located_at_the_caller(tmp_path: Path) -> None:
    write(tmp_path, "node_modules/somepkg/index.js", """
        module.exports.parseConfig = function parseConfig(text) {
          if (!text.startsWith('{')) {
            throw new TypeError('somepkg: config must be a JSON object, got ' + text.length + ' chars');
          }
          return JSON.parse(text);
        };
    """)
    script, raw = _node(tmp_path, "lib.js", """
        const somepkg = require('somepkg');
        function loadConfig() {
          return somepkg.parseConfig('hello world');
        }
        loadConfig();
    """)
    assert "node_modules/somepkg/index.js" in raw
    d = compact_text(raw)
    assert d.type == "TypeError"
    assert d.cause.startswith("somepkg: config must be a JSON object")
    assert d.location is not None
    assert (Path(d.location.file).name, d.location.func) == ("lib.js", "loadConfig")
    assert d.location.line == _line_of(script, "somepkg.parseConfig(")
    parsed = node.parse(raw, Hints())
    assert parsed is not None
    assert [f.in_app for f in parsed.frames if "node_modules" in f.file] == [False]


CHECK_PROFILE = """
    const assert = require('assert');
    function checkProfile(got) {
      const want = { id: 1, name: 'alice', email: 'alice@example.com', city: 'Paris', country: 'FR',
                     zip: '75001', roles: ['admin', 'editor'], active: true, plan: 'pro' };
      assert.deepStrictEqual(got, want);
    }
    checkProfile({ id: 1, name: 'alice', email: 'alice@example.com', city: 'Paris', country: 'FR',
                   zip: '75001', roles: ['admin', 'editor'], active: true, {field} });
"""


@needs_node
@pytest.mark.parametrize(("assertion", "equal"), [("deepStrictEqual", "strictly"), ("deepEqual", "loosely")])
def test_node_deep_equal_failure_keeps_the_lines_that_differ(tmp_path: Path, assertion: str, equal: str) -> None:
    """assert.deepStrictEqual prints the whole value with ``+``/``-`` before the lines that differ, after as
    many equal lines as it likes; assert.deepEqual prints no diff, the actual value whole, ``should loosely
    deep-equal``, then the expected value whole. The lines that differ are the cause either way, marked
    alike, so two different mismatches are two classes."""
    script = CHECK_PROFILE.replace("deepStrictEqual", assertion)
    digests = {}
    for field in ("plan: 'free'", "plan: 'pro', active: false"):
        _, raw = _node(tmp_path, "profile.js", script.replace("{field}", field))
        assert ("+ actual - expected" in raw) == (equal == "strictly")
        digests[field] = compact_text(raw)
    plan = digests["plan: 'free'"]
    assert (plan.type, plan.format) == ("AssertionError", "node")
    assert plan.cause == f"Expected values to be {equal} deep-equal: + plan: 'free', - plan: 'pro', (ERR_ASSERTION)"
    active = digests["plan: 'pro', active: false"]
    assert "+ active: false," in active.cause and "- active: true," in active.cause
    assert plan.key != active.key


@needs_node
def test_node_unhandled_rejection_of_an_async_function(tmp_path: Path) -> None:
    script, raw = _node(tmp_path, "rej.js", """
        async function fetchUser(id) {
          throw new Error('user ' + id + ' not found');
        }
        fetchUser(7);
    """)
    d = compact_text(raw)
    assert (d.type, d.cause) == ("Error", "user 7 not found")
    assert d.location is not None and d.location.func == "fetchUser"
    assert d.location.line == _line_of(script, "throw new Error")


@needs_node
def test_node_unhandled_rejection_with_a_plain_reason(tmp_path: Path) -> None:
    _, raw = _node(tmp_path, "rej.js", "Promise.reject('quota exceeded for bucket invoices');\n")
    assert "ERR_UNHANDLED_REJECTION" in raw
    d = compact_text(raw)
    assert d.type == "UnhandledPromiseRejection"
    assert d.cause == 'promise rejected with the reason "quota exceeded for bucket invoices"'
    assert d.location is None  # only node's own frames: no location beats a misleading one


@needs_node
def test_node_error_cause_chain_reports_the_root(tmp_path: Path) -> None:
    _, raw = _node(tmp_path, "cause.js", """
        function loadSettings() {
          try {
            JSON.parse('{bad');
          } catch (e) {
            throw new Error('failed to load settings', { cause: e });
          }
        }
        loadSettings();
    """)
    assert "[cause]: SyntaxError" in raw
    d = compact_text(raw)
    assert d.type == "Error"
    assert d.cause.startswith("failed to load settings ← SyntaxError: ")
    assert d.location is not None and d.location.func == "loadSettings"


@needs_node
def test_node_multiline_assertion_message(tmp_path: Path) -> None:
    _, raw = _node(tmp_path, "as.js", """
        const assert = require('assert');
        function checkTotal(n) { assert.strictEqual(n, 2); }
        checkTotal(1);
    """)
    d = compact_text(raw)
    assert d.type == "AssertionError"
    assert d.cause == "Expected values to be strictly equal: 1 !== 2 (ERR_ASSERTION)"
    assert d.location is not None and d.location.func == "checkTotal"


@needs_node
def test_node_syntax_error_at_load_uses_the_throw_site(tmp_path: Path) -> None:
    _, raw = _node(tmp_path, "broken.js", "function f( {\n")
    d = compact_text(raw)
    assert d.type == "SyntaxError"
    assert d.location is not None and Path(d.location.file).name == "broken.js"


@needs_node
def test_node_keys_stable_across_dirs_and_data(tmp_path: Path) -> None:
    def digest(folder: Path, user_id: int, field: str) -> Digest:
        source = f"""
            function getUser(users, id) {{
              if (!users[id]) throw new Error('user ' + id + ' not found in shard ' + (id % 7));
              return users[id].{field};
            }}
            getUser({{}}, {user_id});
        """
        return compact_text(_node(folder, "app.js", source)[1])

    first = digest(tmp_path / "run-a", 42, "name")
    second = digest(tmp_path / "elsewhere" / "run-b", 1234, "name")
    assert first.cause != second.cause
    assert first.key == second.key

    _, raw = _node(tmp_path / "run-c", "app.js", GET_USER.replace("{id}", "1"))
    assert compact_text(raw).key != first.key


def test_node_parser_ignores_other_formats() -> None:
    assert node.parse("", Hints()) is None
    assert node.parse("plain text without frames", Hints()) is None


# --- JVM -------------------------------------------------------------------------------------------------

MAIN_JAVA = """
    import java.io.*;
    import java.util.*;

    public class Main {
        static void load(int entries) {
            if (entries < 10) {
                throw new IllegalStateException("registry not initialised: " + entries + " entries");
            }
        }
        static Properties readConfig(String path) throws IOException {
            Properties p = new Properties();
            try (InputStream in = new FileInputStream(path)) { p.load(in); }
            return p;
        }
        static void init(String path) {
            try {
                readConfig(path);
            } catch (IOException e) {
                throw new RuntimeException("could not initialise settings", e);
            }
        }
        static int size(String s) { return s.length(); }
        public static void main(String[] args) throws Exception {
            switch (args[0]) {
                case "state": load(Integer.parseInt(args[1])); break;
                case "wrap": init(args[1]); break;
                case "npe": { String s = args.length > 5 ? "x" : null; System.out.println(size(s)); break; }
                default: break;
            }
        }
    }
"""


@pytest.fixture(scope="module")
def main_java(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    """``Main.java`` compiled once (javac is slow to start); each test runs it in its own folder."""
    if not (have("java") and have("javac")):
        pytest.skip("a JDK (java + javac) is not installed on this machine")
    folder = tmp_path_factory.mktemp("java-main")
    source = write(folder, "Main.java", MAIN_JAVA)
    compiled = run(["javac", "-d", str(folder / "classes"), str(source)], cwd=folder)
    assert compiled.returncode == 0, compiled.output
    return source, folder / "classes"


def _java(folder: Path, main: tuple[Path, Path], *args: str) -> tuple[Path, str]:
    source, classes = main
    folder.mkdir(parents=True, exist_ok=True)
    return source, _failed(run(["java", "-cp", str(classes), "Main", *args], cwd=folder))


@needs_java
def test_jvm_illegal_state(tmp_path: Path, main_java: tuple[Path, Path]) -> None:
    source, raw = _java(tmp_path, main_java, "state", "0")
    assert raw.startswith('Exception in thread "main" java.lang.IllegalStateException')
    d = compact_text(raw)
    assert (d.type, d.format) == ("IllegalStateException", "jvm")
    assert d.cause == "registry not initialised: 0 entries"
    assert d.location is not None
    assert (d.location.file, d.location.line, d.location.func) == (
        "Main.java", _line_of(source, "throw new IllegalStateException"), "Main.load"
    )
    parsed = jvm.parse(raw, Hints())
    assert parsed is not None and parsed.frames[0].func == "Main.main"


@needs_java
def test_jvm_caused_by_keeps_the_root_cause(tmp_path: Path, main_java: tuple[Path, Path]) -> None:
    source, raw = _java(tmp_path, main_java, "wrap", "config.properties")
    assert "Caused by: java.io.FileNotFoundException" in raw and "more" in raw
    d = compact_text(raw)
    assert d.type == "RuntimeException"
    assert d.cause == (
        "could not initialise settings ← FileNotFoundException: config.properties (No such file or directory)"
    )
    # The user's line that hit the failure, not the JDK's FileInputStream and not the wrapping line.
    assert d.location is not None
    assert (d.location.line, d.location.func) == (_line_of(source, "new FileInputStream"), "Main.readConfig")
    parsed = jvm.parse(raw, Hints())
    assert parsed is not None
    jdk = [f for f in parsed.frames if f.func and f.func.startswith("FileInputStream.")]
    assert jdk and not any(f.in_app for f in jdk)
    assert parsed.frames[0].func == "Main.main"  # recovered from the ``... N more`` shared frames


@needs_java
def test_jvm_helpful_null_pointer_message(tmp_path: Path, main_java: tuple[Path, Path]) -> None:
    source, raw = _java(tmp_path, main_java, "npe")
    d = compact_text(raw)
    assert d.type == "NullPointerException"
    assert d.cause.startswith('Cannot invoke "String.length()" because ')
    assert d.location is not None
    assert (d.location.line, d.location.func) == (_line_of(source, "return s.length()"), "Main.size")


@needs_java
def test_jvm_keys_stable_across_dirs_and_data(tmp_path: Path, main_java: tuple[Path, Path]) -> None:
    first = compact_text(_java(tmp_path / "a", main_java, "state", "3")[1])
    second = compact_text(_java(tmp_path / "b" / "c", main_java, "state", "7")[1])
    assert first.cause != second.cause
    assert first.key == second.key
    wrapped_a = compact_text(_java(tmp_path / "d", main_java, "wrap", "app.properties")[1])
    wrapped_b = compact_text(_java(tmp_path / "e", main_java, "wrap", "db.properties")[1])
    assert len({first.key, wrapped_a.key, wrapped_b.key}) == 3  # a different file is a different cause


PIPELINE_JAVA = """
    package com.acme;

    public class App {
        static class Res implements AutoCloseable {
            public void close() { throw new IllegalArgumentException("close failed"); }
        }
        static void level3() { throw new UnsupportedOperationException("codec 'zstd' not available"); }
        static void level2() {
            try { level3(); }
            catch (RuntimeException e) { throw new IllegalStateException("decoder setup", e); }
        }
        static void level1() throws Exception {
            try (Res r = new Res()) { level2(); }
            catch (RuntimeException e) { throw new Exception("pipeline failed", e); }
        }
        public static void main(String[] a) throws Exception { level1(); }
    }
"""

LOGGED_JAVA = """
    import java.util.logging.*;

    public class Svc {
        static int parsePort(String v) { return Integer.parseInt(v); }
        public static void main(String[] a) {
            try { parsePort(a[0]); }
            catch (NumberFormatException e) {
                Logger.getLogger("svc").log(Level.SEVERE, "startup failed", e);
            }
            System.exit(1);
        }
    }
"""


def _java_program(folder: Path, path: str, source: str, main_class: str, *args: str) -> tuple[Path, str]:
    file = write(folder, path, source)
    compiled = run(["javac", "-d", str(folder / "classes"), str(file)], cwd=folder)
    assert compiled.returncode == 0, compiled.output
    return file, _failed(run(["java", "-cp", str(folder / "classes"), main_class, *args], cwd=folder))


@needs_java
def test_jvm_long_chain_with_suppressed_reports_outer_and_root(tmp_path: Path) -> None:
    source, raw = _java_program(tmp_path, "com/acme/App.java", PIPELINE_JAVA, "com.acme.App")
    assert raw.count("Caused by:") == 2 and "Suppressed:" in raw
    d = compact_text(raw)
    assert d.type == "Exception"
    assert d.cause == "pipeline failed ← UnsupportedOperationException: codec 'zstd' not available"
    assert d.location is not None
    assert (d.location.file, d.location.line, d.location.func) == (
        "App.java", _line_of(source, "static void level3()"), "App.level3"
    )
    parsed = jvm.parse(raw, Hints())
    assert parsed is not None
    assert not any(f.func == "App$Res.close" for f in parsed.frames)  # the suppressed section is skipped


@needs_java
def test_jvm_trace_logged_by_java_util_logging(tmp_path: Path) -> None:
    source, raw = _java_program(tmp_path, "Svc.java", LOGGED_JAVA, "Svc", "80a")
    assert "SEVERE: startup failed" in raw
    d = compact_text(raw)
    assert (d.type, d.cause) == ("NumberFormatException", 'For input string: "80a"')
    assert d.location is not None
    expected_line = _line_of(source, "return Integer.parseInt")
    assert (d.location.line, d.location.func) == (expected_line, "Svc.parsePort")


def test_jvm_parser_ignores_other_formats() -> None:
    assert jvm.parse("", Hints()) is None
    assert jvm.parse("    at getUser (/srv/app.js:2:20)", Hints()) is None


# --- Go --------------------------------------------------------------------------------------------------

MAIN_GO = """
    package main

    import (
    \t"fmt"
    \t"os"
    \t"regexp"
    \t"strconv"
    )

    type Config struct{ Name string }

    func lookup(items []int, i int) int {
    \treturn items[i]
    }

    func loadConfig(path string) *Config {
    \tif path == "" {
    \t\treturn nil
    \t}
    \treturn &Config{Name: path}
    }

    func compile(pattern string) *regexp.Regexp {
    \treturn regexp.MustCompile(pattern)
    }

    func main() {
    \tn, _ := strconv.Atoi(os.Args[2])
    \tswitch os.Args[1] {
    \tcase "index":
    \t\tfmt.Println(lookup(make([]int, n), n+2))
    \tcase "custom":
    \t\tpanic(fmt.Sprintf("unexpected state %q after %d retries", "draining", n))
    \tcase "nilmap":
    \t\tvar m map[string]int
    \t\tm["hits"] += n
    \tcase "nilptr":
    \t\tc := loadConfig("")
    \t\tfmt.Println(c.Name)
    \tcase "regexp":
    \t\tcompile("(unclosed" + strconv.Itoa(n))
    \t}
    }
"""


@pytest.fixture(scope="module")
def go_env(tmp_path_factory: pytest.TempPathFactory) -> dict[str, str]:
    """Offline, GOPATH-free settings, with one build cache shared by the module's runs."""
    base = tmp_path_factory.mktemp("go-env")
    return {
        "GOCACHE": str(base / "cache"),
        "GOPATH": str(base / "gopath"),
        "GO111MODULE": "off",
        "GOFLAGS": "",
        "GOPROXY": "off",
        "GOTOOLCHAIN": "local",
        "HOME": os.environ.get("HOME", str(base)),
    }


def _go(folder: Path, env: dict[str, str], *args: str, source: str = MAIN_GO) -> tuple[Path, str]:
    main = write(folder, "main.go", source)
    return main, _failed(run(["go", "run", "main.go", *args], cwd=folder, env=env))


@needs_go
def test_go_index_out_of_range(tmp_path: Path, go_env: dict[str, str]) -> None:
    main, raw = _go(tmp_path, go_env, "index", "3")
    assert "goroutine 1 [running]:" in raw
    d = compact_text(raw)
    # Issue 6: a runtime panic keeps ``panic`` as its type and ``runtime error:`` in its cause.
    assert (d.type, d.format) == ("panic", "go")
    assert d.cause == "runtime error: index out of range [5] with length 3"
    assert d.location is not None
    assert (Path(d.location.file).name, d.location.line, d.location.func) == (
        "main.go", _line_of(main, "return items[i]"), "main.lookup"
    )


@needs_go
def test_go_custom_panic(tmp_path: Path, go_env: dict[str, str]) -> None:
    main, raw = _go(tmp_path, go_env, "custom", "3")
    d = compact_text(raw)
    assert (d.type, d.cause) == ("panic", 'unexpected state "draining" after 3 retries')
    assert d.location is not None
    assert (d.location.line, d.location.func) == (_line_of(main, "panic(fmt.Sprintf"), "main.main")


@needs_go
def test_go_nil_map_write_and_nil_dereference(tmp_path: Path, go_env: dict[str, str]) -> None:
    main, raw = _go(tmp_path / "map", go_env, "nilmap", "1")
    d = compact_text(raw)
    assert (d.type, d.cause) == ("panic", "assignment to entry in nil map")
    assert d.location is not None and d.location.line == _line_of(main, 'm["hits"]')

    main, raw = _go(tmp_path / "ptr", go_env, "nilptr", "1")
    assert "[signal SIGSEGV" in raw
    d = compact_text(raw)
    assert (d.type, d.cause) == ("panic", "runtime error: invalid memory address or nil pointer dereference")
    assert d.location is not None and d.location.line == _line_of(main, "fmt.Println(c.Name)")


@needs_go
def test_go_panic_inside_the_standard_library(tmp_path: Path, go_env: dict[str, str]) -> None:
    main, raw = _go(tmp_path, go_env, "regexp", "1")
    assert "regexp.MustCompile" in raw
    d = compact_text(raw)
    assert d.type == "panic"
    assert "missing closing )" in d.cause
    assert d.location is not None
    expected_line = _line_of(main, "regexp.MustCompile(pattern)")
    assert (d.location.func, d.location.line) == ("main.compile", expected_line)
    parsed = go.parse(raw, Hints())
    assert parsed is not None
    assert [f.in_app for f in parsed.frames if f.func == "regexp.MustCompile"] == [False]


@needs_go
def test_go_build_error(tmp_path: Path, go_env: dict[str, str]) -> None:
    source = "package main\n\nimport \"fmt\"\n\nfunc main() {\n\tfmt.Println(foo)\n}\n"
    main, raw = _go(tmp_path, go_env, source=source)
    assert "# command-line-arguments" in raw
    d = compact_text(raw)
    assert (d.type, d.cause) == ("go build error", "undefined: foo")
    assert d.location is not None
    assert (Path(d.location.file).name, d.location.line) == ("main.go", _line_of(main, "Println(foo)"))


@needs_go
def test_go_keys_stable_across_dirs_and_data(tmp_path: Path, go_env: dict[str, str]) -> None:
    first = compact_text(_go(tmp_path / "a", go_env, "index", "3")[1])
    second = compact_text(_go(tmp_path / "b" / "c", go_env, "index", "11")[1])
    assert first.cause != second.cause
    assert first.key == second.key
    nil_map = compact_text(_go(tmp_path / "d", go_env, "nilmap", "3")[1])
    custom = compact_text(_go(tmp_path / "e", go_env, "custom", "3")[1])
    assert len({first.key, nil_map.key, custom.key}) == 3


CALC_GO = """
package calc

func Add(a, b int) int { return a - b }

func Lookup(m map[string]int, k string) (int, bool) { v, ok := m[k]; return v, ok }
"""

CALC_TEST_GO = """
package calc

import "testing"

func TestAdd(t *testing.T) {
\tif got := Add(2, 3); got != 5 {
\t\tt.Errorf("Add(2, 3) = %d, want 5", got)
\t}
}

func TestLookup(t *testing.T) {
\tif _, ok := Lookup(map[string]int{}, "user_id"); !ok {
\t\tt.Fatalf("Lookup: missing key %q", "user_id")
\t}
}
"""


@needs_go
def test_go_test_failure_names_its_test_line_and_message(tmp_path: Path, go_env: dict[str, str]) -> None:
    """``go test`` prints the failing test and its t.Errorf line (under ``--- FAIL``, or above it with
    -v): each failing test is its own class, and a second failing test changes no key."""
    write(tmp_path, "calc.go", CALC_GO)
    test_file = write(tmp_path, "calc_test.go", CALC_TEST_GO)

    def go_test(*args: str) -> Digest:
        result = run(["go", "test", "-count=1", *args, "."], cwd=tmp_path, env=go_env)
        return compact_text(_failed(result), exit_code=result.returncode, command="go test .")

    add, lookup = go_test("-run", "TestAdd"), go_test("-run", "TestLookup")
    assert add.line == f"[go test FAIL] at calc_test.go:{_line_of(test_file, 't.Errorf')} in TestAdd: " \
        "Add(2, 3) = -1, want 5"
    assert lookup.line == f"[go test FAIL] at calc_test.go:{_line_of(test_file, 't.Fatalf')} in TestLookup: " \
        'Lookup: missing key "user_id"'
    assert add.key != lookup.key
    assert go_test("-v", "-run", "TestAdd").key == add.key
    both = go_test()
    assert both.cause == "Add(2, 3) = -1, want 5 (+1 more failed)"
    assert both.key == add.key


def test_go_parser_ignores_other_formats() -> None:
    assert go.parse("", Hints()) is None
    assert go.parse("no panic here", Hints(exit_code=2)) is None


# --- robustness ------------------------------------------------------------------------------------------


@pytest.mark.timeout(60)  # a hang guard against catastrophic backtracking; speed is measured in benchmarks/
@pytest.mark.parametrize("parser", [node.parse, jvm.parse, go.parse])
def test_parsers_stay_fast_on_hostile_input(parser: object) -> None:
    assert callable(parser)
    hostile = [
        "    at " + "(" * 60_000,
        "\tat " + "a." * 60_000 + "(",
        "panic: x\ngoroutine 1 [running]:\n" + "main.f(" * 20_000 + "\n\t" + ":1" * 30_000,
        ("    at f (" + "x:" * 1000 + "\n") * 60,
        "Error: " + "a" * 120_000 + "\n    at f (/a.js:1:1)\n",
    ]
    for text in hostile:
        parser(text, Hints())


needs_rustc = pytest.mark.skipif(not have("rustc"), reason="rustc is not installed on this machine")


def _rust_panic(tmp_path: Path, name: str, body: str, backtrace: str) -> Digest:
    source = write(tmp_path, f"{name}.rs", f"fn main() {{\n    let v: Vec<u32> = Vec::new();\n{body}\n}}\n")
    built = run(["rustc", "-o", str(tmp_path / name), str(source)], cwd=tmp_path)
    assert built.returncode == 0, built.output
    result = run([str(tmp_path / name)], cwd=tmp_path, env={"RUST_BACKTRACE": backtrace})
    assert result.returncode == 101 and "panicked at" in result.output, result.output
    return compact_text(result.output, exit_code=result.returncode, command=f"./{name}")


@needs_rustc
@pytest.mark.parametrize("backtrace", ["0", "1"])
def test_rust_panics_keep_their_message_and_line(tmp_path: Path, backtrace: str) -> None:
    """The panic's message names the cause and its position the line: not the RUST_BACKTRACE note, nor
    the backtrace. Two panics of one program are two classes."""
    index = _rust_panic(tmp_path, "index", "    let i = std::env::args().count() + 4;\n    println!(\"{}\", v[i]);",
                        backtrace)
    overflow = _rust_panic(tmp_path, "overflow", "    let n = v.len() as u32;\n    println!(\"{}\", n - 1);", backtrace)
    assert index.line == "[panic] at index.rs:4: index out of bounds: the len is 0 but the index is 5", index.line
    assert overflow.line == "[panic] at overflow.rs:4: attempt to subtract with overflow", overflow.line
    assert index.key != overflow.key


CALC_RS = """
pub fn add(a: i32, b: i32) -> i32 { a - b }
pub fn mul(a: i32, b: i32) -> i32 { a + b }

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn adds() {
        std::thread::sleep(std::time::Duration::from_millis(300)); // finishes, and prints, last
        assert_eq!(add(2, 3), 5);
    }

    #[test]
    fn multiplies() { assert_eq!(mul(2, 3), 6); }

    #[test]
    fn looks_up() { assert!(None::<i32>.is_some(), "missing key {}", "user_id"); }
}
"""


@pytest.mark.skipif(not have("cargo"), reason="cargo is not installed on this machine")
def test_cargo_test_failure_names_its_test(tmp_path: Path) -> None:
    """Every failing assert_eq! says ``assertion `left == right` failed``: the test's name tells two apart.
    Of several failing tests the first by name is reported, whatever order they finished in, so a second
    failing test changes no key."""
    write(tmp_path, "Cargo.toml", '[package]\nname = "calc"\nversion = "0.1.0"\nedition = "2021"\n')
    lib = write(tmp_path, "src/lib.rs", CALC_RS)

    def cargo_test(*names: str) -> tuple[str, Digest]:
        result = run(["cargo", "test", "--offline", "-q", *names], cwd=tmp_path, env={"RUST_BACKTRACE": "0"},
                     timeout=300)
        return result.output, compact_text(_failed(result), exit_code=result.returncode, command="cargo test")

    _, adds = cargo_test("adds")
    _, multiplies = cargo_test("multiplies")
    assert adds.line == f"[panic] at lib.rs:{_line_of(lib, 'assert_eq!(add')} in tests::adds: " \
        "assertion `left == right` failed"
    assert multiplies.line == f"[panic] at lib.rs:{_line_of(lib, 'assert_eq!(mul')} in tests::multiplies: " \
        "assertion `left == right` failed"
    assert adds.key != multiplies.key
    output, every = cargo_test()
    assert output.index("---- tests::adds stdout") > output.index("---- tests::multiplies stdout")
    assert every.cause == "assertion `left == right` failed (+2 more failed)"
    assert every.key == adds.key
