"""The ``otel-errcompact`` command.

::

    otel-errcompact demo [--db PATH]
    otel-errcompact compact [FILE] [--json] [--explain] [--exit-code N] [--command CMD] [--kind KIND]
    otel-errcompact trajectories list [--db PATH] [--conversation ID] [--key KEY] [--limit N] [--json]
    otel-errcompact trajectories show ID [--db PATH] [--raw]
    otel-errcompact tonnage INPUT... [--json] [--plot PNG | --no-plot]
    otel-errcompact viewer [--db PATH] [--host 127.0.0.1] [--port 8001] [--trace-url TEMPLATE]

A problem the user can fix (a bad ``OTEL_ERRCOMPACT_*`` value, a ``--db`` that is not a trajectory
database) is one line on stderr naming the variable or path, and exit status 2; never a traceback.
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import json
import sqlite3
import sys
import warnings
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from otel_errcompact.compactor import compact_text
from otel_errcompact.exceptions import ConfigurationError
from otel_errcompact.parsers import PARSERS

__all__ = ["main"]


def _cmd_compact(args: argparse.Namespace) -> int:
    if args.file and args.file != "-":
        with open(args.file, "rb") as fh:
            raw = fh.read()
    else:
        raw = sys.stdin.buffer.read()
    digest = compact_text(raw, exit_code=args.exit_code, command=args.command, kind=args.kind)
    if args.json:
        data = digest.to_dict()
        if args.explain:
            data["explain"] = digest.explain()
        print(json.dumps(data, ensure_ascii=False, indent=2))
        return 0
    print(digest.line)
    if args.explain:
        print(digest.explain(), end="")
    return 0


def _cmd_demo(args: argparse.Namespace) -> int:
    from otel_errcompact.demo import run_demo

    return run_demo(sqlite_path=args.db)


def _store(args: argparse.Namespace) -> Any:
    from otel_errcompact.config import load_settings
    from otel_errcompact.sinks import TrajectoryStore

    origin = "--db"
    path = args.db
    if path is None:
        path, origin = load_settings().sqlite_path, "OTEL_ERRCOMPACT_SQLITE_PATH"
    if path is None:
        raise OSError("no trajectory database: pass --db or set OTEL_ERRCOMPACT_SQLITE_PATH")
    try:
        store = TrajectoryStore(path)
    except FileNotFoundError as exc:
        raise OSError(f"{origin} {str(path)!r}: {exc}") from None
    except (sqlite3.Error, RuntimeError) as exc:
        raise _StoreError(f"{origin} {str(path)!r}: not a readable trajectory database ({exc})") from None
    try:
        store.list(limit=1)  # one row, newest first: another SQLite file (no trajectory table) fails here
    except sqlite3.Error as exc:
        store.close()
        raise _StoreError(f"{origin} {str(path)!r}: not a readable trajectory database ({exc})") from None
    return store


class _StoreError(Exception):
    """A trajectory database that cannot be read; the message names the path."""


def _cmd_list(args: argparse.Namespace) -> int:
    with _store(args) as store:
        rows = store.list(limit=args.limit, conversation=args.conversation, key=args.key)
        if args.json:
            print(json.dumps([dataclasses.asdict(r) for r in rows], default=str, indent=2))
            return 0
        if not rows:
            total = store.count()
            print(f"no matching trajectory records ({total} in {store.path})" if total
                  else f"no trajectory records in {store.path}")
            return 0
        print(f"{'record':<12} {'recorded (UTC)':<19} {'trace id':<32} {'tool':<14} {'×':>3} {'esc':<3} digest")
        for r in rows:
            when = r.recorded_at.strftime("%Y-%m-%d %H:%M:%S")
            print(f"{r.record_id[:12]:<12} {when:<19} {r.trace_id or '-':<32} {(r.tool_name or '-')[:14]:<14} "
                  f"{r.count or 1:>3} {'yes' if r.escalated else '':<3} {r.digest_line or '(not compacted)'}")
        print(f"{len(rows)} of {store.count()} records in {store.path}; "
              "`otel-errcompact trajectories show ID` prints one in full")
    return 0


def _cmd_show(args: argparse.Namespace) -> int:
    from otel_errcompact.sinks import AmbiguousRecordId
    from otel_errcompact.trajectory import lossless_json

    with _store(args) as store:
        try:
            record = store.get(args.record_id)
        except (AmbiguousRecordId, ValueError) as exc:  # ValueError: a record this release cannot read
            print(f"otel-errcompact: {exc}", file=sys.stderr)
            return 2
        if record is None:
            print(f"otel-errcompact: no record {args.record_id!r} in {store.path}", file=sys.stderr)
            return 1
        if args.raw:
            _write_raw(record.raw_error)
            return 0
        # The lone surrogates of an undecodable byte as JSON escapes (model_dump_json refuses them).
        print(lossless_json(record.model_dump(warnings=False), indent=2))
    return 0


def _positive(text: str) -> int:
    """An argument that is an integer ≥ 1 (argparse turns the ValueError into a usage error)."""
    value = int(text)
    if value < 1:
        raise argparse.ArgumentTypeError(f"expected an integer ≥ 1, got {text}")
    return value


def _write_raw(text: str) -> None:
    """``text`` as the UTF-8 bytes it was (a lone surrogate back to the byte it stood for), whatever the
    terminal's locale: ``--raw`` is the error byte for byte."""
    try:
        data = text.encode("utf-8", "surrogateescape")
    except UnicodeEncodeError:  # a surrogate no decoding made: shown escaped
        data = text.encode("utf-8", "backslashreplace")
    buffer = getattr(sys.stdout, "buffer", None)
    if buffer is None:  # a text-only stream (an embedding host's)
        sys.stdout.write(data.decode("utf-8", "replace"))
        return
    sys.stdout.flush()
    buffer.write(data)
    buffer.flush()


