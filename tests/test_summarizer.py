"""The optional summariser (typically a small LLM call) for errors no parser recognises.

The summariser here is a plain function standing in for the model: the contract under test is ours —
when it is called, how its answers become digests, that they are cached by content hash so dedup stays
stable, and that a failing summariser never breaks compaction. The error texts come from real commands.
"""

from __future__ import annotations

import threading
import time
from pathlib import Path

from otel_errcompact import Compactor, Parsed
from otel_errcompact.summary import MAX_ASKING
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


def _date_error(argument: str, folder: Path) -> str:
    """``date -d ARGUMENT``'s real error, which quotes the argument (no parser claims it)."""
    folder.mkdir(parents=True, exist_ok=True)
    result = run(["date", "-d", argument], cwd=folder)
    assert result.returncode == 1 and argument in result.stderr, result.output
    return result.stderr


class WordingSummarizer:
    """Words each answer differently, as a model sampled twice does."""

    def __init__(self) -> None:
        self.calls: list[str] = []

    def __call__(self, text: str) -> str:
        self.calls.append(text)
        return ("DateError: date cannot read its input", "InvalidDate: the date given was not understood")[
            len(self.calls) % 2
        ]


def test_the_summariser_never_sees_a_secret_the_error_quotes(tmp_path: Path) -> None:
    password = "S3cr3tPassw0rd!x"
    raw = _date_error(f"postgres://admin:{password}@db.internal/prod", tmp_path)
    model = CountingSummarizer("DateError: a connection URL was given as a date")
    digest = Compactor(summarizer=model).compact(raw)
    assert len(model.calls) == 1
    assert password not in model.calls[0] and "db.internal/prod" in model.calls[0]
    assert digest.line == "[DateError]: a connection URL was given as a date"


def test_one_error_is_asked_once_whatever_its_temporary_folder(tmp_path: Path) -> None:
    """Repeats that differ only in machine noise share an answer; a different value is asked apart, so a
    digest never shows another call's value."""
    first = _date_error(str(tmp_path / "run-a1b2c3d4" / "report.csv"), tmp_path / "a")
    import tempfile

    again = _date_error(tempfile.mkdtemp(dir=tmp_path) + "/report.csv", tmp_path / "b")
    other = _date_error("next blursday", tmp_path / "c")
    model = CountingSummarizer("DateError: a file path was given as a date")
    compactor = Compactor(summarizer=model, digest_cache_size=0)
    compactor.compact(first)
    compactor.compact(again)
    assert len(model.calls) == 1
    compactor.compact(other)
    assert len(model.calls) == 2 and "blursday" in model.calls[1]


def test_a_models_wording_never_splits_or_merges_classes(tmp_path: Path) -> None:
    """Keys and classes are the heuristic's: one error, summarised in two processes by a model that words
    it differently each time, is one class, as it is without a model; the digests show the answers."""
    raws = [_date_error("next blursday", tmp_path / str(n)) for n in range(2)]
    other = _date_error("last smarch", tmp_path / "other")
    model = WordingSummarizer()
    summarised = [Compactor(summarizer=model).compact(raw) for raw in (*raws, other)]
    heuristic = [Compactor().compact(raw) for raw in (*raws, other)]
    assert len(model.calls) == 3
    assert summarised[0].type != summarised[1].type  # worded differently ...
    assert summarised[0].key == summarised[1].key == heuristic[0].key  # ... one class, as without a model
    assert summarised[2].key == heuristic[2].key != heuristic[0].key  # a different value stays apart
    assert [d.error_class for d in summarised] == [d.error_class for d in heuristic]
    assert all(d.format == "summary" for d in summarised)


def test_a_summariser_that_hangs_is_waited_for_once_within_its_bound(tmp_path: Path) -> None:
    """Past ``summary_timeout_s`` the heuristic digest stands (same key); a repeat while the call is out
    does not ask again, and the answer serves the occurrences after it came."""
    import threading

    raw = _date_error("next blursday", tmp_path)
    release, answered = threading.Event(), threading.Event()
    calls: list[str] = []

    def hanging(text: str) -> str:
        calls.append(text)
        release.wait(30)
        answered.set()
        return "DateError: the date tool does not know the day named"

    compactor = Compactor(summarizer=hanging, summary_timeout_s=0.05, digest_cache_size=0)
    first = compactor.compact(raw)
    second = compactor.compact(raw)
    assert not answered.is_set()  # both returned while the call was still out
    assert len(calls) == 1
    assert first.format == second.format == "fallback" and "blursday" in first.cause
    release.set()
    assert answered.wait(30)
    for _ in range(100):  # the answer is kept right after the summariser returns it
        later = compactor.compact(raw)
        if later.format == "summary":
            break
        threading.Event().wait(0.01)
    assert later.line == "[DateError]: the date tool does not know the day named"
    assert later.key == first.key and len(calls) == 1


