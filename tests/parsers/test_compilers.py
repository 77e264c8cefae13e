"""The gcc/g++/ld, javac, mypy and rustc parsers, on output printed by the real tools run in tmp_path.

Each tool is run twice in different folders, with sources that differ in line positions and literal
values: the dedup key must not change. A different missing name must give a different key.
"""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from otel_errcompact.compactor import compact_text
from otel_errcompact.digest import Digest
from otel_errcompact.parsers import gcc, javac, mypy, rustc
from otel_errcompact.parsers._base import Hints
from tests.realerrors import have, python_error, run, write

needs_gcc = pytest.mark.skipif(not have("gcc"), reason="gcc is not installed")
needs_gxx = pytest.mark.skipif(not have("g++"), reason="g++ is not installed")
needs_javac = pytest.mark.skipif(not have("javac"), reason="javac is not installed")
needs_rustc = pytest.mark.skipif(not have("rustc"), reason="rustc is not installed")


def _failing(cmd: list[str], cwd: Path) -> str:
    result = run(cmd, cwd=cwd)
    assert result.returncode != 0, f"{cmd} was expected to fail:\n{result.output}"
    return result.output


def _digest(raw: str, cmd: list[str]) -> Digest:
    return compact_text(raw, exit_code=1, command=" ".join(cmd))


# --- gcc / g++ ---------------------------------------------------------------------------------------

UNDECLARED_C = """
    #include <stdio.h>
    {pad}
    int main(void) {{
        printf("%d\\n", {value});
        {name} = {value};
        return 0;
    }}
"""


def _gcc(folder: Path, source: str, name: str = "calc.c", *flags: str) -> tuple[str, Digest]:
    folder.mkdir(parents=True, exist_ok=True)
    write(folder, name, source)
    compiler = "g++" if name.endswith((".cpp", ".cc")) else "gcc"
    cmd = [compiler, *flags, "-c", name, "-o", "out.o"]
    raw = _failing(cmd, folder)
    return raw, _digest(raw, cmd)


@needs_gcc
def test_gcc_undeclared_identifier(tmp_path: Path) -> None:
    raw, d = _gcc(tmp_path, UNDECLARED_C.format(pad="", name="total_count", value=7))
    assert "error:" in raw and "In function" in raw
    assert (d.type, d.format, d.retryable) == ("gcc error", "gcc", False)
    assert d.cause == "'total_count' undeclared (first use in this function)"
    assert d.location is not None
    assert (d.location.file, d.location.line, d.location.func) == ("calc.c", 5, "main")
    assert d.line == "[gcc error] at calc.c:5 in main: 'total_count' undeclared (first use in this function)"


@needs_gcc
def test_gcc_key_is_stable_across_runs_and_distinct_per_symbol(tmp_path: Path) -> None:
    _, first = _gcc(tmp_path / "a", UNDECLARED_C.format(pad="", name="total_count", value=7))
    _, again = _gcc(tmp_path / "b", UNDECLARED_C.format(pad="\n\n\n", name="total_count", value=912))
    _, other = _gcc(tmp_path / "c", UNDECLARED_C.format(pad="", name="row_limit", value=7))
    assert again.location is not None and again.location.line == 8  # the lines really moved
    assert first.key == again.key
    assert first.key != other.key
    assert "'row_limit'" in other.cause


@needs_gcc
def test_gcc_ascii_and_typographic_quotes_give_one_key(tmp_path: Path) -> None:
    source = UNDECLARED_C.format(pad="", name="total_count", value=7)
    write(tmp_path, "calc.c", source)
    cmd = ["gcc", "-c", "calc.c", "-o", "out.o"]
    utf8 = run(cmd, cwd=tmp_path, env={"LC_ALL": "C.UTF-8", "LANG": "C.UTF-8"}).output
    plain = run(cmd, cwd=tmp_path, env={"LC_ALL": "C", "LANG": "C"}).output
    assert utf8 != plain or "\u2018" not in utf8  # gcc chose its quotes from the locale
    assert _digest(utf8, cmd).key == _digest(plain, cmd).key
    assert _digest(utf8, cmd).cause.startswith("'total_count'")


