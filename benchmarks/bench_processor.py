"""Cost of otel-errcompact on the agent's thread, as a user runs it: the full ``init()`` pipeline.

    python benchmarks/bench_processor.py [--rounds 15] [--small-rounds 45] [--threads 4] [--json] [--profile]
                                         [--clock thread] [--shapes | --no-shapes] [--hooks]
                                         [--compact-in-place]

Two real SDK pipelines in one process, each a TracerProvider with a BatchSpanProcessor and an exporter
that discards. The plugin side is ``otel_errcompact.init()`` with its defaults on that provider: the
SQLite trajectory store on (in a scratch folder), metrics on with a real metric reader (so token counting
runs), default thresholds. Every span is timed on its own, from start to end, and rounds alternate
bare/plugin (the first side alternates too) so a shared machine's noise hits both alike. The table gives
the median and p99 per span kind, the plugin's added median as a percentage of bare, and the same read
round by round (the median of each round's difference of the two sides' block medians, with its
quartiles over the rounds: a machine whose speed drifts during the run moves a round's two sides alike,
where the pooled medians lean to the side that ran more spans in the fast minutes):

- a chat span inside an agent trace, and the root ``invoke_agent`` span;
- a successful tool span;

(these three cost a few percent of a span at most, so they get ``--small-rounds`` rounds: the noise of
a shared machine is of the same size as the difference measured; and a third provider runs them too,
with a second span processor that does nothing: what the SDK's calls into any processor cost, the floor
the plugin's figures are read against);
- a failed tool span with ``record_exception`` of a real, distinct exception whose traceback is 43-45
  lines (``tests/deeperrors.py`` runs a small four-module application until it fails), and a failed
  tool span whose error is a real one-line message (``open()`` of a missing file), set as the status;
- the SDK's own ``record_exception`` alone, for scale;
- the failed tool span with a traceback again, ``--pause-ms`` apart (20 ms by default, outside the timing,
  ``--paced-block`` spans per side per round), as an agent runs: between two tool calls it waits for its
  model, which takes far longer than that. In the rows above the spans follow each other at once, so all of
  the plugin's background work (digests, the writer, token counting) runs while the next spans are timed and
  competes with them for the GIL; here it has the time between calls, as it has in an agent;
- the chat, root and successful tool spans again, per framework, with the names, attributes and status
  that a real instrumentation records (``benchmarks/span_shapes.py``: the OpenAI Agents SDK and LangGraph,
  each run offline with a scripted model and a tool that reads a real SQLite row, traced by OpenInference):
  the hand-typed spans above carry two or three attributes, a recorded LLM span about thirty (the conversation
  so far, as JSON and flattened), so against those the plugin's share of a span is overstated. Each span is
  started with the attributes the instrumentation gave at start and gets the rest, then its status, before
  it ends, as recorded; the chat and tool spans are children of the framework's recorded root span, opened
  and ended outside the timing. These rows are timed after all the others, as the three small kinds are
  (``--small-rounds``, with the idle floor). The shapes are built first, by a child process, so the
  frameworks are never imported into the timed process. By default the rows are there when the frameworks
  are installed (``bash .ci/integrations-install.sh``) and left out with a note otherwise; ``--shapes``
  makes a failure to build them fatal, ``--no-shapes`` leaves them out.

After each plugin block the pipeline is flushed outside the timing, so one side's backlog never lands in
the other side's block. For the failed spans, the CPU time the plugin's background threads (the digest
thread, the trajectory writer, the metrics thread) spent on each block, flush included, is read from their
own thread clocks and reported per span: they hold the GIL for part of it, which the agent's threads then
wait for. The token-counting and compacting processes' CPU is reported beside them (Linux only): they
take no GIL.
Then ``--threads`` threads emit failed spans at once, bare and plugin alternating,
and the table gives failed spans per second (the store's drain after each run is reported apart), twice:
each span recording an exception made before the timing, and the tool raising inside each span, the
SDK's ``start_as_current_span`` recording it with its defaults, as an instrumented tool fails (raising
the 14-frame exception is then in the timing, on both sides, and no thread holds exceptions it is done with).
``--profile`` runs cProfile over the plugin's failed tool spans and prints where the time goes.
``--hooks`` then times, per failed span, the plugin's own code on the agent's thread: the span processor's
three hooks (``on_start``, ``_on_ending``, ``on_end``), timed in place, by the same clock, around each call
(``--rounds`` blocks, flushed between them as above). Its median against the added median of the table
splits the added cost in two: what the plugin's code does on the agent's thread, and how much slower the
rest of the span runs while the plugin's background threads work (they take the GIL, and the caches).
``--compact-in-place`` makes the failed spans' digests in the agent's process, as before the compacting
process (:mod:`otel_errcompact._compacting_process`) made them, to compare the two.
``--clock thread`` times each span by the agent thread's own CPU time instead of the wall clock: on a
shared machine it leaves out other processes and the time spent waiting for the GIL, so it shows what
the plugin itself costs on the thread (the wall clock shows what the agent waits).
"""

