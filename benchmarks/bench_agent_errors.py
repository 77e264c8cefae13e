"""Digest quality on errors as agents receive them: the committed corpus in ``benchmarks/agent_corpus``.

Run: ``python benchmarks/bench_agent_errors.py [--family NAME ...] [--json] [--reps N]``.

Reads every ``agent_corpus/*.jsonl`` (or the ``--family`` files only) and reports, per format and overall:

- tokens before (the raw error) and after (``Digest.line``), counted with the real ``o200k_base``
  vocabulary (``bpe_openai``, offline), and the reduction ``1 - after / before`` over the sums;
- cause kept: the fraction of records whose every ``cause_tokens`` entry occurs in ``Digest.line``;
- B-cubed precision, recall and F1 of the dedup keys against the labels (per format: within the format);
- merged near-miss pairs (``*.pairs.jsonl``): pairs that must never share a key but do, listed;
- session reduction: a deterministic session (fixed seed) that draws failures from a few classes with
  repeats, each draw a different record of its class (data values vary); raw tokens of every failure
  against the tokens of the final ``[RECENT ERRORS]`` block ``ErrorHistory.render`` returns;
- speed: median and p99 µs of one ``Compactor.compact`` call (digest cache off) on *distinct* inputs, each
  compacted once: (a) real 40-line Python tracebacks, all different (:func:`distinct_tracebacks`), as text;
  (b) the same tracebacks with the exception's type and message as an OTel ``exception`` event carries them
  (what the span processor passes); (c) the same as (a) with the memos compaction keeps across calls
  emptied before each call, so every traceback's code path is met for the first time (the tracebacks
  of (a) come from five code paths, so most of them find their body and frame remembered, as an agent's
  repeated failures do); (d) the one-line errors of the corpus; (e) every corpus record; and, as a fixed
  point across releases, one real 40-line ``KeyError`` traceback (:func:`traceback_40`) compacted
  ``--reps`` times, a new string object each call.
"""

from __future__ import annotations

import argparse
import json
import random
import statistics
import sys
import tempfile
import time
import traceback
from collections import defaultdict
from dataclasses import dataclass
from pathlib import Path
from typing import Any

_ROOT = Path(__file__).resolve().parent.parent
if str(_ROOT) not in sys.path:
    sys.path.insert(0, str(_ROOT))

from benchmarks._machine import describe  # noqa: E402
from otel_errcompact.compactor import Compactor  # noqa: E402
from otel_errcompact.digest import Digest  # noqa: E402
from otel_errcompact.history import ErrorHistory, Thresholds  # noqa: E402

CORPUS = Path(__file__).resolve().parent / "agent_corpus"
ENCODING = "o200k_base"
SESSION_CLASSES = 8
SESSION_FAILURES = 60
SEED = 20261122


@dataclass(frozen=True)
class Entry:
    """A corpus record and its digest."""

    id: str
    family: str
    format: str
    label: str
    text: str
    cause_tokens: tuple[str, ...]
    exit_code: int | None
    command: str | None
    digest: Digest

    @property
    def kept(self) -> bool:
        return all(token in self.digest.line for token in self.cause_tokens)


def _encoder() -> Any:
    import bpe_openai  # ships the official rank files: exact counts, offline

    return bpe_openai.get_encoding(ENCODING)


def load(families: list[str] | None, corpus: Path = CORPUS) -> tuple[list[dict[str, Any]], list[dict[str, str]]]:
    """Records and near-miss pairs of the chosen families (all when ``families`` is empty)."""
    records: list[dict[str, Any]] = []
    pairs: list[dict[str, str]] = []
    for path in sorted(corpus.glob("*.jsonl")):
        if path.name.endswith(".pairs.jsonl"):
            continue
        family = path.stem
        if families and family not in families:
            continue
        for line in path.read_text(encoding="utf-8").splitlines():
            if line.strip():
                records.append({**json.loads(line), "family": family})
        pair_path = path.with_name(f"{family}.pairs.jsonl")
        if pair_path.exists():
            pairs += [json.loads(line) for line in pair_path.read_text(encoding="utf-8").splitlines() if line]
    return records, pairs


def digest_all(records: list[dict[str, Any]], compactor: Compactor | None = None) -> list[Entry]:
    """Compact every record (uncached) and keep what the metrics need."""
    compactor = compactor or Compactor(digest_cache_size=0)
    return [
        Entry(r["id"], r["family"], r["format"], r["label"], r["text"], tuple(r["cause_tokens"]),
              r.get("exit_code"), r.get("command"),
              compactor.compact(r["text"], exit_code=r.get("exit_code"), command=r.get("command")))
        for r in records
    ]


