"""The spool: an append-only log of trajectory records, written before the failed tool call returns.

The writer's queue lives in memory, so a process killed with ``kill -9`` (or by the OOM killer, or a
container runtime) loses whatever was queued: failures the agent had already seen. The spool closes that
gap. :meth:`Spool.append` hands each record to the operating system on the agent's thread, before the
tool call returns. No ``fsync``: once the bytes are in the kernel's page cache they survive the death of
the process (not a power loss, which the SQLite store does not promise either with
``synchronous=NORMAL``).

Mapped segments. A segment's blocks are allocated when it is opened (``posix_fallocate``, on the writer
thread) and the file is mapped shared into memory; a record is then copied into its reserved range of
the mapping. The copy puts the bytes straight into the page cache, like ``write()``, but without a
system call: ``os.write`` releases the GIL, and taking it back from a busy background thread made the
agent's thread wait. Because the blocks exist before any copy, a full disk shows as an error when the
segment is opened (the segment then falls back to ``write()``), never as a ``SIGBUS`` in the agent's
process. A record that does not fit in what is left of the mapping goes to the next segment, which the
writer thread opened and mapped ahead, the spool rotating to it on the spot; only when none is ready, or
the record is bigger than a whole mapping, is it appended past the mapping's end with one ``write()`` on
the ``O_APPEND`` descriptor, and the segment rotated soon after. A mapped segment is
as long as its mapping, so its unused tail, and the range of a record whose copy a ``kill -9``
interrupted, are zero bytes: :func:`read_segment` skips them (a JSON line never holds a NUL byte).
The one thing a mapped segment does not survive is being shortened behind the writer's back: a live
segment truncated by another process turns the next copy into it into a ``SIGBUS``. Nothing but this
module writes to the spool folder; leave it to the library (``otel-errcompact`` deletes each segment
itself once its records are stored).

Segments. The spool is a folder of segment files, ``<start-ns>-<pid>-<seq>.spool``, each a run of JSON
lines (:meth:`TrajectoryRecord.to_storage_json`). The writer thread rotates to a new segment every
:attr:`Spool.segment_bytes` or :attr:`Spool.segment_age_s` and deletes a closed segment once every record
in it has been written to every sink. So the folder holds the last second or so of records, not a
second copy of the store. While a sink fails, the writer keeps the segments holding records it has not
stored, :meth:`Spool.park`-ed: unmapped, cut to what was written in them, with one descriptor each for
the lock.

Recovery. A segment left behind by a killed process is replayed into the sinks by the next writer that
opens the folder (:meth:`Spool.claim_leftovers`), then deleted. Each live writer holds an exclusive
``flock`` on its open segments, so two processes sharing a store never replay each other's live
segments; the kernel drops the lock when a process dies, however it dies.

>>> spool = Spool("trajectories.sqlite3-spool")      # doctest: +SKIP
>>> seq = spool.append(record.to_storage_json().encode() + b"\\n")   # doctest: +SKIP
"""

from __future__ import annotations

import contextlib
import ctypes
import functools
import logging
import mmap
import os
import sys
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

try:
    import fcntl
except ImportError:  # pragma: no cover - Windows: no flock; a spool is then used by one process only
    fcntl = None  # type: ignore[assignment]

__all__ = ["Leftover", "Spool", "read_segment", "write_all"]

_log = logging.getLogger("otel_errcompact")

SUFFIX = ".spool"


def _lock(fd: int) -> bool:
    if fcntl is None:  # pragma: no cover
        return True
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError:
        return False
    return True


@dataclass
class Leftover:
    """A segment of a dead writer, claimed (locked) by this process until :meth:`done` deletes it."""

    path: Path
    fd: int

    def done(self) -> None:
        """Delete the segment: every record in it has been stored."""
        try:
            self.path.unlink(missing_ok=True)
        finally:
            self.release()

    def release(self) -> None:
        """Keep the segment for a later start (its records could not all be stored) and unlock it."""
        with contextlib.suppress(OSError):
            os.close(self.fd)


_POPULATE_WRITE: int | None = getattr(mmap, "MADV_POPULATE_WRITE", 23 if sys.platform == "linux" else None)
_PREFAULT_CHUNK = 16 * 1024
"""Bytes populated per ``mmap.madvise`` call, which holds the GIL (about 15 µs), when libc's cannot be
called."""


