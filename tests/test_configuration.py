"""Configuration as a careful user meets it: a fresh interpreter with the environment set.

The master switch, a second ``init()``, bad and misspelled ``OTEL_ERRCOMPACT_*`` variables, and trajectory
paths that cannot be used. Each test runs its agent in a subprocess, so what is checked is what a user
sees: the exception, the warning on stderr, the files left behind.
"""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from http.server import BaseHTTPRequestHandler
from pathlib import Path
from typing import Any, ClassVar

import pytest

from otel_errcompact.config import ENV_PREFIX, Settings
from otel_errcompact.sinks import TrajectoryStore
from tests.conftest import env_without_otel
from tests.realerrors import loopback_server


def _env(tmp_path: Path, **extra: str) -> dict[str, str]:
    env = env_without_otel()
    env["XDG_DATA_HOME"] = str(tmp_path / "xdg")  # the default store, if anything writes it
    env.update(extra)
    return env


def _python(source: str, env: dict[str, str], *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-c", textwrap.dedent(source), *args],
        env=env, capture_output=True, text=True, timeout=120, check=False,
    )


def _last_json(proc: subprocess.CompletedProcess[str]) -> dict[str, object]:
    assert proc.returncode == 0, proc.stderr
    result: dict[str, object] = json.loads(proc.stdout.strip().splitlines()[-1])
    return result


# -- 1. the master switch -------------------------------------------------------------------------------

DISABLED_AGENT = """
    import json, threading, traceback
    import otel_errcompact
    from opentelemetry import trace

    def lookup(key):
        return {"a": 1}[key]

    def failure(fn):
        try:
            fn("zz")
        except Exception as exc:
            return traceback.format_exception_only(exc)
        return None

    bare = failure(lookup)
    ec = otel_errcompact.init(service_name="switched-off")
    wrapped = ec.tool(lookup)
    named = ec.tool(name="lookup")(lookup)
    with ec.conversation("conv-off"):
        through_wrapper = failure(wrapped)
        through_named = failure(named)
        try:
            with ec.tool_call("lookup"):
                lookup("zz")
            in_block = None
        except KeyError as exc:
            in_block = repr(exc)
        ec.check()
    print(json.dumps({
        "bare": bare, "wrapped": through_wrapper, "named": through_named, "in_block": in_block,
        "same_function": wrapped is lookup,
        "context": ec.context("conv-off"), "sqlite_path": ec.sqlite_path and str(ec.sqlite_path),
        "processor": ec.processor is not None, "writer": ec.writer is not None,
        "threads": threading.active_count(),
        "tracer_provider": type(trace.get_tracer_provider()).__name__,
    }))
    ec.shutdown()
"""


def test_disabled_makes_the_library_inert(tmp_path: Path) -> None:
    proc = _python(DISABLED_AGENT, _env(tmp_path, OTEL_ERRCOMPACT_ENABLED="false"))
    out = _last_json(proc)
    assert out["wrapped"] == out["bare"] == out["named"] == ["KeyError: 'zz'\n"]
    assert out["in_block"] == "KeyError('zz')"
    assert out["same_function"] is True
    assert out["context"] == ""
    assert out["sqlite_path"] is None
    assert out["processor"] is False and out["writer"] is False
    assert out["threads"] == 1
    assert out["tracer_provider"] == "ProxyTracerProvider"  # no provider was created or set
    assert proc.stderr == ""  # no warnings, misleading or otherwise
    assert not (tmp_path / "xdg").exists()  # no store


def test_enabled_the_same_agent_gets_digests(tmp_path: Path) -> None:
    """The contrast that makes the test above meaningful: switched on, the same code is compacted."""
    proc = _python(DISABLED_AGENT, _env(tmp_path, OTEL_ERRCOMPACT_CONSECUTIVE="5"))
    out = _last_json(proc)
    assert out["wrapped"] is None and out["in_block"] is None
    assert "[KeyError]" in str(out["context"])
    assert out["sqlite_path"] is not None and Path(str(out["sqlite_path"])).is_file()


# -- 2. a second init() ---------------------------------------------------------------------------------