def bcubed(entries: list[Entry]) -> tuple[float, float, float]:
    """B-cubed precision, recall and F1 of the keys (clusters) against the labels (classes)."""
    if not entries:
        return 1.0, 1.0, 1.0
    by_key: dict[str, list[Entry]] = defaultdict(list)
    by_label: dict[str, list[Entry]] = defaultdict(list)
    for e in entries:
        by_key[e.digest.key].append(e)
        by_label[e.label].append(e)
    precision = recall = 0.0
    for e in entries:
        cluster, klass = by_key[e.digest.key], by_label[e.label]
        both = sum(1 for other in cluster if other.label == e.label)
        precision += both / len(cluster)
        recall += both / len(klass)
    p, r = precision / len(entries), recall / len(entries)
    return p, r, (2 * p * r / (p + r) if p + r else 0.0)


def merged_pairs(entries: list[Entry], pairs: list[dict[str, str]]) -> list[dict[str, str]]:
    """Near-miss pairs whose two records share a key, with both digests for the reader."""
    by_id = {e.id: e for e in entries}
    merged = []
    for pair in pairs:
        a, b = by_id.get(pair["a"]), by_id.get(pair["b"])
        if a is not None and b is not None and a.digest.key == b.digest.key:
            merged.append({**pair, "a_line": a.digest.line, "b_line": b.digest.line})
    return merged


def session(entries: list[Entry], count: Any, seed: int = SEED) -> dict[str, Any]:
    """Raw tokens of a repeating session's failures against the tokens of its final block."""
    by_label: dict[str, list[Entry]] = defaultdict(list)
    for e in entries:
        by_label[e.label].append(e)
    rng = random.Random(seed)
    labels = rng.sample(sorted(by_label), min(SESSION_CLASSES, len(by_label)))
    history = ErrorHistory(Thresholds(consecutive=10_000, budget=None))
    label = rng.choice(labels)
    raw = 0
    drawn: list[str] = []
    for _ in range(SESSION_FAILURES):
        if rng.random() >= 0.6:
            label = rng.choice(labels)
        entry = rng.choice(by_label[label])  # another record of the class: its data values differ
        drawn.append(entry.id)
        raw += count(entry.text)
        history.observe("session", entry.digest)
    block = history.render("session")
    after = count(block)
    return {"failures": SESSION_FAILURES, "classes": len(labels), "raw_tokens": raw, "block_tokens": after,
            "reduction": 1 - after / raw if raw else 0.0, "block": block}


def traceback_40(folder: Path) -> str:
    """A real 40-line Python traceback: 19 nested calls in a script, ending in a KeyError."""
    import subprocess

    funcs = ["def f0(d):\n    raise KeyError('missing_key')\n"]  # a whole statement: no caret line
    funcs += [f"def f{n}(d):\n    f{n - 1}(d)\n" for n in range(1, 18)]
    script = folder / "deep.py"
    script.write_text("".join(funcs) + "\nf17({})\n")
    proc = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, check=False)
    return proc.stderr


# Five real failure kinds (a missing key, a bad integer literal, a missing attribute, a missing file, bad JSON
# raised inside the standard library), each carrying the order number, so every message differs. Every
# failing line is a whole statement, so CPython prints no caret line under it (as in ``traceback_40``).
_LEAF = """
import json


def fail(order, folder):
    kind = order % 5
    if kind == 0:
        {}[f"order-{order}"]
    if kind == 1:
        int(f"{order}x")
    if kind == 2:
        getattr(None, f"price_{order}")
    if kind == 3:
        open(f"{folder}/report-{order}.csv")
    json.loads("[" + "1," * (order % 97))
"""


@dataclass(frozen=True)
class Traceback:
    """One real traceback and the fields the OTel SDK's ``record_exception`` puts beside it."""

    text: str
    type: str
    message: str


def distinct_tracebacks(folder: Path, count: int) -> list[Traceback]:
    """``count`` real tracebacks, all different: 18 nested calls in a generated module, then one of five
    failure kinds (:data:`_LEAF`) carrying the call's number; formatted by ``traceback.format_exception``
    as ``record_exception`` does. About 40 lines each."""
    import importlib.util

    chain = ["from leaf_bench import fail as _f0", ""]
    chain += [f"def _f{n}(order, folder):\n    _f{n - 1}(order, folder)\n" for n in range(1, 17)]
    chain += ["def run(order, folder):\n    _f16(order, folder)\n"]
    (folder / "leaf_bench.py").write_text(_LEAF, encoding="utf-8")
    (folder / "chain_bench.py").write_text("\n".join(chain), encoding="utf-8")
    sys.path.insert(0, str(folder))
    try:
        spec = importlib.util.spec_from_file_location("chain_bench", folder / "chain_bench.py")
        assert spec is not None and spec.loader is not None
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
        out = []
        for order in range(count):
            try:
                module.run(order, str(folder))
            except Exception as exc:  # the failure the agent's tool would report
                kind = type(exc)
                name = kind.__qualname__ if kind.__module__ == "builtins" else f"{kind.__module__}.{kind.__qualname__}"
                out.append(Traceback("".join(traceback.format_exception(exc)), name, str(exc)))
        return out
    finally:
        sys.path.remove(str(folder))
        sys.modules.pop("leaf_bench", None)


