"""Errors framed the way agent harnesses hand them to the model, from the harnesses' own code.
Run: ``OPENHANDS_PYTHON=/path/to/python3.12 python gen_harness.py``.

- Editor errors: OpenHands' file editors, both ``openhands-aci`` (``ERROR:`` banner) and
  ``openhands-tools`` (``[An error occurred during execution.]`` header), called through
  ``_openhands_driver.py`` under ``OPENHANDS_PYTHON`` (they need Python 3.12).
- Shell errors: real commands (make, sh, pip, git, flake8, python) run by mini-swe-agent's
  ``LocalEnvironment`` and rendered with its default observation template (``<returncode>``,
  ``<output>``); the same outputs rendered by OpenHands' ``TerminalObservation`` (``[The command completed
  with exit code N.]``, ``[Current working directory: …]``, ``[Command finished with exit code N]``).
- The ``Exit code N`` header and ``<tool_use_error>`` tag of Claude Code's tools, whose implementation
  does not run outside that product: here the framing is applied by this script, as the product prints
  it, around the real output of the same commands and the real editor messages above (``source`` says so).

Labels are shared with the unframed records of the other families (``make-no-rule-main.o`` here and in
``build.jsonl``), so the benchmark's B-cubed score checks that framing never changes a key.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import yaml
from _gen import Record, Run, sh, write_family
from minisweagent.environments.local import LocalEnvironment
from minisweagent.models.utils.actions_toolcall import format_toolcall_observation_messages

FAMILY = "harness"
REPEATS = 4
GIT_ENV = {"GIT_AUTHOR_NAME": "dev", "GIT_AUTHOR_EMAIL": "dev@example.com", "GIT_COMMITTER_NAME": "dev",
           "GIT_COMMITTER_EMAIL": "dev@example.com", "HOME": "/nonexistent-home"}


def mini_template() -> str:
    import minisweagent

    config = Path(minisweagent.__file__).parent / "config" / "default.yaml"
    return str(yaml.safe_load(config.read_text())["model"]["observation_template"])


def openhands(requests: list[dict[str, object]]) -> list[str]:
    python = os.environ.get("OPENHANDS_PYTHON")
    if not python:
        raise SystemExit("set OPENHANDS_PYTHON to a Python 3.12 with openhands-aci and openhands-tools")
    driver = Path(__file__).with_name("_openhands_driver.py")
    proc = subprocess.run([python, str(driver)], input=json.dumps(requests), capture_output=True, text=True,
                          check=False, env={**os.environ, "OPENHANDS_SUPPRESS_BANNER": "1",
                                            "LITELLM_LOCAL_MODEL_COST_MAP": "True"})
    if proc.returncode != 0:
        raise SystemExit(f"the OpenHands driver failed:\n{proc.stderr[-3000:]}")
    return list(json.loads(proc.stdout.strip().splitlines()[-1]))


def main() -> None:
    records: list[Record] = []
    template = mini_template()
    python = sys.executable

    # --- editor errors -------------------------------------------------------------------------
    editor_requests: list[tuple[str, str, list[str], str, dict[str, object]]] = []
    folders: list[Path] = []
    for i in range(REPEATS):
        d = Path(tempfile.mkdtemp(prefix="ws-"))
        folders.append(d)
        body = "".join(f"value_{n} = {n}\n" for n in range(i + 2))
        for file in ("app.py", "models.py"):
            (d / file).write_text(f"import os\n{body}\ndef total(rate):\n    return rate * {i + 2}\n"
                                  f"\nimport os\n")
        tool = "aci" if i % 2 == 0 else "editor"
        for file in ("app.py", "models.py"):
            editor_requests.append((f"old-str-missing-{file}-{i}", f"editor-old-str-missing-{file}",
                                    ["did not appear verbatim", file], tool,
                                    {"command": "str_replace", "path": str(d / file),
                                     "old_str": f"return rate * {i + 7}  # v{i}", "new_str": "return 0"}))
            editor_requests.append((f"no-path-{file}-{i}", f"editor-no-path-{file}",
                                    ["does not exist", file], tool,
                                    {"command": "view", "path": str(d / "src" / f"pkg{i}" / file)}))
            editor_requests.append((f"create-exists-{file}-{i}", f"editor-create-exists-{file}",
                                    ["already exists", file], tool,
                                    {"command": "create", "path": str(d / file), "file_text": f"x = {i}\n"}))
            editor_requests.append((f"undo-{file}-{i}", f"editor-undo-{file}",
                                    ["No edit history", file], tool,
                                    {"command": "undo_edit", "path": str(d / file)}))
        for name in ("usr", "cfg"):
            # An edit that applies but leaves an undefined name: openhands-aci lints the change.
            lint_dir = d / f"lint-{name}"
            lint_dir.mkdir()
            (lint_dir / "app.py").write_text("".join(f"# {n}\n" for n in range(i)) + f"def load():\n    return {i}\n")
            editor_requests.append((f"lint-{name}-{i}", f"flake8-undefined-{name}", ["F821", f"'{name}'", "app.py"],
                                    "aci", {"command": "str_replace", "path": str(lint_dir / "app.py"),
                                            "old_str": f"return {i}", "new_str": f"return {name}.name",
                                            "enable_linting": True}))
        editor_requests.append((f"multiple-{i}", "editor-multiple-occurrences", ["Multiple occurrences"], tool,
                                {"command": "str_replace", "path": str(d / "app.py"), "old_str": "import os",
                                 "new_str": "import sys"}))
        editor_requests.append((f"param-old_str-{i}", "editor-param-old_str", ["`old_str`", "is required"], tool,
                                {"command": "str_replace", "path": str(d / "app.py"), "new_str": f"y = {i}"}))
        editor_requests.append((f"param-insert_line-{i}", "editor-param-insert_line",
                                ["`insert_line`", "is required"], tool,
                                {"command": "insert", "path": str(d / "app.py"), "new_str": f"y = {i}"}))
        editor_requests.append((f"view-range-first-{i}", "editor-view-range-first",
                                ["`view_range`", "first element"], tool,
                                {"command": "view", "path": str(d / "app.py"), "view_range": [0, 3 + i]}))
        editor_requests.append((f"view-range-order-{i}", "editor-view-range-order",
                                ["`view_range`", "second element"], tool,
                                {"command": "view", "path": str(d / "app.py"), "view_range": [4 + i, 2]}))
    answers = openhands([{"tool": tool, "args": args} for _, _, _, tool, args in editor_requests])
    for (name, label, tokens, tool, _), text in zip(editor_requests, answers, strict=True):
        package = "openhands-aci" if tool == "aci" else "openhands-tools"
        if name.startswith("lint-"):
            records.append(Record(f"{FAMILY}/{tool}-{name}", "linter", f"{package} str_replace with enable_linting",
                                  text, label, tokens))
            continue
        records.append(Record(f"{FAMILY}/{tool}-{name}", "editor", f"{package} file editor", text, label, tokens))
        if name.endswith(("-0", "-3")):
            # Claude Code's tools report a refused edit inside <tool_use_error> tags.
            inner = text.split("\n", 1)[1]
            records.append(Record(f"{FAMILY}/tool-use-error-{name}", "editor",
                                  f"{package} editor message in a <tool_use_error> tag (framing applied)",
                                  f"<tool_use_error>{inner}</tool_use_error>", label, tokens))

    # --- shell errors through harness terminals -------------------------------------------------
    def commands(i: int, d: Path) -> list[tuple[str, str, str, list[str]]]:
        """(name, label, command, cause tokens) run in folder ``d``."""
        (d / "Makefile").write_text("".join(f"# rule {n}\n" for n in range(i)) + "app: main.o\n\tcc -o app main.o\n")
        (d / "lib.mk").write_text("app: util.o\n\tcc -o app util.o\n")
        (d / "lint_me.py").write_text("".join(f"# {n}\n" for n in range(i)) + "def f():\n    return usr.id\n")
        (d / "lint_cfg.py").write_text("".join(f"# {n}\n" for n in range(i)) + "def f():\n    return cfg.id\n")
        (d / "app.py").write_text("".join(f"# {n}\n" for n in range(i)) +
                                  f"users = {{'u{i}': 1}}\n\ndef load(key):\n    return users[key]\n\n"
                                  "import sys\nprint(load(sys.argv[1]))\n")
        sh("git init -q -b main . && git add -A && git commit -qm init", d, env=GIT_ENV)
        return [
            ("make-main", "make-no-rule-main.o", "make", ["main.o", "No rule"]),
            ("make-util", "make-no-rule-util.o", "make -f lib.mk", ["util.o", "No rule"]),
            ("cd-build", "sh-cd-build", f"cd {d}/build && make", ["can't cd to", "build"]),
            ("pip-fastjsonx", "pip-no-dist-fastjsonx",
             "python -m pip install --no-index --disable-pip-version-check fastjsonx", ["fastjsonx", "No matching"]),
            ("git-login", "git-pathspec-feature-login", "git checkout feature-login", ["feature-login"]),
            ("git-search", "git-pathspec-feature-search", "git checkout feature-search", ["feature-search"]),
            ("flake8-usr", "flake8-undefined-usr-lint_me.py", "flake8 --isolated --select=F821 lint_me.py",
             ["F821", "'usr'"]),
            ("flake8-cfg", "flake8-undefined-cfg-lint_cfg.py", "flake8 --isolated --select=F821 lint_cfg.py",
             ["F821", "'cfg'"]),
            ("py-user_id", "py-keyerror-app-load-user_id", "python app.py user_id", ["KeyError", "'user_id'"]),
            ("py-order_id", "py-keyerror-app-load-order_id", "python app.py order_id", ["KeyError", "'order_id'"]),
        ]

    env = LocalEnvironment(env={"PATH": f"{Path(python).parent}:{os.environ['PATH']}", **GIT_ENV,
                                "LC_ALL": "C.UTF-8"})
    terminal_requests: list[dict[str, object]] = []
    pending: list[tuple[str, str, list[str], Run]] = []
    for i in range(REPEATS):
        d = Path(tempfile.mkdtemp(prefix="task-"))
        folders.append(d)
        for name, label, command, tokens in commands(i, d):
            output = env.execute({"command": command}, cwd=str(d))
            assert output["returncode"] != 0, (command, output)
            mini = format_toolcall_observation_messages(
                actions=[{"command": command, "tool_call_id": f"call_{i}"}], outputs=[output],
                observation_template=template)[0]["content"]
            records.append(Record(f"{FAMILY}/mini-{name}-{i}", "harness",
                                  "mini-swe-agent LocalEnvironment + default observation template",
                                  mini, label, tokens, None, command))
            code = int(output["returncode"])
            records.append(Record(f"{FAMILY}/claude-exit-{name}-{i}", "harness",
                                  "Claude Code Bash tool's 'Exit code N' header (framing applied)",
                                  f"Exit code {code}\n{output['output'].rstrip()}", label, tokens, None, command))
            terminal_requests.append({"tool": "terminal", "output": output["output"].rstrip("\n"), "exit_code": code,
                                      "cwd": str(d), "command": command,
                                      "python": shutil.which("python3") or "python3"})
            pending.append((f"{name}-{i}", label, tokens, Run(output["output"], code, command)))
    for (name, label, tokens, result), text in zip(pending, openhands(terminal_requests), strict=True):
        records.append(Record(f"{FAMILY}/openhands-{name}", "harness", "openhands-tools TerminalObservation",
                              text, label, tokens, None, result.command))
    for d in folders:
        shutil.rmtree(d, ignore_errors=True)

    def rid(prefix: str, i: int = 0) -> str:
        return f"{FAMILY}/{prefix}-{i}"

    pairs = [(rid("aci-lint-usr", 1), rid("aci-lint-cfg", 1), "undefined name differs"),
             (rid("aci-old-str-missing-app.py"), rid("aci-old-str-missing-models.py"), "file differs"),
             (rid("editor-no-path-app.py", 1), rid("editor-no-path-models.py", 1), "file differs"),
             (rid("aci-create-exists-app.py", 2), rid("aci-undo-app.py", 2), "different editor failure"),
             (rid("editor-param-old_str", 3), rid("editor-param-insert_line", 3), "parameter differs"),
             (rid("aci-view-range-first"), rid("aci-view-range-order"), "different view_range fault"),
             (rid("mini-make-main"), rid("mini-make-util"), "missing target differs"),
             (rid("openhands-make-main", 1), rid("openhands-make-util", 1), "missing target differs"),
             (rid("claude-exit-git-login", 2), rid("claude-exit-git-search", 2), "branch differs"),
             (rid("mini-flake8-usr", 3), rid("mini-flake8-cfg", 3), "undefined name differs"),
             (rid("openhands-py-user_id"), rid("openhands-py-order_id"), "missing key differs"),
             (rid("mini-py-user_id", 1), rid("claude-exit-py-order_id", 1), "missing key differs"),
             (rid("mini-cd-build", 2), rid("mini-make-main", 2), "different failure under one framing"),
             (rid("openhands-pip-fastjsonx", 3), rid("openhands-git-login", 3), "different failure, same exit code")]
    write_family(FAMILY, records, pairs)


if __name__ == "__main__":
    main()