REINIT_AGENT = """
    import json, sys, warnings
    import otel_errcompact

    db, other = sys.argv[1], sys.argv[2]
    ec = otel_errcompact.init(sqlite_path=db, consecutive=3)
    with warnings.catch_warnings(record=True) as same:
        warnings.simplefilter("always")
        again = otel_errcompact.init(sqlite_path=db, consecutive=3)
    with warnings.catch_warnings(record=True) as different:
        warnings.simplefilter("always")
        changed = otel_errcompact.init(sqlite_path=other, consecutive=10, action="human")
    errors = []
    for kwargs in ({"consecutive": "banana"}, {"consecutve": 3}):
        try:
            otel_errcompact.init(sqlite_path=db, **kwargs)
            errors.append(None)
        except otel_errcompact.ConfigurationError as exc:
            errors.append(str(exc))
    print(json.dumps({
        "same_handle": again is ec and changed is ec,
        "same_warnings": [str(w.message) for w in same],
        "different_warnings": [(w.category.__name__, str(w.message)) for w in different],
        "consecutive": ec.history.thresholds.consecutive, "action": ec.history.thresholds.action,
        "sqlite_path": str(ec.sqlite_path), "errors": errors,
    }))
    ec.shutdown()
"""


def test_a_second_init_warns_naming_each_differing_setting(tmp_path: Path) -> None:
    db, other = tmp_path / "first.sqlite3", tmp_path / "second.sqlite3"
    out = _last_json(_python(REINIT_AGENT, _env(tmp_path), str(db), str(other)))
    assert out["same_handle"] is True
    assert out["same_warnings"] == []  # same arguments: idempotent and quiet
    ((category, message),) = out["different_warnings"]  # type: ignore[misc]
    assert category == "ConfigurationWarning"
    assert "consecutive: 3 → 10" in message and "action: 'halt' → 'human'" in message
    assert "sqlite_path" in message and str(other) in message
    assert "shutdown()" in message
    # the first settings stay in force, and nothing was created at the ignored path
    assert (out["consecutive"], out["action"], out["sqlite_path"]) == (3, "halt", str(db))
    assert not other.exists()
    bad_value, unknown = out["errors"]  # type: ignore[misc]
    assert bad_value == "invalid otel-errcompact settings: consecutive='banana': expected an integer ≥ 1"
    assert "unknown setting consecutve=" in unknown and "did you mean consecutive=?" in unknown


# -- 3. environment variables ---------------------------------------------------------------------------

INIT_ONLY = """
    import otel_errcompact
    ec = otel_errcompact.init()
    print("sqlite_path", ec.sqlite_path, "consecutive", ec.history.thresholds.consecutive)
    ec.shutdown()
"""


@pytest.mark.parametrize(
    ("variable", "value", "expected"),
    [
        ("OTEL_ERRCOMPACT_CONSECUTIVE", "banana", "expected an integer ≥ 1"),
        ("OTEL_ERRCOMPACT_CONSECUTIVE", "0", "expected an integer ≥ 1"),
        ("OTEL_ERRCOMPACT_ACTION", "explode", "expected one of 'halt', 'human'"),
        ("OTEL_ERRCOMPACT_ENABLED", "maybe", "expected true or false"),
        ("OTEL_ERRCOMPACT_SHUTDOWN_TIMEOUT_S", "-1", "expected a number > 0 and ≤ 86400"),
        # a timeout the clock cannot add to now failed at shutdown, into the host
        ("OTEL_ERRCOMPACT_SHUTDOWN_TIMEOUT_S", "inf", "expected a number > 0 and ≤ 86400"),
        ("OTEL_ERRCOMPACT_SCHEDULE_DELAY_S", "1e12", "expected a number > 0 and ≤ 3600"),
        ("OTEL_ERRCOMPACT_BUDGET", "lots", "expected an integer ≥ 1, or empty / none to turn it off"),
        ("OTEL_ERRCOMPACT_REDACT_PATTERNS", "ACME-[0-9]+", "expected a JSON list, such as '[\"ACME-[0-9]+\"]'"),
        # a union of 'auto' and a boolean: each member refuses the value, said once
        ("OTEL_ERRCOMPACT_COMPACTION_PROCESS", "sometimes", "expected one of 'auto' or true or false"),
    ],
)
def test_a_bad_variable_is_named_with_its_value(tmp_path: Path, variable: str, value: str, expected: str) -> None:
    proc = _python(INIT_ONLY, _env(tmp_path, **{variable: value}))
    assert proc.returncode == 1
    last = proc.stderr.strip().splitlines()[-1]
    assert last == (f"otel_errcompact.exceptions.ConfigurationError: invalid otel-errcompact settings: "
                    f"{variable}={value!r}: {expected}")


