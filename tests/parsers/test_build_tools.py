"""make, CMake and dash (``/bin/sh``) failures, from real runs: the decisive line is kept, wherever it is."""

from __future__ import annotations

from pathlib import Path

import pytest

from otel_errcompact.compactor import compact_text
from otel_errcompact.digest import Digest
from tests.realerrors import have, run, write


def _sh(folder: Path, command: str, env: dict[str, str] | None = None) -> tuple[str, int, Digest]:
    result = run(command, cwd=folder, shell=True, timeout=120, env=env)
    assert result.returncode != 0, result.output
    return result.output, result.returncode, compact_text(result.output, exit_code=result.returncode,
                                                          command=command)


needs_make = pytest.mark.skipif(not have("make"), reason="make is not installed")
needs_cmake = pytest.mark.skipif(not have("cmake"), reason="cmake is not installed")


@needs_make
def test_make_no_rule_keeps_target_and_dependant(tmp_path: Path) -> None:
    write(tmp_path, "Makefile", "app: main.o\n\tcc -o app main.o\n")
    _, code, d = _sh(tmp_path, "make")
    assert (d.type, d.format, d.status) == ("make", "make", code)
    assert "No rule to make target 'main.o', needed by 'app'" in d.line


@needs_make
def test_make_missing_target_differs_by_name(tmp_path: Path) -> None:
    keys = set()
    for n, obj in enumerate(("main.o", "util.o")):
        folder = tmp_path / str(n)
        write(folder, "Makefile", f"app: {obj}\n\tcc -o app {obj}\n")
        keys.add(_sh(folder, "make")[2].key)
    assert len(keys) == 2


@needs_make
def test_make_missing_separator_points_at_the_makefile_line(tmp_path: Path) -> None:
    write(tmp_path, "Makefile", "# one\n# two\nall:\n    echo spaces\n")
    _, _, d = _sh(tmp_path, "make")
    assert d.cause == "missing separator"
    assert d.location is not None and (d.location.file, d.location.line) == ("Makefile", 4)


@needs_make
def test_make_recipe_failure_names_the_command_line_not_make(tmp_path: Path) -> None:
    write(tmp_path, "Makefile", "build:\n\t@echo step one\n\tmkdir -p out\n\tcp config.ini out/\n")
    out, _, d = _sh(tmp_path, "make build")
    assert "make: *** [Makefile:4: build] Error 1" in out
    assert "cannot stat 'config.ini'" in d.cause and "target 'build'" in d.cause
    assert d.location is not None and d.location.func == "build"
    # The same failure in another folder, after more output, is the same class.
    other = tmp_path / "again"
    write(other, "Makefile", "build:\n\t@echo step two\n\t@echo more\n\tmkdir -p out\n\tcp config.ini out/\n")
    assert _sh(other, "make build")[2].key == d.key


@needs_make
@pytest.mark.skipif(not have("cc"), reason="no C compiler")
def test_compiler_error_inside_make_is_the_compilers(tmp_path: Path) -> None:
    write(tmp_path, "main.c", "int main(void) {\n    return count + 1;\n}\n")
    write(tmp_path, "Makefile", "app: main.c\n\tcc -o app main.c\n")
    _, _, d = _sh(tmp_path, "make", env={"LC_ALL": "C"})
    assert d.format == "gcc" and "'count' undeclared" in d.cause


@needs_cmake
def test_cmake_find_package_keeps_the_package(tmp_path: Path) -> None:
    write(tmp_path, "CMakeLists.txt", "cmake_minimum_required(VERSION 3.10)\nproject(demo NONE)\n\n"
                                      "find_package(Zorglib REQUIRED)\n")
    out, _, d = _sh(tmp_path, "cmake -S . -B build")
    assert "CMake Error at CMakeLists.txt:4 (find_package)" in out
    assert d.type == "CMake Error" and d.format == "cmake"
    assert "Zorglib" in d.cause and "in find_package" in d.line
    assert d.location is not None and (d.location.file, d.location.line) == ("CMakeLists.txt", 4)


@needs_cmake
def test_cmake_missing_source_keeps_the_file_name(tmp_path: Path) -> None:
    keys = set()
    for src in ("missing.c", "gone.c"):
        folder = tmp_path / src
        write(folder, "CMakeLists.txt", f"cmake_minimum_required(VERSION 3.10)\nproject(demo C)\n"
                                        f"add_executable(app {src})\n")
        _, _, d = _sh(folder, "cmake -S . -B build")
        assert f"Cannot find source file: {src}" in d.cause
        keys.add(d.key)
    assert len(keys) == 2


@needs_cmake
def test_cmake_parse_error_names_file_line_and_what_was_expected(tmp_path: Path) -> None:
    """A parse error's header has no command (``CMake Error at CMakeLists.txt:3:``): the file, the line
    and what the parser expected are kept, and two parse errors are two classes."""
    digests = {}
    for name, body in (("paren", "add_executable(app main.c\n"), ("stray", "this is stray text\n")):
        folder = tmp_path / name
        write(folder, "CMakeLists.txt", f"cmake_minimum_required(VERSION 3.10)\nproject(demo NONE)\n{body}")
        out, _, d = _sh(folder, "cmake -S . -B build")
        assert "CMake Error at CMakeLists.txt:3:\n" in out
        assert (d.type, d.format) == ("CMake Error", "cmake")
        assert d.location is not None and (d.location.file, d.location.line) == ("CMakeLists.txt", 3)
        assert d.cause.startswith("Parse error.")
        digests[name] = d
    assert 'Function missing ending ")"' in digests["paren"].cause
    assert 'Expected "(", got identifier with text "is"' in digests["stray"].cause
    assert digests["paren"].key != digests["stray"].key


@needs_cmake
def test_cmake_parse_error_in_an_included_file_is_the_cause(tmp_path: Path) -> None:
    """The ``include`` that read a file with a parse error fails after it: the parse error is the cause."""
    write(tmp_path, "CMakeLists.txt", "cmake_minimum_required(VERSION 3.10)\nproject(demo NONE)\n"
                                      "include(extra.cmake)\n")
    write(tmp_path, "extra.cmake", "# extra settings\nset(EXTRA 1\n")
    out, _, d = _sh(tmp_path, "cmake -S . -B build")
    assert "CMake Error at CMakeLists.txt:3 (include)" in out
    assert d.location is not None and (d.location.file, d.location.line) == ("extra.cmake", 2)
    assert d.cause.startswith("Parse error.") and 'Function missing ending ")"' in d.cause


@pytest.mark.skipif(not Path("/bin/sh").exists(), reason="no /bin/sh")
def test_dash_cd_and_syntax_errors(tmp_path: Path) -> None:
    _, _, cd = _sh(tmp_path, f"cd {tmp_path}/build && ls")
    assert "can't cd to" in cd.cause and cd.cause.endswith("/build")
    _, _, syntax = _sh(tmp_path, "echo start; f() ( ; }")
    _, _, other = _sh(tmp_path, "if true; then echo x; fi fi")
    assert syntax.type == other.type
    assert '";" unexpected' in syntax.line and '"fi" unexpected' in other.line
    assert syntax.key != other.key
