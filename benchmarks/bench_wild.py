"""Errors in the wild: what compaction keeps and costs on the ``http``, ``wild`` and ``dedup`` families.

Run: ``python benchmarks/bench_wild.py [--reps N] [--json]``.

1. Per format of the committed families (``benchmarks/agent_corpus/{http,wild,dedup}.jsonl``): records,
   tokens before and after (o200k), the fraction of records whose cause tokens all survive, B-cubed
   precision/recall/F1 of the keys against the labels, merged near-miss pairs, and session reduction
   (the first occurrence of a key costs its digest line, a repeat a ``(×N)`` counter of 3 tokens).
2. The cost of one uncached ``compact`` call on a real 40-line traceback, in each form it travels in
   (raw, JSON-escaped, a JSON report, log-prefixed lines, indentation lost); the raw form once more with
   the pre-stage switched off (what every error pays for it); and the pre-stage alone. Variants are
   interleaved call by call in one process, so load on the machine hits them alike; medians and p99 in
   microseconds.
"""

from __future__ import annotations

import argparse
import json
import logging
import statistics
import sys
import tempfile
import time
from collections import defaultdict
from pathlib import Path
from typing import Any

_ROOT = Path(__file__).resolve().parent.parent
if str(_ROOT) not in sys.path:
    sys.path.insert(0, str(_ROOT))

import otel_errcompact.compactor as _compactor_module  # noqa: E402
from otel_errcompact.compactor import Compactor  # noqa: E402
from otel_errcompact.parsers._base import Hints  # noqa: E402
from otel_errcompact.tokens import count_tokens, exact  # noqa: E402
from otel_errcompact.unwrap import unwrap  # noqa: E402
from tests.realerrors import python_error  # noqa: E402

CORPUS = _ROOT / "benchmarks" / "agent_corpus"
FAMILIES = ("http", "wild", "dedup")
_COUNTER_TOKENS = 3

# Eight distinct callers above a json.loads failure: CPython folds repeated recursive frames, distinct ones it
# prints in full, so this is a 40-line traceback of the usual shape (user frames, then the library's).
_FORTY_LINES = "import json\n\ndef parse_settings(text):\n    return json.loads(text)\n\n" + "".join(
    f"def layer_{i}(text):\n    return {'parse_settings' if i == 0 else f'layer_{i - 1}'}(text)\n\n" for i in range(8)
) + "layer_7('{\"region\": \"eu\",}')\n"


def _percentile(values: list[float], pct: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, max(0, round(pct / 100.0 * (len(ordered) - 1))))]


def quality() -> dict[str, dict[str, float]]:
    """Per-format and overall figures on the committed families."""
    records: list[dict[str, Any]] = []
    pairs: list[dict[str, str]] = []
    for family in FAMILIES:
        records += [json.loads(line) for line in (CORPUS / f"{family}.jsonl").read_text("utf-8").splitlines()]
        pairs += [json.loads(line) for line in (CORPUS / f"{family}.pairs.jsonl").read_text("utf-8").splitlines()]
    compactor = Compactor(digest_cache_size=0)
    digests = {r["id"]: compactor.compact(r["text"], exit_code=r["exit_code"], command=r["command"]) for r in records}
    groups: dict[str, list[dict[str, Any]]] = defaultdict(list)
    for record in records:
        groups[record["format"]].append(record)
    groups["ALL"] = records
    out: dict[str, dict[str, float]] = {}
    for name, group in groups.items():
        ids = {r["id"] for r in group}
        before = sum(count_tokens(r["text"]) for r in group)
        after = sum(count_tokens(digests[r["id"]].line) for r in group)
        kept = sum(all(t in digests[r["id"]].line for t in r["cause_tokens"]) for r in group) / len(group)
        by_label: dict[str, set[str]] = defaultdict(set)
        by_key: dict[str, set[str]] = defaultdict(set)
        for r in group:
            by_label[r["label"]].add(r["id"])
            by_key[digests[r["id"]].key].add(r["id"])
        precision = sum(len(by_label[r["label"]] & by_key[digests[r["id"]].key]) / len(by_key[digests[r["id"]].key])
                        for r in group) / len(group)
        recall = sum(len(by_label[r["label"]] & by_key[digests[r["id"]].key]) / len(by_label[r["label"]])
                     for r in group) / len(group)
        seen: set[str] = set()
        session = 0
        for r in group:
            key = digests[r["id"]].key
            session += _COUNTER_TOKENS if key in seen else count_tokens(digests[r["id"]].line)
            seen.add(key)
        merged = sum(1 for p in pairs if p["a"] in ids and p["b"] in ids and digests[p["a"]].key == digests[p["b"]].key)
        out[name] = {
            "records": len(group), "tokens_before": before, "tokens_after": after,
            "token_reduction": 1 - after / before, "cause_kept": kept, "precision": precision, "recall": recall,
            "f1": 2 * precision * recall / (precision + recall), "merged_pairs": merged,
            "pairs": sum(1 for p in pairs if p["a"] in ids and p["b"] in ids),
            "session_reduction": 1 - session / before,
        }
    return out


