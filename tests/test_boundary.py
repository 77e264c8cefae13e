"""The tool boundary: wrapped tools return results or compact errors, never raw tracebacks.

The tools here fail for real: dict lookups, ``json.loads`` on bad input, a missing file, a shell
command that exits non-zero. Spans go through a real SDK pipeline (see ``tests/conftest.py``).
"""

from __future__ import annotations

import asyncio
import contextvars
import json
import re
import subprocess
import time
import traceback
from collections.abc import Callable, Coroutine
from pathlib import Path
from typing import Any

import pytest
from opentelemetry import trace
from opentelemetry.sdk._logs import LoggerProvider
from opentelemetry.sdk._logs.export import InMemoryLogRecordExporter, SimpleLogRecordProcessor
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import InMemoryMetricReader
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.sampling import ALWAYS_OFF, ParentBased
from opentelemetry.trace import Status, StatusCode

import otel_errcompact
from otel_errcompact import ErrorBudgetExceeded, Escalation, Limits, Thresholds, ToolErrorText
from otel_errcompact.claims import claimed, current_claim
from tests.conftest import OTel, metric_points

HERE = Path(__file__).name


def only_span(otel: OTel, name: str) -> ReadableSpan:
    spans = otel.spans(name)
    assert len(spans) == 1, [s.name for s in otel.spans()]
    return spans[0]


def assert_compact(text: object) -> ToolErrorText:
    assert isinstance(text, ToolErrorText)
    assert isinstance(text, str)
    assert "Traceback" not in text
    assert "File \"" not in text
    assert text.count("\n") == 0
    return text


def test_sync_tool_returns_the_digest_and_records_the_traceback(make_otel: Callable[..., OTel]) -> None:
    otel = make_otel(capture_arguments=True)  # arguments are recorded only on opt-in

    @otel.ec.tool
    def get_order(orders: dict[str, int], order_id: str) -> int:
        return orders[order_id]

    assert get_order({"o-1": 3}, "o-1") == 3
    text = assert_compact(get_order({"o-1": 3}, "order_id"))
    assert text.startswith("Error: [KeyError] at test_boundary.py:")
    assert "in get_order" in text and "'order_id'" in text
    assert "boundary.py" not in text.replace(HERE, "")

    spans = otel.spans("execute_tool get_order")
    assert len(spans) == 2
    ok, failed = spans
    assert ok.status.status_code is StatusCode.UNSET
    assert not any(k.startswith("errcompact.") for k in (ok.attributes or {}))
    assert failed.status.status_code is StatusCode.ERROR
    attrs = failed.attributes or {}
    assert attrs["gen_ai.operation.name"] == "execute_tool"
    assert attrs["gen_ai.tool.name"] == "get_order"
    assert attrs["error.type"] == "KeyError"
    assert attrs["errcompact.digest"] in text
    stack = next(e for e in failed.events if e.name == "exception").attributes["exception.stacktrace"]  # type: ignore[index]

    records = otel.records()
    assert len(records) == 1
    record = records[0]
    assert record.record_id == text.record_id
    assert record.raw_error == stack
    assert "Traceback (most recent call last)" in record.raw_error
    assert "in get_order" in record.raw_error
    assert json.loads(str(record.tool_arguments)) == {"orders": {"o-1": 3}, "order_id": "order_id"}
    assert record.digest is not None and record.digest.line in text


def test_location_is_the_tool_function_not_the_library_or_the_boundary(otel: OTel) -> None:
    @otel.ec.tool
    def load_manifest(text: str) -> Any:
        return json.loads(text)

    text = assert_compact(load_manifest("{'single': 'quotes'}"))
    assert "[JSONDecodeError]" in text
    assert f"at {HERE}:" in text and "in load_manifest" in text
    assert "decoder.py" not in text and "boundary.py" not in text.replace(HERE, "")


def test_named_tool_with_on_error_raise_reraises_after_recording(otel: OTel, tmp_path: Path) -> None:
    @otel.ec.tool(name="read_file", on_error="raise")
    def read(path: str) -> str:
        return Path(path).read_text(encoding="utf-8")

    with pytest.raises(FileNotFoundError):
        read(str(tmp_path / "missing.txt"))
    span = only_span(otel, "execute_tool read_file")
    assert span.status.status_code is StatusCode.ERROR
    assert (span.attributes or {})["gen_ai.tool.name"] == "read_file"
    records = otel.records()
    assert len(records) == 1
    assert records[0].tool_name == "read_file"
    assert records[0].digest is not None and "missing.txt" in records[0].digest.line


def test_async_tool(otel: OTel) -> None:
    @otel.ec.tool
    async def fetch_price(prices: dict[str, float], sku: str) -> float:
        await asyncio.sleep(0)
        return prices[sku]

    async def main() -> tuple[Any, Any]:
        with otel.ec.conversation("conv-async"):
            return await fetch_price({"a": 1.5}, "a"), await fetch_price({"a": 1.5}, "sku-b")

    good, bad = asyncio.run(main())
    assert good == 1.5
    text = assert_compact(bad)
    assert "[KeyError]" in text and "in fetch_price" in text and "'sku-b'" in text
    spans = otel.spans("execute_tool fetch_price")
    assert [s.status.status_code for s in spans] == [StatusCode.UNSET, StatusCode.ERROR]
    assert (spans[1].attributes or {})["gen_ai.conversation.id"] == "conv-async"
    records = otel.records()
    assert [r.scope for r in records] == ["conv-async"]
    assert "'sku-b'" in otel.ec.context("conv-async")


