"""make, CMake and POSIX sh (dash) errors from real runs in throw-away folders. Run: ``python gen_build.py``.

Line numbers, folders and surrounding output vary between the repeats of a scenario (comment lines are
added above the failing line, each run uses a new temp folder); near-miss pairs differ in the target,
package, source file, command or folder that is the cause.
"""

from __future__ import annotations

import shutil
import tempfile
from pathlib import Path

from _gen import Record, Run, sh, write_family

FAMILY = "build"
REPEATS = 4


def main() -> None:
    records: list[Record] = []
    pairs: list[tuple[str, str, str]] = []

    def add(name: str, fmt: str, label: str, result: Run, tokens: list[str], source: str) -> None:
        assert result.returncode != 0, (name, result)
        records.append(Record(f"{FAMILY}/{name}", fmt, source, result.output, label, tokens,
                              result.returncode, result.command))

    def folder(files: dict[str, str]) -> Path:
        path = Path(tempfile.mkdtemp(prefix="build-"))
        for name, text in files.items():
            (path / name).parent.mkdir(parents=True, exist_ok=True)
            (path / name).write_text(text)
        return path

    made: list[Path] = []
    for i in range(REPEATS):
        pad = "".join(f"# note {n}\n" for n in range(i * 2))
        modules = [f"mod{n}" for n in range(4 + 2 * i)]
        compiled = {f"{m}.c": f"int {m}_value(void) {{ return {n}; }}\n" for n, m in enumerate(modules)}
        objects = " ".join(f"{m}.o" for m in modules)
        for obj in ("main.o", "util.o"):
            d = folder({"Makefile": f"{pad}app: {obj}\n\tcc -o app {obj}\n"})
            made.append(d)
            cmd = "make" if i % 2 == 0 else f"make -C {d}"
            add(f"make-no-rule-{obj}-{i}", "make", f"make-no-rule-{obj}", sh(cmd, d), [obj, "No rule"],
                "make with a prerequisite that has no rule")
        for target in ("instal", "deploy"):
            d = folder({"Makefile": f"{pad}all:\n\t@echo built {i}\n"})
            made.append(d)
            add(f"make-unknown-target-{target}-{i}", "make", f"make-unknown-target-{target}",
                sh(f"make {target}", d), [target, "No rule"], "make with a target the Makefile lacks")
        d = folder({"Makefile": f"{pad}all:\n    echo spaces-not-tab {i}\n"})
        made.append(d)
        add(f"make-missing-separator-{i}", "make", "make-missing-separator", sh("make", d),
            ["missing separator"], "Makefile recipe indented with spaces")
        for missing in ("config.ini", "schema.sql"):
            d = folder({**compiled, "Makefile": f"{pad}build: {objects}\n\t@echo step {i}\n\tmkdir -p out\n"
                                                f"\tcp {missing} out/\n"})
            made.append(d)
            add(f"make-recipe-cp-{missing}-{i}", "make", f"make-recipe-cp-{missing}", sh("make build", d),
                [missing, "cannot stat"], "make recipe whose cp fails")
        for var in ("x", "count"):
            src = f"{pad}int main(void) {{\n    return {var} + {i};\n}}\n".replace("#", "//")
            # A real project compiles several modules before the one that fails.
            d = folder({"main.c": src, **compiled,
                        "Makefile": f"app: {objects} main.o\n\tcc -o app {objects} main.o\n"})
            made.append(d)
            # LC_ALL=C: gcc quotes names with plain ASCII quotes, as in most containers.
            add(f"make-gcc-{var}-{i}", "make", f"make-gcc-undeclared-{var}", sh("make", d, env={"LC_ALL": "C"}),
                [f"'{var}'", "undeclared", "main.c"], "make running gcc on code that uses an undeclared name")

        for pkg in ("Foo", "Protobufx"):
            d = folder({"CMakeLists.txt": f"cmake_minimum_required(VERSION 3.10)\nproject(demo{i} C)\n{pad}"
                                          f"find_package({pkg} REQUIRED)\n"})
            made.append(d)
            add(f"cmake-find-package-{pkg}-{i}", "cmake", f"cmake-find-package-{pkg}",
                sh("cmake -S . -B build", d), [pkg, "find_package"], "cmake with a package that is not installed")
        for src in ("missing.c", "gone.c"):
            d = folder({"CMakeLists.txt": f"cmake_minimum_required(VERSION 3.10)\nproject(demo{i} C)\n{pad}"
                                          f"add_executable(app {src})\n"})
            made.append(d)
            add(f"cmake-missing-source-{src}-{i}", "cmake", f"cmake-missing-source-{src}",
                sh("cmake -S . -B build", d), [src, "Cannot find source file"], "add_executable with a missing source")
        for command in ("frobnicate", "add_libary"):
            d = folder({"CMakeLists.txt": f"cmake_minimum_required(VERSION 3.10)\nproject(demo{i} C)\n{pad}"
                                          f"{command}(app main.c)\n"})
            made.append(d)
            add(f"cmake-unknown-command-{command}-{i}", "cmake", f"cmake-unknown-command-{command}",
                sh("cmake -S . -B build", d), [command, "Unknown CMake command"], "a misspelt CMake command")

        for sub in ("build", "dist"):
            d = folder({})
            made.append(d)
            add(f"sh-cd-{sub}-{i}", "shell", f"sh-cd-{sub}", sh(f"cd {d}/{sub} && ls -la", d),
                ["can't cd to", sub], "sh -c 'cd missing-dir && …' (dash)")
        for bad, token in (("echo start; f() ( ; }", '";" unexpected'), ("echo $((1 + ))", "arithmetic"),
                           ("if true; then echo x; fi fi", '"fi" unexpected')):
            d = folder({})
            made.append(d)
            # Vary the harmless part of the command line: the failure is the same.
            add(f"sh-syntax-{len(records)}-{i}", "shell", f"sh-syntax-{token}",
                sh(f"echo run {i} >/dev/null; {bad}", d), [token], "dash parsing a malformed command")
        for tool in ("pnpm", "poetry"):
            d = folder({})
            made.append(d)
            add(f"sh-not-found-{tool}-{i}", "shell", f"sh-not-found-{tool}",
                sh(f"echo step {i}; {tool} install --frozen-lockfile", d), [tool, "not found"],
                "dash running a program that is not installed")
    for d in made:
        shutil.rmtree(d, ignore_errors=True)

    def first(prefix: str, i: int = 0) -> str:
        return next(r.id for r in records if r.id.startswith(f"{FAMILY}/{prefix}") and r.id.endswith(f"-{i}"))

    pairs += [(first("make-no-rule-main.o"), first("make-no-rule-util.o"), "missing prerequisite differs"),
              (first("make-unknown-target-instal", 1), first("make-unknown-target-deploy", 1), "target differs"),
              (first("make-recipe-cp-config.ini"), first("make-recipe-cp-schema.sql"), "missing file differs"),
              (first("make-gcc-x", 2), first("make-gcc-count", 2), "undeclared name differs"),
              (first("cmake-find-package-Foo"), first("cmake-find-package-Protobufx"), "package differs"),
              (first("cmake-missing-source-missing.c"), first("cmake-missing-source-gone.c"), "source differs"),
              (first("cmake-unknown-command-frobnicate", 3), first("cmake-unknown-command-add_libary", 3),
               "command differs"),
              (first("sh-cd-build"), first("sh-cd-dist"), "folder differs"),
              (first("sh-not-found-pnpm", 1), first("sh-not-found-poetry", 1), "program differs")]
    syntax = [r for r in records if r.label.startswith("sh-syntax") and r.id.endswith("-0")]
    pairs += [(syntax[0].id, syntax[2].id, "unexpected token differs"),
              (syntax[0].id, syntax[1].id, "different syntax error")]
    write_family(FAMILY, records, pairs)


if __name__ == "__main__":
    main()