@functools.lru_cache(maxsize=1)
def _libc_madvise() -> Callable[[int, int, int], int] | None:
    """libc's ``madvise``, called through ctypes (which releases the GIL), or None where there is none."""
    try:
        function = ctypes.CDLL(None, use_errno=True).madvise
    except (OSError, AttributeError, TypeError):  # pragma: no cover - not a POSIX libc
        return None
    function.argtypes = (ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int)
    function.restype = ctypes.c_int
    populate: Callable[[int, int, int], int] = function
    return populate


class _Segment:
    """One open (or rotated, not yet deleted) segment file: its descriptor and, when it could be made,
    its mapping of ``capacity`` bytes."""

    __slots__ = ("capacity", "fd", "map", "path", "populated", "seq", "used")

    def __init__(self, seq: int, path: Path, fd: int, segment_bytes: int) -> None:
        self.seq = seq
        self.path = path
        self.fd = fd
        self.map: mmap.mmap | None = None
        self.capacity = 0
        self.populated = 0  # bytes of the mapping whose pages are mapped in (see Spool.prefault)
        self.used = -1  # bytes reserved in it, set when it is rotated (past the mapping: more than capacity)
        try:
            _allocate(fd, segment_bytes)
            self.map = mmap.mmap(fd, segment_bytes, access=mmap.ACCESS_WRITE)
            self.capacity = segment_bytes
        except (OSError, ValueError, AttributeError):
            # No room on the disk, or a file system that cannot map: plain write() calls, as before.
            with contextlib.suppress(OSError):
                os.ftruncate(fd, 0)

    def populate(self) -> None:
        """Map this segment's pages in (see :meth:`Spool.prefault`)."""
        mapping = self.map
        if mapping is None or _POPULATE_WRITE is None or self.populated >= self.capacity:
            return
        madvise = _libc_madvise()
        if madvise is not None:
            # libc's madvise through ctypes runs without the GIL; mmap.madvise holds it throughout.
            buffer = (ctypes.c_char * self.capacity).from_buffer(mapping)
            address = ctypes.addressof(buffer)
            del buffer  # an exported buffer would keep the mapping from being closed
            if madvise(address, self.capacity, _POPULATE_WRITE) != 0:
                _log.debug("trajectory spool: MADV_POPULATE_WRITE refused (errno %d)", ctypes.get_errno())
            self.populated = self.capacity
            return
        while self.populated < self.capacity:
            size = min(_PREFAULT_CHUNK, self.capacity - self.populated)
            try:
                mapping.madvise(_POPULATE_WRITE, self.populated, size)
            except (OSError, ValueError, AttributeError):
                self.populated = self.capacity  # an older kernel: the copies fault as they go
                return
            self.populated += size
            time.sleep(0)  # hands the GIL to an agent thread waiting for it

    def park(self) -> None:
        """Keep the file and its descriptor (which holds the lock: no other writer replays it), not the
        mapping: unmapped, and cut to the bytes reserved in it, the unused part of its allocated blocks
        goes back to the file system and the descriptor the mapping held (``mmap`` keeps a duplicate)
        is closed. Only for a rotated segment with no write in flight (see :meth:`Spool.park_before`)."""
        mapping, self.map = self.map, None
        if mapping is None:
            return
        with contextlib.suppress(Exception):
            mapping.close()
        if 0 <= self.used <= self.capacity:  # past the mapping, records were appended after it: kept whole
            with contextlib.suppress(OSError):
                os.ftruncate(self.fd, self.used)
        self.capacity = self.populated = 0

    def close(self) -> None:
        if self.map is not None:
            with contextlib.suppress(Exception):
                self.map.close()
        with contextlib.suppress(OSError):
            os.close(self.fd)


def _allocate(fd: int, size: int) -> None:
    """Give the file ``size`` bytes of real blocks (not a sparse hole), so that copies into its mapping
    never need the file system to find room."""
    fallocate = getattr(os, "posix_fallocate", None)
    if fallocate is None:  # pragma: no cover - macOS, Windows
        raise OSError("no posix_fallocate: a mapped segment could run out of room")
    fallocate(fd, 0, size)


