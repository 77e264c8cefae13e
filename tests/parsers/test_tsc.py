"""The tsc parser, on diagnostics printed by the real TypeScript compiler run in tmp_path.

The compiler comes from ``.ci/tsc-install.sh`` (a pinned ``typescript`` in ``.cache/tsc``) or from
PATH. Without it these tests skip, except on CI, where a missing compiler is a failure.

Each sample runs in both of tsc's output forms: ``--pretty false`` (``a.ts(2,13): error TS2304: …``)
and ``--pretty true`` (``a.ts:2:13 - error TS2304: …`` with colours, a code frame and a summary). Runs
in different folders with different line positions and literal values must share a dedup key; a
different missing name must not.
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest

from otel_errcompact._sanitize import sanitize
from otel_errcompact.compactor import compact_text
from otel_errcompact.digest import Digest
from otel_errcompact.parsers import gcc, mypy, node, tsc
from otel_errcompact.parsers._base import Hints
from tests.realerrors import have, run, write

_LOCAL_TSC = Path(__file__).resolve().parents[2] / ".cache" / "tsc" / "node_modules" / ".bin" / "tsc"

PLAIN = ("--pretty", "false")
PRETTY = ("--pretty", "true")
FORMS = pytest.mark.parametrize("form", [PLAIN, PRETTY], ids=["plain", "pretty"])


@pytest.fixture(scope="module")
def tsc_bin() -> str:
    """The tsc executable; skips (or fails on CI) when neither the pinned install nor PATH has one."""
    if _LOCAL_TSC.is_file() and os.access(_LOCAL_TSC, os.X_OK):
        return str(_LOCAL_TSC)
    found = shutil.which("tsc")
    if found is not None:
        return found
    reason = "tsc is not installed: run .ci/tsc-install.sh"
    if os.environ.get("CI") == "true":
        pytest.fail(reason)
    pytest.skip(reason)


def _tsc(tsc_bin: str, folder: Path, files: dict[str, str], *args: str) -> tuple[str, Digest]:
    """Write ``files`` into ``folder``, run the real tsc there and digest what it printed."""
    folder.mkdir(parents=True, exist_ok=True)
    for name, source in files.items():
        write(folder, name, source)
    cmd = [tsc_bin, *args]
    result = run(cmd, cwd=folder)
    assert result.returncode != 0, f"{cmd} was expected to fail:\n{result.output}"
    return result.output, compact_text(result.output, exit_code=result.returncode, command="tsc " + " ".join(args))


MISSING_NAME = """
    const base: number = {value};
    {pad}
    export function total(): number {{
        return base + {name};
    }}
"""

PROPERTY = """
    interface User {{ name: string }}
    {pad}
    export function mail(u: User): string {{
        return u.{prop} + "{value}";
    }}
"""

NOT_ASSIGNABLE = """
    {pad}
    export const limit: number = "{value}";
"""

MISSING_MODULE = """
    import {{ helper }} from "{module}";
    {pad}
    export const out = helper({value});
