"""Digests made in the compacting process are the digests the agent's process would make.

The digest thread sends failed spans' raw errors to a child process (:mod:`otel_errcompact._compacting_process`)
so compacting them never holds the agent process's GIL. Whatever happens to the child (killed, stuck,
never started, inherited across a ``fork``) the digests must equal the default compactor's in place.
Every text compacted here is real tool output: the committed agent corpus (``benchmarks/agent_corpus``),
real tracebacks, and hostile input made by real calls.
"""

from __future__ import annotations

import dataclasses
import json
import logging
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from opentelemetry.trace import Status, StatusCode

from otel_errcompact import _compacting_process
from otel_errcompact._compacting_process import CompactingProcess, CompactingProcessError, digest_fields
from otel_errcompact._helper_process import CLOSE_WAIT_S, MAX_STARTS
from otel_errcompact.compactor import Compactor, compact_text
from otel_errcompact.digest import Digest
from otel_errcompact.redact import add_pattern, clear_patterns, patterns
from tests.conftest import OTel, answer_from_fork
from tests.realerrors import python_error
from tests.test_deferred import _made_without_a_reader

ROOT = Path(__file__).resolve().parent.parent
CORPUS = ROOT / "benchmarks" / "agent_corpus"


def _corpus() -> list[str]:
    texts = []
    for path in sorted(CORPUS.glob("*.jsonl")):
        if path.name.endswith(".pairs.jsonl"):
            continue
        for line in path.read_text(encoding="utf-8").splitlines():
            texts.append(json.loads(line)["text"])
    return texts


def _hostile(tmp_path: Path) -> list[str]:
    return [
        os.fsdecode(b"caf\xe9.txt") + ": no such file",  # a lone surrogate, as os.listdir returns it
        os.urandom(4096).decode("latin-1"),  # binary junk
        python_error(tmp_path, "raise ValueError('x' * 3_000_000)\n"),  # a 3 MB message
        "",
    ]


@pytest.fixture
def process() -> Iterator[CompactingProcess]:
    own = CompactingProcess()
    try:
        yield own
    finally:
        own.close()


def _pid(process: CompactingProcess) -> int:
    pid = process.pid
    assert pid is not None
    return pid


@pytest.mark.timeout(300)
def test_every_digest_of_the_agent_corpus_equals_the_one_made_in_place(process: CompactingProcess,
                                                                         tmp_path: Path) -> None:
    texts = _corpus() + _hostile(tmp_path)
    assert len(texts) > 1100
    made = []
    for start in range(0, len(texts), 50):  # the digest thread's batches are of this order
        made.extend(process.compact(texts[start : start + 50]))
    expected = [Compactor().compact(text) for text in texts]
    differ = [(text[:200], got.line, want.line) for text, got, want in zip(texts, made, expected, strict=True)
              if got != want]
    assert differ == []
    assert len({digest.key for digest in made}) > 150, "distinct causes, not one digest for all"
    # every field of the three classes goes across (a field added to them must be carried too)
    assert len(digest_fields(made[0])) == len(dataclasses.fields(Digest))
    located = next(d for d in made if d.location is not None)
    assert digest_fields(located)[2] == dataclasses.astuple(located.location)
    assert digest_fields(located)[6] == dataclasses.astuple(located.key_parts)


@pytest.mark.timeout(60)
def test_the_redaction_patterns_registered_in_the_agent_apply_in_the_child(process: CompactingProcess,
                                                                             tmp_path: Path) -> None:
    text = python_error(tmp_path, "raise KeyError('ACME-884411')\n")
    try:
        add_pattern(r"ACME-[0-9]{6}")
        masked = process.compact([text], patterns())[0]
        assert "ACME-884411" not in masked.line and masked == compact_text(text)
    finally:
        clear_patterns()
    plain = process.compact([text], patterns())[0]  # forgotten again, in the child too
    assert "ACME-884411" in plain.line and plain == compact_text(text)


@pytest.mark.timeout(60)
def test_a_child_killed_between_batches_is_started_again(process: CompactingProcess, tmp_path: Path) -> None:
    texts = _hostile(tmp_path)[:2]
    expected = [compact_text(text) for text in texts]
    assert process.compact(texts) == expected
    first = _pid(process)
    os.kill(first, signal.SIGKILL)
    running = process._process
    assert running is not None
    running.wait(timeout=10)
    assert process.compact(texts) == expected
    assert _pid(process) != first and process.starts == 2


