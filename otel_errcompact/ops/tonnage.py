"""Error tonnage: how much of an agent's context is error text, and what compaction would save.

The pattern's decision criteria (error text as a share of context tokens): under 5 % compaction is not worth
it, over 10 % it pays, over 25 % it is mandatory; in between it is marginal. ``otel-errcompact tonnage`` reads
any mix of:

- **message transcripts**, OpenAI-style (``role: tool`` messages) or Anthropic-style (``tool_result``
  blocks, ``is_error`` honoured), as a JSON list, ``{"messages": [...]}``, or JSONL of either. The context
  is the whole final message list; error text is every tool result that is an error.
- **OTLP JSON trace files** (the collector's file exporter: one ``{"resourceSpans": …}`` object a line).
  Error text is each failed tool span's recorded output (``gen_ai.tool.call.result``, OpenInference
  ``output.value``), else its raw error (an upper bound); the context is the largest
  ``gen_ai.usage.input_tokens`` of a model call in each trace (the context at its fullest).
- **the trajectory store** (SQLite): raw errors only, so the share of context is unknown there.

Savings count what the agent would see instead: per conversation, the ``[RECENT ERRORS]`` block that
replaces the error texts, repeats credited as ``(×N)`` counters. Recurrence lists the classes (dedup keys)
that occurred at least :data:`RECURRING` times.
"""

from __future__ import annotations

import json
import sqlite3
from collections import Counter
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from otel_errcompact.compactor import compact_text
from otel_errcompact.digest import Digest
from otel_errcompact.history import ErrorHistory, Limits, Thresholds
from otel_errcompact.tokens import count_tokens

__all__ = ["RECURRING", "ErrorText", "Source", "TonnageReport", "load", "report", "verdict"]

RECURRING = 3
Kind = Literal["transcript", "otlp-traces", "store"]
_ERROR_WORDS = ("error", "exception", "traceback", "failed", "fatal", "denied", "not found", "refused")


@dataclass(frozen=True, slots=True)
class ErrorText:
    """One error as it entered (or would have entered) the context."""

    text: str
    conversation: str
    tool: str | None = None


@dataclass(slots=True)
class Source:
    """What one input file holds: its error texts, and its context tokens when they can be known."""

    path: Path
    kind: Kind
    errors: list[ErrorText] = field(default_factory=list)
    context_tokens: int | None = None


@dataclass(frozen=True, slots=True)
class ClassRow:
    """One error class (dedup key) over all inputs."""

    key: str
    line: str
    count: int
    raw_tokens: int


@dataclass(frozen=True, slots=True)
class TonnageReport:
    sources: list[Source]
    context_tokens: int | None
    error_tokens: int
    compacted_tokens: int
    classes: list[ClassRow]

    @property
    def fraction(self) -> float | None:
        """Error tokens / context tokens, where every input knows its context size."""
        if not self.context_tokens:
            return None
        return min(1.0, self.error_tokens / self.context_tokens)

    @property
    def saved_tokens(self) -> int:
        return max(0, self.error_tokens - self.compacted_tokens)

    @property
    def recurring(self) -> list[ClassRow]:
        return [row for row in self.classes if row.count >= RECURRING]

    @property
    def verdict(self) -> str:
        return verdict(self.fraction)

    def to_dict(self) -> dict[str, Any]:
        return {
            "sources": [{"path": str(s.path), "kind": s.kind, "errors": len(s.errors),
                         "context_tokens": s.context_tokens} for s in self.sources],
            "context_tokens": self.context_tokens,
            "error_tokens": self.error_tokens,
            "fraction": self.fraction,
            "compacted_tokens": self.compacted_tokens,
            "saved_tokens": self.saved_tokens,
            "verdict": self.verdict,
            "classes": [{"key": r.key, "digest": r.line, "count": r.count, "raw_tokens": r.raw_tokens}
                        for r in self.classes],
        }

    def render(self) -> str:
        """The plain-text table the command prints."""
        out = [f"{'input':<40} {'kind':<12} {'errors':>7} {'context tokens':>15}"]
        for s in self.sources:
            ctx = "unknown" if s.context_tokens is None else f"{s.context_tokens:,}"
            out.append(f"{_cut(str(s.path), 40):<40} {s.kind:<12} {len(s.errors):>7} {ctx:>15}")
        share = "unknown (no input gives the context size)" if self.fraction is None else f"{self.fraction:.1%}"
        out += [
            "",
            f"error tokens:            {self.error_tokens:,}",
            f"context tokens:          {'unknown' if self.context_tokens is None else f'{self.context_tokens:,}'}",
            f"error share of context:  {share}",
            f"after compaction:        {self.compacted_tokens:,} tokens ({self.saved_tokens:,} saved)",
            f"verdict:                 {self.verdict}",
            "",
            f"classes recurring {RECURRING}+ times: {len(self.recurring)} of {len(self.classes)}",
        ]
        for row in self.recurring[:15]:
            out.append(f"  ×{row.count:<4} {row.raw_tokens:>7,} tok  {_cut(row.line, 100)}")
        return "\n".join(out) + "\n"


