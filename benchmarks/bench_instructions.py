"""Instructions per span, counted by callgrind: the plugin's cost in a unit the machine's speed does not move.

Run from the repository root (needs ``valgrind``; ``apt-get install valgrind``)::

    python benchmarks/bench_instructions.py [--spans 400] [--json] [--kind root --kind "tool ok" ...]

``bench_processor.py`` times spans on the wall clock, and on this shared machine the clock's speed moves
between runs (a bare root span took 14.8 µs on one day and 29.6 µs on another, every row moving with
it). An instruction count does not move with it: this script runs the spans of ``bench_processor.py``
under ``valgrind --tool=callgrind``, with the same three sides (``bare``, the SDK alone; ``idle``, a
second span processor that does nothing; ``plugin``, ``otel_errcompact.init()`` with its defaults: the
SQLite store and its spool, a metric reader so token counting runs), each in a child process of its own.

Each kind of span runs ``--spans`` times inside one ``functools.reduce`` call, after a warm-up of the
same kind, and callgrind writes the counts of the thread that calls it when that call starts and when
it ends (``--dump-before``/``--dump-after``, ``--separate-threads``): the instructions the agent's
thread executes per span, as the wall-clock table times it. The plugin's background threads (digests,
writer, metrics) are not in them: callgrind's dumps at those points hold the dumping thread's counts
only; ``bench_processor.py`` gives their CPU time per span.

Callgrind runs one thread at a time, so the counts say how much work the agent's thread does, not how
long it waits for the GIL meanwhile; the wall-clock benchmarks say that. The cyclic garbage collector runs
as usual, after a full collection before each kind's reduce: without it, a full collection that fell in
one side's reduce (the plugin's side holds more objects) counted there alone.
With ``--collector off`` no collection runs but those full ones: which thread's allocation sets off a young
collection, and so which thread's count holds it, moves with the threads' timing under callgrind, and a side's
count with it by about 1 k per span between runs; off, it moves less but still moves: three runs of one version
read a chat span's added count at +5.07 k, +5.46 k and +5.68 k, a successful tool span's at +6.65 k to +7.12 k
(2026-12-07), so a change worth less than about 0.6 k needs more runs of each version, alternated, to show.

The kinds: a chat span inside an agent trace, a root ``invoke_agent`` span, a successful tool span, a
failed tool span recording a real, distinct 43-45-line traceback (``tests/deeperrors.py``), and a failed
tool span whose error is a real one-line message set as its status; failed spans ten to a
conversation, as in ``bench_processor.py``.
"""

from __future__ import annotations

import argparse
import functools
import gc
import json
import re
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from benchmarks._machine import describe

KINDS = ("chat", "root", "tool ok", "tool failed: traceback", "tool failed: one-line error")
SIDES = ("bare", "idle", "plugin")
_WARM_UP = 200
_PART = re.compile(r"\.(\d+)-01$")  # a numbered part of thread 1