def test_generator_tools_and_async_callables_fail_inside_the_boundary(otel: OTel, tmp_path: Path) -> None:
    """A generator tool (sync or async) fails while it is iterated, and an object's async ``__call__`` while
    it is awaited: both inside the boundary, so the agent gets the digest, never the raw exception."""
    present = tmp_path / "present.txt"
    present.write_text("a\nb\n")

    @otel.ec.tool
    def read_lines(path: str) -> Any:
        with open(path) as f:
            yield from f

    @otel.ec.tool
    async def read_lines_async(path: str) -> Any:
        with open(path) as f:
            for line in f:
                yield line

    class Lookup:
        async def __call__(self, key: str) -> int:
            await asyncio.sleep(0)
            return {"a": 1}[key]

    lookup = otel.ec.tool(Lookup())

    async def main() -> tuple[Any, ...]:
        return (await read_lines_async(str(present)), await read_lines_async(str(tmp_path / "gone.txt")),
                await lookup("a"), await lookup("b"))  # fmt: skip

    with otel.ec.conversation("gen"):
        assert read_lines(str(present)) == ["a\n", "b\n"]
        missing = assert_compact(read_lines(str(tmp_path / "missing.txt")))
        lines, gone, one, unknown = asyncio.run(main())
    assert "[FileNotFoundError]" in missing and "in read_lines:" in missing
    assert lines == ["a\n", "b\n"] and one == 1
    assert "[FileNotFoundError]" in assert_compact(gone) and "in read_lines_async:" in gone
    assert "[KeyError]" in assert_compact(unknown) and "'b'" in unknown
    assert "3 tool failure(s), 3 distinct" in otel.ec.context("gen")
    assert [s.status.status_code for s in otel.spans("execute_tool Lookup")] == [StatusCode.UNSET, StatusCode.ERROR]


def test_callable_objects_whose_call_is_a_generator_fail_inside_the_boundary(otel: OTel, tmp_path: Path) -> None:
    """An object whose ``__call__`` is a generator (sync or async) is run to its end inside the boundary,
    as a generator function is: its failure is a digest, not an exception raised later, past the boundary,
    while the agent iterates what the call handed back."""
    present = tmp_path / "present.txt"
    present.write_text("a\nb\n")

    class ReadLines:
        def __call__(self, path: str) -> Any:
            with open(path) as f:
                yield from f

    class ReadLinesAsync:
        async def __call__(self, path: str) -> Any:
            with open(path) as f:
                for line in f:
                    yield line

    read_lines, read_lines_async = otel.ec.tool(ReadLines()), otel.ec.tool(ReadLinesAsync())

    async def main() -> tuple[Any, Any]:
        return await read_lines_async(str(present)), await read_lines_async(str(tmp_path / "gone.txt"))

    with otel.ec.conversation("gen-objects"):
        assert read_lines(str(present)) == ["a\n", "b\n"]
        missing = assert_compact(read_lines(str(tmp_path / "missing.txt")))
        lines, gone = asyncio.run(main())
    assert lines == ["a\n", "b\n"]
    assert "[FileNotFoundError]" in missing and "in __call__:" in missing and "missing.txt" in missing
    assert "[FileNotFoundError]" in assert_compact(gone) and "gone.txt" in gone
    assert "2 tool failure(s), 2 distinct" in otel.ec.context("gen-objects")


def test_tool_call_context_manager(make_otel: Callable[..., OTel]) -> None:
    otel = make_otel(capture_arguments=True)
    with otel.ec.conversation("conv-cm"):
        with otel.ec.tool_call("divide", call_id="call-7", arguments={"a": 1, "b": 0}) as call:
            quotient = 1 / 0
            raise AssertionError(f"unreachable {quotient}")
        assert call.error is not None
        text = assert_compact(call.error)
        assert "[ZeroDivisionError]" in text and "in test_tool_call_context_manager" in text
        assert otel.ec.context() == otel.ec.context("conv-cm") != ""

        with otel.ec.tool_call("noop") as ok_call:
            pass
        assert ok_call.error is None

    span = only_span(otel, "execute_tool divide")
    attrs = span.attributes or {}
    assert attrs["gen_ai.tool.call.id"] == "call-7"
    assert span.status.status_code is StatusCode.ERROR
    record = otel.records()[0]
    assert record.tool_call_id == "call-7"
    assert record.conversation_id == "conv-cm"
    assert json.loads(str(record.tool_arguments)) == {"a": 1, "b": 0}


def test_mcp_style_error_result(otel: OTel, tmp_path: Path) -> None:
    """A tool that reports failure as data, the way MCP servers do, with a real command's stderr."""

    @otel.ec.tool
    def list_dir(path: str) -> dict[str, Any]:
        proc = subprocess.run(["ls", path], capture_output=True, text=True, check=False)
        if proc.returncode != 0:
            return {"isError": True, "content": [{"type": "text", "text": proc.stderr}]}
        return {"isError": False, "content": [{"type": "text", "text": proc.stdout}]}

    ok = list_dir(str(tmp_path))
    assert isinstance(ok, dict) and ok["isError"] is False
    missing = str(tmp_path / "no-such-dir")
    stderr = subprocess.run(["ls", missing], capture_output=True, text=True, check=False).stderr
    text = assert_compact(list_dir(missing))

    failed = [s for s in otel.spans("execute_tool list_dir") if s.status.status_code is StatusCode.ERROR]
    assert len(failed) == 1
    attrs = failed[0].attributes or {}
    assert attrs["error.type"] == "tool_error"
    assert failed[0].status.description == stderr
    records = otel.records()
    assert len(records) == 1
    assert records[0].raw_error == stderr
    assert records[0].digest is not None
    assert "no-such-dir" in records[0].digest.line
    assert records[0].digest.line in text