def verdict(fraction: float | None) -> str:
    """The pattern's decision criteria for a share of context that is error text."""
    if fraction is None:
        return "unknown: give transcripts or traces, which know the context size"
    if fraction > 0.25:
        return "mandatory (> 25 % of context is error text)"
    if fraction > 0.10:
        return "pays (> 10 % of context is error text)"
    if fraction >= 0.05:
        return "marginal (5-10 % of context is error text)"
    return "not worth it (< 5 % of context is error text)"


def _cut(text: str, width: int) -> str:
    text = " ".join(text.split())
    return text if len(text) <= width else text[: width - 1] + "…"


def looks_like_error(text: str, digest: Digest | None = None) -> bool:
    """A tool result with no error flag is an error when a format parser recognises it, or when its first
    line says so."""
    digest = digest or compact_text(text)
    if digest.format not in ("fallback", "summary"):
        return True
    first = text.strip().splitlines()[0].lower() if text.strip() else ""
    return any(word in first for word in _ERROR_WORDS)


# -- readers --------------------------------------------------------------------------------------------------


def _text_of(content: Any) -> str:
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "\n".join(_text_of(part) for part in content)
    if isinstance(content, Mapping):
        if "text" in content:
            return str(content["text"])
        if "content" in content:
            return _text_of(content["content"])
        return json.dumps(content, ensure_ascii=False)
    return "" if content is None else str(content)


def _message_tokens(message: Mapping[str, Any]) -> int:
    tokens = count_tokens(_text_of(message.get("content")))
    for call in message.get("tool_calls") or []:  # OpenAI: arguments are context too
        tokens += count_tokens(json.dumps(call, ensure_ascii=False))
    return tokens


def _transcript_errors(messages: list[Mapping[str, Any]], conversation: str) -> Iterator[ErrorText]:
    names: dict[str, str] = {}
    for message in messages:
        for call in message.get("tool_calls") or []:  # OpenAI
            names[str(call.get("id"))] = str((call.get("function") or {}).get("name") or "")
        content = message.get("content")
        if message.get("role") == "tool":
            text = _text_of(content)
            if looks_like_error(text):
                yield ErrorText(text, conversation, names.get(str(message.get("tool_call_id"))) or None)
        if isinstance(content, list):  # Anthropic
            for block in content:
                if not isinstance(block, Mapping):
                    continue
                if block.get("type") == "tool_use":
                    names[str(block.get("id"))] = str(block.get("name") or "")
                elif block.get("type") == "tool_result":
                    text = _text_of(block.get("content"))
                    flagged = block.get("is_error")
                    if flagged or (flagged is None and looks_like_error(text)):
                        yield ErrorText(text, conversation, names.get(str(block.get("tool_use_id"))) or None)


def _transcripts(data: Any) -> Iterator[list[Mapping[str, Any]]]:
    if isinstance(data, Mapping) and isinstance(data.get("messages"), list):
        yield data["messages"]
    elif isinstance(data, list) and all(isinstance(m, Mapping) and "role" in m for m in data):
        yield list(data)
    elif isinstance(data, list):
        for item in data:
            yield from _transcripts(item)


def _read_transcript(path: Path, docs: list[Any]) -> Source:
    source = Source(path, "transcript", context_tokens=0)
    if docs and all(isinstance(d, Mapping) and "role" in d for d in docs):  # JSONL of messages
        docs = [docs]
    for index, transcript in enumerate(t for doc in docs for t in _transcripts(doc)):
        source.context_tokens = (source.context_tokens or 0) + sum(_message_tokens(m) for m in transcript)
        source.errors.extend(_transcript_errors(transcript, f"{path.name}#{index}"))
    return source


def _attr_value(value: Mapping[str, Any]) -> Any:
    for kind in ("stringValue", "intValue", "doubleValue", "boolValue"):
        if kind in value:
            return value[kind]
    return None


def _attrs(items: Iterable[Mapping[str, Any]] | None) -> dict[str, Any]:
    return {str(item.get("key")): _attr_value(item.get("value") or {}) for item in items or []}


def _spans(docs: list[Any]) -> Iterator[Mapping[str, Any]]:
    for doc in docs:
        for resource_spans in doc.get("resourceSpans", []):
            for scope_spans in resource_spans.get("scopeSpans", []):
                yield from scope_spans.get("spans", [])


def _failed_tool_text(span: Mapping[str, Any], attrs: Mapping[str, Any]) -> str:
    """What the agent received for a failed tool span: its recorded output, else the raw error."""
    text = attrs.get("gen_ai.tool.call.result") or attrs.get("output.value")
    for event in span.get("events", []):
        if not text and event.get("name") == "exception":
            exc = _attrs(event.get("attributes"))
            text = exc.get("exception.stacktrace") or f"{exc.get('exception.type')}: {exc.get('exception.message')}"
    return str(text or (span.get("status") or {}).get("message") or attrs.get("error.type"))


