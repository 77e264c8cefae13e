"""What redaction and the prompt sanitiser cost, on real errors with and without secrets.

    python benchmarks/bench_redact.py [--reps 300] [--baseline REV] [--json]

Inputs, all produced by running real code:

- *tracebacks*: the real Python tracebacks of the benchmark corpus (:mod:`benchmarks.corpus`), no secrets;
  what the tool boundary redacts before writing a span's exception event (the agent's thread);
- *secret-laden*: the 40 real failures of the secret corpus (``tests/test_secrets.py``: HTTP 401 bodies,
  CalledProcessError argv, config parser errors, wrapped connection errors), each carrying a credential;
- *causes*: the same texts cut to 960 characters, what the compactor redacts per digest field.

Variants, interleaved per input (each repetition runs every variant once, in a rotating order, so load
on a shared machine hits all alike): ``redact`` (the anchor-guarded rules), ``unguarded`` (the same rules
run as one ``re.sub`` over the whole text instead of at their anchors), ``prompt_text`` (invisibles, NFKC, redaction and
the delimiter check: what every digest field goes through) and, with ``--baseline REV``, the ``redact``
of an earlier revision loaded from git (the rules before the 16 new secret kinds). Reported: median and
p99 µs per call over all inputs and repetitions.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
import time
import traceback
import types
from collections.abc import Callable
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from benchmarks._machine import describe  # noqa: E402
from otel_errcompact._sanitize import prompt_text  # noqa: E402
from otel_errcompact.redact import _RULES, redact  # noqa: E402


def unguarded(text: str) -> str:
    """The same rules as :func:`redact`, each run as one ``re.sub`` over the whole text (no anchors)."""
    for rule in _RULES:
        text = rule.pattern.sub(rule.replace, text)
    return text


def baseline(rev: str) -> Callable[[str], str] | None:
    """``redact`` as it was at git revision ``rev``, or None when git cannot show it."""
    try:
        source = subprocess.run(
            ["git", "show", f"{rev}:otel_errcompact/redact.py"], cwd=ROOT, capture_output=True, text=True,
            check=True,
        ).stdout
    except (OSError, subprocess.CalledProcessError):
        return None
    module = types.ModuleType("redact_baseline")
    exec(compile(source, f"{rev}:redact.py", "exec"), module.__dict__)
    function: Callable[[str], str] = module.redact
    return function


def tracebacks(workdir: Path) -> list[str]:
    from benchmarks.corpus import _python_samples

    return [sample.raw for sample in _python_samples(workdir)]


def secret_laden(workdir: Path) -> list[str]:
    import socket

    from tests.realerrors import loopback_server
    from tests.test_secrets import KINDS, EchoingAPI, Env

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        closed = int(sock.getsockname()[1])
    out: list[str] = []
    with loopback_server(EchoingAPI) as base:
        for kind in KINDS:
            try:
                kind.leak(Env(base, closed, workdir))
            except Exception as exc:
                out.append("".join(traceback.format_exception(exc)))
    return out


def measure(variants: dict[str, Callable[[str], str]], texts: list[str], reps: int) -> dict[str, list[float]]:
    timings: dict[str, list[float]] = {name: [] for name in variants}
    order = list(variants.items())
    for rep in range(reps):
        rotated = order[rep % len(order):] + order[: rep % len(order)]
        for text in texts:
            for name, function in rotated:
                start = time.perf_counter_ns()
                function(text)
                timings[name].append((time.perf_counter_ns() - start) / 1000)
    return timings


def summary(values: list[float]) -> dict[str, float]:
    ordered = sorted(values)
    return {
        "median_us": round(statistics.median(ordered), 2),
        "p99_us": round(ordered[min(len(ordered) - 1, int(len(ordered) * 0.99))], 2),
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--reps", type=int, default=300)
    parser.add_argument("--baseline", default=None, help="a git revision whose redact() to compare")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args(argv)

    variants: dict[str, Callable[[str], str]] = {
        "redact": redact, "unguarded": unguarded, "prompt_text": prompt_text,
    }
    if args.baseline:
        old = baseline(args.baseline)
        if old is None:
            print(f"baseline {args.baseline} not available from git; skipped", file=sys.stderr)
        else:
            variants[f"redact@{args.baseline}"] = old

    with tempfile.TemporaryDirectory() as tmp:
        inputs = {
            "tracebacks": tracebacks(Path(tmp) / "corpus"),
            "secret-laden": secret_laden(Path(tmp)),
        }
    inputs["causes"] = [text[:960] for text in inputs["tracebacks"] + inputs["secret-laden"]]

    results: dict[str, dict[str, dict[str, float]]] = {}
    for name, texts in inputs.items():
        timings = measure(variants, texts, args.reps)
        results[name] = {variant: summary(values) for variant, values in timings.items()}

    if args.json:
        print(json.dumps({"machine": describe(), "reps": args.reps, "results": results}, indent=2))
        return 0
    print(f"machine: {describe()} (shared with other work: compare variants, not runs)")
    print(f"{'input':<14} {'n':>4} {'variant':<28} {'median µs':>10} {'p99 µs':>10}")
    for name, by_variant in results.items():
        for variant, stats in by_variant.items():
            print(
                f"{name:<14} {len(inputs[name]):>4} {variant:<28} "
                f"{stats['median_us']:>10.2f} {stats['p99_us']:>10.2f}"
            )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
