"""How much of an agent's context compaction saves, and what it costs, on real errors.

Run: ``python benchmarks/bench_compaction.py [--reps N] [--json]``.

Per sample of the real-error corpus (:mod:`benchmarks.corpus`): tokens of the raw error against tokens of
its one-line digest, the reduction, the time of one ``compact_text`` call (median and p95 over ``--reps``
calls, ``time.perf_counter_ns``), and whether the token that names the cause survived.

Then a repeated-error session: ``--failures`` tool failures drawn with a fixed seed from 6 distinct real
errors, an agent retrying the same failing step a few times before moving on. Compared:

- *final context*: the raw errors an agent would have appended to its context (the sum of the raw
  errors) against the one ``[RECENT ERRORS]`` block that replaces them after the last failure;
- *re-sent blocks*: the pessimistic case where a fresh block is sent at every failed step and every one
  of them stays in the context (the sum of the blocks after each step), against the same raw sum;
- the cost per failure of compact + observe + render.

Token counts are real BPE counts (``o200k_base`` through ``bpe-openai``); when that vocabulary cannot be
loaded the script says the counts are estimates.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import random
import statistics
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

_ROOT = Path(__file__).resolve().parent.parent
if str(_ROOT) not in sys.path:
    sys.path.insert(0, str(_ROOT))

from benchmarks._machine import cpu_model  # noqa: E402
from benchmarks.corpus import Sample, build_corpus  # noqa: E402
from otel_errcompact.compactor import Compactor, compact_text  # noqa: E402
from otel_errcompact.history import ErrorHistory, Thresholds  # noqa: E402
from otel_errcompact.tokens import count_tokens, exact  # noqa: E402

ENCODING = "o200k_base"
SESSION_ERRORS = (
    "py_keyerror",
    "node_typeerror",
    "http_openai_429",
    "gcc_undeclared",
    "pytest_failure",
    "java_caused_by",
)


@dataclass(frozen=True)
class SampleResult:
    """One corpus sample, measured."""

    name: str
    format: str
    parsed_as: str
    raw_chars: int
    raw_tokens: int
    digest_tokens: int
    reduction_pct: float
    us_median: float
    us_p95: float
    us_repeat_median: float
    token: str
    survived: bool
    digest: str


def _percentile(values: list[float], pct: float) -> float:
    ordered = sorted(values)
    index = min(len(ordered) - 1, max(0, round(pct / 100.0 * (len(ordered) - 1))))
    return ordered[index]


def _fresh(text: str) -> str:
    """An equal string that is a new object: a real agent receives a new string for every failure, so
    its hash is not cached yet when the compactor's repeat cache looks it up."""
    return (text + " ")[:-1]


def _time_calls(sample: Sample, reps: int, compactor: Compactor) -> list[float]:
    """Microseconds per ``compact`` call, one entry per call (a few warm-up calls first)."""
    for _ in range(5):
        compactor.compact(sample.raw, exit_code=sample.exit_code, command=sample.command, kind=sample.kind)
    out: list[float] = []
    for _ in range(reps):
        raw = _fresh(sample.raw)
        t0 = time.perf_counter_ns()
        compactor.compact(raw, exit_code=sample.exit_code, command=sample.command, kind=sample.kind)
        out.append((time.perf_counter_ns() - t0) / 1000.0)
    return out


def measure_samples(
    samples: list[Sample], reps: int
) -> tuple[list[SampleResult], list[float], list[float]]:
    """Measure every sample; also return every single call time (cold, and exact repeats) for the
    overall distributions."""
    results: list[SampleResult] = []
    all_times: list[float] = []
    all_repeat: list[float] = []
    for s in samples:
        d = compact_text(s.raw, exit_code=s.exit_code, command=s.command, kind=s.kind)
        raw_tokens = count_tokens(s.raw, ENCODING)
        digest_tokens = count_tokens(d.line, ENCODING)
        # Cold: the repeat cache disabled, every call runs sanitise + parsers + redaction + key.
        times = _time_calls(s, reps, Compactor(digest_cache_size=0))
        repeat = _time_calls(s, reps, Compactor())
        all_times += times
        all_repeat += repeat
        results.append(
            SampleResult(
                name=s.name,
                format=s.format,
                parsed_as=d.format,
                raw_chars=len(s.raw),
                raw_tokens=raw_tokens,
                digest_tokens=digest_tokens,
                reduction_pct=100.0 * (1 - digest_tokens / raw_tokens) if raw_tokens else 0.0,
                us_median=statistics.median(times),
                us_p95=_percentile(times, 95),
                us_repeat_median=statistics.median(repeat),
                token=s.token,
                survived=s.token in d.line,
                digest=d.line,
            )
        )
    return results, all_times, all_repeat