def test_a_tool_that_returns_the_traceback_it_caught_is_a_failure_with_error_of(otel: OTel) -> None:
    """A code runner that catches the exception and returns its traceback, as agent harnesses' tools do:
    with ``error_of`` the call fails as a raising tool's does (recorded in full, counted, halted at the
    threshold) and the agent gets the digest, never the traceback."""

    def caught(result: str) -> str | None:
        return result if result.startswith("Traceback (most recent call last):") else None

    @otel.ec.tool(error_of=caught)
    def run_python(code: str) -> str:
        try:
            exec(compile(code, "job.py", "exec"), {})
        except Exception:
            return traceback.format_exc()
        return "ok"

    code = "def load(settings):\n    return settings['region']\n\nload({})\n"
    assert run_python("x = 1") == "ok"
    with otel.ec.conversation("conv-runner"):
        results = [run_python(code) for _ in range(3)]
        with pytest.raises(ErrorBudgetExceeded):
            run_python(code)
    first = assert_compact(results[0])
    assert first.startswith("Error: [KeyError] at job.py:2 in load: 'region'")
    assert "Traceback" not in first and results[1].endswith("(×2)") and results[2].escalated
    failed = [s for s in otel.spans("execute_tool run_python") if s.status.status_code is StatusCode.ERROR]
    assert len(failed) == 3 and (failed[0].attributes or {})["error.type"] == "tool_error"
    records = otel.records()
    assert len(records) == 3 and records[0].raw_error.startswith("Traceback (most recent call last):")
    assert 'File "job.py", line 2, in load' in records[0].raw_error


