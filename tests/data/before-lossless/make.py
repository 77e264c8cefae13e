"""Writes this folder's files with the otel-errcompact of the checkout it runs in.

Run at commit 9e99de2 (the last release that stored a lone surrogate as a ``\\xNN`` escape):
``python tests/data/before-lossless/make.py OUT``, then copy ``OUT/trajectories.jsonl`` and
``OUT/left-by-a-killed-writer.spool`` (as ``1700000000000000000-4242-0.spool``) here. Three real
failures: a file name that is not UTF-8 inside an error (a lone surrogate), an error whose own text
holds a backslash escape (``int()`` of bytes), and a process's stderr that is not UTF-8 (bytes).
``tests/test_durability.py`` reads them back as that release did.
"""

import os
import subprocess
import sys
from pathlib import Path

from otel_errcompact.sinks import JSONLSink, SQLiteSink, TrajectoryWriter
from otel_errcompact.sinks.spool import Spool
from otel_errcompact.trajectory import TrajectoryRecord

_STDERR = "import sys; sys.stderr.buffer.write(bytes([99, 97, 102, 233]) + b': not found'); sys.exit(2)"


def records(folder: Path) -> list[TrajectoryRecord]:
    """The three failures, with fixed record ids."""
    os.close(os.open(os.path.join(os.fsencode(folder), b"caf\xe9.txt"), os.O_CREAT | os.O_WRONLY))
    out = []
    for name in os.listdir(folder):
        try:
            raise ValueError(f"unsupported note file {name}")
        except ValueError as exc:
            out.append(TrajectoryRecord(record_id="0" * 31 + "1", source="tool", tool_name="import_notes",
                                        raw_error=f"ValueError: {exc}", exception_message=str(exc)))
    try:
        int((folder / os.listdir(folder)[0]).read_bytes() or b"caf\xe9")
    except ValueError as exc:
        out.append(TrajectoryRecord(record_id="0" * 31 + "2", source="tool", tool_name="parse_count",
                                    raw_error=f"ValueError: {exc}", exception_message=str(exc)))
    proc = subprocess.run([sys.executable, "-c", _STDERR], capture_output=True, check=False)
    out.append(TrajectoryRecord(record_id="0" * 31 + "3", source="tool", tool_name="run", raw_error=proc.stderr))
    return out


def main(target: Path) -> None:
    """Writes the records through the writer (SQLite, JSONL) and into a spool segment left as a killed
    writer leaves it (cut to its content)."""
    target.mkdir(parents=True)
    inbox = target.parent / "inbox"
    inbox.mkdir()
    recs = records(inbox)
    writer = TrajectoryWriter([SQLiteSink(target / "trajectories.sqlite3"),
                               JSONLSink(target / "trajectories.jsonl")])
    for rec in recs:
        writer.submit(rec)
    assert writer.force_flush(10)
    writer.shutdown()
    spool = Spool(target / "spool")
    for rec in recs:
        spool.append(rec.to_storage_line())
    (segment,) = (target / "spool").glob("*.spool")
    (target / "left-by-a-killed-writer.spool").write_bytes(segment.read_bytes().rstrip(b"\0"))
    spool.close(delete=True)


if __name__ == "__main__":
    main(Path(sys.argv[1]))
