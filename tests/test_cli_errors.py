"""The installed ``otel-errcompact`` command meets bad input with one line and a non-zero exit, reads a
store in a folder it cannot write to, and the demo keeps out of the user's real trajectory store."""

from __future__ import annotations

import json
import os
import re
import shutil
import sqlite3
import subprocess
import sys
import traceback
from collections.abc import Callable
from pathlib import Path

import pytest
from opentelemetry.sdk.trace import TracerProvider

import otel_errcompact
from otel_errcompact.sinks import SQLiteSink, TrajectoryStore
from otel_errcompact.trajectory import TrajectoryRecord
from tests.conftest import env_without_otel

ENTRY = Path(sys.executable).with_name("otel-errcompact")


def _env(tmp_path: Path, **extra: str) -> dict[str, str]:
    env = env_without_otel()
    env["XDG_DATA_HOME"] = str(tmp_path / "xdg")
    env.update(extra)
    return env


def _cli(args: list[str], env: dict[str, str], stdin: str | None = None) -> subprocess.CompletedProcess[str]:
    assert ENTRY.exists(), f"the console script is not installed beside {sys.executable}"
    return subprocess.run([str(ENTRY), *args], env=env, input=stdin, capture_output=True, text=True,
                          timeout=300, check=False)


def _one_line_error(proc: subprocess.CompletedProcess[str]) -> str:
    assert proc.returncode == 2, (proc.returncode, proc.stdout, proc.stderr)
    assert "Traceback" not in proc.stderr
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1, proc.stderr
    assert lines[0].startswith("otel-errcompact: ")
    return lines[0]


def _not_sqlite(tmp_path: Path) -> Path:
    path = tmp_path / "notes.md"
    path.write_bytes(Path(__file__).read_bytes())
    return path


def _other_sqlite(tmp_path: Path) -> Path:
    path = tmp_path / "shop.db"
    with sqlite3.connect(path) as conn:
        conn.execute("CREATE TABLE orders (id INTEGER PRIMARY KEY, total REAL)")
    return path


@pytest.mark.parametrize("action", [["list"], ["show", "abc123"]])
@pytest.mark.parametrize("make", [_not_sqlite, _other_sqlite], ids=["not-sqlite", "other-sqlite"])
def test_a_db_that_is_not_a_trajectory_store_is_one_line(tmp_path: Path, action: list[str], make: object) -> None:
    db = make(tmp_path)  # type: ignore[operator]
    line = _one_line_error(_cli(["trajectories", action[0], *action[1:], "--db", str(db)], _env(tmp_path)))
    assert f"--db {str(db)!r}: not a readable trajectory database" in line


def test_the_store_named_by_the_variable_is_named_too(tmp_path: Path) -> None:
    db = _not_sqlite(tmp_path)
    line = _one_line_error(_cli(["trajectories", "list"], _env(tmp_path, OTEL_ERRCOMPACT_SQLITE_PATH=str(db))))
    assert f"OTEL_ERRCOMPACT_SQLITE_PATH {str(db)!r}: not a readable trajectory database" in line


@pytest.mark.parametrize("command", [["trajectories", "list"], ["demo"]])
def test_a_bad_variable_is_one_line_naming_it(tmp_path: Path, command: list[str]) -> None:
    scratch = tmp_path / "tmp"  # the temporary folder the command sees
    scratch.mkdir()
    line = _one_line_error(_cli(command, _env(tmp_path, OTEL_ERRCOMPACT_CONSECUTIVE="banana", TMPDIR=str(scratch))))
    assert line.endswith("OTEL_ERRCOMPACT_CONSECUTIVE='banana': expected an integer ≥ 1")
    assert list(scratch.iterdir()) == []  # the demo's temporary store is not left behind, empty


def test_compact_does_not_need_the_settings(tmp_path: Path) -> None:
    raw = subprocess.run([sys.executable, "-c", "{}['user_id']"], capture_output=True, text=True).stderr
    proc = _cli(["compact"], _env(tmp_path, OTEL_ERRCOMPACT_CONSECUTIVE="banana"), stdin=raw)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == "[KeyError] at <string>:1 in <module>: 'user_id'"


