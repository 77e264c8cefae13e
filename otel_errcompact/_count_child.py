"""The token-counting process: ``python -I -S _count_child.py <bpe-openai extension> <encoding>``.

Run by :mod:`otel_errcompact._counting_process`, never imported by the package. It loads only
``bpe-openai``'s Rust extension, from the file path it is given (``-I -S``: no site-packages, no
``PYTHON*`` variables, no ``sitecustomize``, so nothing of the host's environment, auto-instrumentation
included, runs here), then answers requests on its standard streams until its input ends, which happens
when the agent's process closes it or dies, however it dies.

Protocol, little-endian unsigned 32-bit integers:

- once, after loading the vocabulary: the line ``ready`` (or ``error: <why>``, and the process exits);
- request: ``n``, then ``n`` byte lengths, then the ``n`` UTF-8 texts back to back;
- reply: ``n`` token counts, in order.

Standard library only: it must start in a bare interpreter.
"""

from __future__ import annotations

import importlib.util
import signal
import struct
import sys
from typing import BinaryIO


def _read(stream: BinaryIO, size: int) -> bytes | None:
    """Exactly ``size`` bytes, or None at the end of the input."""
    data = stream.read(size)
    if data is None or len(data) < size:
        return None
    return data


def _tokenizer(extension: str, encoding: str) -> object:
    spec = importlib.util.spec_from_file_location("bpe_openai._bindings", extension)
    if spec is None or spec.loader is None:
        raise ImportError(f"not an extension module: {extension}")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module.tokenizer_for_encoding(encoding)


def main(argv: list[str]) -> int:
    # A Ctrl-C at the terminal goes to the whole process group: the agent decides what it means, and
    # this process ends when the agent's end closes its input.
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    # Started from a thread of the agent's that blocks SIGTERM and SIGINT (see _signalmask): this process
    # inherits that mask, and must end on a SIGTERM as any process does.
    signal.pthread_sigmask(signal.SIG_SETMASK, ())
    source, sink = sys.stdin.buffer, sys.stdout.buffer
    try:
        tokenizer = _tokenizer(argv[1], argv[2])
    except Exception as exc:  # reported to the agent's process, which then counts in place
        why = f"{type(exc).__name__}: {exc}".replace("\n", " ")[:500]
        sink.write(f"error: {why}\n".encode("utf-8", "replace"))
        sink.flush()
        return 1
    count = tokenizer.count  # type: ignore[attr-defined]
    sink.write(b"ready\n")
    sink.flush()
    while True:
        header = _read(source, 4)
        if header is None:
            return 0
        (n,) = struct.unpack("<I", header)
        sizes = _read(source, 4 * n)
        if sizes is None:
            return 0
        counts = []
        for size in struct.unpack(f"<{n}I", sizes):
            text = _read(source, size)
            if text is None:
                return 0
            counts.append(count(text.decode("utf-8")))
        sink.write(struct.pack(f"<{n}I", *counts))
        sink.flush()


if __name__ == "__main__":
    raise SystemExit(main(sys.argv))
