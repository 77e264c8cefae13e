"""The compacting process: ``python -I -S _compact_child.py <the agent's sys.path, as JSON>``.

Run by :mod:`otel_errcompact._compacting_process`, never imported by the package. It imports only the
compactor's modules, from this file's folder, under a bare package (the package's ``__init__``, which
loads OpenTelemetry, never runs here), with the agent's import path for their dependencies; ``-I -S``:
no ``PYTHON*`` variables, no ``site`` or ``sitecustomize``, so nothing of the host's start-up,
auto-instrumentation included, runs here. It then answers requests on its standard streams until its
input ends, which happens when the agent's process closes it or dies, however it dies.

Protocol, little-endian unsigned 32-bit integers:

- once, after the imports: the line ``ready`` (or ``error: <why>``, and the process exits);
- request: ``n`` and ``p``, then ``p`` bytes (the redaction patterns registered in the agent's process,
  marshalled as ``(pattern, flags)`` pairs), ``n`` byte lengths, then the ``n`` texts, UTF-8 with lone
  surrogates passed through;
- reply: a length, then the ``n`` digests' fields, marshalled (see
  :func:`otel_errcompact._compacting_process.digest_fields`).
"""

from __future__ import annotations

import json
import marshal
import re
import signal
import struct
import sys
import types
from pathlib import Path
from typing import BinaryIO


def _read(stream: BinaryIO, size: int) -> bytes | None:
    """Exactly ``size`` bytes, or None at the end of the input."""
    data = stream.read(size)
    if data is None or len(data) < size:
        return None
    return data


def _import(path: list[str]) -> tuple[object, object, object]:
    sys.path[:] = path
    package = types.ModuleType("otel_errcompact")
    package.__path__ = [str(Path(__file__).resolve().parent)]
    sys.modules["otel_errcompact"] = package
    from otel_errcompact import redact
    from otel_errcompact._compacting_process import digest_fields
    from otel_errcompact.compactor import compact_text

    return compact_text, digest_fields, redact


def main(argv: list[str]) -> int:
    # A Ctrl-C at the terminal goes to the whole process group: the agent decides what it means, and
    # this process ends when the agent's end closes its input.
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    # Started from a thread of the agent's that blocks SIGTERM and SIGINT (see _signalmask): this process
    # inherits that mask, and must end on a SIGTERM as any process does.
    signal.pthread_sigmask(signal.SIG_SETMASK, ())
    source, sink = sys.stdin.buffer, sys.stdout.buffer
    try:
        compact_text, digest_fields, redact = _import(json.loads(argv[1]))
    except Exception as exc:  # reported to the agent's process, which then compacts in place
        why = f"{type(exc).__name__}: {exc}".replace("\n", " ")[:500]
        sink.write(f"error: {why}\n".encode("utf-8", "replace"))
        sink.flush()
        return 1
    sink.write(b"ready\n")
    sink.flush()
    rules: object = ()
    while True:
        header = _read(source, 8)
        if header is None:
            return 0
        n, size = struct.unpack("<II", header)
        blob = _read(source, size) if size else b""
        sizes = _read(source, 4 * n)
        if blob is None or sizes is None:
            return 0
        wanted = marshal.loads(blob) if blob else ()
        if wanted != rules:
            redact.clear_patterns()  # type: ignore[attr-defined]
            redact.add_patterns(re.compile(pattern, flags) for pattern, flags in wanted)  # type: ignore[attr-defined]
            rules = wanted
        digests = []
        for length in struct.unpack(f"<{n}I", sizes):
            text = _read(source, length)
            if text is None:
                return 0
            digests.append(digest_fields(compact_text(text.decode("utf-8", "surrogatepass"))))  # type: ignore[operator]
        body = marshal.dumps(digests)
        sink.write(struct.pack("<I", len(body)) + body)
        sink.flush()


if __name__ == "__main__":
    raise SystemExit(main(sys.argv))