def test_a_misspelled_variable_warns_with_did_you_mean(tmp_path: Path) -> None:
    proc = _python(INIT_ONLY, _env(tmp_path, OTEL_ERRCOMPACT_CONSECUTVE="2", OTEL_ERRCOMPACT_SQLITE_PAHT="x.db"))
    assert proc.returncode == 0, proc.stderr
    assert "consecutive 3" in proc.stdout  # ignored, as the warning says
    assert ("ConfigurationWarning: otel-errcompact: unknown variable OTEL_ERRCOMPACT_CONSECUTVE "
            "(did you mean OTEL_ERRCOMPACT_CONSECUTIVE?); it is ignored") in proc.stderr
    assert "unknown variable OTEL_ERRCOMPACT_SQLITE_PAHT (did you mean OTEL_ERRCOMPACT_SQLITE_PATH?)" in proc.stderr


def test_every_setting_is_a_known_variable(tmp_path: Path) -> None:
    """The known names come from the settings model: setting each field's variable warns about none."""
    defaults = Settings(sqlite_path=tmp_path / "all.sqlite3")
    env = _env(tmp_path)
    for name in Settings.model_fields:
        value = getattr(defaults, name)
        if isinstance(value, (tuple, list)):
            env[f"{ENV_PREFIX}{name.upper()}"] = json.dumps(list(value))  # complex settings are JSON
        else:
            env[f"{ENV_PREFIX}{name.upper()}"] = "none" if value is None else str(value).lower()
    proc = _python(INIT_ONLY, env)
    assert proc.returncode == 0, proc.stderr
    assert "unknown variable" not in proc.stderr and "Warning" not in proc.stderr


# -- 4. trajectory paths that cannot be used ---------------------------------------------------------------

PATH_AGENT = """
    import json, sys
    import otel_errcompact
    kwargs = {"sqlite_path": sys.argv[1]} if len(sys.argv) > 1 else {}
    try:
        ec = otel_errcompact.init(**kwargs)
    except otel_errcompact.ConfigurationError as exc:
        print(json.dumps({"error": str(exc)}))
        raise SystemExit(0)

    @ec.tool
    def lookup(key):
        return {"a": 1}[key]

    print(json.dumps({"error": None, "sqlite_path": ec.sqlite_path and str(ec.sqlite_path),
                      "result": lookup("zz")}))
    ec.shutdown()
"""


def _unusable(tmp_path: Path, kind: str) -> tuple[Path, str]:
    if kind == "read-only system directory":
        return Path("/proc/errcompact-trajectories.sqlite3"), "SQLite database there"
    if kind == "parent is a file":
        (tmp_path / "notes.txt").write_text("a file, not a folder\n")
        return tmp_path / "notes.txt" / "trajectories.sqlite3", "parent"
    if kind == "a directory":
        (tmp_path / "folder").mkdir()
        return tmp_path / "folder", "is a directory"
    (tmp_path / "notes.py").write_bytes(Path(__file__).read_bytes())  # a real file that is not SQLite
    return tmp_path / "notes.py", "not a SQLite database"


KINDS = ["read-only system directory", "parent is a file", "a directory", "not SQLite"]


