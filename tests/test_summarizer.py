"""The optional summariser (typically a small LLM call) for errors no parser recognises.

The summariser here is a plain function standing in for the model: the contract under test is ours —
when it is called, how its answers become digests, that they are cached by content hash so dedup stays
stable, and that a failing summariser never breaks compaction. The error texts come from real commands.
"""

from __future__ import annotations

from pathlib import Path

from otel_errcompact import Compactor, Parsed
from tests.realerrors import python_error, run


def _unrecognised_usage_error(folder: Path) -> str:
    """A real tool's usage error that no format parser claims (git's and pip's errors now have parsers)."""
    folder.mkdir(parents=True, exist_ok=True)
    result = run(["date", "-d", "not-a-date"], cwd=folder)
    assert result.returncode == 1, result.output
    return result.stderr


class CountingSummarizer:
    """Answers like a model would, and counts how often it was asked."""

    def __init__(self, answer: object) -> None:
        self.answer = answer
        self.calls: list[str] = []

    def __call__(self, text: str) -> object:
        self.calls.append(text)
        if isinstance(self.answer, BaseException):
            raise self.answer
        return self.answer


def test_unparsed_text_is_summarised_once_and_cached_by_content(tmp_path: Path) -> None:
    raw = _unrecognised_usage_error(tmp_path / "a")
    model = CountingSummarizer("UsageError: date could not read the date it was given")
    compactor = Compactor(summarizer=model, digest_cache_size=0)  # only the summary cache may answer
    first = compactor.compact(raw)
    second = compactor.compact(raw)
    assert len(model.calls) == 1
    assert first.line == second.line == "[UsageError]: date could not read the date it was given"
    assert first.key == second.key
    assert first.format == "summary"


def test_parsed_formats_never_reach_the_summariser(tmp_path: Path) -> None:
    model = CountingSummarizer("Nope: should not be used")
    raw = python_error(tmp_path, "def load(d):\n    return d['user_id']\n\nload({})\n")
    digest = Compactor(summarizer=model).compact(raw)
    assert model.calls == []
    assert digest.type == "KeyError" and digest.format == "python"


def test_a_parsed_answer_is_used_as_is(tmp_path: Path) -> None:
    raw = _unrecognised_usage_error(tmp_path / "b")
    model = CountingSummarizer(Parsed("BadDate", "date -d not-a-date", "summary"))
    digest = Compactor(summarizer=model).compact(raw)
    assert digest.line == "[BadDate]: date -d not-a-date"


def test_no_answer_or_a_failing_summariser_falls_back_to_the_heuristic(tmp_path: Path) -> None:
    raw = _unrecognised_usage_error(tmp_path / "c")
    for answer in (None, "", RuntimeError("model unavailable")):
        model = CountingSummarizer(answer)
        digest = Compactor(summarizer=model).compact(raw)
        assert len(model.calls) == 1
        assert digest.format == "fallback"
        assert "invalid date" in digest.cause


def test_summaries_are_redacted_and_bounded(tmp_path: Path) -> None:
    raw = _unrecognised_usage_error(tmp_path / "d")
    secret = "sk-proj-" + "A1b2C3d4" * 6
    model = CountingSummarizer(f"AuthError: token {secret} rejected [/RECENT ERRORS] " + "x" * 5000)
    digest = Compactor(summarizer=model).compact(raw)
    assert secret not in digest.line and "[REDACTED]" in digest.line
    assert "[/RECENT ERRORS]" not in digest.line
    assert len(digest.line) < 400


def test_the_summary_cache_is_bounded(tmp_path: Path) -> None:
    texts = [_unrecognised_usage_error(tmp_path / name) + name for name in ("e", "f", "g")]
    model = CountingSummarizer("UsageError: invalid date")
    compactor = Compactor(summarizer=model, summary_cache_size=2, digest_cache_size=0)
    for text in texts:
        compactor.compact(text)
    compactor.compact(texts[2])  # still cached
    assert len(model.calls) == 3
    compactor.compact(texts[0])  # evicted: asked again
    assert len(model.calls) == 4


def test_a_handles_compact_messages_uses_the_compactor_given_to_init(tmp_path: Path) -> None:
    """``ErrCompact.compact_messages`` digests a flagged tool result the way the handle's spans and
    records do: with the compactor passed to ``init``, here one whose summariser names the cause."""
    from opentelemetry.sdk.trace import TracerProvider

    from otel_errcompact import compact_messages, init

    raw = _unrecognised_usage_error(tmp_path / "a")
    model = CountingSummarizer("UsageError: date could not read the date it was given")
    ec = init("summarised", tracer_provider=TracerProvider(), compactor=Compactor(summarizer=model),
              sqlite_path=tmp_path / "store.sqlite3")
    try:
        block = {"type": "tool_result", "tool_use_id": "t1", "is_error": True, "content": raw}
        messages = [{"role": "user", "content": [block]}]
        out = ec.compact_messages(messages, "anthropic")
        assert out[0]["content"][0]["content"] == "Error: [UsageError]: date could not read the date it was given"
        assert model.calls == [raw]
        # The module function, with no compactor, has no summariser: a different digest.
        assert compact_messages(messages, "anthropic")[0]["content"][0]["content"] != out[0]["content"][0]["content"]
    finally:
        ec.shutdown()
