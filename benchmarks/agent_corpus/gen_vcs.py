"""git errors, produced by running real git on throw-away repositories. Run: ``python gen_vcs.py``.

Each scenario runs several times in a fresh folder with different file contents, so paths, commit ids
and line numbers vary within a class; near-miss pairs differ in the one name that is the cause (branch,
file, remote, path).
"""

from __future__ import annotations

import tempfile
from pathlib import Path

from _gen import Record, Run, sh, write_family

FAMILY = "vcs"
ENV = {"GIT_AUTHOR_NAME": "dev", "GIT_AUTHOR_EMAIL": "dev@example.com", "GIT_COMMITTER_NAME": "dev",
       "GIT_COMMITTER_EMAIL": "dev@example.com", "GIT_CONFIG_NOSYSTEM": "1", "HOME": "/nonexistent-home"}
REPEATS = 4


def git(cmd: str, cwd: Path) -> Run:
    return sh(cmd, cwd, env=ENV)


def repo(root: Path, name: str, files: dict[str, str]) -> Path:
    path = root / name
    path.mkdir(parents=True)
    git("git init -q -b main . && git config commit.gpgsign false", path)
    for file, text in files.items():
        (path / file).write_text(text)
    git("git add -A && git commit -qm initial", path)
    return path


def push_rejected(root: Path, i: int, branch: str, fetch_first: bool) -> Run:
    remote = root / "remote.git"
    git(f"git init -q --bare -b {branch} {remote}", root)
    a = repo(root, "a", {"app.py": f"x = {i}\n"})
    git(f"git checkout -q -B {branch} && git remote add origin {remote} && git push -q origin {branch}", a)
    git(f"git clone -q -b {branch} {remote} b", root)
    b = root / "b"
    (a / "app.py").write_text(f"x = {i + 100}\n")
    git("git commit -qam remote-change && git push -q origin HEAD", a)
    (b / f"notes{i}.txt").write_text("local\n")
    git("git add -A && git commit -qm local-change", b)
    if not fetch_first:
        git("git fetch -q origin", b)
    return git(f"git push origin {branch}", b)


def merge_conflict(root: Path, i: int, file: str) -> Run:
    r = repo(root, "r", {file: "\n".join(f"line {n}" for n in range(i + 3)) + "\n"})
    git("git checkout -q -b topic", r)
    (r / file).write_text(f"topic {i}\n")
    git("git commit -qam topic", r)
    git("git checkout -q main", r)
    (r / file).write_text(f"main {i}\n")
    git("git commit -qam main", r)
    return git("git merge topic", r)


def rebase_conflict(root: Path, i: int, file: str) -> Run:
    r = repo(root, "r", {file: f"base {i}\n"})
    git("git checkout -q -b topic", r)
    (r / file).write_text(f"topic {i}\n")
    git(f"git commit -qam 'change {file} on topic {i}'", r)
    git("git checkout -q main", r)
    (r / file).write_text(f"main {i}\n")
    git("git commit -qam main", r)
    git("git checkout -q topic", r)
    return git("git rebase main", r)


def main() -> None:
    records: list[Record] = []
    pairs: list[tuple[str, str, str]] = []

    def add(name: str, label: str, result: Run, tokens: list[str], source: str) -> str:
        rid = f"{FAMILY}/{name}"
        assert result.returncode != 0, (name, result)
        records.append(Record(rid, "vcs", source, result.output, label, tokens, result.returncode,
                              result.command))
        return rid

    for i in range(REPEATS):
        for branch in ("main", "release"):
            with tempfile.TemporaryDirectory() as tmp:
                add(f"push-fetch-first-{branch}-{i}", f"git-push-fetch-first-{branch}",
                    push_rejected(Path(tmp), i, branch, True), [branch, "fetch first"],
                    "git push after another clone pushed")
            with tempfile.TemporaryDirectory() as tmp:
                add(f"push-non-ff-{branch}-{i}", f"git-push-non-ff-{branch}",
                    push_rejected(Path(tmp), i, branch, False), [branch, "non-fast-forward"],
                    "git fetch, then git push without merging")
        for file in ("app.py", "settings.yaml"):
            with tempfile.TemporaryDirectory() as tmp:
                add(f"merge-conflict-{file}-{i}", f"git-merge-conflict-{file}",
                    merge_conflict(Path(tmp), i, file), ["CONFLICT", file], "git merge topic (both changed)")
            with tempfile.TemporaryDirectory() as tmp:
                add(f"rebase-conflict-{file}-{i}", f"git-rebase-conflict-{file}",
                    rebase_conflict(Path(tmp), i, file), ["could not apply", file], "git rebase main")
        for branch in ("feature-login", "feature-search"):
            with tempfile.TemporaryDirectory() as tmp:
                r = repo(Path(tmp), f"r{i}", {"a.txt": f"{i}\n"})
                add(f"checkout-{branch}-{i}", f"git-pathspec-{branch}", git(f"git checkout {branch}", r),
                    [branch], "git checkout of a branch that does not exist")
        for remote in ("upstream", "fork"):
            with tempfile.TemporaryDirectory() as tmp:
                r = repo(Path(tmp), f"r{i}", {"a.txt": f"{i}\n"})
                add(f"no-remote-{remote}-{i}", f"git-no-remote-{remote}", git(f"git push {remote} main", r),
                    [remote, "does not appear to be a git repository"], "git push to an unknown remote")
        with tempfile.TemporaryDirectory() as tmp:
            folder = Path(tmp) / f"work{i}"
            folder.mkdir()
            add(f"not-a-repo-{i}", "git-not-a-repository", git("git status", folder),
                ["not a git repository"], "git status outside a repository")
        for file in ("app.py", "util.py"):
            with tempfile.TemporaryDirectory() as tmp:
                r = repo(Path(tmp), "r", {file: "".join(f"v{n} = {n}\n" for n in range(i + 4))})
                patch = (f"--- a/{file}\n+++ b/{file}\n@@ -1,2 +1,2 @@\n-nothing {i}\n-here\n+new\n+here\n")
                (r / "fix.patch").write_text(patch)
                add(f"apply-{file}-{i}", f"git-apply-{file}", git("git apply fix.patch", r),
                    ["patch does not apply", file], "git apply of a patch whose context is absent")

    pairs += [(f"{FAMILY}/push-fetch-first-main-0", f"{FAMILY}/push-fetch-first-release-1", "branch differs"),
              (f"{FAMILY}/push-fetch-first-main-2", f"{FAMILY}/push-non-ff-main-2", "fetch first vs non-ff"),
              (f"{FAMILY}/merge-conflict-app.py-0", f"{FAMILY}/merge-conflict-settings.yaml-0", "file differs"),
              (f"{FAMILY}/rebase-conflict-app.py-1", f"{FAMILY}/rebase-conflict-settings.yaml-1", "file differs"),
              (f"{FAMILY}/merge-conflict-app.py-3", f"{FAMILY}/rebase-conflict-app.py-3", "merge vs rebase"),
              (f"{FAMILY}/checkout-feature-login-0", f"{FAMILY}/checkout-feature-search-0", "branch differs"),
              (f"{FAMILY}/no-remote-upstream-1", f"{FAMILY}/no-remote-fork-1", "remote differs"),
              (f"{FAMILY}/apply-app.py-2", f"{FAMILY}/apply-util.py-2", "file differs")]
    write_family(FAMILY, records, pairs)


if __name__ == "__main__":
    main()