from __future__ import annotations

import argparse
import cProfile
import io
import itertools
import json
import os
import pstats
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from types import ModuleType
from typing import Any

from opentelemetry import trace
from opentelemetry.context import Context
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import InMemoryMetricReader
from opentelemetry.sdk.trace import ReadableSpan, Span, SpanProcessor, TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor, SpanExporter, SpanExportResult
from opentelemetry.trace import Status, StatusCode, Tracer

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from benchmarks._machine import describe  # noqa: E402
from benchmarks.span_shapes import FRAMEWORKS, SpanShape, shapes_in_child  # noqa: E402
from otel_errcompact import init  # noqa: E402
from otel_errcompact.api import ErrCompact  # noqa: E402
from otel_errcompact.fused import FusedSpanProcessor  # noqa: E402
from tests.deeperrors import deep_app, deep_exception  # noqa: E402

Timer = Callable[[Tracer, int, int], list[int]]
"""``(tracer, first order number, spans) -> per-span nanoseconds``."""

_AGENT = {"gen_ai.operation.name": "invoke_agent", "gen_ai.agent.name": "support"}
_CHAT = {"gen_ai.operation.name": "chat", "gen_ai.request.model": "gpt-4o"}
_TOOL = {"gen_ai.operation.name": "execute_tool", "gen_ai.tool.name": "lookup_order"}
_THREE_SIDES = list(itertools.permutations(("bare", "plugin", "idle")))
"""The orders the small spans' rounds run their three sides in, each in turn."""
_CONVERSATION_SIZE = 10  # failures per conversation: below the default budget, as in a working agent
_CLOCK: list[Callable[[], int]] = [time.perf_counter_ns]
"""What the span timers read: wall time, or with ``--clock thread`` the agent thread's own CPU time, which
leaves out time spent waiting for the GIL and for the machine's other processes."""


class _Discard(SpanExporter):
    def export(self, spans: Sequence[ReadableSpan]) -> SpanExportResult:
        return SpanExportResult.SUCCESS

    def shutdown(self) -> None:
        return None


class _Idle(SpanProcessor):
    """A span processor that does nothing: what any second processor on a provider costs a span (the
    SDK calls each processor's ``on_start``, ``_on_ending`` and ``on_end`` in turn), the floor the
    plugin's small-span figures are read against."""

    def on_start(self, span: Span, parent_context: Context | None = None) -> None:
        return None

    def _on_ending(self, span: Span) -> None:
        return None

    def on_end(self, span: ReadableSpan) -> None:
        return None


class _Errors:
    """Real exceptions and real one-line error texts, made before timing starts (one per order)."""

    def __init__(self, app: ModuleType, scratch: Path) -> None:
        self._app = app
        self._scratch = scratch

    def exceptions(self, first: int, n: int) -> list[BaseException]:
        return [deep_exception(self._app, order) for order in range(first, first + n)]

    def fail(self, order: int) -> object:
        """The application's call, which raises: for a tool that fails inside its span, in the timing."""
        return self._app.handle(order)

    def one_liners(self, first: int, n: int) -> list[str]:
        out = []
        for order in range(first, first + n):
            try:
                open(self._scratch / f"missing-report-{order}.csv", encoding="utf-8").close()
            except OSError as exc:
                out.append(str(exc))
        return out