@needs_gcc
def test_gcc_implicit_declaration_as_error(tmp_path: Path) -> None:
    source = """
        int main(void) {
            return compute_checksum(3);
        }
    """
    _, d = _gcc(tmp_path, source, "sum.c", "-Werror=implicit-function-declaration")
    assert d.type == "gcc error"
    assert "implicit declaration of function 'compute_checksum'" in d.cause
    assert d.location is not None and (d.location.line, d.location.func) == (2, "main")


@needs_gcc
def test_gcc_multiple_errors_digest_the_first_and_count_the_rest(tmp_path: Path) -> None:
    source = """
        int main(void) {
            alpha = 1;
            beta = 2;
            gamma = 3;
            return 0;
        }
    """
    raw, d = _gcc(tmp_path, source, "many.c")
    assert raw.count(": error:") == 3
    assert d.cause == "'alpha' undeclared (first use in this function) (+2 more)"
    assert d.location is not None and d.location.line == 2


@needs_gcc
def test_gcc_many_errors_stay_bounded(tmp_path: Path) -> None:
    body = "\n".join(f"    undeclared_{i} = {i};" for i in range(400))
    source = "int main(void) {\n" + body + "\n    return 0;\n}\n"
    raw, d = _gcc(tmp_path, source, "flood.c")
    assert len(raw) > 20_000
    assert d.cause == "'undeclared_0' undeclared (first use in this function) (+399 more)"
    assert len(d.line) < 200


@needs_gcc
def test_gcc_missing_header_keeps_the_file_name(tmp_path: Path) -> None:
    source = """
        #include "vendor_config.h"
        int main(void) { return 0; }
    """
    _, d = _gcc(tmp_path, source, "inc.c")
    assert d.type == "gcc error"
    assert d.cause == "vendor_config.h: No such file or directory"
    assert d.location is not None and (d.location.file, d.location.line) == ("inc.c", 1)


@needs_gxx
def test_gxx_not_declared_and_no_member(tmp_path: Path) -> None:
    source = """
        struct Account { int balance; };
        int audit() { Account a{}; return a.overdraft; }
        int main() { return lookup_rate(3) + audit(); }
    """
    raw, d = _gcc(tmp_path, source, "bank.cpp")
    assert "In function" in raw
    assert d.type == "g++ error"
    assert d.cause == "'struct Account' has no member named 'overdraft' (+1 more)"
    assert d.location is not None
    assert (d.location.file, d.location.line, d.location.func) == ("bank.cpp", 2, "audit")


@needs_gxx
def test_gxx_not_declared_in_scope_names_the_symbol(tmp_path: Path) -> None:
    source = """
        namespace ledger {
        struct Book {
            int total() const { return lookup_rate(3); }
        };
        }
    """
    _, d = _gcc(tmp_path, source, "ledger.cc")
    assert d.type == "g++ error"
    assert d.cause == "'lookup_rate' was not declared in this scope"
    assert d.location is not None and d.location.func == "ledger::Book::total"


LINK_C = """
    int {name}(int);
    {pad}
    int main(void) {{ return {name}({value}); }}
"""


def _link(folder: Path, source: str, *flags: str) -> tuple[str, Digest]:
    folder.mkdir(parents=True, exist_ok=True)
    write(folder, "prog.c", source)
    cmd = ["gcc", *flags, "prog.c", "-o", "prog"]
    raw = _failing(cmd, folder)
    return raw, _digest(raw, cmd)


@needs_gcc
def test_linker_undefined_reference(tmp_path: Path) -> None:
    raw, d = _link(tmp_path, LINK_C.format(name="missing_fn", pad="", value=2))
    assert "collect2" in raw and "undefined reference" in raw
    assert (d.type, d.format) == ("ld error", "gcc")
    assert d.cause == "undefined reference to 'missing_fn'"
    assert d.location is not None and (d.location.file, d.location.func) == ("prog.c", "main")
    assert ".o" not in d.line  # the linker's temp object file is not a location