def session_sequence(samples: list[Sample], failures: int, seed: int) -> list[Sample]:
    """A realistic failing session: the agent retries the same step (often failing the same way) a few
    times, then tries something else that fails differently. Fixed seed: the same sequence every run."""
    by_name = {s.name: s for s in samples}
    pool = [by_name[n] for n in SESSION_ERRORS if n in by_name]
    for s in samples:  # top up from the corpus when a toolchain was missing
        if len(pool) >= len(SESSION_ERRORS):
            break
        if s not in pool:
            pool.append(s)
    rng = random.Random(seed)
    seq = [rng.choice(pool)]
    while len(seq) < failures:
        seq.append(seq[-1] if rng.random() < 0.55 else rng.choice(pool))
    return seq


def measure_session(seq: list[Sample], runs: int) -> dict[str, Any]:
    """Token totals for one session and the cost per failure of compact + observe + render."""
    # Escalation is left out of the token comparison (a breach adds a sentence and stops the loop);
    # thresholds high enough that the whole session is observed.
    thresholds = Thresholds(consecutive=10_000, budget=None)
    history = ErrorHistory(thresholds)
    raw_each = [count_tokens(s.raw, ENCODING) for s in seq]
    block_each: list[int] = []
    block = ""
    for s in seq:
        d = compact_text(s.raw, exit_code=s.exit_code, command=s.command, kind=s.kind)
        history.observe("session", d)
        block = history.render("session")
        block_each.append(count_tokens(block, ENCODING))
    raw_sum = sum(raw_each)
    final_block = block_each[-1]
    blocks_sum = sum(block_each)
    # What the model reads over the session when every raw error stays in its context: at step i it
    # re-reads errors 1..i. With the block injected ephemerally it reads only the current block.
    raw_reread = sum(sum(raw_each[: i + 1]) for i in range(len(raw_each)))

    per_failure: list[float] = []
    for _ in range(runs):
        # A fresh compactor per replay: the first occurrence of each error is parsed cold, exact
        # repeats hit the compactor's repeat cache, as in a live session.
        compactor = Compactor()
        h = ErrorHistory(thresholds)
        for s in seq:
            raw = _fresh(s.raw)
            t0 = time.perf_counter_ns()
            d = compactor.compact(raw, exit_code=s.exit_code, command=s.command, kind=s.kind)
            h.observe("session", d)
            h.render("session")
            per_failure.append((time.perf_counter_ns() - t0) / 1000.0)
    return {
        "failures": len(seq),
        "distinct_errors": len({s.name for s in seq}),
        "distinct_classes": len({compact_text(s.raw, exit_code=s.exit_code, command=s.command).key
                                 for s in seq}),
        "raw_tokens_appended": raw_sum,
        "final_block_tokens": final_block,
        "final_reduction_pct": 100.0 * (1 - final_block / raw_sum),
        "resent_blocks_tokens": blocks_sum,
        "resent_reduction_pct": 100.0 * (1 - blocks_sum / raw_sum),
        "raw_tokens_reread": raw_reread,
        "reread_reduction_pct": 100.0 * (1 - blocks_sum / raw_reread),
        "us_per_failure_median": statistics.median(per_failure),
        "us_per_failure_p95": _percentile(per_failure, 95),
        "timed_failures": len(per_failure),
        "final_block": block,
        "sequence": [s.name for s in seq],
    }


def machine() -> dict[str, Any]:
    """nproc, CPU model, Python: the context a timing needs."""
    nproc = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    return {
        "nproc": nproc,
        "cpu": cpu_model(),
        "python": platform.python_version(),
        "platform": platform.platform(),
        "encoding": ENCODING,
        "exact_tokens": exact(ENCODING),
    }