def test_a_misspelled_variable_is_a_one_line_warning(tmp_path: Path) -> None:
    db = tmp_path / "t.sqlite3"
    SQLiteSink(db).close()
    proc = _cli(["trajectories", "list"], _env(tmp_path, OTEL_ERRCOMPACT_SQLITE_PATH=str(db),
                                               OTEL_ERRCOMPACT_SQLITE_PAHT=str(db)))
    assert proc.returncode == 0 and "no trajectory records" in proc.stdout
    assert proc.stderr.strip() == ("otel-errcompact: unknown variable OTEL_ERRCOMPACT_SQLITE_PAHT "
                                   "(did you mean OTEL_ERRCOMPACT_SQLITE_PATH?); it is ignored")


def test_the_demo_uses_a_temporary_store_and_says_where(tmp_path: Path) -> None:
    proc = _cli(["demo"], _env(tmp_path))
    assert proc.returncode == 0, proc.stderr
    match = re.search(r"^Trajectories \(full raw errors\): (.+)$", proc.stdout, re.M)
    assert match is not None, proc.stdout
    where = Path(match.group(1))
    try:
        assert "a temporary store for this demo" in proc.stdout
        assert not (tmp_path / "xdg").exists()  # the user's real store was not touched
        with TrajectoryStore(where) as store:
            stored = store.count()
        assert stored >= 10  # the agent's 10 failures, and the recovery part's
        listed = _cli(["trajectories", "list", "--db", str(where), "--limit", "3"], _env(tmp_path))
        assert listed.returncode == 0 and f"3 of {stored} records" in listed.stdout
    finally:
        shutil.rmtree(where.parent, ignore_errors=True)


def test_the_demo_switched_off_says_so_and_leaves_no_folder(tmp_path: Path) -> None:
    tmp = tmp_path / "tmp"
    tmp.mkdir()
    proc = _cli(["demo"], _env(tmp_path, OTEL_ERRCOMPACT_ENABLED="false", TMPDIR=str(tmp)))
    line = _one_line_error(proc)
    assert "switched off (OTEL_ERRCOMPACT_ENABLED=false)" in line, line
    assert list(tmp.iterdir()) == []  # the temporary store's folder went with it


def test_the_demo_writes_where_the_variable_says(tmp_path: Path) -> None:
    db = tmp_path / "chosen.sqlite3"
    proc = _cli(["demo"], _env(tmp_path, OTEL_ERRCOMPACT_SQLITE_PATH=str(db)))
    assert proc.returncode == 0, proc.stderr
    assert f"Trajectories (full raw errors): {db}\n" in proc.stdout
    assert "temporary" not in proc.stdout
    with TrajectoryStore(db) as store:
        assert store.count() >= 10  # the agent's 10 failures, and the recovery part's


def test_records_are_shown_under_an_ascii_locale(tmp_path: Path) -> None:
    """A terminal whose locale is plain C cannot encode "café": the listing and the record are printed
    (escaped), and ``--raw`` gives the error's own UTF-8 bytes, never a UnicodeEncodeError traceback."""
    db = tmp_path / "store.db"
    ec = otel_errcompact.init(service_name="locale", sqlite_path=db, tracer_provider=TracerProvider())
    try:
        with open(tmp_path / "café-menü.txt") as menu:
            menu.read()
    except FileNotFoundError as exc:
        raw = "".join(traceback.format_exception(exc))
        ec.record_error(raw, scope="c-locale")
    assert ec.flush(30)
    ec.shutdown()
    with TrajectoryStore(db) as store:
        (row,) = store.list()
    env = _env(tmp_path, LC_ALL="C", LANG="C", PYTHONUTF8="0", PYTHONCOERCECLOCALE="0", PYTHONIOENCODING="")
    for args in (["trajectories", "list", "--db", str(db)], ["trajectories", "show", row.record_id, "--db", str(db)]):
        proc = _cli(args, env)
        assert proc.returncode == 0 and "Traceback" not in proc.stderr, proc.stderr
        assert "caf\\xe9-men\\xfc.txt" in proc.stdout or "caf\\u00e9" in proc.stdout, proc.stdout
    raw_out = subprocess.run([str(ENTRY), "trajectories", "show", row.record_id, "--db", str(db), "--raw"],
                             env=env, capture_output=True, timeout=300, check=False)
    assert raw_out.returncode == 0 and raw_out.stdout == raw.encode("utf-8"), raw_out.stderr