def _percentile(values: list[float], pct: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, max(0, round(pct / 100 * (len(ordered) - 1))))]


def time_compaction(texts: list[str], reps: int) -> list[float]:
    """µs per uncached ``compact`` call; every call gets a new string object, as a live agent does."""
    compactor = Compactor(digest_cache_size=0)
    out: list[float] = []
    for _ in range(reps):
        for text in texts:
            fresh = (text + " ")[:-1]
            t0 = time.perf_counter_ns()
            compactor.compact(fresh)
            out.append((time.perf_counter_ns() - t0) / 1000)
    return out


def time_distinct(calls: list[tuple[str, dict[str, Any]]]) -> list[float]:
    """µs per ``compact(text, **hints)`` call, each input compacted once by a fresh compactor with its digest
    cache off: nothing is a repeat."""
    compactor = Compactor(digest_cache_size=0)
    out: list[float] = []
    for text, hints in calls:
        t0 = time.perf_counter_ns()
        compactor.compact(text, **hints)
        out.append((time.perf_counter_ns() - t0) / 1000)
    return out


def _forget_remembered() -> None:
    """Empty the bounded memos compaction keeps across calls (a traceback's body and frame, masking
    plans, secret anchors, short cleaned names), so the next call meets its code path for the first time."""
    import importlib

    compactor, normalize, redact, structured = (
        importlib.import_module(f"otel_errcompact.{name}")  # the package re-exports functions by these names
        for name in ("compactor", "normalize", "redact", "structured")
    )
    structured._read_body_remembered.cache_clear()
    compactor._PLACED.clear()
    compactor._clean_cached.cache_clear()
    normalize._PLANS.clear()
    redact._REMEMBERED.clear()


def time_first_sight(calls: list[tuple[str, dict[str, Any]]]) -> list[float]:
    """:func:`time_distinct`, with every memo emptied before each call (outside the timing): what a
    traceback from a code path never seen before costs."""
    compactor = Compactor(digest_cache_size=0)
    out: list[float] = []
    for text, hints in calls:
        _forget_remembered()
        t0 = time.perf_counter_ns()
        compactor.compact(text, **hints)
        out.append((time.perf_counter_ns() - t0) / 1000)
    return out


def speed(entries: list[Entry], tracebacks: list[Traceback], traceback_40_text: str, reps: int) -> dict[str, Any]:
    """Median and p99 µs of the timings the module docstring lists."""
    one_line = [(e.text, {"exit_code": e.exit_code, "command": e.command}) for e in entries
                if e.text.strip() and "\n" not in e.text.strip()]
    series = {
        "traceback_text": time_distinct([(tb.text, {}) for tb in tracebacks]),
        "traceback_structured": time_distinct(
            [(tb.text, {"exception_type": tb.type, "exception_message": tb.message}) for tb in tracebacks]
        ),
        "traceback_first_sight": time_first_sight([(tb.text, {}) for tb in tracebacks]),
        "one_line": time_distinct(one_line),
        "corpus": time_distinct([(e.text, {"exit_code": e.exit_code, "command": e.command}) for e in entries]),
        "traceback_40": time_compaction([traceback_40_text], reps),
    }
    lines = sorted(len(tb.text.splitlines()) for tb in tracebacks)
    by_kind: dict[str, list[float]] = defaultdict(list)
    for tb, took in zip(tracebacks, series["traceback_text"], strict=True):
        by_kind[tb.type.rsplit(".", 1)[-1]].append(took)
    return {
        "traceback_lines": [lines[0], lines[-1]] if lines else [],
        "traceback_40_lines": len(traceback_40_text.splitlines()),
        "traceback_text_us_median_by_type": {kind: statistics.median(v) for kind, v in sorted(by_kind.items())},
        **{f"{name}_calls": len(times) for name, times in series.items()},
        **{f"{name}_us_median": statistics.median(times) for name, times in series.items() if times},
        **{f"{name}_us_p99": _percentile(times, 99) for name, times in series.items() if times},
    }


