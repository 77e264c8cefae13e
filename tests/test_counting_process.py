"""Token counts for the metrics are made in a child process: the agent's process loads no vocabulary.

The counts must equal :func:`count_tokens` whatever happens to the child: killed between or during
batches, never started (no interpreter to run it), or inherited across a ``fork``. Every text counted
here is a real traceback, a real source file or text as a real call returns it.
"""

from __future__ import annotations

import json
import logging
import os
import signal
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

import otel_errcompact
from otel_errcompact import _counting_process, tokens
from otel_errcompact._counting_process import MAX_STARTS, CountingProcess, CountingProcessError
from otel_errcompact.tokens import background_counter, count_tokens
from tests.conftest import answer_from_fork
from tests.realerrors import python_error

ROOT = Path(__file__).resolve().parent.parent


def _texts(tmp_path: Path) -> list[str]:
    return [
        python_error(tmp_path, "import json\njson.loads('{\"a\": [1, 2,')\n"),
        Path(otel_errcompact.__file__).read_text(encoding="utf-8"),
        os.fsdecode(b"caf\xe9.txt") + ": no such file",  # a lone surrogate, as os.listdir returns it
        "",
    ]


def _own_process(encoding: str = "o200k_base") -> CountingProcess:
    extension = tokens._extension_path()
    assert extension is not None, "bpe-openai's extension is a dependency"
    return CountingProcess(extension, encoding)


def _payload(texts: list[str]) -> list[bytes]:
    return [text.encode("utf-8", "replace") for text in texts]


def _pid(process: CountingProcess) -> int:
    running = process._process
    assert running is not None
    return running.pid


@dataclass
class Started:
    """A counting process of its own (not the shared one), that has counted ``texts`` once."""

    process: CountingProcess
    texts: list[str]
    expected: list[int]

    def counts(self) -> list[int]:
        return self.process.count(_payload(self.texts))


@pytest.fixture
def started(tmp_path: Path) -> Iterator[Started]:
    texts = _texts(tmp_path)
    process = _own_process()
    try:
        here = Started(process, texts, [count_tokens(text) for text in texts])
        assert here.counts() == here.expected
        yield here
    finally:
        process.close()


_AGENT = """
import json, os, sys
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import InMemoryMetricReader
from opentelemetry.sdk.trace import TracerProvider
import otel_errcompact
from tests.conftest import metric_points
from tests.realerrors import python_error
from pathlib import Path

reader = InMemoryMetricReader()
ec = otel_errcompact.init(tracer_provider=TracerProvider(), meter_provider=MeterProvider(metric_readers=[reader]),
                          sqlite_path=sys.argv[1] + "/t.db")
raws = [python_error(Path(sys.argv[1]), f"raise KeyError('k{i}')\\n") for i in range(3)]
for i in range(30):
    ec.record_error(raws[i % 3], scope=f"conv-{i}", tool_name="lookup")
assert ec.flush(60)
loaded = sorted(name for name in ("bpe_openai._bindings", "bpe_openai", "tiktoken") if name in sys.modules)
total = sum(int(p.value) for p in metric_points(reader, "errcompact.tokens.raw"))
from otel_errcompact._counting_process import running_pids
from otel_errcompact.tokens import count_tokens
parents = [int(Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[1]) for pid in running_pids()]
print(json.dumps({"loaded": loaded, "raw": total, "exact": 10 * sum(count_tokens(r) for r in raws),
                  "parents": parents, "me": os.getpid()}))
ec.shutdown()
"""


@pytest.mark.timeout(120)
def test_an_agent_with_metrics_loads_no_tokenizer_and_gets_exact_counts(tmp_path: Path) -> None:
    out = subprocess.run(
        [sys.executable, "-c", _AGENT, str(tmp_path)], cwd=ROOT, capture_output=True, text=True, timeout=100
    )
    assert out.returncode == 0, out.stderr
    assert "tokenizer" not in out.stderr and "counted in this process" not in out.stderr, out.stderr
    result = json.loads(out.stdout.splitlines()[-1])
    assert result["loaded"] == []
    assert abs(result["raw"] - result["exact"]) <= 0.01 * result["exact"]
    assert result["parents"] == [result["me"]], "running_pids names the agent's one counting process"


@pytest.mark.timeout(60)
def test_a_counting_process_killed_between_batches_is_started_again(started: Started) -> None:
    process = started.process
    first = _pid(process)
    os.kill(first, signal.SIGKILL)
    running = process._process
    assert running is not None
    running.wait(timeout=10)  # dead and reaped before the next batch
    assert started.counts() == started.expected
    assert _pid(process) != first
    assert process.starts == 2


@pytest.mark.timeout(60)
def test_a_counting_process_that_stops_answering_is_reported_then_replaced(
    started: Started, monkeypatch: pytest.MonkeyPatch
) -> None:
    process = started.process
    stuck = _pid(process)
    os.kill(stuck, signal.SIGSTOP)  # alive, never answers
    monkeypatch.setattr(_counting_process, "REPLY_TIMEOUT_S", 0.5)
    with pytest.raises(CountingProcessError, match="stopped answering"):
        started.counts()
    with pytest.raises(ProcessLookupError):  # killed and reaped, stopped as it was
        os.kill(stuck, signal.SIGCONT)
    monkeypatch.undo()
    assert started.counts() == started.expected
    assert _pid(process) != stuck
    process.close()
    with pytest.raises(CountingProcessError, match="closed"):
        started.counts()


@pytest.mark.timeout(60)
@pytest.mark.parametrize(
    ("interpreter", "why"),
    [("mute", "did not start"), ("frozen", "no Python interpreter")],
    ids=["ends-without-a-word", "frozen-application"],
)
def test_without_a_counting_process_the_counts_are_made_in_place_and_said_once(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture, interpreter: str, why: str
) -> None:
    texts = _texts(tmp_path)
    if interpreter == "mute":  # an interpreter that starts and ends without answering
        mute = tmp_path / "python3"
        mute.write_text("#!/bin/sh\nexit 0\n", encoding="utf-8")
        mute.chmod(0o755)
        monkeypatch.setattr(sys, "executable", str(mute))
    else:  # a frozen application's executable is the application: never started again
        monkeypatch.setattr(sys, "frozen", True, raising=False)
    process = _own_process()
    monkeypatch.setattr(tokens, "shared", lambda extension, encoding: process)
    count = background_counter()
    with caplog.at_level(logging.WARNING, logger="otel_errcompact"):
        for _ in range(MAX_STARTS + 2):
            assert count(texts) == [count_tokens(text) for text in texts]
    assert process.starts == MAX_STARTS  # then no more tries
    said = [r.getMessage() for r in caplog.records if "counted in this process" in r.getMessage()]
    assert len(said) == 1 and why in said[0]


@pytest.mark.timeout(60)
@pytest.mark.skipif(not hasattr(os, "fork"), reason="POSIX fork")
def test_a_forked_process_counts_with_its_own_counting_process(started: Started) -> None:
    process = started.process
    parents = _pid(process)

    def in_the_fork() -> dict[str, Any]:
        answer = {"counts": started.counts(), "pid": _pid(process)}
        process.close()
        return answer

    answer = answer_from_fork(in_the_fork)
    assert answer["counts"] == started.expected
    assert answer["pid"] != parents
    # The fork's close left the parent's counting process alone.
    assert started.counts() == started.expected
    assert _pid(process) == parents