def test_show_gives_back_the_undecodable_byte_of_a_file_name(tmp_path: Path) -> None:
    """An error naming a file whose name is not UTF-8: ``show`` prints JSON that reads back as the very
    text (the byte as its escape ``\\udce9``), ``--raw`` the error's own bytes, 0xE9 included."""
    db = tmp_path / "store.db"
    inbox = tmp_path / "inbox"
    inbox.mkdir()
    os.close(os.open(os.path.join(os.fsencode(inbox), b"caf\xe9.csv"), os.O_CREAT | os.O_WRONLY))
    ec = otel_errcompact.init(service_name="bytes", sqlite_path=db, tracer_provider=TracerProvider())
    try:
        for name in os.listdir(inbox):
            (inbox / name).read_text(encoding="ascii").splitlines()[0]
    except IndexError as exc:
        raw = "".join(traceback.format_exception(exc))
        ec.record_error(f"{raw}while reading {name}", scope="c-bytes")
    assert ec.flush(30)
    ec.shutdown()
    with TrajectoryStore(db) as store:
        (row,) = store.list()
    shown = _cli(["trajectories", "show", row.record_id, "--db", str(db)], _env(tmp_path))
    assert shown.returncode == 0, shown.stderr
    assert json.loads(shown.stdout)["raw_error"] == f"{raw}while reading {name}"
    raw_out = subprocess.run([str(ENTRY), "trajectories", "show", row.record_id, "--db", str(db), "--raw"],
                             env=_env(tmp_path), capture_output=True, timeout=300, check=False)
    assert raw_out.returncode == 0, raw_out.stderr
    assert raw_out.stdout == raw.encode() + b"while reading caf\xe9.csv"


def test_a_listing_limit_below_one_is_a_usage_error(tmp_path: Path) -> None:
    db = tmp_path / "store.db"
    SQLiteSink(db).close()
    proc = _cli(["trajectories", "list", "--db", str(db), "--limit", "0"], _env(tmp_path))
    assert proc.returncode == 2 and "expected an integer ≥ 1, got 0" in proc.stderr, proc.stderr


def test_an_ambiguous_prefix_lists_its_matches_and_marks_only_a_cut_list(tmp_path: Path) -> None:
    """``show PREFIX`` matching two records names both, and nothing else: a "…" would say there were more.
    Matching seven, it names five and ends with "…"."""
    db = tmp_path / "store.db"
    ids = [f"ab{n:030x}" for n in range(2)] + [f"cd{n:030x}" for n in range(7)]
    sink = SQLiteSink(db)
    for record_id in ids:
        try:
            {}[record_id]
        except KeyError:
            raw = traceback.format_exc()
        sink.write([TrajectoryRecord(source="tool", raw_error=raw, record_id=record_id)])
    sink.close()
    line = _one_line_error(_cli(["trajectories", "show", "ab", "--db", str(db)], _env(tmp_path)))
    assert line.endswith(f"is ambiguous: {ids[0]}, {ids[1]}"), line
    line = _one_line_error(_cli(["trajectories", "show", "cd", "--db", str(db)], _env(tmp_path)))
    assert line.endswith(f"is ambiguous: {', '.join(ids[2:7])}, …"), line


# Run as root, the command is held back by a folder's mode only without the capabilities that override it:
# this drops them from the bounding set, which the command, run by exec, then cannot have.
_WITHOUT_OVERRIDES = """
import ctypes, os, sys
libc = ctypes.CDLL(None, use_errno=True)
for cap in (1, 2, 3):  # CAP_DAC_OVERRIDE, CAP_DAC_READ_SEARCH, CAP_FOWNER
    if libc.prctl(24, cap, 0, 0, 0) != 0:  # PR_CAPBSET_DROP
        sys.exit(f"prctl(PR_CAPBSET_DROP, {cap}): {os.strerror(ctypes.get_errno())}")
os.execv(sys.argv[1], sys.argv[1:])
"""