@pytest.mark.parametrize("kind", KINDS)
def test_an_unusable_path_in_the_environment_fails_fast_naming_it(tmp_path: Path, kind: str) -> None:
    path, reason = _unusable(tmp_path, kind)
    before = path.read_bytes() if path.is_file() else None
    out = _last_json(_python(PATH_AGENT, _env(tmp_path, OTEL_ERRCOMPACT_SQLITE_PATH=str(path))))
    error = str(out["error"])
    assert error.startswith(f"OTEL_ERRCOMPACT_SQLITE_PATH={str(path)!r}: "), error
    assert reason in error
    if before is not None:
        assert path.read_bytes() == before  # refused, not overwritten


@pytest.mark.parametrize("kind", KINDS)
def test_an_unusable_path_argument_fails_fast_naming_it(tmp_path: Path, kind: str) -> None:
    path, reason = _unusable(tmp_path, kind)
    out = _last_json(_python(PATH_AGENT, _env(tmp_path), str(path)))
    assert str(out["error"]).startswith(f"sqlite_path={str(path)!r}: ")
    assert reason in str(out["error"])


def test_an_unusable_default_path_warns_and_runs_without_the_store(tmp_path: Path) -> None:
    (tmp_path / "data-file").write_text("XDG_DATA_HOME points at a file\n")
    env = _env(tmp_path, XDG_DATA_HOME=str(tmp_path / "data-file"))
    proc = _python(PATH_AGENT, env)
    out = _last_json(proc)
    assert out["error"] is None and out["sqlite_path"] is None
    assert str(out["result"]).startswith("Error: [KeyError]")  # compaction still works
    assert "ConfigurationWarning: otel-errcompact: running without the trajectory store: the default " \
           "sqlite_path=" in proc.stderr
    assert "set OTEL_ERRCOMPACT_SQLITE_PATH to a writable file" in proc.stderr


def test_a_usable_path_is_created_with_its_folders(tmp_path: Path) -> None:
    db = tmp_path / "new" / "deeper" / "t.sqlite3"
    out = _last_json(_python(PATH_AGENT, _env(tmp_path, OTEL_ERRCOMPACT_SQLITE_PATH=str(db))))
    assert out["error"] is None and out["sqlite_path"] == str(db)
    with TrajectoryStore(db) as store:
        assert store.count() == 1


NONE_AGENT = """
    import json, os
    import otel_errcompact

    ec = otel_errcompact.init(sqlite_path=None, budget=None)

    @ec.tool
    def lookup(key):
        return {"a": 1}[key]

    with ec.conversation("conv-none"):
        results = [lookup(str(n)) for n in range(25)]  # with the variable's budget of 20, the 21st call would halt
        context = ec.context()
    print(json.dumps({"sqlite_path": ec.sqlite_path and str(ec.sqlite_path), "writer": ec.writer is not None,
                      "errors": sum(r.startswith("Error: [KeyError]") for r in results), "context": context,
                      "files": sorted(os.listdir(os.environ["XDG_DATA_HOME"]))
                      if os.path.isdir(os.environ["XDG_DATA_HOME"]) else []}))
    ec.shutdown()
"""


def test_none_for_a_setting_that_can_be_off_turns_it_off(tmp_path: Path) -> None:
    """``sqlite_path=None`` and ``budget=None`` win over the variables and the defaults, as empty variables do:
    no store (none in the default place either) and no budget, where dropping None kept both."""
    env = _env(tmp_path, OTEL_ERRCOMPACT_SQLITE_PATH=str(tmp_path / "from-env.sqlite3"), OTEL_ERRCOMPACT_BUDGET="20",
               OTEL_ERRCOMPACT_CONSECUTIVE="1000", OTEL_ERRCOMPACT_BREAKER_THRESHOLD="0")
    out = _last_json(_python(NONE_AGENT, env))
    assert out["sqlite_path"] is None and out["writer"] is False
    assert out["files"] == [] and not (tmp_path / "from-env.sqlite3").exists()
    assert out["errors"] == 25  # every call returned its digest: no halt at the variable's budget of 20
    assert "(×25, 16+ different values)" in str(out["context"])  # one class, every failure counted in it


