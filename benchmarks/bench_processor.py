"""Cost of the span processor on the agent's thread.

    python benchmarks/bench_processor.py [--spans 20000] [--rounds 7] [--json]

Two real SDK pipelines in the same run: a TracerProvider with a BatchSpanProcessor and an exporter that
discards, with and without :class:`ErrorCompactionProcessor` added. Rounds alternate between the two so
machine noise hits both alike; the table gives the median µs per span and the ratio, for spans that are
not tool spans, for successful tool spans, and for failed tool spans (which run the whole pipeline:
trajectory record queued for SQLite, compaction, history, annotation).
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import time
from collections.abc import Callable, Sequence
from pathlib import Path

from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor, SpanExporter, SpanExportResult
from opentelemetry.trace import Status, StatusCode, Tracer

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from benchmarks._machine import describe  # noqa: E402
from otel_errcompact.history import ErrorHistory, Thresholds  # noqa: E402
from otel_errcompact.pipeline import ErrorPipeline  # noqa: E402
from otel_errcompact.processor import ErrorCompactionProcessor  # noqa: E402
from otel_errcompact.sinks import SQLiteSink, TrajectoryWriter  # noqa: E402


class _Discard(SpanExporter):
    def export(self, spans: Sequence[ReadableSpan]) -> SpanExportResult:
        return SpanExportResult.SUCCESS

    def shutdown(self) -> None:
        return None


def _real_exception(i: int) -> BaseException:
    """A real KeyError with a real traceback; the variable part (an order number) makes every raw error
    text distinct, so compaction runs in full each time while dedup still sees one class."""
    orders: dict[str, str] = {}
    try:
        orders[f"order {i}"]
    except KeyError as exc:
        return exc
    raise AssertionError("unreachable")


def _plain(tracer: Tracer, n: int) -> None:
    # As in an agent's trace: one root span per ten, the rest its children (n spans in all).
    for _ in range(max(1, n // 10)):
        with tracer.start_as_current_span("invoke_agent", attributes={"gen_ai.operation.name": "invoke_agent"}):
            for _ in range(9):
                with tracer.start_as_current_span("chat gpt-4o", attributes={"gen_ai.operation.name": "chat"}):
                    pass


def _tool_ok(tracer: Tracer, n: int) -> None:
    attrs = {"gen_ai.operation.name": "execute_tool", "gen_ai.tool.name": "lookup"}
    for _ in range(n):
        with tracer.start_as_current_span("execute_tool lookup", attributes=attrs):
            pass


def _tool_failed(tracer: Tracer, n: int) -> None:
    attrs = {"gen_ai.operation.name": "execute_tool", "gen_ai.tool.name": "lookup"}
    for i in range(n):
        exc = _real_exception(i)
        with tracer.start_as_current_span(
            "execute_tool lookup",
            attributes={**attrs, "gen_ai.conversation.id": f"conv-{i % 50}"},
            record_exception=False,
            set_status_on_exception=False,
        ) as span:
            span.record_exception(exc)
            span.set_status(Status(StatusCode.ERROR, f"KeyError: {exc}"))
            span.set_attribute("error.type", "KeyError")


def _time_per_span(work: Callable[[Tracer, int], None], tracer: Tracer, n: int) -> float:
    start = time.perf_counter_ns()
    work(tracer, n)
    return (time.perf_counter_ns() - start) / n / 1000


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--spans", type=int, default=20_000, help="spans per round (default 20000)")
    parser.add_argument("--rounds", type=int, default=7, help="alternating rounds (default 7)")
    parser.add_argument("--json", action="store_true", help="print JSON instead of a table")
    args = parser.parse_args(argv)

    with tempfile.TemporaryDirectory() as tmp:
        bare = TracerProvider()
        bare.add_span_processor(BatchSpanProcessor(_Discard(), max_queue_size=1 << 20))
        with_ec = TracerProvider()
        with_ec.add_span_processor(BatchSpanProcessor(_Discard(), max_queue_size=1 << 20))
        writer = TrajectoryWriter([SQLiteSink(Path(tmp) / "bench.sqlite3")])
        # Thresholds high enough that the failed-span rows measure the steady path, not escalation.
        history = ErrorHistory(Thresholds(consecutive=10**9, budget=None))
        with_ec.add_span_processor(ErrorCompactionProcessor(ErrorPipeline(history, writer)))
        tracers = {"bare": bare.get_tracer("bench"), "errcompact": with_ec.get_tracer("bench")}

        results: dict[str, dict[str, float]] = {}
        # Failed spans run a tenth as many per round: the trajectory writer persists a few thousand
        # records a second, and a flood beyond its queue would measure the drop path instead.
        rows = (("non-tool span", _plain, args.spans), ("tool span, ok", _tool_ok, args.spans),
                ("tool span, failed", _tool_failed, max(1, args.spans // 10)))
        for label, work, count in rows:
            samples: dict[str, list[float]] = {"bare": [], "errcompact": []}
            for tracer in tracers.values():  # warm-up
                _time_per_span(work, tracer, min(500, count))
            for _ in range(args.rounds):
                for name, tracer in tracers.items():
                    samples[name].append(_time_per_span(work, tracer, count))
            if label == "tool span, failed":
                writer.force_flush(120)  # leave no backlog for the next row
            bare_us = statistics.median(samples["bare"])
            ec_us = statistics.median(samples["errcompact"])
            results[label] = {"bare_us": bare_us, "errcompact_us": ec_us, "ratio": ec_us / bare_us,
                              "added_us": ec_us - bare_us}
        bare.shutdown()
        with_ec.shutdown()
        flush_start = time.perf_counter()
        writer.shutdown(120)
        drain_s = time.perf_counter() - flush_start

    if args.json:
        print(json.dumps({"machine": describe(), "spans": args.spans, "rounds": args.rounds,
                          "results": results, "writer_drain_s": drain_s}, indent=2))
        return 0
    print(f"machine: {describe()}; {args.spans} spans × {args.rounds} rounds, median per span")
    print(f"{'span kind':<20} {'bare SDK µs':>12} {'+errcompact µs':>15} {'ratio':>7} {'added µs':>9}")
    for label, row in results.items():
        print(f"{label:<20} {row['bare_us']:>12.2f} {row['errcompact_us']:>15.2f} {row['ratio']:>7.2f} "
              f"{row['added_us']:>9.2f}")
    print(f"trajectory writer drained the remaining queue in {drain_s:.2f} s at shutdown")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
