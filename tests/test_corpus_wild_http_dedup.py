"""The committed corpus families ``http``, ``wild`` and ``dedup`` (``benchmarks/agent_corpus``) hold.

They are real errors, produced by the ``gen_<family>.py`` generators beside them; this test replays them
through the compactor and checks the issue's bars: the cause-naming tokens survive in at least 97 % of
digests, no near-miss pair shares a key, and the keys match the labels with a B-cubed F1 of at least 0.98.
"""

from __future__ import annotations

import json
from collections import defaultdict
from pathlib import Path
from typing import Any

import pytest

from otel_errcompact.compactor import Compactor

CORPUS = Path(__file__).resolve().parent.parent / "benchmarks" / "agent_corpus"
FAMILIES = ("http", "wild", "dedup")


def _load(family: str) -> tuple[list[dict[str, Any]], list[dict[str, str]]]:
    records = [json.loads(line) for line in (CORPUS / f"{family}.jsonl").read_text(encoding="utf-8").splitlines()]
    pairs_file = CORPUS / f"{family}.pairs.jsonl"
    pairs = [json.loads(line) for line in pairs_file.read_text(encoding="utf-8").splitlines()]
    return records, pairs


def _bcubed_f1(labels: dict[str, str], keys: dict[str, str]) -> float:
    by_label: dict[str, set[str]] = defaultdict(set)
    by_key: dict[str, set[str]] = defaultdict(set)
    for rid, label in labels.items():
        by_label[label].add(rid)
        by_key[keys[rid]].add(rid)
    precision = recall = 0.0
    for rid in labels:
        same_label, same_key = by_label[labels[rid]], by_key[keys[rid]]
        both = len(same_label & same_key)
        precision += both / len(same_key)
        recall += both / len(same_label)
    precision /= len(labels)
    recall /= len(labels)
    return 2 * precision * recall / (precision + recall)


@pytest.mark.parametrize("family", FAMILIES)
def test_family_meets_the_bars(family: str) -> None:
    records, pairs = _load(family)
    assert len(records) >= 80
    compactor = Compactor(digest_cache_size=0)
    digests = {r["id"]: compactor.compact(r["text"], exit_code=r["exit_code"], command=r["command"])
               for r in records}
    lost = [r["id"] for r in records if not all(token in digests[r["id"]].line for token in r["cause_tokens"])]
    kept = 1 - len(lost) / len(records)
    assert kept >= 0.97, lost
    merged = [p for p in pairs if digests[p["a"]].key == digests[p["b"]].key]
    assert merged == []
    f1 = _bcubed_f1({r["id"]: r["label"] for r in records}, {rid: d.key for rid, d in digests.items()})
    assert f1 >= 0.98