def test_an_unusable_jsonl_path_fails_fast_naming_it(tmp_path: Path) -> None:
    (tmp_path / "logs").mkdir()
    env = _env(tmp_path, OTEL_ERRCOMPACT_SQLITE_PATH=str(tmp_path / "t.sqlite3"),
               OTEL_ERRCOMPACT_JSONL_PATH=str(tmp_path / "logs"))
    out = _last_json(_python(PATH_AGENT, env))
    assert out["error"] == f"OTEL_ERRCOMPACT_JSONL_PATH={str(tmp_path / 'logs')!r}: is a directory; give the path " \
                           "of a file inside it"


def test_the_viewer_trace_url_variable_is_a_known_setting(tmp_path: Path) -> None:
    env = _env(tmp_path, OTEL_ERRCOMPACT_TRACE_URL="http://127.0.0.1:16686/trace/{trace_id}",
               OTEL_ERRCOMPACT_SQLITE_PATH=str(tmp_path / "t.sqlite3"))
    proc = _python(INIT_ONLY, env)
    assert proc.returncode == 0, proc.stderr
    assert "unknown variable" not in proc.stderr


class _Receiver(BaseHTTPRequestHandler):
    """An OTLP/HTTP receiver that accepts every export and remembers its path (``/v1/traces`` …) and
    its body."""

    paths: ClassVar[list[str]] = []
    bodies: ClassVar[list[tuple[str, bytes]]] = []

    def do_POST(self) -> None:
        body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
        type(self).paths.append(self.path)
        type(self).bodies.append((self.path, body))
        self.send_response(200)
        self.send_header("Content-Type", "application/x-protobuf")
        self.send_header("Content-Length", "0")
        self.end_headers()

    def log_message(self, format: str, *args: Any) -> None:
        return None


EXPORTING_AGENT = """
    import otel_errcompact
    ec = otel_errcompact.init(service_name="exporters")

    @ec.tool
    def lookup(key):
        return {"a": 1}[key]

    with ec.conversation("c"):
        lookup("b")
    ec.flush()
    ec.shutdown()
"""


def test_the_standard_exporter_variables_turn_each_signal_off(tmp_path: Path) -> None:
    """``OTEL_TRACES_EXPORTER=none`` and ``OTEL_LOGS_EXPORTER=none`` keep those signals home, as
    ``OTEL_METRICS_EXPORTER`` does for metrics, though an OTLP endpoint is set for all three."""
    with loopback_server(_Receiver) as base:
        exported = {}
        for case, extra in (("default", {}), ("off", {"OTEL_TRACES_EXPORTER": "none", "OTEL_LOGS_EXPORTER": "none"})):
            _Receiver.paths.clear()
            env = _env(tmp_path / case, OTEL_EXPORTER_OTLP_ENDPOINT=base, **extra)
            proc = _python(EXPORTING_AGENT, env)
            assert proc.returncode == 0, proc.stderr
            exported[case] = set(_Receiver.paths)
    assert exported["default"] == {"/v1/traces", "/v1/logs", "/v1/metrics"}
    assert exported["off"] == {"/v1/metrics"}


REINIT_EXPORTING_AGENT = """
    import json
    from opentelemetry import trace
    import otel_errcompact

    def run(tool_name, **settings):
        ec = otel_errcompact.init(service_name="exporters", **settings)

        def lookup(key):
            return {"a": 1}[key]

        tool = ec.tool(name=tool_name)(lookup)
        with ec.conversation("c-" + tool_name):
            tool("b")
        flushed = ec.flush()
        ec.shutdown()
        return flushed, trace.get_tracer_provider()

    first_flushed, first_provider = run("first_lookup")
    second_flushed, second_provider = run("second_lookup", consecutive=5)
    print(json.dumps({"flushed": [first_flushed, second_flushed],
                      "same_provider": first_provider is second_provider}))
    with trace.get_tracer("app").start_as_current_span("app work after shutdown"):
        pass  # exported when the providers are shut down, at exit
"""


