"""The shell parser, on what real ``bash -c`` runs printed and the exit codes they returned."""

from __future__ import annotations

from pathlib import Path

import pytest

from otel_errcompact.compactor import compact_text
from otel_errcompact.digest import Digest
from otel_errcompact.parsers import shell
from otel_errcompact.parsers._base import Hints
from tests.realerrors import Run, have, run, tls_loopback_server, write

pytestmark = pytest.mark.skipif(not have("bash"), reason="bash is not installed on this machine")


def _bash(folder: Path, command: str) -> tuple[Run, Digest]:
    folder.mkdir(parents=True, exist_ok=True)
    result = run(["bash", "-c", command], cwd=folder, timeout=30)
    return result, compact_text(result.output, exit_code=result.returncode, command=command)


def test_command_not_found(tmp_path: Path) -> None:
    result, d = _bash(tmp_path, "nosuchcmd --verbose")
    assert result.returncode == 127
    assert (d.type, d.format, d.status) == ("CommandNotFound", "shell", 127)
    assert d.cause == "nosuchcmd: command not found"
    assert d.line == "[CommandNotFound]: nosuchcmd: command not found"


def test_permission_denied(tmp_path: Path) -> None:
    write(tmp_path, "deploy.sh", "echo deploying\n")
    result, d = _bash(tmp_path, "./deploy.sh")
    assert result.returncode == 126
    assert (d.type, d.status) == ("PermissionDenied", 126)
    assert d.cause == "./deploy.sh: Permission denied"


def test_missing_interpreter_is_not_a_missing_command(tmp_path: Path) -> None:
    """A script whose ``#!`` interpreter is missing exits 127 as a command not on PATH does, but the cure
    differs (the ``#!`` line, not PATH): it is its own class, and the line keeps what the shell said."""
    script = write(tmp_path, "deploy.sh", "#!/usr/bin/nonexistent-interp\necho deploying\n")
    script.chmod(0o755)
    result, bad = _bash(tmp_path, "./deploy.sh")
    _, missing = _bash(tmp_path, "deploy.sh")
    assert result.returncode == 127 and missing.status == 127
    assert (bad.type, missing.type) == ("BadInterpreter", "CommandNotFound")
    assert missing.cause == "deploy.sh: command not found"
    assert bad.key != missing.key
    # bash 5.2 no longer names the interpreter (``cannot execute: required file not found``); earlier
    # releases do (``/usr/bin/nonexistent-interp: bad interpreter: No such file or directory``).
    said = ("/usr/bin/nonexistent-interp: bad interpreter" if "bad interpreter" in result.output
            else "cannot execute: required file not found")
    assert bad.cause.startswith(f"./deploy.sh: {said}")

    # /bin/sh (dash on Debian) says ``not found`` for both: the script's path still tells them apart.
    sh_keys = set()
    for command, name in (("./deploy.sh", "./deploy.sh"), ("deploy.sh", "deploy.sh")):
        ran = run(command, cwd=tmp_path, shell=True)
        digest = compact_text(ran.output, exit_code=ran.returncode, command=command)
        assert ran.returncode == 127 and digest.cause.startswith(f"{name}: ")
        sh_keys.add(digest.key)
    assert len(sh_keys) == 2


def test_interpreter_that_cannot_run_is_named(tmp_path: Path) -> None:
    """bash names a ``#!`` interpreter that is there but cannot run (``bad interpreter: Permission
    denied``, exit 126): the interpreter is the cause, and two interpreters are two classes."""
    keys = set()
    for name in ("interp-a", "interp-b"):
        folder = tmp_path / name
        write(folder, name, "not a program\n")  # present, not executable
        write(folder, "job.sh", f"#!{folder / name}\necho job\n").chmod(0o755)
        result, d = _bash(folder, "./job.sh")
        assert result.returncode == 126
        assert d.type == "BadInterpreter"
        assert d.cause.startswith("./job.sh: ") and f"{name}: bad interpreter: Permission denied" in d.cause
        keys.add(d.key)
    assert len(keys) == 2


def test_missing_file(tmp_path: Path) -> None:
    result, d = _bash(tmp_path, "cat missing.txt")
    assert result.returncode == 1
    assert (d.type, d.status) == ("NoSuchFile", 1)
    assert d.cause == "cat: missing.txt: No such file or directory"


def test_missing_directory_keeps_the_path(tmp_path: Path) -> None:
    result, d = _bash(tmp_path, "ls /nonexistent")
    assert result.returncode == 2
    assert d.type == "NoSuchFile"
    assert "'/nonexistent'" in d.cause and d.cause.startswith("ls: cannot access")


