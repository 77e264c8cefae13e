"""The spool's mapped segments: what a killed process leaves in them is read back whole, or skipped.

A segment is a file whose blocks are allocated up front and mapped into memory; records are copied into
reserved ranges. A range whose copy a ``kill -9`` interrupted, and the unused tail, are zero bytes. These
tests write real records through a real :class:`Spool`, damage a segment the way an interrupted copy
does, and read it back as recovery does.
"""

from __future__ import annotations

import contextlib
import os
import sqlite3
import time
from pathlib import Path

import pytest

from otel_errcompact.compactor import compact_text
from otel_errcompact.sinks import JSONLSink, SQLiteSink, TrajectoryStore, TrajectoryWriter, read_jsonl
from otel_errcompact.sinks import spool as spool_module
from otel_errcompact.sinks.spool import SUFFIX, Spool, read_segment
from otel_errcompact.trajectory import TrajectoryRecord
from tests.test_durability import _real_record


def _line(rec: TrajectoryRecord) -> bytes:
    return rec.to_storage_line()


def _read_ids(path: Path) -> list[str]:
    return [TrajectoryRecord.from_storage_json(line).record_id for lines in read_segment(path) for line in lines]


def _segments(folder: Path) -> list[Path]:
    return sorted(folder.glob(f"*{SUFFIX}"))