"""


def _source(template: str, pad: int = 0, **values: object) -> str:
    return template.format(pad="\n".join("// pad" for _ in range(pad)), **values)


# --- single errors, both forms ------------------------------------------------------------------------


@FORMS
def test_cannot_find_name(tsc_bin: str, tmp_path: Path, form: tuple[str, str]) -> None:
    raw, d = _tsc(tsc_bin, tmp_path, {"calc.ts": _source(MISSING_NAME, name="total_count", value=7)},
                  "--noEmit", *form, "calc.ts")
    assert "TS2304" in raw
    assert d.type == "tsc TS2304"
    assert d.cause == "Cannot find name 'total_count'"
    assert d.location is not None
    assert (d.location.file, d.location.line, d.location.func) == ("calc.ts", 4, None)
    assert d.line == "[tsc TS2304] at calc.ts:4: Cannot find name 'total_count'"


def test_pretty_output_is_coloured_and_keys_like_plain(tsc_bin: str, tmp_path: Path) -> None:
    files = {"calc.ts": _source(MISSING_NAME, name="total_count", value=7)}
    raw_plain, plain = _tsc(tsc_bin, tmp_path / "plain", files, "--noEmit", *PLAIN, "calc.ts")
    raw_pretty, pretty = _tsc(tsc_bin, tmp_path / "pretty", files, "--noEmit", *PRETTY, "calc.ts")
    assert "\x1b[" in raw_pretty and "\x1b[" not in raw_plain
    assert "calc.ts:4:" in sanitize(raw_pretty)[0] and "calc.ts(4," in raw_plain
    assert pretty.line == plain.line
    assert pretty.key == plain.key


@FORMS
def test_property_does_not_exist_keeps_the_property(tsc_bin: str, tmp_path: Path, form: tuple[str, str]) -> None:
    _, d = _tsc(tsc_bin, tmp_path, {"mail.ts": _source(PROPERTY, prop="email", value="x")},
                "--noEmit", *form, "mail.ts")
    assert d.type == "tsc TS2339"
    assert d.cause == "Property 'email' does not exist on type 'User'"
    assert d.location is not None and (d.location.file, d.location.line) == ("mail.ts", 4)


@FORMS
def test_type_not_assignable(tsc_bin: str, tmp_path: Path, form: tuple[str, str]) -> None:
    _, d = _tsc(tsc_bin, tmp_path, {"conf.ts": _source(NOT_ASSIGNABLE, value="ten")}, "--noEmit", *form, "conf.ts")
    assert d.type == "tsc TS2322"
    assert d.cause == "Type 'string' is not assignable to type 'number'"
    assert d.location is not None and (d.location.file, d.location.line) == ("conf.ts", 1)


@FORMS
def test_cannot_find_module_keeps_the_module(tsc_bin: str, tmp_path: Path, form: tuple[str, str]) -> None:
    _, d = _tsc(tsc_bin, tmp_path, {"use.ts": _source(MISSING_MODULE, module="left-padder", value=1)},
                "--noEmit", *form, "use.ts")
    assert d.type == "tsc TS2307"
    assert "'left-padder'" in d.cause
    assert d.cause.startswith("Cannot find module 'left-padder'")
    assert d.location is not None and (d.location.file, d.location.line) == ("use.ts", 1)


# --- several errors -----------------------------------------------------------------------------------


@FORMS
def test_several_errors_report_the_first_and_count_the_rest(
    tsc_bin: str, tmp_path: Path, form: tuple[str, str]
) -> None:
    files = {
        "a.ts": _source(MISSING_NAME, name="total_count", value=1),
        "b.ts": _source(PROPERTY, prop="email", value="y") + _source(NOT_ASSIGNABLE, value="z"),
    }
    raw, d = _tsc(tsc_bin, tmp_path, files, "--noEmit", *form, "a.ts", "b.ts")
    assert raw.count("error") >= 3
    if form == PRETTY:
        assert "Found 3 errors in 2 files" in raw
    assert d.type == "tsc TS2304"
    assert d.cause == "Cannot find name 'total_count' (+2 more)"
    assert d.location is not None and d.location.file == "a.ts"


@FORMS
def test_fixing_another_error_keeps_the_key_of_the_first(tsc_bin: str, tmp_path: Path, form: tuple[str, str]) -> None:
    """The count of the other errors is shown but not keyed: once they are fixed, the unchanged first
    error keeps its key; another first error has another."""
    broken = {"a.ts": _source(MISSING_NAME, name="total_count", value=1), "b.ts": _source(NOT_ASSIGNABLE, value="z")}
    _, both = _tsc(tsc_bin, tmp_path / "both", broken, "--noEmit", *form, "a.ts", "b.ts")
    _, alone = _tsc(tsc_bin, tmp_path / "alone", {"a.ts": broken["a.ts"]}, "--noEmit", *form, "a.ts")
    other_file = {"a.ts": _source(MISSING_NAME, name="row_limit", value=1)}
    _, other = _tsc(tsc_bin, tmp_path / "other", other_file, "--noEmit", *form, "a.ts")
    assert both.cause == "Cannot find name 'total_count' (+1 more)"
    assert alone.cause == "Cannot find name 'total_count'"
    assert both.key == alone.key
    assert other.key != alone.key


def test_related_information_is_not_counted_as_an_error(tsc_bin: str, tmp_path: Path) -> None:
    # TS2551 points at lib.es5.d.ts's declaration of 'length' in an indented related-information block.
    source = "export function f(a: string): number {\n    return a.lenght;\n}\n"
    raw, d = _tsc(tsc_bin, tmp_path, {"s.ts": source}, "--noEmit", *PRETTY, "s.ts")
    assert "lib.es5.d.ts" in raw
    assert d.type == "tsc TS2551"
    assert d.cause == "Property 'lenght' does not exist on type 'string'. Did you mean 'length'?"
    assert d.location is not None and (d.location.file, d.location.line) == ("s.ts", 2)


# --- errors without a file ----------------------------------------------------------------------------


@FORMS
def test_missing_project_path(tsc_bin: str, tmp_path: Path, form: tuple[str, str]) -> None:
    raw, d = _tsc(tsc_bin, tmp_path, {}, "-p", "no-such-project", *form)
    assert "TS5058" in raw
    assert d.type == "tsc TS5058"
    assert d.cause == "The specified path does not exist: 'no-such-project'"
    assert d.location is None
    assert d.line == "[tsc TS5058]: The specified path does not exist: 'no-such-project'"


@FORMS
def test_tsconfig_errors(tsc_bin: str, tmp_path: Path, form: tuple[str, str]) -> None:
    files = {
        "tsconfig.json": '{\n  "compilerOptions": {\n    "strictt": true\n  }\n}\n',
        "main.ts": "export const ok = 1;\n",
    }
    _, d = _tsc(tsc_bin, tmp_path, files, *form)
    assert d.type == "tsc TS5025"
    assert d.cause == "Unknown compiler option 'strictt'. Did you mean 'strict'?"
    assert d.location is not None and (d.location.file, d.location.line) == ("tsconfig.json", 3)


def test_no_inputs_in_config_keys_the_same_in_any_folder(tsc_bin: str, tmp_path: Path) -> None:
    digests = [_tsc(tsc_bin, tmp_path / name, {"tsconfig.json": "{}\n"}, *PLAIN)[1] for name in ("one", "two")]
    assert digests[0].type == "tsc TS18003"
    assert digests[0].cause.startswith("No inputs were found in config file")
    assert "tsconfig.json" in digests[0].cause
    assert digests[0].location is None
    assert digests[0].key == digests[1].key


# --- dedup keys ---------------------------------------------------------------------------------------


@FORMS
def test_key_is_stable_across_folders_and_values(tsc_bin: str, tmp_path: Path, form: tuple[str, str]) -> None:
    def digest(folder: str, pad: int, value: int, name: str) -> Digest:
        files = {"calc.ts": _source(MISSING_NAME, pad=pad, name=name, value=value)}
        return _tsc(tsc_bin, tmp_path / folder, files, "--noEmit", *form, "calc.ts")[1]

    first = digest("run-1", 0, 7, "total_count")
    second = digest("run-2", 5, 912, "total_count")
    other = digest("run-3", 0, 7, "grand_total")
    assert first.location is not None and second.location is not None
    assert first.location.line != second.location.line
    assert first.key == second.key
    assert other.key != first.key


@FORMS
def test_different_properties_and_modules_do_not_share_a_key(
    tsc_bin: str, tmp_path: Path, form: tuple[str, str]
) -> None:
    email = _tsc(tsc_bin, tmp_path / "p1", {"m.ts": _source(PROPERTY, prop="email", value="a")},
                 "--noEmit", *form, "m.ts")[1]
    phone = _tsc(tsc_bin, tmp_path / "p2", {"m.ts": _source(PROPERTY, prop="phone", value="b")},
                 "--noEmit", *form, "m.ts")[1]
    mod_a = _tsc(tsc_bin, tmp_path / "m1", {"u.ts": _source(MISSING_MODULE, module="pkg-a", value=1)},
                 "--noEmit", *form, "u.ts")[1]
    mod_b = _tsc(tsc_bin, tmp_path / "m2", {"u.ts": _source(MISSING_MODULE, module="pkg-b", pad=3, value=2)},
                 "--noEmit", *form, "u.ts")[1]
    assert email.key != phone.key
    assert mod_a.key != mod_b.key


# --- neighbours: tsc claims none of theirs, none of them claims tsc's ---------------------------------


@FORMS
def test_other_compiler_parsers_leave_tsc_output_alone(tsc_bin: str, tmp_path: Path, form: tuple[str, str]) -> None:
    files = {
        "a.ts": _source(MISSING_NAME, name="total_count", value=1),
        "b.ts": _source(MISSING_MODULE, module="pkg-a", value=1),
    }
    raw, _ = _tsc(tsc_bin, tmp_path, files, "--noEmit", *form, "a.ts", "b.ts")
    plain = sanitize(raw)[0]  # what the compactor hands parsers: colours stripped
    for parser in (gcc.parse, mypy.parse, node.parse):
        assert parser(plain, Hints(exit_code=2, command="tsc")) is None


@pytest.mark.skipif(not (have("gcc") and have("node") and have("mypy")), reason="gcc, node or mypy missing")
def test_tsc_parser_leaves_other_tools_output_alone(tmp_path: Path) -> None:
    write(tmp_path, "calc.c", "int main(void) { return total_count; }\n")
    write(tmp_path, "app.js", "const m = require('left-padder');\n")
    write(tmp_path, "app.py", "def f() -> int:\n    return 'x'\n")
    outputs = [
        run(["gcc", "-c", "calc.c", "-o", "calc.o"], cwd=tmp_path).output,
        run(["node", "app.js"], cwd=tmp_path).output,
        run(["mypy", "--no-incremental", "--strict", "app.py"], cwd=tmp_path).output,
    ]
    for output in outputs:
        assert "error" in output.lower()
        assert tsc.parse(output, Hints(exit_code=1)) is None


# --- robustness ---------------------------------------------------------------------------------------


@pytest.mark.timeout(60)  # a hang guard against catastrophic backtracking; speed is measured in benchmarks/
def test_large_and_odd_input_is_bounded_and_never_raises(tsc_bin: str, tmp_path: Path) -> None:
    raw, _ = _tsc(tsc_bin, tmp_path, {"calc.ts": _source(MISSING_NAME, name="total_count", value=7)},
                  "--noEmit", *PLAIN, "calc.ts")
    header = raw.strip().splitlines()[0]
    samples = [
        raw * (128_000 // len(raw)),  # many real errors
        header.replace("\n", "") * (128_000 // len(header)),  # one enormous line
        "(" + "1" * 64_000 + "): error TS" + "(1," * 20_000,  # positions that never close
        ":" + "1:" * 40_000 + " - error TS",
    ]
    for sample in samples:
        tsc.parse(sample, Hints())
    many = tsc.parse(samples[0], Hints())
    assert many is not None and many.cause.startswith("Cannot find name 'total_count' (+")