def _exported_tool_names(bodies: list[tuple[str, bytes]]) -> dict[str, set[str]]:
    """The tool names each signal exported (failed tool spans, trajectory log events, error counts), and
    the names of every span exported (``spans``)."""
    from opentelemetry.proto.collector.logs.v1.logs_service_pb2 import ExportLogsServiceRequest
    from opentelemetry.proto.collector.metrics.v1.metrics_service_pb2 import ExportMetricsServiceRequest
    from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest

    def tool(attributes: Any) -> str:
        return next((a.value.string_value for a in attributes if a.key == "gen_ai.tool.name"), "")

    names: dict[str, set[str]] = {"traces": set(), "logs": set(), "metrics": set(), "spans": set()}
    for path, body in bodies:
        if path == "/v1/traces":
            for rs in ExportTraceServiceRequest.FromString(body).resource_spans:
                names["spans"] |= {s.name for ss in rs.scope_spans for s in ss.spans}
                names["traces"] |= {tool(s.attributes) for ss in rs.scope_spans for s in ss.spans
                                    if any(a.key == "errcompact.digest" for a in s.attributes)}
        elif path == "/v1/logs":
            for rl in ExportLogsServiceRequest.FromString(body).resource_logs:
                names["logs"] |= {tool(r.attributes) for sl in rl.scope_logs for r in sl.log_records
                                  if r.event_name == "errcompact.trajectory"}
        elif path == "/v1/metrics":
            for rm in ExportMetricsServiceRequest.FromString(body).resource_metrics:
                names["metrics"] |= {tool(p.attributes) for sm in rm.scope_metrics for m in sm.metrics
                                     if m.name == "errcompact.errors" for p in m.sum.data_points}
    return names


def test_init_after_shutdown_exports_through_the_providers_it_created(tmp_path: Path) -> None:
    """The providers init() created are the process-wide ones, which OpenTelemetry sets once: shutdown()
    flushes them and leaves them running, the next init() exports through them, and the application's
    own spans after the last shutdown are exported when the process exits."""
    with loopback_server(_Receiver) as base:
        _Receiver.bodies.clear()
        env = _env(tmp_path, OTEL_EXPORTER_OTLP_ENDPOINT=base, OTEL_ERRCOMPACT_SQLITE_PATH=str(tmp_path / "t.sqlite3"))
        out = _last_json(_python(REINIT_EXPORTING_AGENT, env))
        bodies = list(_Receiver.bodies)
    assert out == {"flushed": [True, True], "same_provider": True}
    exported = _exported_tool_names(bodies)
    assert "app work after shutdown" in exported.pop("spans")
    assert exported == {signal: {"first_lookup", "second_lookup"} for signal in ("traces", "logs", "metrics")}


REVIEWED_AGENT = """
    import json, os, sqlite3, sys, threading
    import otel_errcompact

    person = threading.Event()  # the reviewer, who has not answered yet
    ec = otel_errcompact.init(service_name="reviewed", action="human", human_review=lambda escalation: person.wait())

    @ec.tool
    def count_orders():
        with sqlite3.connect(":memory:") as conn:
            return conn.execute("SELECT count(*) FROM orders").fetchall()

    with ec.conversation("c"):
        results = [count_orders() for _ in range(3)]
    flushed = ec.flush(timeout_s=2) if sys.argv[1] == "flush" else ec.shutdown()
    print(json.dumps({"escalated": [r.escalated for r in results], "flushed": flushed}), flush=True)
    os._exit(0)  # only what flush() or shutdown() exported reaches the receiver
"""