@pytest.mark.timeout(60)
def test_a_child_that_stops_answering_is_reported_then_replaced(process: CompactingProcess, tmp_path: Path,
                                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    texts = _hostile(tmp_path)[:1]
    assert process.compact(texts) == [compact_text(texts[0])]
    stuck = _pid(process)
    os.kill(stuck, signal.SIGSTOP)
    monkeypatch.setattr(_compacting_process, "REPLY_TIMEOUT_S", 0.5)
    with pytest.raises(CompactingProcessError, match="stopped answering"):
        process.compact(texts)
    with pytest.raises(ProcessLookupError):  # killed and reaped, stopped as it was
        os.kill(stuck, signal.SIGCONT)
    monkeypatch.undo()
    assert process.compact(texts) == [compact_text(texts[0])]
    process.close()
    with pytest.raises(CompactingProcessError, match="closed"):
        process.compact(texts)


@pytest.mark.timeout(60)
def test_closing_does_not_wait_for_a_child_that_stopped_answering(process: CompactingProcess, tmp_path: Path) -> None:
    """At exit a batch may be out to a child that will never answer: close() kills it rather than wait
    out the batch's reply timeout, and the batch fails as when the child dies."""
    texts = _hostile(tmp_path)[:1]
    assert process.compact(texts) == [compact_text(texts[0])]
    os.kill(_pid(process), signal.SIGSTOP)
    failed: list[BaseException] = []

    def batch() -> None:
        try:
            process.compact(texts)
        except CompactingProcessError as exc:
            failed.append(exc)

    thread = threading.Thread(target=batch)
    thread.start()
    time.sleep(0.2)  # the batch is out, waiting for the stopped child
    started = time.monotonic()
    process.close()
    thread.join(10)
    assert time.monotonic() - started < CLOSE_WAIT_S + 5 < _compacting_process.REPLY_TIMEOUT_S
    assert not thread.is_alive() and len(failed) == 1 and "stopped answering" in str(failed[0])
    assert process.pid is None
    with pytest.raises(CompactingProcessError, match="closed"):
        process.compact(texts)


_KILLED_AGENT = """
import sys, time
from pathlib import Path
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import Status, StatusCode
import otel_errcompact
from otel_errcompact import _compacting_process
from tests.realerrors import python_error

provider = TracerProvider()
provider.add_span_processor(BatchSpanProcessor(InMemorySpanExporter()))
ec = otel_errcompact.init(tracer_provider=provider, sqlite_path=sys.argv[1] + "/t.db", compaction_process=True)
raw = python_error(Path(sys.argv[1]), "d = {}\\nd['user_id']\\n")
with provider.get_tracer("t").start_as_current_span(
    "execute_tool lookup", attributes={"gen_ai.operation.name": "execute_tool", "gen_ai.tool.name": "lookup"}
) as span:
    span.add_event("exception", {"exception.type": "KeyError", "exception.stacktrace": raw})
    span.set_status(Status(StatusCode.ERROR, "KeyError"))
deadline = time.monotonic() + 30
while _compacting_process.shared().pid is None and time.monotonic() < deadline:
    time.sleep(0.01)
print(_compacting_process.shared().pid, flush=True)
time.sleep(60)
"""


@pytest.mark.timeout(90)
def test_the_child_ends_when_the_agent_is_killed(tmp_path: Path) -> None:
    """``kill -9`` of the agent runs no exit handler: the child ends because its input closes."""
    agent = subprocess.Popen([sys.executable, "-c", _KILLED_AGENT, str(tmp_path)], cwd=ROOT,
                             stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        assert agent.stdout is not None
        line = agent.stdout.readline().strip()
        assert line.isdigit(), (line, agent.stderr.read() if agent.poll() is not None and agent.stderr else "")
        child = int(line)
        os.kill(child, 0)  # running
    finally:
        agent.kill()
        agent.wait(30)
    deadline = time.monotonic() + 20
    while Path(f"/proc/{child}").exists() and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not Path(f"/proc/{child}").exists() or "Z" in Path(f"/proc/{child}/stat").read_text().split()[2]


def _raws(tmp_path: Path, count: int) -> list[str]:
    names = ["user_id", "order", "email", "session", "region", "locale", "quota", "plan", "tenant", "owner"]
    return [python_error(tmp_path, f"d = {{}}\nd[{name!r}]\n") for name in names[:count]]


def _fail(otel: OTel, raws: list[str]) -> None:
    tracer = otel.tracer_provider.get_tracer("test")
    for raw in raws:
        attributes = {"gen_ai.operation.name": "execute_tool", "gen_ai.tool.name": "lookup"}
        with tracer.start_as_current_span("execute_tool lookup", attributes=attributes) as span:
            span.add_event("exception", {"exception.type": "KeyError", "exception.message": "x",
                                         "exception.stacktrace": raw})
            span.set_status(Status(StatusCode.ERROR, "KeyError"))


def _exported_digests(otel: OTel) -> dict[str, str]:
    otel.tracer_provider.force_flush()
    return {str(s.attributes["errcompact.key"]): str(s.attributes["errcompact.digest"])
            for s in otel.span_exporter.get_finished_spans() if s.attributes and "errcompact.key" in s.attributes}


@pytest.mark.timeout(120)
def test_init_makes_failed_spans_digests_in_the_child_and_they_are_the_in_place_ones(
    tmp_path: Path, make_otel: Callable[..., OTel], monkeypatch: pytest.MonkeyPatch
) -> None:
    huge = _hostile(tmp_path)[2]  # a 3 MB message: the compactor cuts it, so it is cut in place
    raws = [*_raws(tmp_path, 6), huge]
    otel = make_otel(batch=True, export_delay_ms=60_000, compaction_process=True)
    compacting = otel.ec.pipeline.compacting
    assert compacting is _compacting_process.shared()
    sent: list[int] = []
    compact = compacting.compact

    def noted(texts: list[str], rules: Any = ()) -> Any:
        sent.extend(len(text) for text in texts)
        return compact(texts, rules)

    monkeypatch.setattr(compacting, "compact", noted)
    _fail(otel, raws)
    assert _made_without_a_reader(otel)  # by the digest thread, not by a flush on this one
    assert _exported_digests(otel) == {compact_text(raw).key: compact_text(raw).line for raw in raws}
    assert compacting.pid is not None and compacting.starts >= 1, "the digest thread's batches went to the child"
    assert sorted(sent) == sorted(len(raw) for raw in raws if raw is not huge)


@pytest.mark.timeout(120)
def test_a_compactor_of_the_callers_own_runs_in_place(tmp_path: Path, make_otel: Callable[..., OTel]) -> None:
    raws = _raws(tmp_path, 2)
    seen: list[str] = []

    class Mine(Compactor):
        def compact(self, raw, **hints):  # type: ignore[no-untyped-def, override]
            seen.append(str(raw))
            return super().compact(raw, **hints)

    otel = make_otel(batch=True, export_delay_ms=60_000, compactor=Mine(), compaction_process=True)
    assert otel.ec.pipeline.compacting is None
    _fail(otel, raws)
    assert otel.ec.flush(30)
    assert sorted(seen) == sorted(raws)


@pytest.mark.timeout(120)
def test_without_a_child_the_digests_are_made_in_place_and_that_is_said_once(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture, make_otel: Callable[..., OTel]
) -> None:
    monkeypatch.setattr(sys, "frozen", True, raising=False)  # a frozen application: no interpreter to start
    nowhere = CompactingProcess()
    monkeypatch.setattr(_compacting_process, "shared", lambda: nowhere)
    raws = _raws(tmp_path, 3 * MAX_STARTS)
    otel = make_otel(batch=True, export_delay_ms=60_000, compaction_process=True)
    assert otel.ec.pipeline.compacting is nowhere
    with caplog.at_level(logging.INFO, logger="otel_errcompact"):
        for raw in raws:  # one batch each
            _fail(otel, [raw])
            assert _made_without_a_reader(otel)
    assert _exported_digests(otel) == {compact_text(raw).key: compact_text(raw).line for raw in raws}
    assert nowhere.pid is None and nowhere.starts == MAX_STARTS  # then no more tries
    said = [r.getMessage() for r in caplog.records if "made in this process" in r.getMessage()]
    assert len(said) == 1 and "no Python interpreter" in said[0]


@pytest.mark.parametrize(("cores", "setting", "used"), [
    (2, None, False), (4, None, True), (16, "auto", True), (2, True, True), (16, False, False),
])
def test_init_uses_the_child_where_it_has_a_core_of_its_own_unless_told(
    make_otel: Callable[..., OTel], monkeypatch: pytest.MonkeyPatch, cores: int, setting: bool | str | None, used: bool
) -> None:
    monkeypatch.setattr(_compacting_process, "usable_cores", lambda: cores)
    otel = make_otel(batch=True, compaction_process=setting)
    assert (otel.ec.pipeline.compacting is _compacting_process.shared()) is used
    assert (otel.ec.pipeline.compacting is None) is not used


@pytest.mark.timeout(60)
@pytest.mark.skipif(not hasattr(os, "fork"), reason="POSIX fork")
def test_a_forked_process_compacts_with_its_own_child(process: CompactingProcess, tmp_path: Path) -> None:
    texts = _hostile(tmp_path)[:2]
    expected = [digest_fields(compact_text(text)) for text in texts]
    assert [digest_fields(d) for d in process.compact(texts)] == expected
    parents = _pid(process)

    def in_the_fork() -> dict[str, Any]:
        answer = {"fields": [digest_fields(d) for d in process.compact(texts)], "pid": _pid(process)}
        process.close()
        return answer

    answer = answer_from_fork(in_the_fork)
    assert answer["pid"] != parents
    assert [tuple(tuple(v) if isinstance(v, list) else v for v in f) for f in answer["fields"]] == expected
    assert [digest_fields(d) for d in process.compact(texts)] == expected  # the parent's is untouched
    assert _pid(process) == parents