def _unwritable(folder: Path) -> list[str]:
    """Make ``folder`` read-only (0o555) and return the prefix that runs a command which cannot write to it,
    checked by trying to; skips the test where no such command can be run."""
    folder.chmod(0o555)
    prefix = [sys.executable, "-c", _WITHOUT_OVERRIDES] if os.geteuid() == 0 else []
    probe = subprocess.run([*prefix, sys.executable, "-c", "import sys; open(sys.argv[1], 'x')", str(folder / "probe")],
                           capture_output=True, text=True, timeout=60, check=False)
    if "PermissionError" not in probe.stderr:
        pytest.skip(f"no process here is kept from writing to a 0o555 folder: {probe.stderr.strip() or 'it wrote'}")
    return prefix


def _record_failures(db: Path) -> otel_errcompact.ErrCompact:
    """An agent's handle on the store ``db`` holding three committed failures (the caller shuts it down)."""
    ec = otel_errcompact.init(service_name="copied", sqlite_path=db, tracer_provider=TracerProvider())
    for n in range(3):
        ec.record_error(f"Traceback (most recent call last):\n  File \"sync.py\", line {n + 1}, in pull\n"
                        f"ValueError: shard {n} is gone\n", scope="nightly")
    assert ec.flush(30)
    return ec


def test_a_store_in_a_folder_the_user_cannot_write_to_is_listed_and_shown(tmp_path: Path) -> None:
    """SQLite's read-only mode still creates the -wal and -shm files: in a folder the user cannot write to
    (a store copied into a read-only folder, or another user's), the store is read as an immutable file."""
    folder = tmp_path / "copied"
    folder.mkdir()
    db = folder / "store.db"
    _record_failures(db).shutdown()
    assert sorted(p.name for p in folder.iterdir()) == ["store.db"]  # as a store no agent has open is left
    try:
        prefix = _unwritable(folder)
        listed = subprocess.run([*prefix, str(ENTRY), "trajectories", "list", "--db", str(db)], env=_env(tmp_path),
                                capture_output=True, text=True, timeout=300, check=False)
        assert listed.returncode == 0, listed.stderr
        for n in range(3):
            assert f"[ValueError] at sync.py:{n + 1} in pull: shard {n} is gone" in listed.stdout, listed.stdout
        assert f"3 of 3 records in {db}" in listed.stdout
        rows = subprocess.run([*prefix, str(ENTRY), "trajectories", "list", "--db", str(db), "--json"],
                              env=_env(tmp_path), capture_output=True, text=True, timeout=300, check=False)
        assert rows.returncode == 0, rows.stderr
        newest = json.loads(rows.stdout)[0]["record_id"]
        shown = subprocess.run([*prefix, str(ENTRY), "trajectories", "show", newest, "--db", str(db), "--raw"],
                               env=_env(tmp_path), capture_output=True, text=True, timeout=300, check=False)
        assert shown.returncode == 0, shown.stderr
        assert shown.stdout.endswith("ValueError: shard 2 is gone\n"), shown.stdout
        assert sorted(p.name for p in folder.iterdir()) == ["store.db"]
    finally:
        folder.chmod(0o755)


def test_a_wal_that_a_read_only_folder_keeps_from_being_read_is_named(tmp_path: Path) -> None:
    """A store copied while its agent ran has its newest records in the -wal, which SQLite reads only through
    a -shm it cannot create there: the command says so, rather than listing the store without them."""
    live = tmp_path / "live" / "store.db"
    folder = tmp_path / "copied"
    folder.mkdir()
    ec = _record_failures(live)
    try:
        shutil.copy(live, folder / "store.db")
        shutil.copy(f"{live}-wal", folder / "store.db-wal")
    finally:
        ec.shutdown()
    assert (folder / "store.db-wal").stat().st_size > 0
    db = folder / "store.db"
    try:
        prefix = _unwritable(folder)
        proc = subprocess.run([*prefix, str(ENTRY), "trajectories", "list", "--db", str(db)], env=_env(tmp_path),
                              capture_output=True, text=True, timeout=300, check=False)
        line = _one_line_error(proc)
        assert f"{db}-wal holds records not yet copied into store.db" in line, line
        assert "copy store.db with store.db-wal into a folder you can write to" in line, line
    finally:
        folder.chmod(0o755)