def report(entries: list[Entry], pairs: list[dict[str, str]], count: Any) -> dict[str, Any]:
    """Per-format and overall metrics."""
    groups: dict[str, list[Entry]] = defaultdict(list)
    for e in entries:
        groups[e.format].append(e)
    rows: dict[str, Any] = {}
    for name, group in [*sorted(groups.items()), ("ALL", entries)]:
        before = sum(count(e.text) for e in group)
        after = sum(count(e.digest.line) for e in group)
        p, r, f1 = bcubed(group)
        rows[name] = {"records": len(group), "classes": len({e.label for e in group}),
                      "tokens_before": before, "tokens_after": after,
                      "token_reduction": 1 - after / before if before else 0.0,
                      "cause_kept": sum(e.kept for e in group) / len(group),
                      "bcubed_precision": p, "bcubed_recall": r, "bcubed_f1": f1}
    return rows


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--family", action="append", help="corpus file stem (repeatable); default all")
    parser.add_argument("--json", action="store_true", help="print one JSON document")
    parser.add_argument("--reps", type=int, default=2000,
                        help="distinct 40-line tracebacks to time, and calls on the fixed 40-line one")
    parser.add_argument("--verbose", action="store_true", help="list every record whose cause was lost")
    args = parser.parse_args(argv)

    encoder = _encoder()

    def count(text: str) -> int:
        return len(encoder.encode(text)) if text else 0

    records, pairs = load(args.family)
    if not records:
        parser.error("no corpus records found")
    entries = digest_all(records)
    rows = report(entries, pairs, count)
    merged = merged_pairs(entries, pairs)
    sess = session(entries, count)
    with tempfile.TemporaryDirectory() as tmp:
        timing = speed(entries, distinct_tracebacks(Path(tmp), args.reps), traceback_40(Path(tmp)), args.reps)
    lost = [{"id": e.id, "tokens": list(e.cause_tokens), "line": e.digest.line} for e in entries if not e.kept]
    doc: dict[str, Any] = {"machine": describe(), "encoding": ENCODING, "families": sorted({e.family for e in entries}),
           "formats": rows, "pairs": len(pairs), "merged_pairs": merged, "session": sess, "speed": timing,
           "cause_lost": lost}
    if args.json:
        print(json.dumps(doc, indent=2, ensure_ascii=False))
        return 0
    print(f"machine: {doc['machine']} | tokens: {ENCODING} (bpe_openai) | families: {', '.join(doc['families'])}")
    head = (f"{'format':12} {'records':>7} {'classes':>7} {'tok before':>10} {'tok after':>9} {'reduct':>7} "
            f"{'cause kept':>10} {'B3 P':>6} {'B3 R':>6} {'B3 F1':>6}")
    print(head)
    print("-" * len(head))
    for name, row in rows.items():
        if name == "ALL":
            print("-" * len(head))
        print(f"{name:12} {row['records']:7d} {row['classes']:7d} {row['tokens_before']:10d} "
              f"{row['tokens_after']:9d} {row['token_reduction']:7.3f} {row['cause_kept']:10.3f} "
              f"{row['bcubed_precision']:6.3f} {row['bcubed_recall']:6.3f} {row['bcubed_f1']:6.3f}")
    print(f"\nnear-miss pairs: {len(pairs)}, merged: {len(merged)}")
    for m in merged:
        print(f"  MERGED {m['a']} + {m['b']} ({m['why']})\n    {m['a_line']}\n    {m['b_line']}")
    print(f"\nsession: {sess['failures']} failures from {sess['classes']} classes, raw {sess['raw_tokens']} tokens, "
          f"final block {sess['block_tokens']} tokens, reduction {sess['reduction']:.3f}")
    low, high = timing["traceback_lines"]
    print("\ncompaction, every input distinct and compacted once (digest cache off):")
    for name, label in (("traceback_text", f"{low}-{high}-line tracebacks, text"),
                        ("traceback_structured", "the same, with exception.type/.message"),
                        ("traceback_first_sight", "the same, every code path seen first"),
                        ("one_line", "one-line corpus errors"), ("corpus", "every corpus record")):
        print(f"  {label:42} median {timing[name + '_us_median']:6.1f} µs, p99 {timing[name + '_us_p99']:6.1f} µs "
              f"({timing[name + '_calls']} calls)")
    print(f"  the fixed {timing['traceback_40_lines']}-line traceback_40, a new string each call:"
          f" median {timing['traceback_40_us_median']:.1f} µs, p99 {timing['traceback_40_us_p99']:.1f} µs"
          f" ({timing['traceback_40_calls']} calls)")
    kinds = ", ".join(f"{kind} {us:.1f}" for kind, us in timing["traceback_text_us_median_by_type"].items())
    print(f"  tracebacks, text, median µs by exception type: {kinds}")
    if args.verbose or len(lost) <= 20:
        for item in lost:
            print(f"  cause lost: {item['id']} {item['tokens']}\n    {item['line']}")
    else:
        print(f"  {len(lost)} records lost a cause token (--verbose lists them)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
