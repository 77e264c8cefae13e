"""The committed agent-error corpus holds the digest targets: a regression guard for every parser.

The corpus (``benchmarks/agent_corpus``) is real output of real tools and real harness code; the metrics
are the benchmark's own (``benchmarks/bench_agent_errors.py``), computed here on the families of
harness-framed, editor, linter, build, package, VCS and test-runner errors.
"""

from __future__ import annotations

from collections import defaultdict

import pytest

from benchmarks.bench_agent_errors import Entry, bcubed, digest_all, load, merged_pairs

FAMILIES = ["harness", "linter", "build", "package", "vcs", "testrunner"]


@pytest.fixture(scope="module")
def corpus() -> tuple[list[Entry], list[dict[str, str]]]:
    records, pairs = load(FAMILIES)
    assert {r["family"] for r in records} == set(FAMILIES), "a corpus family file is missing"
    return digest_all(records), pairs


def test_cause_is_kept_in_at_least_97_percent(corpus: tuple[list[Entry], list[dict[str, str]]]) -> None:
    entries, _ = corpus
    lost = [(e.id, e.cause_tokens, e.digest.line) for e in entries if not e.kept]
    assert 1 - len(lost) / len(entries) >= 0.97, lost[:10]


def test_no_near_miss_pair_shares_a_key(corpus: tuple[list[Entry], list[dict[str, str]]]) -> None:
    entries, pairs = corpus
    assert len(pairs) >= 50
    assert merged_pairs(entries, pairs) == []


def test_keys_match_the_labels(corpus: tuple[list[Entry], list[dict[str, str]]]) -> None:
    entries, _ = corpus
    _, _, f1 = bcubed(entries)
    assert f1 >= 0.98


def test_framing_never_changes_the_key(corpus: tuple[list[Entry], list[dict[str, str]]]) -> None:
    """Every class seen both raw and inside a harness's framing has one key across all its forms."""
    entries, _ = corpus
    forms: dict[str, dict[str, set[str]]] = defaultdict(lambda: defaultdict(set))
    for e in entries:
        kind = "framed" if e.family == "harness" else "raw"
        forms[e.label][kind].add(e.digest.key)
    shared = {label: f for label, f in forms.items() if "framed" in f and "raw" in f}
    assert len(shared) >= 5
    for label, f in shared.items():
        assert f["framed"] == f["raw"] and len(f["raw"]) == 1, label


def test_no_framing_line_is_ever_the_cause(corpus: tuple[list[Entry], list[dict[str, str]]]) -> None:
    entries, _ = corpus
    framing = ("<returncode>", "<output>", "</output>", "[Command finished", "[The command completed",
               "[Current working directory", "[Python interpreter", "ERROR:", "[An error occurred",
               "<tool_use_error>", "Exit code")
    for e in entries:
        if e.family == "harness":
            assert not e.digest.cause.startswith(framing), (e.id, e.digest.line)
            assert not any(mark in e.digest.key_parts.message for mark in framing), (e.id, e.digest.line)