def _newer_schema(record: str) -> str:
    """The stored record as a later release with a new record schema would write it: a new version, a new
    field."""
    data = json.loads(record)
    data["schema_version"] += 1
    data["retry_budget"] = {"left": 2}
    return json.dumps(data)


def _damaged(record: str) -> str:
    """The stored record cut short, as a damaged page or a row edited by hand leaves it."""
    return record[: len(record) // 2]


@pytest.mark.parametrize(("change", "says"), [
    (_newer_schema, "written by a newer otel-errcompact (errcompact.trajectory v2; this release reads v1)"),
    (_damaged, "not a readable trajectory record ("),
], ids=["newer-schema", "damaged"])
def test_a_record_that_cannot_be_read_is_one_line_naming_it(
    tmp_path: Path, change: Callable[[str], str], says: str
) -> None:
    """``show`` of a record this release cannot read (a newer release's record schema, a damaged row) says
    which record, in which store, and why; not a JSON or pydantic traceback. ``tonnage`` over the store
    too."""
    db = tmp_path / "store.db"
    _record_failures(db).shutdown()
    with sqlite3.connect(db) as conn:
        record_id, record = conn.execute("SELECT record_id, record FROM trajectory ORDER BY id LIMIT 1").fetchone()
        conn.execute("UPDATE trajectory SET record = ? WHERE record_id = ?", (change(record), record_id))
    conn.close()
    for args in (["trajectories", "show", record_id], ["trajectories", "show", record_id, "--raw"]):
        line = _one_line_error(_cli([*args, "--db", str(db)], _env(tmp_path)))
        assert line.startswith(f"otel-errcompact: record {record_id} in {db}: {says}"), line
    line = _one_line_error(_cli(["tonnage", str(db), "--no-plot"], _env(tmp_path)))
    assert line.startswith(f"otel-errcompact: record {record_id} in {db}: {says}"), line


def _newer_layout(tmp_path: Path) -> Path:
    """A store whose table layout a later release wrote."""
    path = tmp_path / "later.db"
    SQLiteSink(path).close()
    with sqlite3.connect(path) as conn:
        conn.execute("UPDATE errcompact_schema SET version = version + 1 WHERE component = 'trajectory'")
    conn.close()
    return path


@pytest.mark.parametrize("make", [_not_sqlite, _other_sqlite, _newer_layout],
                         ids=["not-sqlite", "other-sqlite", "newer-layout"])
def test_the_viewer_refuses_what_is_not_a_trajectory_store_in_one_line(tmp_path: Path, make: object) -> None:
    """The viewer checks the store as ``list`` and ``show`` do, before Datasette starts: Datasette serves any
    file, with a traceback for one that is not SQLite and broken pages for another SQLite file."""
    db = make(tmp_path)  # type: ignore[operator]
    assert ENTRY.exists()
    args = [str(ENTRY), "viewer", "--db", str(db), "--port", "0"]
    with subprocess.Popen(args, env=_env(tmp_path), stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                          text=True) as viewer:
        try:
            stdout, stderr = viewer.communicate(timeout=60)
        except subprocess.TimeoutExpired:  # it serves the file: stopped as a process manager stops it
            viewer.terminate()
            stdout, stderr = viewer.communicate(timeout=60)
    proc = subprocess.CompletedProcess(args, viewer.returncode, stdout, stderr)
    line = _one_line_error(proc)
    assert f"--db {str(db)!r}: not a readable trajectory database" in line, line
    assert proc.stdout == ""  # nothing was served