def _chat(tracer: Tracer, first: int, n: int) -> list[int]:
    times = []
    clock = _CLOCK[0]
    for _ in range(max(1, n // 9)):
        with tracer.start_as_current_span("invoke_agent support", attributes=_AGENT):
            for _ in range(9):
                start = clock()
                with tracer.start_as_current_span("chat gpt-4o", attributes=_CHAT):
                    pass
                times.append(clock() - start)
    return times


def _root(tracer: Tracer, first: int, n: int) -> list[int]:
    times = []
    clock = _CLOCK[0]
    for order in range(first, first + n):
        start = clock()
        with tracer.start_as_current_span(
            "invoke_agent support", attributes={**_AGENT, "gen_ai.conversation.id": f"conv-{order}"}
        ):
            pass
        times.append(clock() - start)
    return times


def _tool_ok(tracer: Tracer, first: int, n: int) -> list[int]:
    times = []
    clock = _CLOCK[0]
    with tracer.start_as_current_span("invoke_agent support", attributes=_AGENT):
        for _ in range(n):
            start = clock()
            with tracer.start_as_current_span("execute_tool lookup_order", attributes=_TOOL):
                pass
            times.append(clock() - start)
    return times


def _ending(shape: SpanShape) -> Status | None:
    """The status the instrumentation set before the span ended; None when it set none."""
    return None if shape.status is StatusCode.UNSET else Status(shape.status)


def _end_as_recorded(span: trace.Span, shape: SpanShape, status: Status | None) -> None:
    """What the instrumentation did to the span after it started: the rest of its attributes, its status."""
    span.set_attributes(shape.end_attributes)
    if status is not None:
        span.set_status(status)


def _shaped_children(root: SpanShape, child: SpanShape, per_root: int | None) -> Timer:
    """Recorded child spans timed under recorded root spans, each root opened and finished outside the
    timing: :func:`_chat` (``per_root=9``: nine LLM spans per agent run) and :func:`_tool_ok` (``None``:
    every tool span under one root) with recorded spans."""
    child_status, root_status = _ending(child), _ending(root)

    def run(tracer: Tracer, first: int, n: int) -> list[int]:
        times = []
        clock = _CLOCK[0]
        size = per_root or max(1, n)
        for _ in range(max(1, n // size)):
            with tracer.start_as_current_span(root.name, attributes=root.start_attributes) as parent:
                for _ in range(size):
                    start = clock()
                    with tracer.start_as_current_span(child.name, attributes=child.start_attributes) as span:
                        _end_as_recorded(span, child, child_status)
                    times.append(clock() - start)
                _end_as_recorded(parent, root, root_status)
        return times

    return run


def _shaped_root(root: SpanShape) -> Timer:
    """:func:`_root` with a recorded root span. Its attributes are as recorded, the same for every span
    (where :func:`_root` gives each its own conversation id)."""
    status = _ending(root)

    def run(tracer: Tracer, first: int, n: int) -> list[int]:
        times = []
        clock = _CLOCK[0]
        for _ in range(n):
            start = clock()
            with tracer.start_as_current_span(root.name, attributes=root.start_attributes) as span:
                _end_as_recorded(span, root, status)
            times.append(clock() - start)
        return times

    return run


def _shaped_kinds(found: dict[str, list[SpanShape]]) -> list[tuple[str, Timer]]:
    """The rows of the recorded spans: chat, root and successful tool span, per framework."""
    rows: list[tuple[str, Timer]] = []
    for framework, spans in found.items():
        by_kind = {shape.kind: shape for shape in spans}
        root, llm, tool = by_kind["agent"], by_kind["llm"], by_kind["tool"]
        via = FRAMEWORKS[framework]
        rows += [
            (f"chat span, {via}", _shaped_children(root, llm, 9)),
            (f"root span, {via}", _shaped_root(root)),
            (f"tool span, ok, {via}", _shaped_children(root, tool, None)),
        ]
    return rows


def _load_shapes(wanted: bool | None) -> dict[str, list[SpanShape]]:
    """The recorded shapes: none with ``--no-shapes``; with ``--shapes`` a failure to build them ends the
    run; by default it leaves their rows out, with a note."""
    if wanted is False:
        return {}
    try:
        return shapes_in_child()
    except (RuntimeError, OSError, ValueError, subprocess.SubprocessError) as exc:
        if wanted:
            raise
        last = str(exc).strip().splitlines()[-1:] or [type(exc).__name__]
        print(f"note: rows of recorded span shapes left out: {last[0]}", file=sys.stderr)
        return {}


def _failed(errors: _Errors, *, one_line: bool, record_only: bool = False, pause_s: float = 0.0) -> Timer:
    """Failed tool spans, ten per conversation; ``pause_s`` apart (outside the timing) when given."""
    def run(tracer: Tracer, first: int, n: int) -> list[int]:
        excs = errors.exceptions(first, n) if not one_line else []
        lines = errors.one_liners(first, n) if one_line else []
        times = []
        clock = _CLOCK[0]
        for k in range(0, n, _CONVERSATION_SIZE):
            conv = {**_AGENT, "gen_ai.conversation.id": f"conv-{first + k}"}
            with tracer.start_as_current_span("invoke_agent support", attributes=conv):
                for j in range(k, min(n, k + _CONVERSATION_SIZE)):
                    start = clock()
                    with tracer.start_as_current_span(
                        "execute_tool lookup_order", attributes=_TOOL,
                        record_exception=False, set_status_on_exception=False,
                    ) as span:
                        if record_only:
                            span.record_exception(excs[j])
                            times.append(clock() - start)
                            continue
                        if one_line:
                            span.set_status(Status(StatusCode.ERROR, lines[j]))
                            span.set_attribute("error.type", "FileNotFoundError")
                        else:
                            exc = excs[j]
                            span.record_exception(exc)
                            span.set_status(Status(StatusCode.ERROR, f"{type(exc).__name__}: {exc}"))
                            span.set_attribute("error.type", type(exc).__name__)
                    times.append(clock() - start)
                    if pause_s:
                        time.sleep(pause_s)
        return times

    return run


_BACKGROUND = {
    "digests": "otel-errcompact-digests",
    "writer": "otel_errcompact.TrajectoryWriter",
    "tokens": "otel-errcompact-tokens",
}
"""The plugin's background threads whose CPU a failed span costs, by the names they run under (and the
token-counting and compacting processes, see :func:`_process_cpu_ns`)."""


def _background_cpu_ns() -> dict[str, int]:
    """CPU time used so far by each of the plugin's background threads (its own clock, POSIX only), so
    that what a failure costs them shows apart from the agent's thread: they take the GIL too."""
    found = {t.name: t for t in threading.enumerate()}
    out: dict[str, int] = {}
    for label, name in _BACKGROUND.items():
        thread = found.get(name)
        if thread is None or thread.ident is None or not hasattr(time, "pthread_getcpuclockid"):
            continue
        try:
            out[label] = time.clock_gettime_ns(time.pthread_getcpuclockid(thread.ident))
        except OSError:  # the thread ended meanwhile
            continue
    from otel_errcompact import _compacting_process, _counting_process

    counting = _process_cpu_ns(_counting_process.running_pids())
    if counting is not None:
        out["counting process"] = counting
    compacting = _compacting_process.shared().pid
    compacted = _process_cpu_ns([compacting] if compacting is not None else [])
    if compacted is not None:
        out["compacting process"] = compacted
    return out


def _process_cpu_ns(pids: list[int]) -> int | None:
    """CPU time used so far by the child processes ``pids`` (Linux ``/proc``), or None: the token-counting
    process counts the metrics' tokens and the compacting process makes the digests, each on a core of
    its own, without the GIL; they are reported beside the threads."""
    ticks = 0
    found = False
    for pid in pids:
        try:
            fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
        except (OSError, IndexError):
            continue
        ticks += int(fields[11]) + int(fields[12])  # utime, stime
        found = True
    return ticks * 1_000_000_000 // os.sysconf("SC_CLK_TCK") if found else None


def _stats(ns: list[int]) -> dict[str, float]:
    ordered = sorted(ns)
    return {
        "median_us": statistics.median(ordered) / 1000,
        "p99_us": ordered[min(len(ordered) - 1, int(len(ordered) * 0.99))] / 1000,
        "n": len(ordered),
    }


def _paired(per_round: dict[str, list[float]], side: str) -> dict[str, float]:
    """What ``side`` adds to bare, read round by round: each round's difference of the two sides' block
    medians (the sides of a round run one right after the other), then the median and quartiles of those
    differences over the rounds, in µs and as a share of the bare block median.

    Why, besides the pooled medians: this machine's speed can move by half within a run. The pooled
    medians then lean to whichever side happened to run more of its spans in the fast minutes; a round's
    two blocks ran within a second of each other, so their difference keeps little of the drift, and the
    quartiles say how far the rounds disagree."""
    diffs = sorted(p - b for b, p in zip(per_round["bare"], per_round[side], strict=True))
    shares = sorted((p - b) / b for b, p in zip(per_round["bare"], per_round[side], strict=True))
    if not diffs:
        return {}
    q1, _, q3 = statistics.quantiles(diffs, n=4) if len(diffs) > 1 else (diffs[0], 0.0, diffs[0])
    return {"median_us": statistics.median(diffs), "q1_us": q1, "q3_us": q3,
            "median_share": statistics.median(shares), "rounds": len(diffs)}


def _paired_text(paired: dict[str, float]) -> str:
    """A :func:`_paired` result as the table prints it."""
    if not paired:
        return "-"
    return (f"{paired['median_us']:+.2f}µs {100 * paired['median_share']:+.1f}% "
            f"({paired['q1_us']:+.2f} to {paired['q3_us']:+.2f})")


def _hook_times(ec: ErrCompact, timer: Timer, tracer: Tracer, first: int, blocks: int, block: int) -> dict[str, float]:
    """The span processor's own time per tool span under ``timer``: its ``on_start``, ``_on_ending`` and
    ``on_end``, each timed in place by the span clock, summed per span (see ``--hooks``)."""
    processor: Any = ec.processor
    # What the SDK calls: the processor's hooks, through the instance, or the fused entry that holds them
    # in the provider's list (see otel_errcompact.fused), whose on_end is the batch processor's.
    entries = getattr(getattr(tracer, "span_processor", None), "_span_processors", ())
    fused = next((e for e in entries if type(e) is FusedSpanProcessor and e.processor is processor), None)
    owner: Any = processor if fused is None else fused
    names = ("on_start", "_on_ending", "on_end") if fused is None else ("on_start", "_on_ending")
    originals = {name: owner.__dict__.get(name) for name in names}
    clock = _CLOCK[0]
    spent: dict[int, int] = {}

    def timed(name: str) -> Callable[..., None]:
        hook = getattr(owner, name)

        def run(span: Any, *args: Any, **kwargs: Any) -> None:
            start = clock()
            hook(span, *args, **kwargs)
            took = clock() - start
            if span.name.startswith("execute_tool"):  # the failed tool spans, not their agent's root span
                key = span.context.span_id  # on_end gets a read-only copy of the span: same ids
                spent[key] = spent.get(key, 0) + took

        return run

    for name in names:
        setattr(owner, name, timed(name))  # the SDK calls the hooks through the instance
    samples: list[int] = []
    try:
        for k in range(blocks):
            spent.clear()
            timer(tracer, first + k * block, block)
            ec.flush(120)
            samples += list(spent.values())
    finally:
        for name, original in originals.items():
            if original is None:
                delattr(owner, name)
            else:
                setattr(owner, name, original)
    return _stats(samples)


def _threaded(tracer: Tracer, errors: _Errors, first: int, threads: int, per_thread: int, *,
              raised: bool = False) -> float:
    """Failed spans per second with ``threads`` threads emitting at once.

    By default each span records an exception made before the timing, so raising it is left out and
    the threads hold all of their exceptions, with their frames, while they run. With ``raised`` the
    tool fails inside its span each time, as an instrumented tool does: the application raises, and the
    SDK's own ``start_as_current_span`` records the exception and sets the status on its way out (its
    defaults; no ``error.type``), and the exception is dropped once the call has failed.
    """
    barrier = threading.Barrier(threads + 1)

    def attributes(order: int) -> dict[str, str]:
        return {**_TOOL, "gen_ai.conversation.id": f"conv-{order // _CONVERSATION_SIZE}"}

    def emit(excs: list[BaseException], base: int) -> None:
        barrier.wait()
        for j, exc in enumerate(excs):
            with tracer.start_as_current_span(
                "execute_tool lookup_order", attributes=attributes(base + j),
                record_exception=False, set_status_on_exception=False,
            ) as span:
                span.record_exception(exc)
                span.set_status(Status(StatusCode.ERROR, f"{type(exc).__name__}: {exc}"))
                span.set_attribute("error.type", type(exc).__name__)

    def raise_in_span(base: int) -> None:
        barrier.wait()
        for j in range(per_thread):
            try:
                with tracer.start_as_current_span("execute_tool lookup_order", attributes=attributes(base + j)):
                    errors.fail(base + j)
            except Exception:  # the failure is the point: the span recorded it
                continue

    bases = [first + t * per_thread for t in range(threads)]
    pool = ([threading.Thread(target=raise_in_span, args=(base,)) for base in bases] if raised else
            [threading.Thread(target=emit, args=(errors.exceptions(base, per_thread), base)) for base in bases])
    for thread in pool:
        thread.start()
    barrier.wait()
    start = time.perf_counter()
    for thread in pool:
        thread.join()
    return threads * per_thread / (time.perf_counter() - start)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rounds", type=int, default=15, help="alternating rounds per span kind (default 15)")
    parser.add_argument("--small-rounds", type=int, default=45,
                        help="rounds for the chat, root and successful tool spans (default 45)")
    parser.add_argument("--block", type=int, default=400, help="spans per side per round (default 400)")
    parser.add_argument("--threads", type=int, default=4, help="threads for the throughput run (default 4)")
    parser.add_argument("--per-thread", type=int, default=500, help="failed spans per thread (default 500)")
    parser.add_argument("--pause-ms", type=float, default=20.0,
                        help="a row of failed tool spans this far apart, as an agent waits for its model "
                             "between tool calls (default 20; 0 leaves the row out)")
    parser.add_argument("--paced-block", type=int, default=100,
                        help="spans per side per round in that row (default 100)")
    parser.add_argument("--json", action="store_true", help="print JSON instead of a table")
    parser.add_argument("--profile", action="store_true", help="cProfile the plugin's failed tool spans")
    parser.add_argument("--hooks", action="store_true",
                        help="time the span processor's hooks in place, per failed span")
    parser.add_argument("--clock", choices=("wall", "thread"), default="wall",
                        help="time spans by wall clock (default) or by the agent thread's CPU time")
    parser.add_argument("--shapes", action=argparse.BooleanOptionalAction, default=None,
                        help="rows of spans shaped as real instrumentations record them (default: when the "
                             "frameworks are installed)")
    parser.add_argument("--compact-in-place", action="store_true",
                        help="make the digests in the agent's process, not the compacting process (to compare)")
    args = parser.parse_args(argv)
    _CLOCK[0] = time.thread_time_ns if args.clock == "thread" else time.perf_counter_ns
    for name in [n for n in os.environ if n.startswith(("OTEL_EXPORTER_OTLP", "OTEL_ERRCOMPACT_"))]:
        del os.environ[name]  # the defaults, not whatever the calling shell set
    found = _load_shapes(args.shapes)  # before the pipelines exist: the child's CPU is spent by then

    with tempfile.TemporaryDirectory() as tmp:
        scratch = Path(tmp)
        errors = _Errors(deep_app(scratch), scratch)
        bare = TracerProvider()
        bare.add_span_processor(BatchSpanProcessor(_Discard(), max_queue_size=1 << 16))
        plugin = TracerProvider()
        plugin.add_span_processor(BatchSpanProcessor(_Discard(), max_queue_size=1 << 16))
        reader = InMemoryMetricReader()
        meters = MeterProvider(metric_readers=[reader])
        ec: ErrCompact = init("bench", tracer_provider=plugin, meter_provider=meters,
                              sqlite_path=scratch / "trajectories.sqlite3")
        if args.compact_in_place:
            ec.pipeline.compacting = None
        idle = TracerProvider()
        idle.add_span_processor(BatchSpanProcessor(_Discard(), max_queue_size=1 << 16))
        idle.add_span_processor(_Idle())
        tracers = {"bare": bare.get_tracer("bench"), "plugin": plugin.get_tracer("bench"),
                   "idle": idle.get_tracer("bench")}
        kinds: list[tuple[str, Timer]] = [
            ("chat span in an agent trace", _chat),
            ("root invoke_agent span", _root),
            ("tool span, ok", _tool_ok),
            ("tool span, failed: 43-45 line traceback", _failed(errors, one_line=False)),
            ("tool span, failed: one-line error", _failed(errors, one_line=True)),
            ("record_exception alone (SDK)", _failed(errors, one_line=False, record_only=True)),
        ]
        paced = f"tool span, failed: 43-45 line traceback, {args.pause_ms:g} ms apart"
        if args.pause_ms > 0:
            kinds.append((paced, _failed(errors, one_line=False, pause_s=args.pause_ms / 1000)))
        shaped = _shaped_kinds(found)
        kinds += shaped
        blocks = {label: args.block for label, _ in kinds} | {paced: min(args.block, args.paced_block)}
        small = {label for label, _ in kinds[:3] + shaped}  # the spans without a failure
        order = 1_000_000  # order numbers never repeat: every failure is a distinct raw error
        for label, timer in kinds:  # warm-up: imports, caches, the store's first transaction
            if label == paced:
                continue  # the same code as the row without pauses
            for tracer in tracers.values():
                timer(tracer, order, 50)
                order += 50
        ec.flush(60)

        results: dict[str, dict[str, dict[str, float]]] = {}
        background: dict[str, dict[str, float]] = {}  # failed kinds: µs of background CPU per span
        for label, timer in kinds:
            samples: dict[str, list[int]] = {"bare": [], "plugin": [], "idle": []}
            per_round: dict[str, list[float]] = {"bare": [], "plugin": [], "idle": []}  # each block's median
            used: dict[str, int] = {}
            spans = 0
            for rnd in range(args.small_rounds if label in small else args.rounds):
                sides: tuple[str, ...] = ("bare", "plugin") if rnd % 2 == 0 else ("plugin", "bare")
                if label in small:  # and the floor: a provider with a second processor that does nothing
                    sides = _THREE_SIDES[rnd % len(_THREE_SIDES)]
                for side in sides:
                    before = _background_cpu_ns() if side == "plugin" else {}
                    block_ns = timer(tracers[side], order, blocks[label])
                    samples[side] += block_ns
                    per_round[side].append(statistics.median(block_ns) / 1000)
                    if side == "plugin":
                        ec.flush(120)
                        for name, ns in _background_cpu_ns().items():
                            if name in before:
                                used[name] = used.get(name, 0) + ns - before[name]
                        spans += blocks[label]
                order += blocks[label]  # both sides get the same errors in a round
            bare_s, plugin_s = _stats(samples["bare"]), _stats(samples["plugin"])
            results[label] = {"bare": bare_s, "plugin": plugin_s, "paired": _paired(per_round, "plugin")}
            if samples["idle"]:
                results[label]["idle"] = _stats(samples["idle"])
                results[label]["idle_paired"] = _paired(per_round, "idle")
            if "failed:" in label and spans:
                background[label] = {name: ns / spans / 1000 for name, ns in used.items()}

        throughput: dict[str, list[float]] = {"bare": [], "plugin": []}
        throughput_raised: dict[str, list[float]] = {"bare": [], "plugin": []}
        drains: list[float] = []
        for rnd in range(max(3, args.rounds // 3)):
            sides = ("bare", "plugin") if rnd % 2 == 0 else ("plugin", "bare")
            for rates, raised in ((throughput, False), (throughput_raised, True)):
                for side in sides:
                    rates[side].append(
                        _threaded(tracers[side], errors, order, args.threads, args.per_thread, raised=raised))
                    if side == "plugin":
                        start = time.perf_counter()
                        ec.flush(120)
                        drains.append(time.perf_counter() - start)
                order += args.threads * args.per_thread

        hooks: dict[str, dict[str, float]] = {}
        if args.hooks:
            for label, timer in kinds:
                if "failed:" in label:
                    hooks[label] = _hook_times(ec, timer, tracers["plugin"], order, args.rounds, blocks[label])
                    order += args.rounds * blocks[label]

        profile_text = ""
        if args.profile:
            profiler = cProfile.Profile()
            timer = _failed(errors, one_line=False)
            excs_first = order
            profiler.enable()
            timer(tracers["plugin"], excs_first, 2000)
            profiler.disable()
            out = io.StringIO()
            pstats.Stats(profiler, stream=out).sort_stats("tottime").print_stats(25)
            profile_text = out.getvalue()

        writer = ec.writer
        dropped = writer.dropped if writer is not None else 0
        ec.shutdown()
        bare.shutdown()
        idle.shutdown()
        plugin.shutdown()

    tp = {side: statistics.median(v) for side, v in throughput.items()}
    tp_raised = {side: statistics.median(v) for side, v in throughput_raised.items()}
    summary = {
        "machine": describe(),
        "rounds": args.rounds,
        "clock": args.clock,
        "small_rounds": args.small_rounds,
        "block": args.block,
        "pause_ms": args.pause_ms,
        "paced_block": min(args.block, args.paced_block),
        "spans": results,
        "span_shapes": {
            framework: [
                {"kind": s.kind, "name": s.name, "attributes": s.attribute_count(),
                 "at_start": len(s.start_attributes), "set_before_end": len(s.end_attributes), "root": s.root,
                 "status": s.status.name}
                for s in recorded
            ]
            for framework, recorded in found.items()
        },
        "background_cpu_us_per_failed_span": background,
        "threads": args.threads,
        "throughput_per_s": tp,
        "throughput_ratio": tp["plugin"] / tp["bare"],
        "throughput_raised_per_s": tp_raised,
        "throughput_raised_ratio": tp_raised["plugin"] / tp_raised["bare"],
        "writer_drain_s_median": statistics.median(drains),
        "records_dropped": dropped,
        "hooks_per_failed_span": hooks,
    }
    if args.json:
        print(json.dumps(summary, indent=2))
    else:
        print(f"machine: {describe()}; {args.rounds} rounds ({args.small_rounds} for the spans without a failure) "
              f"× {args.block} spans per side per kind, bare and plugin interleaved; {args.clock} clock")
        width = max(42, *(len(label) for label in results))
        print(f"{'span kind':<{width}} {'bare med':>9} {'plugin med':>11} {'added':>8} {'added %':>8} {'ratio':>6} "
              f"{'bare p99':>9} {'plugin p99':>11}   {'by round: added (quartiles)':>34}")
        for label, row in results.items():
            b, p = row["bare"], row["plugin"]
            added = p["median_us"] - b["median_us"]
            print(f"{label:<{width}} {b['median_us']:>7.2f}µs {p['median_us']:>9.2f}µs "
                  f"{added:>+6.2f}µs {100 * added / b['median_us']:>+7.1f}% {p['median_us'] / b['median_us']:>6.2f} "
                  f"{b['p99_us']:>7.1f}µs {p['p99_us']:>9.1f}µs   {_paired_text(row['paired'])}")
        for label, row in results.items():
            if "idle" in row:
                bare_us, idle_us = row["bare"]["median_us"], row["idle"]["median_us"]
                print(f"{label}: a second span processor that does nothing adds {idle_us - bare_us:+.2f} µs "
                      f"({100 * (idle_us - bare_us) / bare_us:+.1f} %; by round {_paired_text(row['idle_paired'])})")
        for framework, recorded in found.items():
            print(f"recorded spans, {FRAMEWORKS[framework]}: "
                  + ", ".join(f"{s.kind} {s.name!r} {s.attribute_count()} attributes "
                              f"({len(s.start_attributes)} at start)" for s in recorded))
        for label, cpu in background.items():
            print(f"background threads' CPU per span, {label.split(': ', 1)[1]}: "
                  + ", ".join(f"{name} {us:.1f} µs" for name, us in cpu.items()))
        print(f"{args.threads}-thread failed spans: bare {tp['bare']:.0f}/s, plugin {tp['plugin']:.0f}/s, "
              f"ratio {tp['plugin'] / tp['bare']:.2f}; the tool raising inside each span: bare "
              f"{tp_raised['bare']:.0f}/s, plugin {tp_raised['plugin']:.0f}/s, ratio "
              f"{tp_raised['plugin'] / tp_raised['bare']:.2f}; store drained each run's backlog in "
              f"{statistics.median(drains):.2f} s (median); records dropped: {dropped}")
        for label, share in hooks.items():
            added = results[label]["plugin"]["median_us"] - results[label]["bare"]["median_us"]
            print(f"the span processor's hooks per span, {label.split(': ', 1)[1]}: median "
                  f"{share['median_us']:.1f} µs (p99 {share['p99_us']:.1f}) of the {added:+.1f} µs added")
    if profile_text:
        print(profile_text)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