def test_grep_usage_error_is_exit_2(tmp_path: Path) -> None:
    write(tmp_path, "notes.txt", "alpha\nbeta\n")
    result, d = _bash(tmp_path, "grep -E '(' notes.txt")
    assert result.returncode == 2
    assert (d.type, d.status) == ("exit 2", 2)
    assert d.cause.startswith("grep: ") and "Unmatched" in d.cause


def test_silent_failure_still_gets_a_digest(tmp_path: Path) -> None:
    result, d = _bash(tmp_path, "false")
    assert (result.returncode, result.output) == (1, "")
    assert d.line == "[exit 1]: false: exited with status 1"


def test_timeout(tmp_path: Path) -> None:
    result, d = _bash(tmp_path, "timeout 0.1 sleep 5")
    assert result.returncode == 124
    assert (d.type, d.status, d.retryable) == ("Timeout", 124, True)
    assert d.cause == "timeout 0.1 sleep 5: timed out"


def test_sigkill_as_shell_status_and_as_negative_code(tmp_path: Path) -> None:
    result, d = _bash(tmp_path, "sleep 5 & kill -9 $!; wait $!")
    assert result.returncode == 137
    assert (d.type, d.status) == ("Killed", 137)
    assert d.cause.endswith("killed by SIGKILL")

    result, d = _bash(tmp_path, "kill -9 $$")
    assert result.returncode == -9  # Python reports the signal itself when bash was the one killed
    assert (d.type, d.status) == ("Killed", -9)
    assert d.cause == "kill -9 $$: killed by SIGKILL"


def test_unbound_variable_and_syntax_error(tmp_path: Path) -> None:
    _, d = _bash(tmp_path, "set -u; echo $DEPLOY_TARGET")
    assert (d.type, d.cause) == ("UnboundVariable", "DEPLOY_TARGET: unbound variable")
    result, d = _bash(tmp_path, 'echo "unclosed')
    assert result.returncode == 2
    assert d.type == "ShellSyntaxError"


@pytest.mark.skipif(not have("sqlite3") or not have("gzip"), reason="sqlite3 or gzip is not installed")
def test_a_tool_syntax_error_is_not_the_shells(tmp_path: Path) -> None:
    """sqlite3's ``near "selec": syntax error`` and gzip's ``unexpected end of file`` are the tool's own:
    the shell parsed the command, so the cure is in the SQL or the file, not in the quoting."""
    result, sql = _bash(tmp_path, "sqlite3 shop.db 'selec 1'")
    _, gz = _bash(tmp_path, "printf x | gzip -dc")
    _, shell_error = _bash(tmp_path, "echo )")
    assert result.returncode == 1
    assert sql.type == "exit 1"
    assert sql.cause == "sqlite3 shop.db 'selec 1': Error: in prepare, near \"selec\": syntax error"
    assert gz.type == "exit 1" and gz.cause.endswith("gzip: stdin: unexpected end of file")
    assert (shell_error.type, shell_error.cause) == ("ShellSyntaxError", "syntax error near unexpected token `)'")


@pytest.mark.skipif(not have("curl") or not have("openssl"), reason="curl or openssl is not installed")
def test_curl_report_beats_the_explanation_after_it(tmp_path: Path) -> None:
    """curl reports a certificate it cannot verify as ``curl: (60) SSL certificate problem: …``, then explains
    in a paragraph whose ``curl failed to verify …`` would outrank the report for its word ``failed``."""
    with tls_loopback_server(tmp_path) as url:
        result, d = _bash(tmp_path / "run", f"curl -sS {url}/health")
    assert result.returncode == 60
    assert "curl failed to verify the legitimacy of the server" in result.output
    assert (d.type, d.cause) == ("exit 60", "curl: (60) SSL certificate problem: self-signed certificate")


def test_telling_line_beats_progress_lines(tmp_path: Path) -> None:
    script = write(tmp_path, "build.sh", """
        for step in 1 2 3; do echo "[$step/4] compiling module_$step"; done
        echo "error: linker failed for target api-server" >&2
        echo "[4/4] 100% done" >&2
        exit 3
    """)
    result, d = _bash(tmp_path, f"bash {script.name}")
    assert result.output.rstrip().endswith("100% done")
    assert (d.type, d.status) == ("exit 3", 3)
    # The line does not name the program, so the command leads the cause.
    assert d.cause == "bash build.sh: error: linker failed for target api-server"