def test_an_interrupted_copy_is_skipped_and_the_lines_around_it_are_kept(tmp_path: Path) -> None:
    spool = Spool(tmp_path / "spool")
    recs = [_real_record(tmp_path, i) for i in range(3)]
    first, cut, last = (_line(r) for r in recs)
    spool.append(first)
    # A second writer reserved its range and died half-way through its copy: a prefix of its line,
    # then the zero bytes of the rest of its range. A third writer finished its copy after it.
    slot = spool.pin(len(cut))
    spool.write(slot, cut[: len(cut) // 2])
    spool.unpin(slot)
    spool.append(last)
    (segment,) = _segments(tmp_path / "spool")
    assert segment.stat().st_size > len(first) + len(cut) + len(last), "the segment is mapped ahead"
    assert _read_ids(segment) == [recs[0].record_id, recs[2].record_id]
    spool.close(delete=True)


def test_a_record_bigger_than_the_mapping_is_appended_after_it(tmp_path: Path) -> None:
    spool = Spool(tmp_path / "spool", segment_bytes=4096)
    small = _real_record(tmp_path, 1)
    big = small.model_copy(update={"record_id": "f" * 32, "raw_error": small.raw_error * 40})
    assert len(_line(big)) > 2 * 4096
    spool.append(_line(small))
    spool.append(_line(big))
    spool.append(_line(small.model_copy(update={"record_id": "e" * 32})))
    assert spool.due()
    (segment,) = _segments(tmp_path / "spool")
    assert _read_ids(segment) == [small.record_id, "f" * 32, "e" * 32]
    spool.close(delete=True)


def test_a_segment_that_cannot_be_allocated_is_written_with_write(tmp_path: Path,
                                                               monkeypatch: pytest.MonkeyPatch) -> None:
    def no_room(fd: int, size: int) -> None:
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(spool_module, "_allocate", no_room)
    spool = Spool(tmp_path / "spool")
    recs = [_real_record(tmp_path, i) for i in range(5)]
    for rec in recs:
        spool.append(_line(rec))
    spool.prefault()  # nothing to map in; the next segment is opened ahead, as plain file
    segment, ready = _segments(tmp_path / "spool")
    assert ready.stat().st_size == 0
    assert segment.stat().st_size == sum(len(_line(r)) for r in recs), "plain appends, no mapped tail"
    assert _read_ids(segment) == [r.record_id for r in recs]
    spool.close(delete=True)


def test_records_copied_into_a_dead_writers_mapping_are_recovered_into_the_store(tmp_path: Path) -> None:
    folder = tmp_path / "t.db-spool"
    spool = Spool(folder)
    spool.prefault()
    recs = [_real_record(tmp_path, i) for i in range(40)]
    for rec in recs:
        spool.append(_line(rec))
    # The process dies: nothing is closed, deleted or unlocked by it. Its lock goes with its descriptors.
    assert spool._next is not None, "the next segment is made ready ahead"
    for segment in [*spool._closed, spool._open, spool._next]:
        segment.close()
    writer = TrajectoryWriter([SQLiteSink(tmp_path / "t.db")], spool_dir=folder)
    writer.shutdown(timeout_s=30)
    assert writer.recovered == len(recs) and writer.lost == 0
    with sqlite3.connect(tmp_path / "t.db") as conn:
        stored = {r[0] for r in conn.execute("SELECT record_id FROM trajectory")}
    assert stored == {r.record_id for r in recs}


def test_rotation_takes_the_segment_made_ready_ahead(tmp_path: Path) -> None:
    spool = Spool(tmp_path / "spool", segment_bytes=8192)
    spool.prefault()
    ready = spool._next
    assert ready is not None and ready.seq == 1
    assert ready.map is None or ready.populated == ready.capacity == 2 * 8192
    rec = _real_record(tmp_path, 1)
    spool.append(_line(rec))
    spool.rotate()
    assert spool._open is ready and spool._next is None and spool.seq == 1
    spool.append(_line(rec.model_copy(update={"record_id": "a" * 32})))
    first, second = _segments(tmp_path / "spool")
    assert _read_ids(first) == [rec.record_id] and _read_ids(second) == ["a" * 32]
    spool.close(delete=True)
    assert not (tmp_path / "spool").exists()


def test_a_line_past_the_mapping_goes_to_the_segment_made_ready_ahead_without_a_write(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Under a steady stream the mapping fills before the writer's next round rotates it: the agent's
    thread then rotates to the segment made ready ahead and copies there, with no ``write()`` (which
    would release the GIL), and recovery reads the segments back in order."""
    folder = tmp_path / "t.db-spool"
    spool = Spool(folder, segment_bytes=8192)
    spool.prefault()
    ready = spool._next
    assert ready is not None and ready.map is not None
    fds = {spool._open.fd, ready.fd}
    writes: list[int] = []  # write() calls into the two segments
    real_write = spool_module.os.write
    monkeypatch.setattr(spool_module.os, "write",
                        lambda fd, data: (fd in fds and writes.append(fd)) or real_write(fd, data))
    recs = [_real_record(tmp_path, i) for i in range(60)]
    lines = [_line(rec) for rec in recs]
    mapping = 2 * 8192
    assert sum(map(len, lines)) > mapping and all(len(line) < mapping // 4 for line in lines)
    seqs = [spool.copy_in(line) for line in lines[:30]]
    assert seqs[0] == 0 and seqs[-1] == 1, "the line that did not fit opened segment 1"
    assert spool._open is ready and spool._next is None and writes == []
    # Nothing ready: the line is not copied, and the caller appends it with write() as before.
    rest = lines[30:]
    while (seq := spool.copy_in(rest[0])) is not None:
        rest.pop(0)
    assert seq is None and spool.seq == 1
    for line in rest:
        spool.append(line)
    assert writes, "past the mapping, with no segment ready: write()"
    first, second = _segments(folder)
    assert first.stat().st_size == mapping, "segment 0 was never written past its mapping"
    assert _read_ids(first) + _read_ids(second) == [rec.record_id for rec in recs]
    monkeypatch.undo()
    # The process dies: recovery stores every line of both segments.
    for segment in [*spool._closed, spool._open]:
        segment.close()
    writer = TrajectoryWriter([SQLiteSink(tmp_path / "t.db")], spool_dir=folder)
    writer.shutdown(timeout_s=30)
    assert writer.recovered == len(recs) and writer.lost == 0


def _descriptors_in(folder: Path) -> int:
    """This process's open descriptors on files in ``folder`` (a mapping holds one of its own)."""
    count = 0
    for fd in os.listdir("/proc/self/fd"):
        with contextlib.suppress(OSError):
            count += os.readlink(f"/proc/self/fd/{fd}").startswith(f"{folder}{os.sep}")
    return count


_PROC_FD = pytest.mark.skipif(not Path("/proc/self/fd").is_dir(), reason="counts descriptors in /proc/self/fd")


@_PROC_FD
def test_a_sink_failure_keeps_the_spool_only_until_the_records_are_stored(tmp_path: Path) -> None:
    """Another connection holds the store's write lock past the sink's busy timeout: the batch fails.
    The records stay in the spool and in memory, and the next batch after the lock is released stores
    them with it, each in its last version; from then on the spool is back to its usual one segment
    (and the one made ready ahead), instead of keeping every later segment, its blocks and descriptors,
    for the rest of the process. The sink that did store them is not handed them again."""
    db, jl, folder = tmp_path / "t.db", tmp_path / "t.jsonl", tmp_path / "t.db-spool"
    writer = TrajectoryWriter([SQLiteSink(db, busy_timeout_ms=50), JSONLSink(jl)], spool_dir=folder,
                              schedule_delay_s=0.05)
    records = iter(_real_record(tmp_path, i) for i in range(1000))
    for _ in range(5):
        writer.submit(next(records))
    assert writer.force_flush(10)
    usual = (len(_segments(folder)), _descriptors_in(folder))

    other = sqlite3.connect(db, isolation_level=None)
    other.execute("BEGIN IMMEDIATE")
    refused = [next(records) for _ in range(5)]
    for rec in refused:
        writer.submit(rec)
    assert not writer.force_flush(10)
    assert writer.failed == 5
    time.sleep(0.6)  # past the spool's segment age: a segment per half second would be kept meanwhile
    refused.append(next(records))
    writer.submit(refused[-1])
    assert not writer.force_flush(10)
    assert (len(_segments(folder)), _descriptors_in(folder)) == usual
    other.execute("ROLLBACK")
    other.close()

    amended = refused[0].amended(compact_text(refused[0].raw_error), count=1)
    writer.submit(amended)  # its digest added: the version the store must end with
    writer.force_flush(10)
    time.sleep(0.6)  # the segment holding the refused records is now rotated, and can go
    later = [next(records) for _ in range(3)]
    for rec in later:
        writer.submit(rec)
    writer.force_flush(10)
    assert (len(_segments(folder)), _descriptors_in(folder)) == usual
    assert writer.failed == 6  # counted once, when refused

    with TrajectoryStore(db) as store:
        assert store.count() == 5 + 6 + 3
        assert store.get(refused[0].record_id) == amended
        assert all(store.get(rec.record_id) == rec for rec in [*refused[1:], *later])
    assert read_jsonl(jl)[5:6] == [amended]
    assert len(jl.read_bytes().splitlines()) == 5 + 6 + 1 + 3  # one line a version: none written twice
    writer.shutdown(timeout_s=30)
    assert not folder.exists(), "everything is stored: the next start has nothing to replay"


@_PROC_FD
def test_a_kept_segment_gives_back_its_mapping_and_unused_blocks_and_keeps_its_lock(tmp_path: Path) -> None:
    folder = tmp_path / "t.db-spool"
    spool = Spool(folder, segment_bytes=8192)
    recs = [_real_record(tmp_path, i) for i in range(6)]
    for pair in (recs[0:2], recs[2:4], recs[4:6]):
        for rec in pair:
            spool.append(_line(rec))
        spool.rotate()
    kept = spool.park_before(spool.seq)
    assert [segment.seq for segment in kept] == [0, 1, 2]
    before = _descriptors_in(folder)
    spool.park(kept)
    assert _descriptors_in(folder) == before - 3  # each mapping's own descriptor
    paths = _segments(folder)[:3]
    for path, pair in zip(paths, (recs[0:2], recs[2:4], recs[4:6]), strict=True):
        assert path.stat().st_size == sum(len(_line(rec)) for rec in pair)  # not its 16 KiB mapping
        assert _read_ids(path) == [rec.record_id for rec in pair]
    assert Spool(tmp_path / "t.db-spool").claim_leftovers() == []  # still locked: no other writer replays them
    assert spool.park_before(spool.seq) == []
    assert len(spool.release_before(spool.seq)) == 3
