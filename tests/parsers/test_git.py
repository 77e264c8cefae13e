"""git failures from real repositories: the rejected ref, the conflicting file, the fatal line."""

from __future__ import annotations

from pathlib import Path

import pytest

from otel_errcompact.compactor import compact_text
from otel_errcompact.digest import Digest
from tests.realerrors import have, run

pytestmark = pytest.mark.skipif(not have("git"), reason="git is not installed")

ENV = {"GIT_AUTHOR_NAME": "dev", "GIT_AUTHOR_EMAIL": "dev@example.com", "GIT_COMMITTER_NAME": "dev",
       "GIT_COMMITTER_EMAIL": "dev@example.com", "GIT_CONFIG_NOSYSTEM": "1", "HOME": "/nonexistent"}


def git(folder: Path, command: str, *, fail: bool = False) -> Digest | None:
    folder.mkdir(parents=True, exist_ok=True)
    result = run(command, cwd=folder, shell=True, env=ENV)
    if not fail:
        assert result.returncode == 0, result.output
        return None
    assert result.returncode != 0, result.output
    return compact_text(result.output, exit_code=result.returncode, command=command)


def repo(folder: Path, files: dict[str, str]) -> Path:
    git(folder, "git init -q -b main .")
    for name, text in files.items():
        (folder / name).write_text(text)
    git(folder, "git add -A && git commit -qm initial")
    return folder


def test_push_rejected_keeps_ref_and_reason_not_the_summary(tmp_path: Path) -> None:
    remote = tmp_path / "remote.git"
    git(tmp_path, f"git init -q --bare -b main {remote}")
    a = repo(tmp_path / "a", {"app.py": "x = 1\n"})
    git(a, f"git remote add origin {remote} && git push -q origin main")
    git(tmp_path, f"git clone -q {remote} b")
    (a / "app.py").write_text("x = 2\n")
    git(a, "git commit -qam change && git push -q origin main")
    b = tmp_path / "b"
    (b / "notes.txt").write_text("mine\n")
    git(b, "git add -A && git commit -qm local")
    d = git(b, "git push origin main", fail=True)
    assert d is not None and d.type == "git"
    assert d.cause == "! [rejected] main -> main (fetch first)"


def test_merge_conflicts_differ_by_file_and_from_a_rebase(tmp_path: Path) -> None:
    digests = {}
    for file in ("app.py", "settings.yaml"):
        for verb in ("merge", "rebase"):
            r = repo(tmp_path / f"{file}-{verb}", {file: "base\n"})
            git(r, "git checkout -q -b topic")
            (r / file).write_text("topic\n")
            git(r, "git commit -qam topic && git checkout -q main")
            (r / file).write_text("main\n")
            git(r, "git commit -qam main")
            if verb == "rebase":
                git(r, "git checkout -q topic")
            digests[file, verb] = git(r, "git merge topic" if verb == "merge" else "git rebase main", fail=True)
    for (file, verb), d in digests.items():
        assert d is not None and f"CONFLICT (content): Merge conflict in {file}" in d.cause
        assert ("could not apply" in d.cause) == (verb == "rebase")
    assert len({d.key for d in digests.values() if d is not None}) == 4


def test_pathspec_and_missing_remote_keep_the_name(tmp_path: Path) -> None:
    r = repo(tmp_path / "r", {"a.txt": "a\n"})
    one = git(r, "git checkout feature-login", fail=True)
    two = git(r, "git checkout feature-search", fail=True)
    assert one is not None and two is not None
    assert "'feature-login'" in one.cause and one.key != two.key
    remote = git(r, "git push upstream main", fail=True)
    assert remote is not None and remote.cause == "'upstream' does not appear to be a git repository"


def test_apply_keeps_the_summary_line(tmp_path: Path) -> None:
    r = repo(tmp_path / "r", {"app.py": "a = 1\nb = 2\n"})
    (r / "fix.patch").write_text("--- a/app.py\n+++ b/app.py\n@@ -1,2 +1,2 @@\n-nothing\n-here\n+new\n+here\n")
    d = git(r, "git apply fix.patch", fail=True)
    assert d is not None and d.cause == "app.py: patch does not apply"


def test_a_summary_line_gives_way_to_the_error_that_names_the_cause(tmp_path: Path) -> None:
    """``failed to push some refs`` and ``Please commit or stash them.`` only sum up the error above
    them; the files a change would overwrite are listed under it; ``git pull`` without an upstream says
    so in a sentence before its advice. Each cause keeps its own key."""
    remote = tmp_path / "remote.git"
    git(tmp_path, f"git init -q --bare -b main {remote}")
    empty = tmp_path / "empty"
    git(empty, f"git init -q -b main . && git remote add origin {remote}")
    refspecs = {b: git(empty, f"git push origin {b}", fail=True) for b in ("main", "release")}
    assert refspecs["main"] is not None and refspecs["main"].cause == "src refspec main does not match any"
    assert refspecs["release"] is not None and refspecs["main"].key != refspecs["release"].key

    overwritten = {}
    for file in ("app.py", "settings.yaml"):
        r = repo(tmp_path / f"dirty-{file}", {file: "base\n"})
        git(r, "git checkout -q -b feature")
        (r / file).write_text("feature\n")
        git(r, "git commit -qam feature && git checkout -q main")
        (r / file).write_text("local edit\n")
        overwritten[file] = git(r, "git checkout feature", fail=True)
    d = overwritten["app.py"]
    assert d is not None and d.cause.endswith("would be overwritten by checkout: app.py"), d.cause
    assert d.key != overwritten["settings.yaml"].key  # type: ignore[union-attr]

    r = repo(tmp_path / "unstaged", {"app.py": "base\n"})
    git(r, "git checkout -q -b feature && git commit -q --allow-empty -m f && git checkout -q main")
    (r / "app.py").write_text("edit\n")
    rebase = git(r, "git rebase feature", fail=True)
    assert rebase is not None and rebase.cause.startswith("cannot rebase: You have unstaged changes"), rebase.cause

    clone = tmp_path / "clone"
    git(tmp_path, f"git clone -q {tmp_path / 'unstaged'} clone")
    git(clone, "git checkout -q -b local")
    pull = git(clone, "git pull", fail=True)
    assert pull is not None and pull.cause == "There is no tracking information for the current branch."