def test_specific_line_beats_a_generic_error_summary(tmp_path: Path) -> None:
    result, d = _bash(tmp_path, "tar xf backup-2024.tar")
    assert result.returncode == 2
    assert "Error is not recoverable" in result.output  # the generic line tar prints last
    assert d.type == "NoSuchFile"
    assert "backup-2024.tar" in d.cause and "not recoverable" not in d.cause


@pytest.mark.skipif(not have("sqlite3"), reason="sqlite3 is not installed")
def test_a_pointer_line_is_not_the_cause(tmp_path: Path) -> None:
    """sqlite3 quotes the failing statement under its message and points into it (``^--- error here``):
    the pointer's word ``error`` must not outrank the message, which names the missing column."""
    _bash(tmp_path, "sqlite3 shop.db 'create table orders(id integer primary key, email text)'")
    result, missing = _bash(tmp_path, "sqlite3 shop.db 'select nosuch from orders'")
    _, other = _bash(tmp_path, "sqlite3 shop.db 'select total from orders'")
    assert result.output.rstrip().endswith("^--- error here")
    assert missing.cause == "sqlite3 shop.db 'select nosuch from orders': Error: in prepare, no such column: nosuch"
    assert other.cause.endswith("no such column: total")
    assert missing.key != other.key


def test_unstructured_output_uses_the_last_line(tmp_path: Path) -> None:
    script = write(tmp_path, "job.py", """
        import sys
        print('starting')
        sys.exit('quota for tenant acme used up')
    """)
    _, d = _bash(tmp_path, f"python3 {script.name}")
    assert d.type == "exit 1"
    assert d.cause == "python3 job.py: quota for tenant acme used up"


def test_no_answer_without_failure(tmp_path: Path) -> None:
    result, _ = _bash(tmp_path, "echo building; echo done")
    assert result.returncode == 0
    assert shell.parse(result.output, Hints(exit_code=0, command="echo building")) is None
    assert shell.parse(result.output, Hints()) is None


def test_recognises_shell_errors_without_an_exit_code(tmp_path: Path) -> None:
    result, _ = _bash(tmp_path, "nosuchtool")
    parsed = shell.parse(result.output, Hints())
    assert parsed is not None
    assert (parsed.type, parsed.status) == ("CommandNotFound", None)
    assert parsed.cause == "nosuchtool: command not found"


def test_keys_stable_across_dirs_and_distinct_across_causes(tmp_path: Path) -> None:
    _, first = _bash(tmp_path / "a", "cat missing.txt")
    _, second = _bash(tmp_path / "b" / "c", "cat missing.txt")
    _, other_file = _bash(tmp_path / "d", "cat other.txt")
    assert first.key == second.key
    assert first.key != other_file.key

    _, quiet_a = _bash(tmp_path / "e", "false")
    _, quiet_b = _bash(tmp_path / "f", "false")
    _, exit_2 = _bash(tmp_path / "g", "exit 2")
    assert quiet_a.key == quiet_b.key
    assert quiet_a.key != exit_2.key

    _, timeout_a = _bash(tmp_path / "h", "timeout 0.1 sleep 5")
    _, timeout_b = _bash(tmp_path / "i", "timeout 0.2 sleep 7")
    assert timeout_a.key == timeout_b.key

    _, missing_a = _bash(tmp_path / "j", "nosuchcmd")
    _, missing_b = _bash(tmp_path / "k", "othercmd")
    assert missing_a.key != missing_b.key


@pytest.mark.timeout(60)  # a hang guard against catastrophic backtracking; speed is measured in benchmarks/
def test_stays_fast_on_hostile_input() -> None:
    for text in ("x" * 130_000, ("a/" * 5000 + ": not found\n") * 20, "bash: " * 20_000):
        parsed = shell.parse(text, Hints(exit_code=1, command="x" * 10_000))
        assert parsed is not None and len(parsed.cause) < 2_000


def _perl(folder: Path, name: str) -> Digest:
    write(folder, "job.pl", f"use strict;\nprint ${name};\n")
    result = run(["perl", "job.pl"], cwd=folder)
    assert result.returncode != 0, result.output
    return compact_text(result.output, exit_code=result.returncode, command="perl job.pl")


def _dpkg(folder: Path, package: str) -> Digest:
    folder.mkdir(parents=True)
    result = run(["dpkg", "-s", package], cwd=folder)
    assert result.returncode != 0, result.output
    return compact_text(result.output, exit_code=result.returncode, command=f"dpkg -s {package}")