def _table(results: list[SampleResult], all_times: list[float], all_repeat: list[float], reps: int) -> str:
    head = (
        f"{'sample':26} {'format':7} {'raw tok':>7} {'dig tok':>7} {'reduct':>7} "
        f"{'µs med':>7} {'µs p95':>7} {'µs rep':>7}  cause token kept"
    )
    rows = [head, "-" * len(head)]
    for r in results:
        rows.append(
            f"{r.name:26} {r.parsed_as:7} {r.raw_tokens:7d} {r.digest_tokens:7d} {r.reduction_pct:6.1f}% "
            f"{r.us_median:7.1f} {r.us_p95:7.1f} {r.us_repeat_median:7.1f}  "
            f"{'yes' if r.survived else 'NO'} ({r.token})"
        )
    raw_total = sum(r.raw_tokens for r in results)
    dig_total = sum(r.digest_tokens for r in results)
    rows.append("-" * len(head))
    rows.append(
        f"{'ALL (' + str(len(results)) + ' samples)':26} {'':7} {raw_total:7d} {dig_total:7d} "
        f"{100.0 * (1 - dig_total / raw_total):6.1f}% {statistics.median(all_times):7.1f} "
        f"{_percentile(all_times, 95):7.1f} {statistics.median(all_repeat):7.1f}  "
        f"{sum(r.survived for r in results)}/{len(results)} kept"
    )
    rows.append(
        f"median per-sample reduction {statistics.median(r.reduction_pct for r in results):.1f}%, "
        f"min {min(r.reduction_pct for r in results):.1f}%; timings over {reps} calls per sample\n"
        "µs med/p95: one compact call with the repeat cache off (sanitise, parsers, redaction, key); "
        "µs rep: median of an exact repeat (cache on, new string object each call)"
    )
    return "\n".join(rows)


def _session_text(s: dict[str, Any]) -> str:
    return "\n".join(
        [
            f"SESSION: {s['failures']} tool failures from {s['distinct_errors']} distinct real errors "
            f"({s['distinct_classes']} dedup classes), seed fixed",
            f"  raw errors appended to the context (sum of raw)      {s['raw_tokens_appended']:8d} tokens",
            f"  final [RECENT ERRORS] block replacing them            {s['final_block_tokens']:8d} tokens"
            f"   reduction {s['final_reduction_pct']:.1f}%",
            f"  a block re-sent at every step, all kept (sum of {s['failures']}) "
            f"{s['resent_blocks_tokens']:8d} tokens   reduction vs sum of raw "
            f"{s['resent_reduction_pct']:.1f}%",
            f"  raw history re-read at every step (Σ prefix sums)    {s['raw_tokens_reread']:8d} tokens"
            f"   vs re-sent blocks: reduction {s['reread_reduction_pct']:.1f}%",
            f"  compact + observe + render per failure: median {s['us_per_failure_median']:.1f} µs, "
            f"p95 {s['us_per_failure_p95']:.1f} µs (over {s['timed_failures']} failures)",
        ]
    )


def main(argv: list[str] | None = None) -> int:
    """Build the corpus, measure, print the table (or JSON)."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--reps", type=int, default=300, help="compact_text calls per sample (>= 200)")
    parser.add_argument("--failures", type=int, default=40, help="failures in the session")
    parser.add_argument(
        "--session-runs", type=int, default=50, help="times the session is replayed for timing"
    )
    parser.add_argument("--seed", type=int, default=20240611)
    parser.add_argument("--json", action="store_true", help="print one JSON document instead of the table")
    args = parser.parse_args(argv)
    if args.reps < 200:
        parser.error("--reps must be at least 200")

    with tempfile.TemporaryDirectory(prefix="errcompact-bench-") as tmp:
        t0 = time.perf_counter()
        samples = build_corpus(Path(tmp))
        corpus_s = time.perf_counter() - t0
    results, all_times, all_repeat = measure_samples(samples, args.reps)
    session = measure_session(session_sequence(samples, args.failures, args.seed), args.session_runs)
    info = machine()

    if args.json:
        raw_total = sum(r.raw_tokens for r in results)
        dig_total = sum(r.digest_tokens for r in results)
        doc = {
            "machine": info,
            "reps": args.reps,
            "corpus_build_seconds": round(corpus_s, 1),
            "samples": [r.__dict__ for r in results],
            "overall": {
                "samples": len(results),
                "raw_tokens": raw_total,
                "digest_tokens": dig_total,
                "reduction_pct": 100.0 * (1 - dig_total / raw_total),
                "median_reduction_pct": statistics.median(r.reduction_pct for r in results),
                "us_median": statistics.median(all_times),
                "us_p95": _percentile(all_times, 95),
                "us_repeat_median": statistics.median(all_repeat),
                "cause_token_kept": sum(r.survived for r in results),
            },
            "session": session,
        }
        print(json.dumps(doc, ensure_ascii=False, indent=2))
        return 0

    tokens_note = (
        f"real BPE token counts ({ENCODING} via bpe-openai)"
        if info["exact_tokens"]
        else "ESTIMATED token counts (4 chars/token): bpe-openai not importable"
    )
    print(
        f"machine: nproc={info['nproc']} cpu={info['cpu']!r} python={info['python']} | {tokens_note} | "
        f"corpus of {len(samples)} real errors built in {corpus_s:.1f}s"
    )
    print()
    print(_table(results, all_times, all_repeat, args.reps))
    print()
    print(_session_text(session))
    print()
    print("final block:")
    print(session["final_block"])
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