class Spool:
    """An append-only, segmented record log in ``directory`` (created if missing).

    Not thread-safe on its own: the :class:`~otel_errcompact.sinks.writer.TrajectoryWriter` calls
    :meth:`copy_in`, :meth:`pin`, :meth:`unpin`, :meth:`rotate` and :meth:`release_before` under its queue lock
    (:meth:`discard` after it, outside), and :meth:`write` from several agent threads at once, under
    the lock for a copy into the mapping and outside it for a ``write()`` (see :meth:`write`);
    :meth:`prefault` runs on the writer thread only, outside the lock. Lines of concurrent writers may
    reach a segment in another order than their records reach the queue; the versions of one record
    are submitted one after the other, so their lines keep their order.

    :param segment_bytes: rotate once the open segment holds this much (default 1 MiB); a segment's
        mapping is twice this.
    :param segment_age_s: rotate a non-empty segment this old (default 0.5 s), so a closed segment
        can be deleted soon after its records are stored.
    """

    def __init__(self, directory: str | os.PathLike[str], *, segment_bytes: int = 1 << 20,
                 segment_age_s: float = 0.5) -> None:
        self.directory = Path(directory)
        self.directory.mkdir(parents=True, exist_ok=True)
        self.segment_bytes = segment_bytes
        self.segment_age_s = segment_age_s
        self._prefix = f"{time.time_ns():020d}-{os.getpid()}-"
        self._seq = 0
        self._bytes = 0
        self._closed: list[_Segment] = []  # rotated, not yet stored
        self._pins: dict[int, int] = {}  # segment → writes in flight (see pin)
        self._pid = os.getpid()
        self._open = self._new_segment(0)
        self._next: _Segment | None = None  # opened ahead by prefault(), taken by rotate() or copy_in()
        self._opened = time.monotonic()

    @property
    def seq(self) -> int:
        """Sequence number of the open segment; :meth:`append` returns it."""
        return self._seq

    def _path(self, seq: int) -> Path:
        return self.directory / f"{self._prefix}{seq:08d}{SUFFIX}"

    def _new_segment(self, seq: int) -> _Segment:
        path = self._path(seq)
        fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_APPEND | getattr(os, "O_CLOEXEC", 0), 0o600)
        _lock(fd)
        # Mapped at twice the rotation size: the worker rotates between its rounds, and the records of
        # a busy round past ``segment_bytes`` still go to the mapping rather than to write().
        return _Segment(seq, path, fd, 2 * self.segment_bytes)

    def prefault(self) -> None:
        """Get the open segment's pages, and the next segment, ready before the agent's threads need them.

        The first write to each page of a shared file mapping is a page fault that finds, zeroes and
        maps a page: about 2.7 µs per record, on the agent's thread. ``MADV_POPULATE_WRITE`` (Linux
        5.14) does it ahead, here on the writer thread and without the GIL (elsewhere the copies
        fault as they go). The next segment is opened, allocated and mapped here too, outside the
        writer's lock, so that :meth:`rotate`, which runs under it, only swaps segments and no agent
        thread waits for those system calls.
        """
        self._open.populate()
        ready = self._next
        if ready is None:
            # Only this thread sets _next; an agent thread takes it only once it is set (see copy_in),
            # so no rotation can happen between reading _seq here and setting _next.
            ready = self._next = self._new_segment(self._seq + 1)
        ready.populate()  # the local: an agent thread may take the segment meanwhile, and copy into it

    def append(self, data: bytes) -> int:
        """Write ``data`` (whole lines) to the open segment; returns its sequence number.

        A copy into the segment's mapping, or one ``write()`` when it does not fit; a partial write
        (a huge record, a full disk) is continued until everything is written or the OS reports an
        error, which is raised.
        """
        slot = self.pin(len(data))
        try:
            self.write(slot, data)
        finally:
            self.unpin(slot)
        return slot[0]

    def copy_in(self, data: bytes) -> int | None:
        """Copy ``data`` into the open segment's mapping when it fits there: its sequence number, else
        ``None`` (nothing reserved: :meth:`pin` and :meth:`write` it instead). Under the caller's lock.

        :meth:`pin`, :meth:`write` and :meth:`unpin` in one call, for the common case of a record that
        fits: with the lock held throughout, no other writer can rotate the segment meanwhile, so
        there is nothing to pin. The writer calls this for every failure on the agent's thread, where
        four calls instead of one cost about 2 µs. The reservation is taken only after the copy, so a
        copy that raises reserves nothing.

        When the line does not fit what is left of the mapping and the next segment is ready
        (:meth:`prefault`), the spool rotates to it here, which only swaps segments, and copies the line
        there: under a steady stream of failures the mapping fills before the writer's next round
        rotates it, and a ``write()`` per record from then on would release the GIL on the agent's
        thread and make it wait to take it back."""
        offset = self._bytes
        end = offset + len(data)
        segment = self._open
        mapping = segment.map
        if end > segment.capacity or mapping is None:
            ready = self._next
            if ready is None or ready.map is None or len(data) > ready.capacity or self._bytes == 0:
                return None
            self._swap_in(ready)
            offset, end, mapping = 0, len(data), ready.map
        mapping[offset:end] = data
        self._bytes = end
        return self._seq

    def pin(self, size: int) -> tuple[int, int]:
        """Reserve ``size`` bytes in the open segment; returns the slot: its sequence number and the
        offset of the reserved range in its mapping (-1: append with ``write()``).

        The segment stays open, and is not deleted, until :meth:`unpin`, so :meth:`write` may run
        without the caller's lock (see :meth:`TrajectoryWriter.submit
        <otel_errcompact.sinks.writer.TrajectoryWriter.submit>`). Call ``pin`` and ``unpin`` under that lock.
        """
        seq = self._seq
        self._pins[seq] = self._pins.get(seq, 0) + 1
        offset = self._bytes
        self._bytes = offset + size
        if self._bytes > self._open.capacity:
            # Past the mapping: appended at the end of the file. No later copy goes to the mapping, so
            # what is in the file stays in the order of the reservations.
            self._bytes = max(self._bytes, self._open.capacity + size)
            return seq, -1
        return seq, offset

    def write(self, slot: tuple[int, int], data: bytes) -> None:
        """Put ``data`` in the reserved range of the pinned ``slot``; thread-safe between writers.

        Each writer copies into its own range of the mapping, so lines written by several threads at
        once never overlap. Past the mapping, the file is opened with ``O_APPEND``: the kernel places
        each ``write()`` at its end atomically. Only a partial write (which a regular file sees when
        the disk is full) can leave a cut line, which recovery skips.
        """
        seq, offset = slot
        # Read without the lock: if the worker rotates meanwhile, the segment is found among the
        # rotated ones, which are kept at least as long as the pinned one (release_before stops at the
        # oldest pin).
        segment = self._open if seq == self._open.seq else self._segment_of(seq)
        if offset >= 0 and segment.map is not None:
            segment.map[offset:offset + len(data)] = data
            return
        write_all(segment.fd, data)

    def unpin(self, slot: tuple[int, int]) -> None:
        """Release a :meth:`pin` (under the caller's lock)."""
        seq = slot[0]
        left = self._pins.get(seq, 0) - 1
        if left > 0:
            self._pins[seq] = left
        else:
            self._pins.pop(seq, None)

    @property
    def pinned(self) -> int | None:
        """The oldest segment with a write in flight, if any."""
        return min(self._pins) if self._pins else None

    def _segment_of(self, seq: int) -> _Segment:
        for segment in list(self._closed):  # a copy: the worker may rotate or release meanwhile
            if segment.seq == seq:
                return segment
        raise OSError(f"trajectory spool: segment {seq} is no longer open")

    def due(self, *, by_age: bool = True) -> bool:
        """True when the open segment should be rotated (big enough, or old and not empty).

        ``by_age=False``: only when big enough. The writer asks so while it keeps segments whose records
        a sink has not stored yet: none can be deleted meanwhile, and rotating every
        :attr:`segment_age_s` would keep a file and a descriptor per half second of failures rather
        than per :attr:`segment_bytes` of them."""
        if self._bytes >= self.segment_bytes:
            return True
        return by_age and self._bytes > 0 and time.monotonic() - self._opened >= self.segment_age_s

    def rotate(self) -> None:
        """Close the open segment for appends (it stays on disk until :meth:`release_before`).

        Called by the writer thread under its lock: the next segment is usually ready (see
        :meth:`prefault`); it is opened here only when it is not.
        """
        if self._bytes == 0:
            self._opened = time.monotonic()
            return
        self._swap_in(self._next or self._new_segment(self._seq + 1))  # _next is always numbered seq + 1

    def _swap_in(self, segment: _Segment) -> None:
        """Make ``segment`` (numbered ``seq + 1``) the open one, the open one a rotated one; under the lock."""
        self._open.used = self._bytes
        self._closed.append(self._open)
        self._seq = segment.seq
        if self._next is segment:
            self._next = None
        self._open = segment
        self._bytes = 0
        self._opened = time.monotonic()

    def release_before(self, seq: int) -> list[_Segment]:
        """Take the rotated segments numbered below ``seq`` (all their records are stored) off the
        list; :meth:`discard` them outside the caller's lock.

        Deleting a file and unmapping a segment whose pages are mapped in are system calls that
        take a while; the agent's threads must not wait for them on the writer's lock.
        """
        pinned = self.pinned
        if pinned is not None:
            seq = min(seq, pinned)  # a write to it is in flight
        released: list[_Segment] = []
        while self._closed and self._closed[0].seq < seq:
            released.append(self._closed.pop(0))
        return released

    def park_before(self, seq: int) -> list[_Segment]:
        """The rotated segments numbered below ``seq``, still mapped and with no write in flight, that
        the caller keeps although every record in them has been handed to the sinks (one refused some);
        :meth:`park` them outside the caller's lock. They stay on the list, for :meth:`release_before`."""
        pinned = self.pinned
        if pinned is not None:
            seq = min(seq, pinned)
        return [segment for segment in self._closed if segment.seq < seq and segment.map is not None]

    @staticmethod
    def park(segments: list[_Segment]) -> None:
        """Unmap the segments :meth:`park_before` returned and give back their unused blocks (see
        :meth:`_Segment.park`); their files stay until :meth:`release_before` and :meth:`discard`."""
        for segment in segments:
            segment.park()

    @staticmethod
    def discard(segments: list[_Segment]) -> int:
        """Delete and close segments :meth:`release_before` took off; how many files were deleted."""
        deleted = 0
        for segment in segments:
            try:
                segment.path.unlink(missing_ok=True)
                deleted += 1
            except OSError:
                _log.warning("trajectory spool: could not delete %s", segment.path, exc_info=True)
            finally:
                segment.close()
        return deleted

    def claim_leftovers(self) -> list[Leftover]:
        """Segments in the folder that no live writer holds, oldest first, each locked for this process."""
        mine = self._prefix
        found: list[Leftover] = []
        try:
            names = sorted(p for p in self.directory.iterdir() if p.name.endswith(SUFFIX))
        except OSError:
            return found
        for path in names:
            if path.name.startswith(mine):
                continue
            try:
                fd = os.open(path, os.O_RDONLY | getattr(os, "O_CLOEXEC", 0))
            except OSError:
                continue  # deleted meanwhile by its owner
            if _lock(fd):
                found.append(Leftover(path, fd))
            else:
                os.close(fd)
        return found

    def after_fork_in_child(self) -> None:
        """In a process forked from this spool's (see :mod:`otel_errcompact._forked`): the parent's
        segments stay the parent's. This process closes its mappings of them and its copies of their
        descriptors (the files, and the parent's locks on them, stay), and opens a segment of its own,
        named with its own process id. Raises ``OSError`` when it cannot."""
        for segment in [*self._closed, self._open, *([self._next] if self._next is not None else [])]:
            segment.close()
        self._closed = []
        self._pins = {}
        self._next = None
        self._prefix = f"{time.time_ns():020d}-{os.getpid()}-"
        self._pid = os.getpid()
        self._seq = 0
        self._bytes = 0
        self._open = self._new_segment(0)
        self._opened = time.monotonic()

    def close(self, *, delete: bool) -> None:
        """Close every segment; ``delete`` removes them too (everything they hold is stored)."""
        if os.getpid() != self._pid:
            return  # a forked child shares the parent's descriptors: leave the parent's files alone
        segments = [*self._closed, self._open, *([self._next] if self._next is not None else [])]
        self._closed = []
        self._next = None
        if delete:
            self.discard(segments)
            with contextlib.suppress(OSError):
                self.directory.rmdir()  # only if empty: another writer's segments keep it
        else:
            for segment in segments:
                segment.close()

    def disk_bytes(self) -> int:
        """Bytes in the open and rotated-but-not-yet-stored segments of this writer (a mapped segment
        counts its whole mapping: its blocks are allocated)."""
        return max(self._bytes, self._open.capacity) + sum(_size(s.path) for s in self._closed)


def write_all(fd: int, data: bytes) -> None:
    """Write all of ``data`` to the blocking descriptor ``fd``: ``write()`` may take less than it is given
    (a full disk, a signal) and says how much it took."""
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view):]


def _size(path: Path) -> int:
    try:
        return path.stat().st_size
    except OSError:
        return 0


def read_segment(path: str | os.PathLike[str], *, chunk_lines: int = 512) -> Iterator[list[bytes]]:
    """The complete lines of a segment, ``chunk_lines`` at a time (a cut-off last line is skipped).

    Zero bytes are a mapped segment's unused space: its tail, or the range of a record whose copy was
    interrupted. A line is what follows the last zero byte before its newline, so an interrupted
    record (a prefix of its line, then zeros) is skipped and the line after it is kept whole. Read
    line by line so that memory holds one chunk, not the whole segment.
    """
    chunk: list[bytes] = []
    with open(path, "rb") as fh:
        for raw in fh:
            if not raw.endswith(b"\n"):
                break  # the process died inside this write, or the mapping's unused tail
            line = raw.rpartition(b"\0")[2]
            if line == b"\n":
                continue
            chunk.append(line)
            if len(chunk) >= chunk_lines:
                yield chunk
                chunk = []
    if chunk:
        yield chunk