def _cmd_tonnage(args: argparse.Namespace) -> int:
    from otel_errcompact.ops import tonnage

    try:
        result = tonnage.report([tonnage.load(path) for path in args.inputs])
    except ValueError as exc:
        print(f"otel-errcompact: {exc}", file=sys.stderr)
        return 2
    if args.json:
        print(json.dumps(result.to_dict(), ensure_ascii=False, indent=2))
    else:
        sys.stdout.write(result.render())
    if not args.no_plot and result.classes:
        png = tonnage.plot(result, args.plot)
        print(f"plot: {png}", file=sys.stderr if args.json else sys.stdout)
    return 0


def _cmd_viewer(args: argparse.Namespace) -> int:
    from otel_errcompact.ops import viewer

    # Opened as list and show open it, then closed: Datasette serves any file, and would start on one that is
    # not a trajectory store (or one of a layout it cannot read) with a traceback, or with every page broken.
    with _store(args) as store:
        path = store.path
    return viewer.serve(path, host=args.host, port=args.port, trace_url=args.trace_url)


def build_parser() -> argparse.ArgumentParser:
    """The argument parser (exposed for documentation and tests)."""
    from otel_errcompact import __version__

    parser = argparse.ArgumentParser(
        prog="otel-errcompact",
        description="Compact raw errors into one-line digests for LLM agents.",
    )
    parser.add_argument("--version", action="version", version=f"%(prog)s {__version__}")
    sub = parser.add_subparsers(dest="command_name", required=True, metavar="COMMAND")

    compact = sub.add_parser("compact", help="print the digest of a raw error read from FILE or stdin")
    compact.add_argument("file", nargs="?", help="file with the raw error (default: stdin)")
    compact.add_argument("--json", action="store_true", help="print every field as JSON")
    compact.add_argument("--explain", action="store_true", help="say what the dedup key was built from")
    compact.add_argument("--exit-code", type=int, default=None, help="exit code of the failed process")
    compact.add_argument("--command", default=None, help="the command that failed")
    compact.add_argument(
        "--kind", default=None, choices=[kind for kind, _ in PARSERS], help="the format, when known"
    )
    compact.set_defaults(func=_cmd_compact)

    demo = sub.add_parser(
        "demo",
        help="run a scripted agent whose tools really fail (nothing to set up: a loopback HTTP server on "
        "127.0.0.1 stands in for the model API)",
    )
    demo.add_argument(
        "--db", type=Path, default=None,
        help="trajectory SQLite file (default: OTEL_ERRCOMPACT_SQLITE_PATH if set, else a new temporary one)",
    )
    demo.set_defaults(func=_cmd_demo)

    traj = sub.add_parser("trajectories", help="read the trajectory store (the full raw errors)")
    traj_sub = traj.add_subparsers(dest="trajectories_command", required=True, metavar="ACTION")
    listing = traj_sub.add_parser("list", help="the newest records, one line each")
    listing.add_argument("--db", type=Path, default=None, help="SQLite file (default: settings)")
    listing.add_argument("--conversation", default=None, help="only this conversation or scope")
    listing.add_argument("--key", default=None, help="only this dedup key (or key prefix)")
    listing.add_argument("--limit", type=_positive, default=20, help="how many (default 20)")
    listing.add_argument("--json", action="store_true", help="print JSON")
    listing.set_defaults(func=_cmd_list)
    show = traj_sub.add_parser("show", help="one record in full, raw error included")
    show.add_argument("record_id", metavar="ID", help="record id or a unique prefix of it")
    show.add_argument("--db", type=Path, default=None, help="SQLite file (default: settings)")
    show.add_argument("--raw", action="store_true", help="print only the raw error, byte for byte")
    show.set_defaults(func=_cmd_show)

    ton = sub.add_parser(
        "tonnage", help="how much of the context is error text, and what compaction would save"
    )
    ton.add_argument(
        "inputs", nargs="+", type=Path, metavar="INPUT",
        help="trajectory store (SQLite), OTLP JSON trace file, or OpenAI/Anthropic transcript (JSON/JSONL)",
    )
    ton.add_argument("--json", action="store_true", help="print the report as JSON")
    ton.add_argument("--plot", type=Path, default=Path("errcompact-tonnage.png"), help="PNG to write")
    ton.add_argument("--no-plot", action="store_true", help="do not write the PNG")
    ton.set_defaults(func=_cmd_tonnage)

    view = sub.add_parser("viewer", help="browse the trajectory store in a local, read-only web viewer")
    view.add_argument("--db", type=Path, default=None, help="SQLite file (default: settings)")
    view.add_argument("--host", default="127.0.0.1", help="address to bind (default 127.0.0.1)")
    view.add_argument("--port", type=int, default=8001, help="port (default 8001)")
    view.add_argument(
        "--trace-url", default=None,
        help="link to a trace, with {trace_id} (default: OTEL_ERRCOMPACT_TRACE_URL, else Jaeger on localhost)",
    )
    view.set_defaults(func=_cmd_viewer)
    return parser