@pytest.mark.parametrize("step", ["flush", "shutdown"])
def test_a_review_waiting_for_a_person_does_not_hold_back_the_breachs_export(tmp_path: Path, step: str) -> None:
    """A human-review hook may wait for a person for longer than any timeout: ``flush()`` and
    ``shutdown()`` export the breach (its span event and its metric) first, and wait for the hook with
    what is left (``flush()`` then returns False, as the review is not done)."""
    from opentelemetry.proto.collector.metrics.v1.metrics_service_pb2 import ExportMetricsServiceRequest
    from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest

    with loopback_server(_Receiver) as base:
        _Receiver.bodies.clear()
        env = _env(tmp_path, OTEL_EXPORTER_OTLP_ENDPOINT=base, OTEL_ERRCOMPACT_SQLITE_PATH=str(tmp_path / "t.sqlite3"),
                   OTEL_ERRCOMPACT_SHUTDOWN_TIMEOUT_S="2")
        out = _last_json(_python(REVIEWED_AGENT, env, step))
        bodies = list(_Receiver.bodies)
    assert out == {"escalated": [False, False, True], "flushed": False if step == "flush" else None}
    events = [dict((a.key, a.value.string_value or a.value.int_value) for a in e.attributes)
              for path, body in bodies if path == "/v1/traces"
              for rs in ExportTraceServiceRequest.FromString(body).resource_spans
              for ss in rs.scope_spans for span in ss.spans for e in span.events if e.name == "errcompact.escalation"]
    assert [(e["errcompact.reason"], e["errcompact.action"], e["gen_ai.tool.name"]) for e in events] == [
        ("consecutive", "human", "count_orders")
    ]
    escalations = [p.as_int for path, body in bodies if path == "/v1/metrics"
                   for rm in ExportMetricsServiceRequest.FromString(body).resource_metrics
                   for sm in rm.scope_metrics for m in sm.metrics if m.name == "errcompact.escalations"
                   for p in m.sum.data_points]
    assert escalations == [1]


PROMETHEUS_AGENT = """
    import json, os, socket, sys, warnings
    from opentelemetry import trace
    import otel_errcompact

    if sys.argv[1] == "taken":  # another worker of the application already serves the port
        other = socket.create_server(("127.0.0.1", 0))
        os.environ["OTEL_EXPORTER_PROMETHEUS_PORT"] = str(other.getsockname()[1])
    try:
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            ec = otel_errcompact.init(service_name="prometheus")
    except Exception as exc:
        print(json.dumps({"raised": f"{type(exc).__name__}: {exc}",
                          "tracer_provider": type(trace.get_tracer_provider()).__name__}))
        raise SystemExit(0)

    @ec.tool
    def lookup(key):
        return {"a": 1}[key]

    with ec.conversation("c"):
        result = lookup("b")
    ec.shutdown()
    print(json.dumps({"warnings": [str(w.message) for w in caught], "result": result}))
"""


def test_a_prometheus_port_another_process_serves_is_a_warning(tmp_path: Path) -> None:
    """``OTEL_METRICS_EXPORTER=prometheus`` in a second worker process on the same host: the port is taken.
    ``init()`` says so and the agent runs, its tool failure compacted."""
    env = _env(tmp_path, OTEL_METRICS_EXPORTER="prometheus", OTEL_EXPORTER_PROMETHEUS_HOST="127.0.0.1")
    last = _last_json(_python(PROMETHEUS_AGENT, env, "taken"))
    assert "raised" not in last, last
    (warning,) = [w for w in last["warnings"] if "Prometheus" in w]  # type: ignore[attr-defined]
    assert warning.startswith("otel-errcompact: not serving metrics for Prometheus on 127.0.0.1:"), warning
    assert "(OTEL_EXPORTER_PROMETHEUS_HOST/_PORT)" in warning, warning
    assert "[KeyError]" in str(last["result"]), last


EXPORTER_AGENT = """
    import json, warnings
    import otel_errcompact

    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        ec = otel_errcompact.init(service_name="exporters", sqlite_path=None)
    ec.shutdown()
    print(json.dumps([str(w.message) for w in caught if issubclass(w.category, otel_errcompact.ConfigurationWarning)]))
"""


