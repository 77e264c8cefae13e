"""flake8, ruff and eslint diagnostics from real runs on files written to a temp folder.
Run: ``python gen_linter.py`` (eslint is used when ``ESLINT`` names its binary, or found on PATH).

flake8 runs with the selection agent harnesses use after an edit (syntax errors and undefined names
first); ruff with its default and its concise output. Lines above the faulty one vary between repeats, so
line numbers differ within a class; near-miss pairs differ in the undefined name, the unused import, the
file or the rule.
"""

from __future__ import annotations

import dataclasses
import os
import shutil
import tempfile
from pathlib import Path

from _gen import Record, Run, run, write_family

FAMILY = "linter"
REPEATS = 4
FLAKE8 = ["flake8", "--isolated", "--select=F821,F822,F831,E111,E112,E113,E999,E902,F401"]

PY_CASES = {
    # name: (file, source template with {pad}, cause tokens)
    "undefined-usr": ("app.py", "{pad}def load():\n    return usr.name\n", ["F821", "'usr'"]),
    "undefined-cfg": ("app.py", "{pad}def load():\n    return cfg.name\n", ["F821", "'cfg'"]),
    "unused-os": ("tools.py", "import os\n{pad}x = 1\n", ["F401", "'os'"]),
    "unused-sys": ("tools.py", "import sys\n{pad}x = 1\n", ["F401", "'sys'"]),
    "unmatched-app": ("app.py", "{pad}total = (1 + 2))\n", ["E999", "unmatched ')'"]),
    "unmatched-views": ("views.py", "{pad}total = (1 + 2))\n", ["E999", "unmatched ')'"]),
    "indent-models": ("models.py", "{pad}def f():\n     return 1\n", ["E111", "models.py"]),
}
RUFF_TOKENS = {
    "undefined-usr": ["F821", "`usr`"], "undefined-cfg": ["F821", "`cfg`"],
    "unused-os": ["F401", "`os`"], "unused-sys": ["F401", "`sys`"],
    "unmatched-app": ["invalid-syntax", "Expected a statement"],
    "unmatched-views": ["invalid-syntax", "Expected a statement"],
}
JS_CASES = {
    "no-undef-fetchUser": ("client.js", "{pad}export function go() {{ return fetchUser(1); }}\n",
                           ["'fetchUser' is not defined", "no-undef"]),
    "no-undef-apiBase": ("client.js", "{pad}export const url = apiBase + '/v1';\n",
                         ["'apiBase' is not defined", "no-undef"]),
    "parse-client": ("client.js", "{pad}export const total = (1 + 2));\n", ["Parsing error", "client.js"]),
    "parse-server": ("server.js", "{pad}export const total = (1 + 2));\n", ["Parsing error", "server.js"]),
    "unused-helper": ("util.js", "{pad}function helper() {{ return 1; }}\nexport const y = 2;\n",
                      ["'helper' is defined but never used", "no-unused-vars"]),
}


def pad(i: int, comment: str, noise: bool = True) -> str:
    """Lines above the faulty one; odd repeats add the style slips real files have (flake8's default
    selection reports them, so the report grows around the same decisive diagnostic)."""
    lines = [f"{comment} line {n} of setup\n" for n in range(i * 3)]
    if i % 2 and comment == "#" and noise:
        lines += [f"setting_{n}=dict(a = {n},b={n})  # {'x' * 90}\n" for n in range(2 + i)]
    return "".join(lines)


def main() -> None:
    records: list[Record] = []

    def add(name: str, label: str, result: Run, tokens: list[str], source: str) -> None:
        assert result.returncode != 0, (name, result)
        records.append(Record(f"{FAMILY}/{name}", "linter", source, result.output, label, tokens,
                              result.returncode, result.command))

    eslint = os.environ.get("ESLINT") or shutil.which("eslint")
    for i in range(REPEATS):
        for case, (file, template, tokens) in PY_CASES.items():
            with tempfile.TemporaryDirectory() as tmp:
                d = Path(tmp)
                # A style slip is the cause of the indentation case: no other slips around it.
                (d / file).write_text(template.format(pad=pad(i, "#", noise=not case.startswith("indent"))))
                flake8 = FLAKE8 if i % 2 == 0 else ["flake8", "--isolated"]
                add(f"flake8-{case}-{i}", f"flake8-{case}", run([*flake8, file], d), tokens,
                    "flake8 with a harness's post-edit selection (even repeats) or its default selection")
                if case in RUFF_TOKENS:
                    fmt = ["--output-format=concise"] if i % 2 else []
                    ruff = run(["ruff", "check", "--no-cache", "--isolated", "--select=E9,F", *fmt, file], d)
                    add(f"ruff-{case}-{i}", f"ruff-{case}", ruff, [*RUFF_TOKENS[case], file],
                        "ruff check (default or concise output)")
        if eslint:
            for case, (file, template, tokens) in JS_CASES.items():
                with tempfile.TemporaryDirectory() as tmp:
                    d = Path(tmp)
                    (d / file).write_text(template.format(pad=pad(i, "//")))
                    cmd = [eslint, "--no-eslintrc", "--env", "es2022,node", "--parser-options",
                           "ecmaVersion:2022", "--parser-options", "sourceType:module", "--rule",
                           '{"no-undef": "error", "no-unused-vars": "error"}', file]
                    result = run(cmd, d)
                    # Record the command as typed (``eslint …``), not this machine's install path.
                    result = dataclasses.replace(result, command=" ".join(["eslint", *cmd[1:]]))
                    add(f"eslint-{case}-{i}", f"eslint-{case}", result, [*tokens, file],
                        "eslint 8 with no-undef and no-unused-vars")

    def rid(prefix: str, i: int = 0) -> str:
        return f"{FAMILY}/{prefix}-{i}"

    pairs = [(rid("flake8-undefined-usr"), rid("flake8-undefined-cfg"), "undefined name differs"),
             (rid("flake8-unused-os", 1), rid("flake8-unused-sys", 1), "unused import differs"),
             (rid("flake8-unmatched-app", 2), rid("flake8-unmatched-views", 2), "file differs"),
             (rid("ruff-undefined-usr"), rid("ruff-undefined-cfg"), "undefined name differs"),
             (rid("ruff-unused-os", 3), rid("ruff-unused-sys", 3), "unused import differs"),
             (rid("ruff-unmatched-app", 1), rid("ruff-unmatched-views", 1), "file differs")]
    if eslint:
        pairs += [(rid("eslint-no-undef-fetchUser"), rid("eslint-no-undef-apiBase"), "undefined name differs"),
                  (rid("eslint-parse-client", 1), rid("eslint-parse-server", 1), "file differs")]
    write_family(FAMILY, records, pairs)


if __name__ == "__main__":
    main()
