"""make, CMake, Maven and dash (``/bin/sh``) failures, from real runs: the decisive line is kept, wherever it is."""

from __future__ import annotations

import zipfile
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
needs_mvn = pytest.mark.skipif(not have("mvn"), reason="Maven (mvn) is not installed")


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


def _pom(folder: Path, body: str = "", head: str = "<groupId>demo</groupId>") -> None:
    write(folder, "pom.xml", f"""<project xmlns="http://maven.apache.org/POM/4.0.0">
          <modelVersion>4.0.0</modelVersion>
          {head}<artifactId>app</artifactId><version>1.0</version>
          {body}
        </project>
        """)


def _mvn(folder: Path, goal: str) -> tuple[str, Digest]:
    """``mvn -o`` with a fresh local repository in ``folder``: Maven may not fetch, so nothing touches the
    network, and any plugin, dependency or POM the build needs is missing. Empty user settings keep a
    mirror configured on this machine from renaming the repository Maven reports."""
    write(folder, "settings.xml", "<settings/>\n")
    command = f"mvn -o -B -s settings.xml -Dmaven.repo.local=repo {goal}"
    # A JVM that compiles less starts faster; the build does nothing but fail to resolve.
    out, _, digest = _sh(folder, command, env={"MAVEN_OPTS": "-XX:TieredStopAtLevel=1"})
    return out, digest


def _resolving_goal(repo: Path) -> str:
    """Install in the local repository ``repo`` a plugin whose goal asks for the project's dependencies,
    and return the goal. Maven resolves dependencies only for a goal that needs them, and every stock goal
    is a plugin an empty repository lacks. Maven plans the build from a plugin's descriptor and loads the
    goal's class only after resolving, so the descriptor is the whole plugin; installed without a
    ``_remote.repositories`` record, it counts as built here, which offline mode accepts."""
    folder = repo / "demo" / "probe" / "probe-maven-plugin" / "1.0"
    write(folder, "probe-maven-plugin-1.0.pom", """
        <project><modelVersion>4.0.0</modelVersion><groupId>demo.probe</groupId>
          <artifactId>probe-maven-plugin</artifactId><version>1.0</version><packaging>maven-plugin</packaging>
        </project>
        """)
    descriptor = """<plugin><groupId>demo.probe</groupId><artifactId>probe-maven-plugin</artifactId>
      <version>1.0</version><goalPrefix>probe</goalPrefix><mojos><mojo><goal>resolve</goal>
      <requiresDependencyResolution>test</requiresDependencyResolution>
      <implementation>demo.probe.ResolveMojo</implementation><language>java</language></mojo></mojos></plugin>
    """
    with zipfile.ZipFile(folder / "probe-maven-plugin-1.0.jar", "w") as jar:
        jar.writestr("META-INF/maven/plugin.xml", descriptor)
    return "demo.probe:probe-maven-plugin:1.0:resolve"


@needs_mvn
def test_maven_offline_missing_plugin_is_named(tmp_path: Path) -> None:
    """Offline, a plugin the local repository lacks is named with its version, and two plugins are two
    classes (the line Maven prints names the plugin early and its artifact after a long preamble)."""
    default = tmp_path / "default"
    _pom(default)
    out, resources = _mvn(default, "compile")  # the lifecycle's own plugin, at the version Maven binds
    assert "in offline mode and the artifact org.apache.maven.plugins:maven-resources-plugin:jar:" in out
    assert (resources.type, resources.format) == ("maven", "maven")
    assert resources.cause.startswith("could not resolve plugin org.apache.maven.plugins:maven-resources-plugin:")
    assert resources.cause.endswith("has not been downloaded from central before (offline mode)")

    pinned = tmp_path / "pinned"
    _pom(pinned, """<build><plugins><plugin><groupId>org.codehaus.mojo</groupId>
          <artifactId>exec-maven-plugin</artifactId><version>3.1.0</version><executions><execution>
          <phase>validate</phase><goals><goal>java</goal></goals></execution></executions></plugin></plugins></build>""")
    _, exec_plugin = _mvn(pinned, "validate")
    assert "plugin org.codehaus.mojo:exec-maven-plugin:3.1.0: it has not been downloaded" in exec_plugin.cause
    assert exec_plugin.key != resources.key


@needs_mvn
def test_maven_offline_missing_dependency_is_named(tmp_path: Path) -> None:
    """Offline, the dependency the local repository lacks is named (the line Maven prints names it last,
    after the project), and two projects missing different dependencies are two classes."""
    digests = {}
    for name, group, version in (("guava", "com.google.guava", "33.0.0-jre"),
                                 ("commons-lang3", "org.apache.commons", "3.14.0")):
        folder = tmp_path / name
        _pom(folder, f"""<dependencies><dependency><groupId>{group}</groupId><artifactId>{name}</artifactId>
          <version>{version}</version></dependency></dependencies>""")
        out, digest = _mvn(folder, _resolving_goal(folder / "repo"))
        assert "Could not resolve dependencies for project demo:app:jar:1.0: Cannot access" in out
        assert digest.type == "maven"
        assert digest.cause == (f"could not resolve dependencies of demo:app:jar:1.0: {group}:{name}:jar:{version} "
                                f"has not been downloaded from central before (offline mode)")
        digests[name] = digest
    assert digests["guava"].key != digests["commons-lang3"].key


@needs_mvn
def test_maven_offline_missing_parent_or_imported_pom_is_named(tmp_path: Path) -> None:
    """A parent POM or an imported BOM the local repository lacks stops Maven before it builds anything: the
    POM is named, and the two are two classes."""
    parent = tmp_path / "parent"
    _pom(parent, head="""<parent><groupId>org.springframework.boot</groupId>
          <artifactId>spring-boot-starter-parent</artifactId><version>3.2.0</version></parent>""")
    _, from_parent = _mvn(parent, "validate")
    assert from_parent.type == "maven"
    assert "could not resolve parent POM of org.springframework.boot:app:1.0: " in from_parent.cause
    assert "org.springframework.boot:spring-boot-starter-parent:pom:3.2.0 has not been downloaded" in from_parent.cause

    imported = tmp_path / "imported"
    _pom(imported, """<dependencyManagement><dependencies><dependency><groupId>com.acme</groupId>
          <artifactId>acme-bom</artifactId><version>2.1</version><type>pom</type><scope>import</scope>
          </dependency></dependencies></dependencyManagement>""")
    _, from_import = _mvn(imported, "validate")
    assert from_import.cause.startswith("could not resolve import POM: com.acme:acme-bom:pom:2.1 has not been")
    assert from_import.key != from_parent.key


@pytest.mark.skipif(not Path("/bin/sh").exists(), reason="no /bin/sh")
def test_dash_cd_and_syntax_errors(tmp_path: Path) -> None:
    _, _, cd = _sh(tmp_path, f"cd {tmp_path}/build && ls")
    assert "can't cd to" in cd.cause and cd.cause.endswith("/build")
    _, _, syntax = _sh(tmp_path, "echo start; f() ( ; }")
    _, _, other = _sh(tmp_path, "if true; then echo x; fi fi")
    assert syntax.type == other.type
    assert '";" unexpected' in syntax.line and '"fi" unexpected' in other.line
    assert syntax.key != other.key