def _one_line_warning(message: Warning | str, category: type[Warning], filename: str, lineno: int,
                      file: Any = None, line: str | None = None) -> None:
    # A command-line user needs the message, not the library line that issued it.
    text = str(message)
    print(text if text.startswith("otel-errcompact") else f"otel-errcompact: {text}", file=sys.stderr)


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the console script."""
    parser = build_parser()
    args = parser.parse_args(argv)
    warnings.showwarning = _one_line_warning
    for stream in (sys.stdout, sys.stderr):  # a digest or a record under an ASCII locale: escaped, not a crash
        reconfigure = getattr(stream, "reconfigure", None)
        if callable(reconfigure):
            with contextlib.suppress(ValueError, OSError):
                reconfigure(errors="backslashreplace")
    try:
        return int(args.func(args))
    except BrokenPipeError:  # `otel-errcompact ... | head` is normal use
        return 0
    except (OSError, ConfigurationError, _StoreError) as exc:
        print(f"otel-errcompact: {exc}", file=sys.stderr)
        return 2
    except sqlite3.Error as exc:  # a SQLite file without the trajectory table, a corrupt page, ...
        where = getattr(args, "db", None)
        print(f"otel-errcompact: {'--db ' + repr(str(where)) + ': ' if where else ''}"
              f"not a readable trajectory database ({exc})", file=sys.stderr)
        return 2


if __name__ == "__main__":
    raise SystemExit(main())