@needs_gcc
def test_linker_with_debug_info_has_a_line(tmp_path: Path) -> None:
    _, d = _link(tmp_path, LINK_C.format(name="missing_fn", pad="", value=2), "-g")
    assert d.location is not None and d.location.line == 3
    assert str(d.location) == "prog.c:3 in main"  # ld prints the absolute path; the digest shows the name
    assert d.cause == "undefined reference to 'missing_fn'"


@needs_gcc
def test_linker_key_is_stable_and_distinct_per_symbol(tmp_path: Path) -> None:
    raw_a, first = _link(tmp_path / "a", LINK_C.format(name="missing_fn", pad="", value=2))
    raw_b, again = _link(tmp_path / "b", LINK_C.format(name="missing_fn", pad="\n\n", value=77))
    _, other = _link(tmp_path / "c", LINK_C.format(name="absent_symbol", pad="", value=2))
    assert raw_a != raw_b  # different temp object names in the raw output
    assert first.key == again.key
    assert first.key != other.key
    assert "'absent_symbol'" in other.cause


@needs_gcc
def test_linker_missing_library(tmp_path: Path) -> None:
    raw, d = _link(tmp_path, "int main(void) { return 0; }\n", "-lzz_no_such_lib")
    assert "ld returned 1 exit status" in raw
    assert d.type == "ld error"
    assert "-lzz_no_such_lib" in d.cause


@needs_gcc
def test_gcc_parser_declines_output_of_other_tools(tmp_path: Path) -> None:
    write(tmp_path, "app.py", "def f() -> str:\n    return 3\n")
    out = run([sys.executable, "-m", "mypy", "--no-incremental", "--cache-dir=/dev/null", "app.py"],
              cwd=tmp_path).output
    assert ": error:" in out
    assert gcc.parse(out, Hints()) is None
    if have("javac"):
        write(tmp_path, "Main.java", "public class Main { int f() { return nope; } }\n")
        assert gcc.parse(_failing(["javac", "-d", "out", "Main.java"], tmp_path), Hints()) is None


# --- javac -------------------------------------------------------------------------------------------

JAVA_SYMBOL = """
    public class Main {{
        {pad}
        public static void main(String[] args) {{
            int y = {value};
            System.out.println({name} + y);
        }}
    }}
"""


def _javac(folder: Path, source: str, name: str = "Main.java") -> tuple[str, Digest]:
    folder.mkdir(parents=True, exist_ok=True)
    write(folder, name, source)
    cmd = ["javac", "-d", "classes", name]
    raw = _failing(cmd, folder)
    return raw, _digest(raw, cmd)


@needs_javac
def test_javac_cannot_find_symbol_keeps_the_symbol(tmp_path: Path) -> None:
    raw, d = _javac(tmp_path, JAVA_SYMBOL.format(pad="", name="foo", value=2))
    assert "symbol:" in raw and "location: class Main" in raw
    assert (d.type, d.format) == ("javac error", "javac")
    assert d.cause == "cannot find symbol: variable foo"
    assert d.location is not None and (d.location.file, d.location.line) == ("Main.java", 5)


@needs_javac
def test_javac_key_is_stable_and_distinct_per_symbol(tmp_path: Path) -> None:
    _, first = _javac(tmp_path / "a", JAVA_SYMBOL.format(pad="", name="foo", value=2))
    _, again = _javac(tmp_path / "b", JAVA_SYMBOL.format(pad="\n\n", name="foo", value=4096))
    _, other = _javac(tmp_path / "c", JAVA_SYMBOL.format(pad="", name="bar", value=2))
    assert again.location is not None and again.location.line == 7
    assert first.key == again.key
    assert first.key != other.key


@needs_javac
def test_javac_incompatible_types_and_error_count(tmp_path: Path) -> None:
    source = """
        public class Shop {
            static int price() { String label = 5; return 1; }
            public static void main(String[] args) { undefinedCall(); }
        }
    """
    raw, d = _javac(tmp_path, source, "Shop.java")
    assert raw.rstrip().endswith("2 errors")
    assert d.cause == "incompatible types: int cannot be converted to String (+1 more)"
    assert d.location is not None and d.location.line == 2