def _child(side: str, spans: int, scratch: Path, kinds: Sequence[str] = KINDS, *, collector: bool = True) -> None:
    """The spans, run under callgrind: each kind in one ``functools.reduce`` call (the dump points)."""
    if not collector:
        gc.disable()  # before anything is imported: no collection runs but the explicit ones below
    from opentelemetry import trace
    from opentelemetry.sdk.metrics import MeterProvider
    from opentelemetry.sdk.metrics.export import InMemoryMetricReader
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import BatchSpanProcessor
    from opentelemetry.trace import Status, StatusCode

    from benchmarks.bench_processor import _AGENT, _CHAT, _CONVERSATION_SIZE, _TOOL, _Discard, _Errors, _Idle
    from tests.deeperrors import deep_app

    provider = TracerProvider()
    provider.add_span_processor(BatchSpanProcessor(_Discard(), max_queue_size=1 << 16))
    ec = None
    if side == "idle":
        provider.add_span_processor(_Idle())
    elif side == "plugin":
        import otel_errcompact

        meters = MeterProvider(metric_readers=[InMemoryMetricReader()])
        ec = otel_errcompact.init(
            "bench-instructions", tracer_provider=provider, meter_provider=meters,
            sqlite_path=scratch / "trajectories.sqlite3",
        )
    tracer = provider.get_tracer("bench")
    errors = _Errors(deep_app(scratch), scratch)
    orders = iter(range(10**9))

    def kind_steps(kind: str, n: int) -> tuple[Callable[[None, int], None], Callable[[], None]]:
        """``(step, close)``: ``step(_, i)`` makes span ``i`` of ``n``; the inputs are made here, first."""
        first = next(orders) * 10_000
        roots: list[Any] = []
        if kind in ("chat", "tool ok"):
            roots = [tracer.start_span("invoke_agent support", attributes=_AGENT)]
        elif kind.startswith("tool failed"):
            roots = [
                tracer.start_span(
                    "invoke_agent support", attributes={**_AGENT, "gen_ai.conversation.id": f"conv-{first + k}"}
                )
                for k in range(0, n, _CONVERSATION_SIZE)
            ]
        contexts = [trace.set_span_in_context(root) for root in roots]

        def close() -> None:
            for root in roots:
                root.end()

        if kind == "chat":
            def step(_: None, i: int) -> None:
                with tracer.start_as_current_span("chat gpt-4o", context=contexts[0], attributes=_CHAT):
                    pass
        elif kind == "root":
            def step(_: None, i: int) -> None:
                with tracer.start_as_current_span(
                    "invoke_agent support", attributes={**_AGENT, "gen_ai.conversation.id": f"conv-{first + i}"}
                ):
                    pass
        elif kind == "tool ok":
            def step(_: None, i: int) -> None:
                with tracer.start_as_current_span("execute_tool lookup_order", context=contexts[0], attributes=_TOOL):
                    pass
        else:
            if kind == "tool failed: traceback":
                excs = errors.exceptions(first, n)

                def fail(span: Any, i: int) -> None:
                    exc = excs[i]
                    span.record_exception(exc)
                    span.set_status(Status(StatusCode.ERROR, f"{type(exc).__name__}: {exc}"))
                    span.set_attribute("error.type", type(exc).__name__)
            else:
                lines = errors.one_liners(first, n)

                def fail(span: Any, i: int) -> None:
                    span.set_status(Status(StatusCode.ERROR, lines[i]))
                    span.set_attribute("error.type", "FileNotFoundError")

            def step(_: None, i: int) -> None:
                with tracer.start_as_current_span(
                    "execute_tool lookup_order", context=contexts[i // _CONVERSATION_SIZE], attributes=_TOOL,
                    record_exception=False, set_status_on_exception=False,
                ) as span:
                    fail(span, i)
        return step, close

    def settle() -> None:
        if ec is not None:
            ec.flush()
        provider.force_flush()

    for kind in kinds:
        step, close = kind_steps(kind, _WARM_UP)
        for i in range(_WARM_UP):  # a plain loop: only the measured calls go through functools.reduce
            step(None, i)
        close()
        settle()
        step, close = kind_steps(kind, spans)
        gc.collect()  # every side starts the kind with no collection due: one full one would weigh on it alone
        functools.reduce(step, range(spans), None)  # callgrind dumps its counts before and after this call
        close()
        settle()
    if ec is not None:
        ec.shutdown()
    provider.shutdown()


def _totals(path: Path) -> int:
    for line in path.read_text(errors="replace").splitlines():
        if line.startswith(("summary:", "totals:")):
            return int(line.split()[1])
    return 0


def parts_per_kind(out_dir: Path, pid: int, kinds: Sequence[str]) -> dict[str, int]:
    """``kind -> instructions`` of the thread that ran the spans, from callgrind's per-part files.

    Part 1 runs from the start to the first reduce. Then each kind has two: its reduce (dumped when it
    starts and when it ends), and what follows until the next kind's reduce (the flush, and the next
    kind's warm-up and inputs); the last part, written at exit, is not numbered. Thread 1 is the main
    thread, which runs the spans.
    """
    counts: dict[int, int] = {}
    for path in out_dir.glob(f"callgrind.out.{pid}.*-01"):
        match = _PART.search(path.name)
        if match:
            counts[int(match.group(1))] = _totals(path)
    expected = 2 * len(kinds)
    if sorted(counts) != list(range(1, expected + 1)):
        raise RuntimeError(f"callgrind wrote parts {sorted(counts)}, not 1-{expected}: was reduce called elsewhere?")
    return {kind: counts[2 + 2 * index] for index, kind in enumerate(kinds)}


def run_side(
    side: str, spans: int, scratch: Path, kinds: Sequence[str] = KINDS, *, collector: bool = True
) -> dict[str, int]:
    """Run one side under callgrind; its counts per kind."""
    (scratch / side).mkdir()
    child = [str(Path(__file__).resolve()), "--child", side, "--spans", str(spans), "--scratch", str(scratch / side)]
    child += [f"--kind={kind}" for kind in kinds]
    if not collector:
        child.append("--collector=off")
    return count_kinds(child, scratch / f"callgrind-{side}", kinds)


def count_kinds(python_args: Sequence[str], out_dir: Path, kinds: Sequence[str]) -> dict[str, int]:
    """Run ``python python_args...`` under callgrind, dumping at each ``functools.reduce`` call, and read
    the instructions of each kind's reduce (see :func:`parts_per_kind`)."""
    out_dir.mkdir()
    command = [
        "valgrind", "--tool=callgrind", "--separate-threads=yes",
        "--dump-before=functools_reduce", "--dump-after=functools_reduce",
        f"--callgrind-out-file={out_dir}/callgrind.out.%p", sys.executable, *python_args,
    ]
    done = subprocess.run(command, capture_output=True, text=True, check=False)
    if done.returncode != 0:
        raise RuntimeError(f"valgrind exited {done.returncode}:\n{done.stderr[-2000:]}")
    pids = {int(m.group(1)) for p in out_dir.iterdir() if (m := re.match(r"callgrind\.out\.(\d+)\.", p.name))}
    if len(pids) != 1:
        raise RuntimeError(f"callgrind wrote files for {len(pids)} processes")
    return parts_per_kind(out_dir, pids.pop(), kinds)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--spans", type=int, default=400, help="spans per kind and side (default 400)")
    parser.add_argument("--json", action="store_true", help="print the figures as JSON")
    parser.add_argument("--kind", action="append", choices=KINDS, dest="kinds",
                        help="count only this kind of span (repeat for several; default: every kind)")
    parser.add_argument(
        "--collector", choices=("on", "off"), default="on",
        help="off: the cyclic garbage collector disabled in every side (a full collection still runs before "
        "each kind). The counts then hold each side's own work without the collections, whose timing moves "
        "a side's count by about 1 k between runs: for comparing two versions of the code (default on)",
    )
    parser.add_argument("--child", choices=SIDES, help=argparse.SUPPRESS)
    parser.add_argument("--scratch", type=Path, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    kinds = tuple(kind for kind in KINDS if kind in args.kinds) if args.kinds else KINDS
    if args.child:
        _child(args.child, args.spans, args.scratch, kinds, collector=args.collector == "on")
        return 0
    if shutil.which("valgrind") is None:
        print("bench_instructions: valgrind is not installed (apt-get install valgrind)", file=sys.stderr)
        return 2
    with tempfile.TemporaryDirectory(prefix="bench-instructions-") as folder:
        scratch = Path(folder)
        collector = args.collector == "on"
        results = {side: run_side(side, args.spans, scratch, kinds, collector=collector) for side in SIDES}
    per_span = {side: {kind: count / args.spans for kind, count in kinds.items()} for side, kinds in results.items()}
    if args.json:
        print(json.dumps(
            {"machine": describe(), "spans": args.spans, "collector": args.collector, "per_span": per_span}, indent=2
        ))
        return 0
    off = "" if args.collector == "on" else ", the garbage collector off"
    print(f"machine: {describe()}; {args.spans} spans per kind and side, under callgrind{off}")
    print("instructions per span on the agent's thread (idle: a second span processor that does nothing)")
    header = ("bare", "idle", "plugin", "added")
    print(f"{'span kind':30s} " + " ".join(f"{h:>10s}" for h in header) + f" {'added %':>8s} {'idle %':>7s}")
    for kind in kinds:
        bare, idle, plugin = (per_span[side][kind] for side in SIDES)
        print(
            f"{kind:30s} {bare:10,.0f} {idle:10,.0f} {plugin:10,.0f} {plugin - bare:+10,.0f} "
            f"{100 * (plugin / bare - 1):+7.1f}% {100 * (idle / bare - 1):+6.1f}%"
        )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
