"""Shared plumbing for the corpus generators: run a real tool, keep what it printed, write the JSONL.

A generator builds :class:`Record` values from real runs and hands them to :func:`write_family`, which
checks the corpus rules (unique ids, labels present, every cause token present in the raw text, pairs
that name existing records with different labels) before writing ``<family>.jsonl`` and
``<family>.pairs.jsonl`` beside this file.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

__all__ = ["HERE", "Record", "Run", "near_miss_pairs", "run", "sh", "write_family", "write_records"]


@dataclass(frozen=True)
class Run:
    """What a real process printed (stdout then stderr, as a terminal shows them) and its exit code."""

    output: str
    returncode: int
    command: str


def run(cmd: list[str] | str, cwd: Path, *, env: dict[str, str] | None = None, timeout: float = 120,
        stdin: str | None = None) -> Run:
    """Run a real command; a string runs through ``/bin/sh -c`` as an agent's shell tool would."""
    merged = {**os.environ, "NO_COLOR": "1", "LC_ALL": "C.UTF-8", "PYTHONDONTWRITEBYTECODE": "1",
              "PYTEST_DISABLE_PLUGIN_AUTOLOAD": "1", **(env or {})}
    shell = isinstance(cmd, str)
    proc = subprocess.run(cmd, cwd=cwd, shell=shell, capture_output=True, text=True, timeout=timeout,
                          env=merged, errors="replace", input=stdin)
    command = cmd if isinstance(cmd, str) else " ".join(cmd)
    return Run(proc.stdout + proc.stderr, proc.returncode, command)


def sh(command: str, cwd: Path, **kwargs: object) -> Run:
    """``run`` for a shell command line (the common case in agent tools)."""
    return run(command, cwd, **kwargs)  # type: ignore[arg-type]


@dataclass
class Record:
    """One corpus record (see README.md beside this file for the fields)."""

    id: str
    format: str
    source: str
    text: str
    label: str
    cause_tokens: list[str]
    exit_code: int | None = None
    command: str | None = None
    extra: dict[str, str] = field(default_factory=dict)

    def to_json(self) -> str:
        data = asdict(self)
        data.pop("extra")
        order = ["id", "format", "source", "text", "exit_code", "command", "label", "cause_tokens"]
        return json.dumps({k: data[k] for k in order}, ensure_ascii=False)


def write_family(family: str, records: list[Record], pairs: list[tuple[str, str, str]]) -> None:
    """Check the corpus rules and write ``<family>.jsonl`` and ``<family>.pairs.jsonl``."""
    ids: dict[str, Record] = {}
    for rec in records:
        if rec.id in ids:
            raise SystemExit(f"duplicate id {rec.id}")
        if not rec.id.startswith(family + "/"):
            raise SystemExit(f"id {rec.id} must start with {family}/")
        missing = [t for t in rec.cause_tokens if t not in rec.text]
        if missing or not rec.cause_tokens:
            raise SystemExit(f"{rec.id}: cause tokens {missing or '(none)'} not in the raw text:\n{rec.text}")
        ids[rec.id] = rec
    for a, b, _why in pairs:
        if a not in ids or b not in ids:
            raise SystemExit(f"pair ({a}, {b}) names a missing record")
        if ids[a].label == ids[b].label:
            raise SystemExit(f"pair ({a}, {b}) shares label {ids[a].label}")
    (HERE / f"{family}.jsonl").write_text("".join(r.to_json() + "\n" for r in records), encoding="utf-8")
    (HERE / f"{family}.pairs.jsonl").write_text(
        "".join(json.dumps({"a": a, "b": b, "why": why}) + "\n" for a, b, why in pairs), encoding="utf-8"
    )
    labels = len({r.label for r in records})
    print(f"{family}: {len(records)} records, {labels} classes, {len(pairs)} near-miss pairs")


# The generators that build their records as dicts (dedup, http, wild) write them with these two.


def near_miss_pairs(records: list[dict[str, Any]], groups: list[tuple[str, str, str]]) -> list[dict[str, str]]:
    """For each ``(label a, label b, why)``: every record of ``a`` paired with the record of ``b`` in the
    same form (the last ``-`` part of the id), so a pair differs in the cause, not in how it is wrapped."""
    by_label: dict[str, list[dict[str, Any]]] = {}
    for record in records:
        by_label.setdefault(record["label"], []).append(record)
    pairs = []
    for a, b, why in groups:
        right = by_label.get(b, [])
        for x in by_label.get(a, []):
            form = x["id"].rsplit("-", 1)[-1]
            match = next((y for y in right if y["id"].rsplit("-", 1)[-1] == form), None)
            if match is not None:
                pairs.append({"a": x["id"], "b": match["id"], "why": why})
    return pairs


def write_records(family: str, records: list[dict[str, Any]], pairs: list[dict[str, str]]) -> None:
    """Write dict records and pairs as ``<family>.jsonl`` and ``<family>.pairs.jsonl`` beside this file."""
    with open(HERE / f"{family}.jsonl", "w", encoding="utf-8") as out:
        for record in records:
            out.write(json.dumps(record, ensure_ascii=False) + "\n")
    with open(HERE / f"{family}.pairs.jsonl", "w", encoding="utf-8") as out:
        for pair in pairs:
            out.write(json.dumps(pair) + "\n")
    print(f"{len(records)} records, {len(pairs)} pairs -> {HERE / family}.jsonl")