@pytest.mark.parametrize(
    ("variable", "value", "warned"),
    [
        ("OTEL_TRACES_EXPORTER", "console", "OTEL_TRACES_EXPORTER='console': the traces provider init() creates "
         "exports with otlp (or none); ignoring console"),
        ("OTEL_METRICS_EXPORTER", "otlp,zipkin", "OTEL_METRICS_EXPORTER='otlp,zipkin': the metrics provider init() "
         "creates exports with otlp or prometheus (or none); ignoring zipkin"),
        ("OTEL_LOGS_EXPORTER", "none", None),
        ("OTEL_EXPORTER_OTLP_TRACES_PROTOCOL", "http/json", "OTEL_EXPORTER_OTLP_TRACES_PROTOCOL='http/json': expected "
         "grpc or http/protobuf; exporting traces with http/protobuf"),
        ("OTEL_EXPORTER_OTLP_PROTOCOL", "grpc", None),
    ],
)
def test_an_exporter_the_created_providers_cannot_have_is_named(
    tmp_path: Path, variable: str, value: str, warned: str | None
) -> None:
    """A standard ``OTEL_<SIGNAL>_EXPORTER`` naming an exporter the providers ``init()`` creates do not
    have (the SDK's ``console``, say) sends that signal nowhere: ``init()`` says so instead of keeping
    quiet. ``none`` is known, and quiet. So is a protocol the OTLP exporters do not speak (``http/json``,
    which the Python SDK has none for, was taken for http/protobuf without a word)."""
    # An endpoint for traces alone: the span exporter is made (and reads the protocol), with nothing to send.
    env = _env(tmp_path, OTEL_EXPORTER_OTLP_TRACES_ENDPOINT="http://127.0.0.1:9/v1/traces", **{variable: value})
    messages = json.loads(_python(EXPORTER_AGENT, env).stdout.strip().splitlines()[-1])
    assert messages == ([f"otel-errcompact: {warned}"] if warned else []), messages


SCRAPED_AGENT = """
    import json, os, socket, urllib.request
    import otel_errcompact

    with socket.create_server(("127.0.0.1", 0)) as probe:  # a free port, for the endpoint to serve
        os.environ["OTEL_EXPORTER_PROMETHEUS_PORT"] = str(probe.getsockname()[1])
    ec = otel_errcompact.init(service_name="scraped")
    url = f"http://127.0.0.1:{os.environ['OTEL_EXPORTER_PROMETHEUS_PORT']}/metrics"

    @ec.tool
    def lookup(key):
        return {"a": 1}[key]

    with ec.conversation("c"):
        for key in ("a", "b", "a"):  # a success, a failure, a success: a flush after each call
            lookup(key)
            ec.flush()
    page = urllib.request.urlopen(url, timeout=30).read().decode()
    ec.shutdown()
    print(json.dumps([line for line in page.splitlines() if line.startswith("errcompact_tool_calls_total{")]))
"""


def test_a_scrape_after_flushes_serves_each_series_once_with_its_current_value(tmp_path: Path) -> None:
    """``ec.flush()`` between two scrapes of the ``OTEL_METRICS_EXPORTER=prometheus`` endpoint: the next
    scrape holds each series once, with its current count (each flush used to queue one more copy of every
    series, oldest first, and Prometheus keeps the first sample of a series in a scrape)."""
    env = _env(tmp_path, OTEL_METRICS_EXPORTER="prometheus", OTEL_EXPORTER_PROMETHEUS_HOST="127.0.0.1")
    proc = _python(SCRAPED_AGENT, env)
    assert proc.returncode == 0, proc.stderr
    lines = json.loads(proc.stdout.strip().splitlines()[-1])
    by_outcome = {line.split('errcompact_outcome="')[1].split('"')[0]: line.rsplit(" ", 1)[1] for line in lines}
    assert len(lines) == 2, lines
    assert by_outcome == {"ok": "2.0", "error": "1.0"}, lines


@pytest.mark.parametrize("port", ["9464x", "99999"])
def test_a_bad_prometheus_port_is_named_before_anything_starts(tmp_path: Path, port: str) -> None:
    env = _env(tmp_path, OTEL_METRICS_EXPORTER="prometheus", OTEL_EXPORTER_PROMETHEUS_HOST="127.0.0.1",
               OTEL_EXPORTER_PROMETHEUS_PORT=port)
    last = _last_json(_python(PROMETHEUS_AGENT, env, "as-set"))
    assert last["raised"] == (f"ConfigurationError: OTEL_EXPORTER_PROMETHEUS_PORT={port!r}: "
                              "expected a port number from 0 to 65535")
    assert last["tracer_provider"] == "ProxyTracerProvider"  # nothing was set up before the refusal