def _cargo(folder: Path, crate: str) -> Digest:
    write(folder, "Cargo.toml", f'[package]\nname = "app"\nversion = "0.1.0"\nedition = "2021"\n\n'
                                f'[dependencies]\n{crate} = "1"\n')
    write(folder, "src/main.rs", "fn main() {}\n")
    result = run(["cargo", "build", "--offline"], cwd=folder, env={"CARGO_HOME": str(folder / "cargo-home")})
    assert result.returncode != 0, result.output
    return compact_text(result.output, exit_code=result.returncode, command="cargo build --offline")


@pytest.mark.parametrize(
    ("tool", "fail", "names"),
    [
        ("perl", _perl, ("undeclared", "db_handle")),
        ("dpkg", _dpkg, ("nosuchpkgx", "otherpkgx")),
        ("cargo", _cargo, ("serde_jsonx", "tokiox")),
    ],
)
def test_the_telling_line_is_not_the_advice_or_summary_after_it(
    tmp_path: Path, tool: str, fail: object, names: tuple[str, str]
) -> None:
    """perl's ``Execution of … aborted due to compilation errors.``, dpkg's ``Use dpkg --info …`` and
    cargo's ``As a reminder, you're using offline mode …`` come after the line naming the cause: that
    line is kept, and two causes are two classes."""
    if not have(tool):
        pytest.skip(f"{tool} is not installed")
    digests = [fail(tmp_path / name, name) for name in names]  # type: ignore[operator]
    for name, digest in zip(names, digests, strict=True):
        assert name in digest.cause, digest.line
    assert digests[0].key != digests[1].key


_ABORTS = r"""
    #include <cassert>
    #include <fstream>
    #include <stdexcept>
    #include <string>

    int main() {
        std::string mode;
        std::ifstream("mode") >> mode;
        if (mode == "config") throw std::runtime_error("config file app.toml missing");
        if (mode == "db") throw std::runtime_error("database 'orders' unreachable");
        int users = 0;
        assert(users > 0);
        return 0;
    }
"""


@pytest.mark.skipif(not have("g++"), reason="g++ is not installed")
def test_an_abort_keeps_what_the_process_said(tmp_path: Path) -> None:
    """A C++ service that dies of an uncaught exception or a failed assert() exits with SIGABRT: the
    exception's what() or the assertion is the cause, not the signal alone."""
    write(tmp_path, "svc.cpp", _ABORTS)
    built = run(["g++", "-o", "svc", "svc.cpp"], cwd=tmp_path)
    assert built.returncode == 0, built.output

    def abort(mode: str) -> Digest:
        (tmp_path / "mode").write_text(mode)
        result, digest = _bash(tmp_path, "./svc && echo done")
        assert result.returncode == 134 and "Aborted" in result.output  # bash's report, with the pid
        return digest

    digests = {mode: abort(mode) for mode in ("config", "db", "assert")}
    assert {d.type for d in digests.values()} == {"Aborted"}
    assert digests["config"].cause == "./svc && echo done: std::runtime_error: config file app.toml missing"
    assert digests["db"].cause == "./svc && echo done: std::runtime_error: database 'orders' unreachable"
    assert "Assertion `users > 0' failed" in digests["assert"].cause
    assert len({d.key for d in digests.values()}) == 3
    assert abort("config").key == digests["config"].key  # another run, another pid: the same key


@pytest.mark.skipif(not have("yq"), reason="yq (the jq wrapper) is not installed")
def test_yq_reports_the_yaml_problem_and_where_it_is(tmp_path: Path) -> None:
    """yq reports PyYAML's exception on one line of its own (``yq: Error running jq: ScannerError: while
    scanning a quoted scalar``): the problem PyYAML states on a later line is the cause, the position it
    gives is the location, and yq's label is neither."""
    write(tmp_path, "quoted.yaml", 'name: app\nkey: "unterminated\n')
    write(tmp_path, "flow.yaml", "ports: [80, 443\nname: app\n")
    result, quoted = _bash(tmp_path, "yq . quoted.yaml")
    _, flow = _bash(tmp_path, "yq . flow.yaml")
    assert result.returncode == 1 and "Error running jq" in result.output
    assert (quoted.type, quoted.format) == ("ScannerError", "yq")
    assert quoted.cause == "while scanning a quoted scalar: found unexpected end of stream"
    assert quoted.location is not None and (quoted.location.file, quoted.location.line) == ("quoted.yaml", 3)
    assert flow.type == "ParserError"
    assert flow.cause == "while parsing a flow sequence: did not find expected ',' or ']'"
    assert quoted.key != flow.key
    write(tmp_path, "quoted.yaml", 'name: app\nversion: 2\nkey: "unterminated\n')  # the same problem, moved
    assert _bash(tmp_path, "yq . quoted.yaml")[1].key == quoted.key