@needs_javac
def test_javac_method_arguments_keep_required_and_found(tmp_path: Path) -> None:
    source = """
        public class Calls {
            static int twice(int a) { return 2 * a; }
            public static void main(String[] args) { twice(); }
        }
    """
    _, d = _javac(tmp_path, source, "Calls.java")
    assert "method twice in class Calls cannot be applied to given types" in d.cause
    assert "required: int" in d.cause and "found: no arguments" in d.cause


@needs_javac
def test_javac_missing_import_names_the_class(tmp_path: Path) -> None:
    source = """
        import java.util.Lisst;
        public class Imp { }
    """
    _, d = _javac(tmp_path, source, "Imp.java")
    assert d.cause == "cannot find symbol: class Lisst"


@needs_javac
def test_javac_missing_source_file(tmp_path: Path) -> None:
    cmd = ["javac", "Absent.java"]
    d = _digest(_failing(cmd, tmp_path), cmd)
    assert (d.type, d.location) == ("javac error", None)
    assert "Absent.java" in d.cause


# --- mypy --------------------------------------------------------------------------------------------

MYPY_SOURCE = """
    import os
    {pad}
    def label(count: int) -> str:
        return count * {value}

    def show() -> None:
        print({name})
"""


def _mypy(folder: Path, source: str, *flags: str) -> tuple[str, Digest]:
    folder.mkdir(parents=True, exist_ok=True)
    write(folder, "app.py", source)
    cmd = [sys.executable, "-m", "mypy", "--no-incremental", f"--cache-dir={folder / '.mypy'}", *flags,
           "app.py"]
    raw = _failing(cmd, folder)
    return raw, compact_text(raw, exit_code=1)


def test_mypy_return_value(tmp_path: Path) -> None:
    raw, d = _mypy(tmp_path, MYPY_SOURCE.format(pad="", value=2, name="undefined_name"))
    assert "Found 2 errors in 1 file" in raw
    assert (d.type, d.format) == ("mypy error", "mypy")
    assert d.cause == 'Incompatible return value type (got "int", expected "str") [return-value] (+1 more)'
    assert d.location is not None and (d.location.file, d.location.line) == ("app.py", 4)


def test_mypy_error_context_gives_the_function(tmp_path: Path) -> None:
    _, d = _mypy(tmp_path, MYPY_SOURCE.format(pad="", value=2, name="x"), "--show-error-context")
    assert d.location is not None and d.location.func == "label"


def test_mypy_pretty_output_gives_the_same_cause(tmp_path: Path) -> None:
    source = MYPY_SOURCE.format(pad="", value=2, name="undefined_name")
    _, plain = _mypy(tmp_path / "a", source)
    raw, pretty = _mypy(tmp_path / "b", source, "--pretty", "--show-column-numbers")
    assert "\n[return-value]" in raw  # mypy really wrapped the message
    assert pretty.cause == plain.cause
    assert pretty.key == plain.key


def test_mypy_key_is_stable_and_distinct_per_name(tmp_path: Path) -> None:
    # Only the name-defined error: put a valid return first.
    source = """
        {pad}
        def show(count: int) -> None:
            print(count + {value}, {name})
    """
    _, first = _mypy(tmp_path / "a", source.format(pad="", value=1, name="widget_total"))
    _, again = _mypy(tmp_path / "b", source.format(pad="\n\n\n", value=99, name="widget_total"))
    _, other = _mypy(tmp_path / "c", source.format(pad="", value=1, name="gadget_total"))
    assert first.cause == 'Name "widget_total" is not defined [name-defined]'
    assert first.key == again.key
    assert first.key != other.key


def test_mypy_parser_declines_gcc_output(tmp_path: Path) -> None:
    if not have("gcc"):
        pytest.skip("gcc is not installed")
    raw, _ = _gcc(tmp_path, UNDECLARED_C.format(pad="", name="total_count", value=7))
    assert mypy.parse(raw, Hints()) is None


EXPORT_CLI = """
    import argparse

    parser = argparse.ArgumentParser()
    parser.add_argument("--input", required=True)
    parser.add_argument("--format", choices=["csv", "json"])
    parser.parse_args()
"""