def test_at_most_a_few_questions_are_out_at_once(tmp_path: Path) -> None:
    import threading

    from otel_errcompact.summary import MAX_ASKING

    release = threading.Event()
    calls: list[str] = []

    def hanging(text: str) -> None:
        calls.append(text)
        release.wait(30)

    compactor = Compactor(summarizer=hanging, summary_timeout_s=0.01, digest_cache_size=0)
    words = ("blursday", "smarch", "octember", "thirsday", "fryday", "saturnday")
    try:
        for n, word in enumerate(words):
            digest = compactor.compact(_date_error(f"next {word}", tmp_path / str(n)))
            assert digest.format == "fallback" and word in digest.cause
        assert len(calls) == MAX_ASKING < len(words)
    finally:
        release.set()


def test_summary_timeout_must_be_a_finite_positive_number() -> None:
    import pytest

    from otel_errcompact import ConfigurationError

    for bad in (0, -1.0, float("nan"), float("inf"), "2"):
        with pytest.raises(ConfigurationError, match=r"Compactor\.summary_timeout_s="):
            Compactor(summarizer=lambda text: None, summary_timeout_s=bad)  # type: ignore[arg-type]


class HangingSummarizer:
    """A model endpoint that does not answer until it is let go; notes the thread of every call."""

    def __init__(self) -> None:
        self.go = threading.Event()
        self.threads: list[threading.Thread] = []

    def __call__(self, text: str) -> object:
        self.threads.append(threading.current_thread())
        self.go.wait(30)
        return "DateError: the date given was not understood"


def test_a_slow_summariser_runs_on_a_few_threads_however_many_errors_come(tmp_path: Path) -> None:
    """A stream of new errors against a summariser that hangs, then against the same one answering: every
    occurrence gets a digest (the heuristic's while none is in time), and the summariser runs on at most
    MAX_ASKING threads, daemon threads kept for the next questions, not one thread per question."""
    raws = [_date_error(f"blursday {i}", tmp_path / str(i)) for i in range(3 * MAX_ASKING)]
    model = HangingSummarizer()
    compactor = Compactor(summarizer=model, digest_cache_size=0, summary_timeout_s=0.05)
    hung = [compactor.compact(raw) for raw in raws]
    assert all(d.format == "fallback" and "invalid date" in d.cause for d in hung)
    assert len(model.threads) == MAX_ASKING  # the rest were not asked: MAX_ASKING questions are out
    model.go.set()
    deadline = time.monotonic() + 60  # the answers come: each round asks about the errors not answered yet
    while not all(compactor.compact(raw).format == "summary" for raw in raws):
        assert time.monotonic() < deadline, "the summariser's answers never served the digests"
        time.sleep(0.01)
    answered = [compactor.compact(raw) for raw in raws]
    assert all(d.line == "[DateError]: the date given was not understood" for d in answered)
    assert len(model.threads) == len(raws)  # each error asked once
    assert len(set(model.threads)) <= MAX_ASKING
    assert all(thread.daemon for thread in model.threads)


def test_a_summarizer_that_is_no_function_and_negative_cache_sizes_are_refused_when_made() -> None:
    """The summarizer is called only for an error no parser recognises, on the summary thread, where a
    string given for it failed unseen; a negative cache size is no size. Each is refused when the
    compactor is made, naming the field."""
    import pytest

    from otel_errcompact import ConfigurationError

    with pytest.raises(ConfigurationError, match=r"^Compactor\.summarizer='gpt-4o-mini': expected a function"):
        Compactor(summarizer="gpt-4o-mini")  # type: ignore[arg-type]
    for name in ("summary_cache_size", "digest_cache_size"):
        with pytest.raises(ConfigurationError, match=rf"^Compactor\.{name}=-1: expected an integer ≥ 0"):
            Compactor(**{name: -1})  # type: ignore[arg-type]