def _read_otlp(path: Path, docs: list[Any]) -> Source:
    from otel_errcompact import semconv

    source = Source(path, "otlp-traces")
    fullest: dict[str, int] = {}
    for span in _spans(docs):
        attrs = _attrs(span.get("attributes"))
        trace_id = str(span.get("traceId"))
        if "gen_ai.usage.input_tokens" in attrs:
            fullest[trace_id] = max(fullest.get(trace_id, 0), int(attrs["gen_ai.usage.input_tokens"]))
        failed = (span.get("status") or {}).get("code") in (2, "STATUS_CODE_ERROR") or "error.type" in attrs
        if failed and semconv.is_tool_span(attrs):
            conversation = str(semconv.conversation_id(attrs) or trace_id)
            tool = semconv.tool_name(attrs, str(span.get("name") or ""))
            source.errors.append(ErrorText(_failed_tool_text(span, attrs), conversation, tool))
    source.context_tokens = sum(fullest.values()) if fullest else None
    return source


def _read_store(path: Path) -> Source:
    """The raw errors of a trajectory store; a ``ValueError`` naming it when it is a SQLite file this
    release cannot read as one (another database, a layout of another release, a damaged page)."""
    from otel_errcompact.sinks import TrajectoryStore

    source = Source(path, "store")
    try:
        with TrajectoryStore(path) as store:
            for row in store.list(limit=max(1, store.count())):
                record = store.get(row.record_id)
                if record is not None:
                    scope = record.conversation_id or record.scope or "default"
                    source.errors.append(ErrorText(record.raw_error, scope, record.tool_name))
    except (sqlite3.Error, RuntimeError) as exc:  # RuntimeError: a table layout it does not read
        raise ValueError(f"{path}: not a readable trajectory store ({exc})") from None
    return source


def _json_docs(path: Path) -> list[Any]:
    text = path.read_text(encoding="utf-8", errors="replace")
    try:
        return [json.loads(text)]
    except json.JSONDecodeError:
        return [json.loads(line) for line in text.splitlines() if line.strip()]


def load(path: str | Path) -> Source:
    """Read one input, recognised by its content: a SQLite store, OTLP JSON traces, or a transcript."""
    path = Path(path)
    with path.open("rb") as fh:
        head = fh.read(16)
    if head.startswith(b"SQLite format 3"):
        return _read_store(path)
    try:
        docs = _json_docs(path)
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise ValueError(
            f"{path}: not a trajectory store, OTLP JSON traces or a JSON/JSONL transcript ({exc})"
        ) from exc
    if docs and all(isinstance(d, Mapping) and "resourceSpans" in d for d in docs):
        return _read_otlp(path, docs)
    return _read_transcript(path, docs)


def report(sources: list[Source]) -> TonnageReport:
    """Tonnage over every source: shares, recurrence per class, and the tokens left after compaction."""
    history = ErrorHistory(Thresholds(consecutive=10**9, budget=None), Limits(max_scopes=10**6))
    counts: Counter[str] = Counter()
    raw_by_key: Counter[str] = Counter()
    lines: dict[str, str] = {}
    scopes: set[str] = set()
    error_tokens = 0
    for source in sources:
        for error in source.errors:
            digest = compact_text(error.text)
            tokens = count_tokens(error.text)
            error_tokens += tokens
            counts[digest.key] += 1
            raw_by_key[digest.key] += tokens
            lines.setdefault(digest.key, digest.line)
            scope = f"{source.path}::{error.conversation}"
            history.observe(scope, digest)
            scopes.add(scope)
    compacted = sum(count_tokens(history.render(scope)) for scope in scopes)
    known = [s.context_tokens for s in sources]
    context = sum(k for k in known if k is not None) if known and all(k is not None for k in known) else None
    classes = [ClassRow(key, lines[key], n, raw_by_key[key]) for key, n in counts.most_common()]
    return TonnageReport(sources, context, error_tokens, compacted, classes)


def plot(result: TonnageReport, path: str | Path, top: int = 12) -> Path:
    """A PNG: the error tokens of the largest classes, raw and after compaction, with the verdict."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    rows = sorted(result.classes, key=lambda r: r.raw_tokens, reverse=True)[:top]
    fig, ax = plt.subplots(figsize=(11, 2.4 + 0.5 * max(1, len(rows))))
    labels = [f"×{r.count}  {_cut(r.line, 60)}" for r in rows][::-1]
    raw = [r.raw_tokens for r in rows][::-1]
    digest = [count_tokens(r.line) for r in rows][::-1]
    positions = range(len(rows))
    ax.barh([p + 0.2 for p in positions], raw, height=0.4, color="#d9534f", label="raw error tokens (all occurrences)")
    ax.barh([p - 0.2 for p in positions], digest, height=0.4, color="#5cb85c", label="digest tokens (once, counted)")
    ax.set_yticks(list(positions), labels, fontsize=7)
    ax.set_xlabel("tokens")
    share = "unknown" if result.fraction is None else f"{result.fraction:.1%}"
    ax.set_title(f"Error text: {share} of context — {result.verdict}", fontsize=9)
    ax.legend(fontsize=7, loc="lower right")
    fig.tight_layout()
    out = Path(path)
    fig.savefig(out, dpi=110)
    plt.close(fig)
    return out