def test_an_error_of_that_fails_leaves_the_result_as_it_is(otel: OTel, tmp_path: Path) -> None:
    """``error_of`` is the user's code: one that raises on a result must not raise into the agent."""

    def strict(result: subprocess.CompletedProcess[str]) -> str | None:
        return result.stderr.splitlines()[0] if result.returncode else None  # raises on an empty stderr

    @otel.ec.tool(error_of=strict)
    def shell(*argv: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(list(argv), capture_output=True, text=True, check=False, cwd=tmp_path)

    failed = shell("ls", "no-such-file")
    assert "no-such-file" in assert_compact(failed)
    quiet = shell("false")  # exit 1, nothing on stderr: strict raises IndexError
    assert isinstance(quiet, subprocess.CompletedProcess) and quiet.returncode == 1
    assert len(otel.records()) == 1
def test_a_long_error_returned_as_data_is_bounded_on_the_span_and_whole_in_the_record(
    otel: OTel, tmp_path: Path
) -> None:
    """A failure returned as data gets the same bounds on its span as an exception's: a status description
    of ~1 KiB (head and tail), not the whole text, which leaves the process with every export."""

    @otel.ec.tool
    def stat_files(paths: list[str]) -> dict[str, Any]:
        proc = subprocess.run(["ls", *paths], capture_output=True, text=True, check=False)
        if proc.returncode != 0:
            return {"isError": True, "content": [{"type": "text", "text": proc.stderr}]}
        return {"isError": False, "content": [{"type": "text", "text": proc.stdout}]}

    paths = [str(tmp_path / f"missing-{i}.csv") for i in range(5000)]
    text = assert_compact(stat_files(paths))
    assert "missing-" in text

    (record,) = otel.records()
    stderr = record.raw_error
    assert len(stderr) > 300_000 and stderr.count("\n") == 5000  # the whole stderr, as the tool returned it
    (span,) = otel.spans("execute_tool stat_files")
    description = span.status.description or ""
    assert len(description) <= 1200
    first, *_, last = stderr.splitlines()
    assert description.startswith(first[:200]) and description.rstrip("\n").endswith(last)


@pytest.mark.parametrize(
    ("options", "named"),
    [
        ({"on_error": "ignore"}, "on_error='ignore': expected one of 'digest', 'raise'"),
        ({"retry": "3"}, "retry='3': expected a RetryPolicy or a number of attempts ≥ 1"),
        ({"retry": -1}, "retry=-1: expected a RetryPolicy or a number of attempts ≥ 1"),
        ({"error_of": "stderr"}, "error_of='stderr': expected a function of the tool's result"),
        ({"name": 7}, "name=7: expected a string"),
    ],
)
@pytest.mark.parametrize("enabled", [True, False], ids=["on", "switched-off"])
def test_a_tool_option_of_the_wrong_kind_is_refused_where_the_tool_is_declared(
    make_otel: Callable[..., OTel], options: dict[str, Any], named: str, enabled: bool
) -> None:
    """``@ec.tool(...)`` and ``ec.tool_call(...)`` refuse a bad option when the tool is declared, naming it:
    read only inside a call, ``on_error="ignore"`` was taken for the default and ``retry="3"`` failed with
    a TypeError of the library's own comparison. Switched off too: code runs the same with the switch in
    either position."""
    otel = make_otel(enabled=enabled)

    def lookup(key: str) -> int:
        return {"a": 1}[key]

    with pytest.raises(otel_errcompact.ConfigurationError, match=re.escape(named)):
        otel.ec.tool(**options)(lookup)
    if set(options) <= {"on_error", "name"}:
        call_options = {k: v for k, v in options.items() if k != "name"}
        with pytest.raises(otel_errcompact.ConfigurationError, match=re.escape(named)), otel.ec.tool_call(
            options.get("name", "lookup"), **call_options
        ):
            lookup("b")
    assert otel.ec.context("default") == ""  # nothing ran


def test_halt_raises_at_the_next_call_without_running_the_tool(otel: OTel) -> None:
    ran: list[str] = []

    @otel.ec.tool
    def lookup(key: str) -> str:
        ran.append(key)
        return {"a": "1"}[key]

    with otel.ec.conversation("conv-loop"):
        results = [lookup("missing") for _ in range(3)]
        assert [isinstance(r, ToolErrorText) and r.escalated for r in results] == [False, False, True]
        assert "threshold breached" in results[-1]
        with pytest.raises(ErrorBudgetExceeded) as info:
            lookup("missing")
        with pytest.raises(ErrorBudgetExceeded):
            otel.ec.check()
    assert len(ran) == 3
    assert info.value.escalation.reason == "consecutive"
    assert info.value.escalation.count == 3
    assert len(otel.spans("execute_tool lookup")) == 3  # the refused call opened no span
    with pytest.raises(ErrorBudgetExceeded):
        otel.ec.check("conv-loop")


def _lookups(ec: Any, steps: tuple[str, ...]) -> list[object]:
    """A decorated look-up called once per step, failing with a real KeyError on each "fail" step and
    finding its key on each "succeed" step; what each call returned."""
    available: set[str] = set()

    @ec.tool
    def lookup(key: str) -> str:
        return {k: "found" for k in available}[key]

    results: list[object] = []
    for step in steps:
        available.clear()
        if step == "succeed":
            available.add("k")
        results.append(lookup("k"))
    return results


def test_in_a_trace_the_sampler_left_out_a_success_still_ends_the_streak(tmp_path: Path) -> None:
    """With sampling (``ParentBased(TraceIdRatioBased(…))`` in production; here every trace is left out) no
    span processor reads the tool spans: the boundary counts each call itself, successes as well as
    failures, so a success between failures ends their streak and counts in ``errcompact.tool.calls``."""
    reader = InMemoryMetricReader()
    meter_provider = MeterProvider(metric_readers=[reader])
    ec = otel_errcompact.init(tracer_provider=TracerProvider(sampler=ALWAYS_OFF), meter_provider=meter_provider,
                              sqlite_path=tmp_path / "t.sqlite3", breaker_threshold=0)
    try:
        with ec.conversation("conv-sampled-out"):
            results = _lookups(ec, ("fail", "fail", "succeed", "fail", "fail", "succeed", "fail"))
            ec.check()  # two failures in a row at most: no halt
        assert results[2] == results[5] == "found"
        assert [r.escalated for r in results if isinstance(r, ToolErrorText)] == [False] * 5
        assert ec.history.escalation("conv-sampled-out") is None
        assert ec.flush()
        calls = {p.attributes["errcompact.outcome"]: p.value for p in metric_points(reader, "errcompact.tool.calls")}
        assert calls == {"ok": 2, "error": 5}
    finally:
        ec.shutdown()
        meter_provider.shutdown()


def test_in_a_trace_the_sampler_left_out_top_level_calls_count_in_the_default_scope(tmp_path: Path) -> None:
    """Top-level calls without a conversation in traces the sampler left out: each call is a trace of its
    own, but they count together in ``default``, as recorded ones do (a repeat is ``(×2)``, a success ends
    the streak, three in a row breach), and ``ec.context()`` shows them."""
    ec = otel_errcompact.init(tracer_provider=TracerProvider(sampler=ALWAYS_OFF), sqlite_path=tmp_path / "t.sqlite3",
                              breaker_threshold=0)
    try:
        results = _lookups(ec, ("fail", "fail", "succeed", "fail", "fail", "fail"))
        assert isinstance(results[1], str) and results[1].endswith("(×2)") and results[2] == "found"
        assert [r.escalated for r in results if isinstance(r, ToolErrorText)] == [False] * 4 + [True]
        assert "5 tool failure(s), 1 distinct" in ec.context()
        assert ec.history.scopes() == ["default"]
        with pytest.raises(ErrorBudgetExceeded):
            ec.check()
    finally:
        ec.shutdown()


def test_top_level_calls_count_in_the_default_scope(otel: OTel) -> None:
    @otel.ec.tool
    def ping(host: str) -> int:
        return {"localhost": 1}[host]

    ping("db.internal")
    second = assert_compact(ping("db.internal"))
    assert second.endswith("(×2)")
    assert "(×2)" in otel.ec.context()
    assert {r.scope for r in otel.records()} == {"default"}


def test_boundary_inside_an_agent_span_uses_its_conversation(otel: OTel) -> None:
    @otel.ec.tool
    def lookup(key: str) -> str:
        return {"a": "1"}[key]

    attrs = {"gen_ai.operation.name": "invoke_agent", "gen_ai.conversation.id": "conv-outer"}
    with otel.tracer.start_as_current_span("invoke_agent outer", attributes=attrs):
        for _ in range(3):
            lookup("b")
        with pytest.raises(ErrorBudgetExceeded):
            lookup("b")
    assert {r.scope for r in otel.records()} == {"conv-outer"}


def test_digest_text_vs_full_traceback_sizes(otel: OTel) -> None:
    """The agent sees one line; the store keeps the whole chained traceback."""

    def inner(config: dict[str, Any]) -> Any:
        return config["database"]["url"]

    @otel.ec.tool
    def connect(config: dict[str, Any]) -> Any:
        try:
            return inner(config)
        except KeyError as exc:
            raise RuntimeError("could not read the database settings") from exc

    text = assert_compact(connect({"cache": {}}))
    record = otel.records()[0]
    assert "The above exception was the direct cause" in record.raw_error
    assert len(text) * 3 < len(record.raw_error)
    expected = record.exception_stacktrace
    assert expected == record.raw_error


def test_tools_keep_their_signature_metadata(otel: OTel) -> None:
    @otel.ec.tool(name="search")
    def search_docs(query: str, limit: int = 5) -> list[str]:
        """Search the docs."""
        return [query] * limit

    assert search_docs.__name__ == "search_docs"
    assert search_docs.__doc__ == "Search the docs."
    assert search_docs("q", limit=2) == ["q", "q"]
    assert only_span(otel, "execute_tool search").attributes["gen_ai.tool.name"] == "search"  # type: ignore[index]


def test_with_the_master_switch_off_tools_raise_as_unwrapped(make_otel: Callable[..., OTel]) -> None:
    """With the master switch off the library is inert: no span, no digest, the tool's own exception."""
    otel = make_otel(enabled=False)

    @otel.ec.tool
    def lookup(key: str) -> str:
        return {"a": "1"}[key]

    @otel.ec.tool(name="runner", retry=2, mutating=True, error_of=lambda result: result or None)
    def runner(code: str) -> str:
        return code

    with pytest.raises(KeyError, match="zzz"):
        lookup("zzz")
    assert runner("Traceback …") == "Traceback …"  # every keyword is taken, and the result is left as it is
    assert otel.ec.writer is None
    assert otel.spans() == []


def _failed_json_parse(otel: OTel) -> BaseException:
    """Call a wrapped tool that fails on broken JSON; the exception it raised."""
    captured: list[BaseException] = []

    @otel.ec.tool
    def parse(text: str) -> Any:
        try:
            return json.loads(text)
        except ValueError as exc:
            captured.append(exc)
            raise

    assert_compact(parse("[1, 2,"))
    return captured[0]


def test_exception_text_matches_format_exception(otel: OTel) -> None:
    raised = _failed_json_parse(otel)
    record = otel.records()[0]
    # The stored stack ends with the same exception line the tool itself saw, unabridged.
    own = "".join(traceback.format_exception(raised))
    assert record.raw_error.rstrip().splitlines()[-1] == own.rstrip().splitlines()[-1]
    assert "in parse" in record.raw_error
    assert record.exception_type == "json.decoder.JSONDecodeError"


def test_the_exception_event_carries_the_conventions_attributes_and_no_deprecated_one(otel: OTel) -> None:
    """The ``exception`` event of a failed call has the three attributes the exception conventions define,
    its type named as the SDK names it; not ``exception.escaped``, which the conventions deprecate (and
    register as a boolean, where a string ``"False"`` was written)."""
    raised = _failed_json_parse(otel)
    (event,) = [e for e in only_span(otel, "execute_tool parse").events if e.name == "exception"]
    attributes = dict(event.attributes or {})
    assert set(attributes) == {"exception.type", "exception.message", "exception.stacktrace"}
    with otel.tracer.start_as_current_span("sdk") as span:
        span.record_exception(raised)  # the SDK's own event for the same exception
    (sdk_event,) = only_span(otel, "sdk").events
    assert attributes["exception.type"] == (sdk_event.attributes or {})["exception.type"]
    assert attributes["exception.message"] == (sdk_event.attributes or {})["exception.message"]


def test_arguments_are_not_captured_by_default(make_otel: Callable[..., OTel]) -> None:
    otel = make_otel()

    @otel.ec.tool
    def login(user: str, password: str) -> str:
        return {"ann": "ok"}[user]

    assert_compact(login("bob", "hunter2-secret"))
    span = only_span(otel, "execute_tool login")
    assert "gen_ai.tool.call.arguments" not in (span.attributes or {})
    record = otel.records()[0]
    assert record.tool_arguments is None
    assert "hunter2-secret" not in record.to_json()


def test_an_argument_is_rendered_once_per_call(make_otel: Callable[..., OTel], tmp_path: Path) -> None:
    """A call's arguments are encoded once, for the breaker's fingerprint and the span and record alike:
    an argument JSON cannot encode is rendered by its ``repr``, which a tool's argument may make costly
    (a dataframe, a lazy query) or count."""
    otel = make_otel(capture_arguments=True)

    class Query:
        rendered = 0

        def __repr__(self) -> str:
            Query.rendered += 1
            return "Query(select * from orders)"

    @otel.ec.tool
    def run(query: Query, path: str) -> str:
        return Path(path).read_text(encoding="utf-8")

    query = Query()
    assert_compact(run(query, str(tmp_path / "missing.sql")))
    assert Query.rendered == 1
    span = only_span(otel, "execute_tool run")
    assert "Query(select * from orders)" in str((span.attributes or {})["gen_ai.tool.call.arguments"])
    assert "Query(select * from orders)" in str(otel.records()[0].tool_arguments)


def _load_settings(path: str) -> dict[str, Any]:
    with open(path, encoding="utf-8") as fh:
        return dict(json.load(fh))


async def _load_settings_async(path: str) -> dict[str, Any]:
    await asyncio.sleep(0)
    return _load_settings(path)


def test_framework_span_around_a_wrapped_failure_is_not_a_success(otel: OTel, tmp_path: Path) -> None:
    """A framework's own tool span (OpenInference kind TOOL) that wraps ``@ec.tool`` ends OK because the
    tool returned the digest; it must not reset the consecutive counter, whether the boundary's span is
    nested inside it or (as with tracers that do not attach their spans to the context) not."""
    missing = str(tmp_path / "settings.json")
    wrapped = otel.ec.tool(_load_settings)
    tracer = otel.tracer
    with otel.ec.conversation("conv-nested"):
        for _ in range(3):  # nested: the boundary's span is a child of the framework's span
            with tracer.start_as_current_span("load", attributes={"openinference.span.kind": "TOOL"}):
                result = wrapped(missing)
    assert isinstance(result, ToolErrorText) and result.escalated
    assert otel.ec.history.escalation("conv-nested") is not None

    for _ in range(3):  # detached: the framework span starts no context and records the output it got
        text = wrapped(missing)
        framework = tracer.start_span(
            "load", attributes={"openinference.span.kind": "TOOL", "session.id": "default"}
        )
        framework.set_attribute("output.value", json.dumps({"content": str(text)}))
        framework.end()
    escalation = otel.ec.history.escalation("default")
    assert escalation is not None and escalation.reason == "consecutive"

    # A genuine success still resets the counter.
    otel.ec.acknowledge("default")
    wrapped(missing)
    ok = tracer.start_span("load", attributes={"openinference.span.kind": "TOOL", "session.id": "default"})
    ok.set_attribute("output.value", '{"db": "shop.db"}')
    ok.end()
    wrapped(missing)
    assert otel.ec.history.escalation("default") is None


@pytest.mark.parametrize("batch", [False, True], ids=["simple", "batch"])
def test_a_framework_span_failing_around_a_raising_wrapped_tool_is_one_failure(
    make_otel: Callable[..., OTel], tmp_path: Path, batch: bool
) -> None:
    """``@ec.tool(on_error="raise")`` inside a framework's own tool span: the exception leaves both spans,
    and both end failed, but it is one failed call, counted once."""
    otel = make_otel(batch=batch)
    wrapped = otel.ec.tool(on_error="raise")(_load_settings)
    missing = str(tmp_path / "settings.json")
    with otel.ec.conversation("conv-raise"):
        for _ in range(2):
            with pytest.raises(FileNotFoundError):  # noqa: SIM117 - the framework's span, then the call
                with otel.tracer.start_as_current_span(
                    "load", attributes={"openinference.span.kind": "TOOL", "tool.name": "load"}
                ):
                    wrapped(missing)
    otel.ec.flush()
    assert [s.status.status_code for s in otel.spans("load")] == [StatusCode.ERROR] * 2
    assert sorted(r.count or 0 for r in otel.records()) == [1, 2]
    assert "(×2)" in otel.ec.context("conv-raise")
    assert otel.ec.history.escalation("conv-raise") is None  # two calls: below the threshold of three


def test_a_decorated_tools_span_says_what_the_tool_is(otel: OTel) -> None:
    """The GenAI conventions' execute_tool span recommends ``gen_ai.tool.type`` and
    ``gen_ai.tool.description`` where known: a decorated function is a ``function`` tool, described by the
    first line of its docstring (what frameworks hand the model) or by ``description=``; a sync and an async
    tool, failing and succeeding, and a block run with ``ec.tool_call`` (which knows no more than a name)."""

    @otel.ec.tool
    def get_order(orders: dict[str, int], order_id: str) -> int:
        """Look up an order's quantity.

        Raises KeyError for an unknown order.
        """
        return orders[order_id]

    @otel.ec.tool(description="Parse a JSON document")
    async def parse(text: str) -> Any:
        return json.loads(text)

    get_order({"o-1": 3}, "o-1")
    get_order({"o-1": 3}, "o-2")
    asyncio.run(parse("{"))
    with otel.ec.tool_call("block"):
        pass

    described = {
        span.name: (span.attributes or {}).get("gen_ai.tool.description") for span in otel.spans()
        if (span.attributes or {}).get("gen_ai.tool.type") == "function"
    }
    assert described == {"execute_tool get_order": "Look up an order's quantity.",
                         "execute_tool parse": "Parse a JSON document"}
    assert len(otel.spans("execute_tool get_order")) == 2
    assert all(s.attributes and s.attributes["gen_ai.tool.type"] == "function"
               for s in otel.spans("execute_tool get_order"))
    assert "gen_ai.tool.type" not in (only_span(otel, "execute_tool block").attributes or {})


@pytest.mark.parametrize("batch", [False, True], ids=["simple", "batch"])
def test_a_wrapped_tool_calling_a_wrapped_tool_counts_each_failure_once(
    make_otel: Callable[..., OTel], tmp_path: Path, batch: bool
) -> None:
    """A tool that calls another wrapped tool: the inner call's exception leaving the outer call too is
    one failure (the outer call hands the agent the inner call's digest); an outer call that fails in a
    way of its own after the inner one failed is one failure more, not two."""
    otel = make_otel(batch=batch)
    missing = str(tmp_path / "settings.json")
    load = otel.ec.tool(name="load", on_error="raise")(_load_settings)
    aload = otel.ec.tool(name="aload", on_error="raise")(_load_settings_async)

    @otel.ec.tool
    def configure(path: str) -> dict[str, Any]:
        return load(path)

    @otel.ec.tool
    async def aconfigure(path: str) -> dict[str, Any]:
        return await aload(path)

    @otel.ec.tool
    def report(path: str) -> dict[str, Any]:
        settings = otel.ec.tool(_load_settings)(path)  # the digest, as a string
        return dict(settings)  # fails in a way of its own

    with otel.ec.conversation("conv-nested-raise"):
        text = assert_compact(configure(missing))
        atext = assert_compact(asyncio.run(aconfigure(missing)))
    assert "in _load_settings" in text and "(×" not in text
    assert "in _load_settings" in atext and "(×2)" in atext
    assert "2 tool failure(s), 1 distinct" in otel.ec.context("conv-nested-raise")
    with otel.ec.conversation("conv-nested-own"):
        assert "[ValueError]" in assert_compact(report(missing))
    assert "2 tool failure(s), 2 distinct" in otel.ec.context("conv-nested-own")

    otel.ec.flush()
    assert len(otel.records()) == 4
    for name in ("load", "configure", "aload", "aconfigure", "report"):
        assert [s.status.status_code for s in otel.spans(f"execute_tool {name}")] == [StatusCode.ERROR]


def _close_elsewhere(step: Callable[[], Coroutine[Any, Any, Any]]) -> None:
    """Start the coroutine ``step()`` on an event loop, run it until it first waits, then close it in a
    fresh context, as the garbage collector or an event loop stopped by Ctrl-C does."""

    async def start() -> Coroutine[Any, Any, Any]:
        coroutine = step()
        coroutine.send(None)
        return coroutine

    contextvars.Context().run(asyncio.run(start()).close)


def test_a_tool_coroutine_closed_in_another_context_ends_its_call_without_raising(otel: OTel) -> None:
    """An agent step suspended inside a wrapped async tool (and inside ``ec.conversation``) may be closed
    in another context than it ran in: by the garbage collector, or by an event loop stopped with Ctrl-C.
    Closing it ends the call as cancelled, and raises nothing into the code closing it."""

    @otel.ec.tool
    async def wait_for_rows() -> int:
        await asyncio.Event().wait()
        return 1

    async def agent_step() -> Any:
        with otel.ec.conversation("conv-closed"):
            return await wait_for_rows()

    _close_elsewhere(agent_step)
    span = only_span(otel, "execute_tool wait_for_rows")
    assert (span.attributes or {})["errcompact.cancelled"] is True
    assert otel.ec.context("conv-closed") == ""


def test_a_bridged_call_closed_in_another_context_raises_nothing() -> None:
    """A framework bridge claims the tool spans of the call it runs (:func:`claimed`) for as long as the
    call awaits its tool: an agent step suspended there and closed in another context (the garbage
    collector, an event loop stopped with Ctrl-C) leaves the claim without raising into the closer."""

    async def bridged_call() -> None:
        with claimed() as claim:
            assert current_claim() is claim
            await asyncio.Event().wait()

    _close_elsewhere(bridged_call)
    assert current_claim() is None


def test_a_budget_breach_is_reported_while_a_stuck_loop_stands_unacknowledged(make_otel: Callable[..., OTel]) -> None:
    """With review asked for, the run goes on after a stuck loop's breach: when it then spends its budget,
    that is a breach of its own (span event, log record, metric, review hook), reported once, and the loop
    going on is not reported again."""
    reviewed: list[Escalation] = []
    otel = make_otel(thresholds=Thresholds(consecutive=3, budget=5, action="human"), human_review=reviewed.append,
                     breaker_threshold=0)

    @otel.ec.tool
    def lookup(key: str) -> str:
        return {"a": "1"}[key]

    with otel.tracer.start_as_current_span("invoke_agent shop", attributes={
        "gen_ai.operation.name": "invoke_agent", "gen_ai.conversation.id": "conv-budget",
    }):
        results = [lookup("missing") for _ in range(7)]  # stuck at the 3rd, budget spent at the 5th
    assert all(isinstance(r, ToolErrorText) for r in results)
    assert otel.ec.flush()
    [agent_span] = otel.spans("invoke_agent shop")
    events = [dict(e.attributes or {}) for e in agent_span.events if e.name == "errcompact.escalation"]
    assert [(e["errcompact.reason"], e["errcompact.count"]) for e in events] == [("consecutive", 3), ("budget", 5)]
    logs = otel.logs("errcompact.escalation")
    assert [r.log_record.attributes["errcompact.reason"] for r in logs] == ["consecutive", "budget"]  # type: ignore[index]
    assert otel.metric_sum("errcompact.escalations") == 2
    assert [(e.reason, e.scope) for e in reviewed] == [("consecutive", "conv-budget"), ("budget", "conv-budget")]


def test_a_run_that_keeps_checking_or_succeeding_is_not_dropped_as_idle(make_otel: Callable[..., OTel]) -> None:
    """``idle_seconds`` counts from the scope's last activity, not its last failure: a halted run that
    keeps calling ``check()`` stays halted, and a run whose calls now succeed keeps its history, whether
    the calls are ``@ec.tool``'s or a framework's own tool spans."""
    otel = make_otel(limits=Limits(idle_seconds=1.5), breaker_threshold=0)

    @otel.ec.tool
    def lookup(key: str) -> str:
        return {"a": "1"}[key]

    with otel.ec.conversation("conv-halted"):
        for _ in range(3):
            lookup("missing")
    with otel.ec.conversation("conv-going-on"):
        lookup("missing")
    for step in range(6):  # 3 s in all, well past idle_seconds since the last failure
        time.sleep(0.5)
        with pytest.raises(ErrorBudgetExceeded):
            otel.ec.check("conv-halted")
        with otel.ec.conversation("conv-going-on"):
            assert lookup("a") == "1"
        framework = otel.tracer.start_span(
            "lookup", attributes={"openinference.span.kind": "TOOL", "session.id": "conv-framework"}
        )
        if step == 0:  # its one failure
            framework.set_status(Status(StatusCode.ERROR, "KeyError: 'missing'"))
        framework.end()
    # A look that is not activity of its own.
    assert {"conv-going-on", "conv-framework"} <= set(otel.ec.history.scopes())
    assert "1 tool failure(s)" in otel.ec.context("conv-going-on")
    with pytest.raises(ErrorBudgetExceeded):
        otel.ec.check("conv-halted")


def test_acknowledge_closes_the_breakers_the_conversation_ran_into(make_otel: Callable[..., OTel]) -> None:
    """A person who acknowledged a halted conversation lets it go on: the call that failed three times (and
    so opened its breaker) runs again, for every conversation. ``reset`` forgets a conversation without
    vouching for its calls: the breakers it opened stay open."""
    otel = make_otel(thresholds=Thresholds(consecutive=3), breaker_threshold=3, breaker_cooldown_s=600)
    available: set[str] = set()

    @otel.ec.tool
    def lookup(key: str) -> str:
        return {k: "found" for k in available}[key]

    for conversation, key in (("conv-reviewed", "k"), ("conv-ended", "other")):
        with otel.ec.conversation(conversation):
            for _ in range(3):
                assert isinstance(lookup(key), ToolErrorText)
            with pytest.raises(ErrorBudgetExceeded):
                lookup(key)
    available = {"k", "other"}  # both keys work now
    with otel.ec.conversation("conv-elsewhere"):
        refused = lookup("k")
        assert isinstance(refused, ToolErrorText) and refused.circuit_open
    otel.ec.acknowledge("conv-reviewed")
    otel.ec.reset("conv-ended")
    with otel.ec.conversation("conv-reviewed"):
        assert lookup("k") == "found"
    with otel.ec.conversation("conv-elsewhere"):
        assert lookup("k") == "found"
    with otel.ec.conversation("conv-ended"):
        refused = lookup("other")
        assert isinstance(refused, ToolErrorText) and refused.circuit_open


def test_an_agents_sdk_tool_span_a_cancellation_ended_is_neither_a_failure_nor_a_success(
    make_otel: Callable[..., OTel],
) -> None:
    """The OpenAI Agents SDK ends the span of a tool whose own task was cancelled (the awaited work was
    cancelled under it) with ERROR ``Tool execution cancelled: …``, through OpenInference: like a call the
    boundary saw cancelled, it is no failure of its own (no record, no count) and does not end the streak
    of the failures around it, so the third identical failure escalates."""
    pytest.importorskip("agents")
    instrumentation = pytest.importorskip("openinference.instrumentation.openai_agents")
    from agents import Agent, Runner, function_tool

    from tests.integrations.agents_script import ScriptedModel

    otel = make_otel(consecutive=3)
    instrumentor = instrumentation.OpenAIAgentsInstrumentor()
    instrumentor.instrument(tracer_provider=otel.tracer_provider)
    try:
        async def count_orders(customer: str) -> int:
            """Count a customer's orders."""
            return {"globex": 3}[customer]

        async def read_invoice(invoice_id: str) -> str:
            """Read an invoice."""
            pending: asyncio.Future[str] = asyncio.get_running_loop().create_future()
            pending.cancel()  # the request it waited for was cancelled
            return await pending

        model = ScriptedModel(("count_orders", "count_orders", "read_invoice", "count_orders"))
        tools = [function_tool(count_orders), function_tool(read_invoice)]
        Runner.run_sync(Agent(name="orders-agent", model=model, tools=tools), "How many orders does acme have?")
    finally:
        instrumentor.uninstrument()
    [cancelled] = otel.spans("read_invoice")
    assert (cancelled.status.description or "").startswith("Tool execution cancelled")  # what the SDK records
    assert [r.tool_name for r in otel.records()] == ["count_orders"] * 3
    escalations = [e for s in otel.spans() for e in s.events if e.name == "errcompact.escalation"]
    assert [dict(e.attributes or {})["errcompact.count"] for e in escalations] == [3]


def test_log_records_of_a_trace_the_sampler_left_out_say_it_was_not_sampled(tmp_path: Path) -> None:
    """The escalation and trajectory log records of failures in a trace the sampler left out carry the span
    context's flags (not sampled), as a sampled trace's carry its own (sampled)."""
    logger_provider = LoggerProvider()
    log_exporter = InMemoryLogRecordExporter()
    logger_provider.add_log_record_processor(SimpleLogRecordProcessor(log_exporter))
    tracer_provider = TracerProvider(sampler=ParentBased(ALWAYS_OFF))
    ec = otel_errcompact.init(tracer_provider=tracer_provider, logger_provider=logger_provider,
                              sqlite_path=tmp_path / "t.sqlite3", breaker_threshold=0, consecutive=2)
    try:
        @ec.tool
        def lookup(key: str) -> str:
            return {"a": "1"}[key]

        for conversation, sampled in (("conv-sampled-out", False), ("conv-sampled", True)):
            flags = trace.TraceFlags(trace.TraceFlags.SAMPLED if sampled else trace.TraceFlags.DEFAULT)
            parent = trace.NonRecordingSpan(trace.SpanContext(
                int(f"{len(conversation):032x}", 16) + 1, 1, is_remote=True, trace_flags=flags,
            ))  # an incoming request's trace context, sampled or not upstream
            with ec.conversation(conversation), trace.use_span(parent):
                for _ in range(2):
                    assert isinstance(lookup("missing"), ToolErrorText)
        assert ec.flush()
        logger_provider.force_flush()
        by_name: dict[tuple[str, bool], int] = {}
        for log in log_exporter.get_finished_logs():
            record = log.log_record
            assert record.trace_flags is not None
            key = (str(record.event_name), bool(record.trace_flags.sampled))
            by_name[key] = by_name.get(key, 0) + 1
        # Each failure's trajectory record is emitted once; each conversation breaches once.
        assert by_name == {
            ("errcompact.trajectory", False): 2, ("errcompact.escalation", False): 1,
            ("errcompact.trajectory", True): 2, ("errcompact.escalation", True): 1,
        }
    finally:
        ec.shutdown()
        logger_provider.shutdown()