def test_an_argparse_usage_error_is_no_mypy_error(tmp_path: Path) -> None:
    """``export.py: error: …`` under argparse's ``usage:`` line is the command line's fault, not a type
    checker's; the value passed is shown but not keyed, the flag and the mistake are."""

    def cli(*args: str) -> Digest:
        raw = python_error(tmp_path, EXPORT_CLI, name="export.py", args=list(args))
        return compact_text(raw, exit_code=2, command="python export.py " + " ".join(args))

    xml, yaml = cli("--input", "a.csv", "--format", "xml"), cli("--input", "a.csv", "--format", "yaml")
    missing = cli("--format", "csv")
    assert xml.line == "[usage error]: export.py: argument --format: invalid choice: 'xml' (choose from 'csv', 'json')"
    assert missing.line == "[usage error]: export.py: the following arguments are required: --input"
    assert xml.key == yaml.key
    assert xml.key != missing.key


# --- rustc -------------------------------------------------------------------------------------------

RUST_SOURCE = """
    fn main() {{
        {pad}let base = {value};
        println!("{{}}", base + {name});
    }}
"""


def _rustc(folder: Path, source: str, *flags: str) -> tuple[str, Digest]:
    folder.mkdir(parents=True, exist_ok=True)
    write(folder, "src/main.rs", source)
    cmd = ["rustc", "--edition=2021", *flags, "src/main.rs", "-o", "app"]
    raw = _failing(cmd, folder)
    return raw, _digest(raw, cmd)


@needs_rustc
def test_rustc_cannot_find_value(tmp_path: Path) -> None:
    raw, d = _rustc(tmp_path, RUST_SOURCE.format(pad="", value=1, name="x"))
    assert "error[E0425]" in raw and "--> src/main.rs" in raw
    assert (d.type, d.format) == ("rustc E0425", "rustc")
    assert d.cause == "cannot find value `x` in this scope"
    assert d.location is not None and (d.location.file, d.location.line) == ("src/main.rs", 3)
    assert d.line.startswith("[rustc E0425] at main.rs:3: ")


@needs_rustc
def test_rustc_key_is_stable_and_distinct_per_name(tmp_path: Path) -> None:
    _, first = _rustc(tmp_path / "a", RUST_SOURCE.format(pad="", value=1, name="x"))
    _, again = _rustc(tmp_path / "b", RUST_SOURCE.format(pad="\n\n", value=31337, name="x"))
    _, other = _rustc(tmp_path / "c", RUST_SOURCE.format(pad="", value=1, name="offset"))
    assert again.location is not None and again.location.line == 5
    assert first.key == again.key
    assert first.key != other.key


@needs_rustc
def test_rustc_mismatched_types_borrows_the_label(tmp_path: Path) -> None:
    source = """
        fn main() {
            let name: String = 5;
            let _ = missing_helper(name);
        }
    """
    raw, d = _rustc(tmp_path, source)
    assert "aborting due to 2 previous errors" in raw
    assert d.type in {"rustc E0308", "rustc E0425"}  # rustc decides the emission order
    if d.type == "rustc E0308":
        assert d.cause == "mismatched types: expected `String`, found integer (+1 more)"
    else:
        assert d.cause == "cannot find function `missing_helper` in this scope (+1 more)"


@needs_rustc
def test_rustc_short_error_format(tmp_path: Path) -> None:
    raw, d = _rustc(tmp_path, RUST_SOURCE.format(pad="", value=1, name="x"), "--error-format=short")
    assert "-->" not in raw
    assert d.type == "rustc E0425"
    assert "`x`" in d.cause
    assert d.location is not None and d.location.line == 3


@needs_rustc
def test_rustc_parser_declines_gcc_and_javac_output(tmp_path: Path) -> None:
    if have("gcc"):
        raw, _ = _gcc(tmp_path / "c", UNDECLARED_C.format(pad="", name="total_count", value=7))
        assert rustc.parse(raw, Hints()) is None
    if have("javac"):
        raw, _ = _javac(tmp_path / "j", JAVA_SYMBOL.format(pad="", name="foo", value=2))
        assert rustc.parse(raw, Hints()) is None
        assert javac.parse(raw, Hints()) is not None