def _log_each_line(text: str) -> str:
    formatter = logging.Formatter("%(asctime)s %(levelname)s [%(name)s] %(message)s")
    return "\n".join(formatter.format(logging.LogRecord("worker", logging.ERROR, __file__, 0, line, None, None))
                     for line in text.rstrip("\n").split("\n")) + "\n"


def _no_unwrap(text: str, hints: Hints) -> tuple[str, Hints]:
    return text, hints


def timing(reps: int) -> dict[str, Any]:
    """Microseconds per uncached compaction of each form, interleaved; and the pre-stage alone."""
    with tempfile.TemporaryDirectory() as tmp:
        raw = python_error(Path(tmp), _FORTY_LINES)
    lines = raw.rstrip("\n").split("\n")
    forms = {
        "raw": raw,
        "json string": json.dumps(raw),
        "json report": json.dumps({"status": "error", "error": {"traceback": raw}}),
        "log lines": _log_each_line(raw),
        "dedented": "\n".join(line.strip() for line in lines),
    }
    compactor = Compactor(digest_cache_size=0)
    times: dict[str, list[float]] = {name: [] for name in [*forms, "raw, no pre-stage", "pre-stage only (raw)"]}
    hints = Hints()
    for _ in range(20):
        for text in forms.values():
            compactor.compact(text)
    for _ in range(reps):
        for name, text in forms.items():
            fresh = (text + " ")[:-1]
            t0 = time.perf_counter_ns()
            compactor.compact(fresh)
            times[name].append((time.perf_counter_ns() - t0) / 1000)
        fresh = (raw + " ")[:-1]
        setattr(_compactor_module, "unwrap", _no_unwrap)  # noqa: B010 - the compactor's own global
        try:
            t0 = time.perf_counter_ns()
            compactor.compact(fresh)
            times["raw, no pre-stage"].append((time.perf_counter_ns() - t0) / 1000)
        finally:
            setattr(_compactor_module, "unwrap", unwrap)  # noqa: B010
        fresh = (raw + " ")[:-1]
        t0 = time.perf_counter_ns()
        unwrap(fresh, hints)
        times["pre-stage only (raw)"].append((time.perf_counter_ns() - t0) / 1000)
    keys = {name: compactor.compact(text).key for name, text in forms.items()}
    return {
        "traceback_lines": len(lines),
        "same_key_in_every_form": len(set(keys.values())) == 1,
        "line": compactor.compact(raw).line,
        "us": {name: {"median": statistics.median(v), "p99": _percentile(v, 99)} for name, v in times.items()},
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--reps", type=int, default=2000, help="interleaved rounds of timed calls")
    parser.add_argument("--json", action="store_true", help="print one JSON document")
    args = parser.parse_args(argv)
    result: dict[str, Any] = {"exact_tokens": exact(), "quality": quality(), "timing": timing(args.reps)}
    if args.json:
        print(json.dumps(result, indent=2))
        return 0
    print(f"tokens: {'o200k_base (exact)' if result['exact_tokens'] else 'estimated (4 chars/token)'}")
    print(f"{'format':14s} {'n':>4s} {'tok before':>10s} {'after':>6s} {'reduct.':>7s} {'kept':>6s} "
          f"{'P':>6s} {'R':>6s} {'F1':>6s} {'merged':>8s} {'session':>7s}")
    for name, q in sorted(result["quality"].items(), key=lambda kv: (kv[0] == "ALL", kv[0])):
        print(f"{name:14s} {q['records']:4d} {q['tokens_before']:10d} {q['tokens_after']:6d} "
              f"{q['token_reduction']:7.3f} {q['cause_kept']:6.3f} {q['precision']:6.3f} {q['recall']:6.3f} "
              f"{q['f1']:6.3f} {q['merged_pairs']:3d}/{q['pairs']:<4d} {q['session_reduction']:7.3f}")
    t = result["timing"]
    print(f"\ncompaction of one {t['traceback_lines']}-line traceback, uncached, interleaved ({args.reps} rounds)")
    print(f"  digest: {t['line']}\n  same key in every form: {t['same_key_in_every_form']}")
    for name, v in t["us"].items():
        print(f"  {name:22s} median {v['median']:7.1f} µs   p99 {v['p99']:7.1f} µs")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