# --- robustness --------------------------------------------------------------------------------------


@pytest.mark.timeout(60)  # a hang guard against catastrophic backtracking; speed is measured in benchmarks/
@needs_gcc
def test_parsers_stay_fast_on_huge_hostile_lines(tmp_path: Path) -> None:
    raw, _ = _gcc(tmp_path, UNDECLARED_C.format(pad="", name="total_count", value=7))
    # Real output wrapped in long runs of the characters the patterns pivot on.
    hostile = (" " * 60_000 + "^" + ":" * 30_000 + "1:" * 10_000 + "\n" + raw + "[" * 20_000 + "\n")
    for parser in (gcc.parse, javac.parse, mypy.parse, rustc.parse):
        parser(hostile, Hints())
    d = compact_text(hostile)
    assert "'total_count'" in d.cause


@needs_gcc
def test_a_duplicate_symbol_keeps_one_key_though_gcc_names_its_objects_anew(tmp_path: Path) -> None:
    """The linker quotes the object that first defined the symbol by gcc's temporary name, new on every
    run (``/tmp/cc9mQisY.o``): one failure, one key; another symbol, another key."""
    write(tmp_path, "one.c", "int dup(void) { return 1; }\nint twice(void) { return 1; }\n")
    write(tmp_path, "two.c", "int dup(void) { return 2; }\n")
    write(tmp_path, "three.c", "int twice(void) { return 3; }\n")
    write(tmp_path, "main.c", "int main(void) { return 0; }\n")
    dup = [_digest(_failing(cmd, tmp_path), cmd) for cmd in [["gcc", "one.c", "two.c", "main.c"]] * 2]
    cmd = ["gcc", "one.c", "three.c", "main.c"]
    twice = _digest(_failing(cmd, tmp_path), cmd)
    assert "multiple definition of" in dup[0].line and "'dup'" in dup[0].line, dup[0].line
    assert dup[0].key == dup[1].key != twice.key


# --- the count of other errors ---------------------------------------------------------------------------

# Per tool: the source around the offending lines, and one line using an undefined name ({name}).
_UNDEFINED_USE: dict[str, tuple[str, str]] = {
    "gcc": ("int main(void) {{\n{lines}    return 0;\n}}\n", "    {name} = 1;\n"),
    "javac": ("public class Main {{\n    public static void main(String[] args) {{\n{lines}    }}\n}}\n",
              "        int {name}Copy = {name};\n"),
    "mypy": ("def main() -> None:\n{lines}    pass\n", "    print({name})\n"),
    "rustc": ("fn main() {{\n{lines}}}\n", "    let _{name}: i32 = {name};\n"),
}


def _undefined(tool: str, folder: Path, *names: str) -> Digest:
    around, line = _UNDEFINED_USE[tool]
    source = around.format(lines="".join(line.format(name=name) for name in names))
    if tool == "gcc":
        return _gcc(folder, source, "calc.c")[1]
    if tool == "javac":
        return _javac(folder, source)[1]
    if tool == "mypy":
        return _mypy(folder, source)[1]
    return _rustc(folder, source)[1]


@pytest.mark.parametrize("tool", sorted(_UNDEFINED_USE))
def test_fixing_another_error_keeps_the_key_of_the_first(tmp_path: Path, tool: str) -> None:
    """``(+1 more)`` is shown, but the key is built without it: once the second error is fixed, the
    unchanged first one keeps its key; a different first error has another."""
    if tool != "mypy" and not have(tool):
        pytest.skip(f"{tool} is not installed")
    both = _undefined(tool, tmp_path / "both", "totalCount", "rowLimit")
    alone = _undefined(tool, tmp_path / "alone", "totalCount")
    other = _undefined(tool, tmp_path / "other", "pageSize")
    assert "totalCount" in both.cause and both.cause.endswith("(+1 more)"), both.line
    assert "totalCount" in alone.cause and "more" not in alone.cause, alone.line
    assert both.key == alone.key
    assert other.key != alone.key
