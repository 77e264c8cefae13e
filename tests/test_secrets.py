"""Secrets never leave through digests or telemetry, and the local store keeps what really happened.

Forty-one kinds of credential, each freshly generated with its real shape (random, never a real key), are
carried into a real failure by the code that really leaks them in the wild: an HTTP client's status
error naming the URL, an API's 401 body echoing the key or the request headers (a 127.0.0.1 server
answers), a ``CalledProcessError`` with the secret in argv or in a shell command, a config parser quoting
the offending line, a JSON settings error, a wrapped Redis connection error naming its DSN. The failing
code runs inside a tool wrapped by ``@ec.tool`` on the real OpenTelemetry SDK with in-memory exporters.

Nothing of any secret may appear in what leaves the process or reaches a prompt: the tool's returned
error, the ``[RECENT ERRORS]`` block, every exported span (attributes, status, events, the escalation
event), every exported log record (trajectory and escalation events). The local SQLite store keeps the
raw error in full (the documented policy), unless redaction at rest is on.
"""

from __future__ import annotations

import argparse
import base64
import configparser
import hashlib
import hmac
import json
import os
import re
import secrets
import string
import subprocess
import sys
import traceback
import urllib.parse
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler
from pathlib import Path
from typing import Any, ClassVar

import httpx
import pytest
import redis
from opentelemetry.exporter.otlp.proto.http import Compression
from opentelemetry.exporter.otlp.proto.http._log_exporter import OTLPLogExporter
from opentelemetry.proto.collector.logs.v1.logs_service_pb2 import ExportLogsServiceRequest
from opentelemetry.proto.common.v1.common_pb2 import AnyValue
from opentelemetry.sdk._logs import LoggerProvider
from opentelemetry.sdk._logs.export import BatchLogRecordProcessor
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.trace import StatusCode

import otel_errcompact
from otel_errcompact import compact_text
from otel_errcompact.compactor import Compactor
from otel_errcompact.redact import REDACTED, add_pattern, clear_patterns, patterns, redact
from otel_errcompact.sinks import JSONLSink, RedactingSink, TrajectoryStore, read_jsonl
from otel_errcompact.trajectory import TrajectoryRecord
from tests.conftest import OTel
from tests.realerrors import loopback_server, python_error

ALNUM = string.ascii_letters + string.digits
UPPER_DIGITS = string.ascii_uppercase + string.digits
B64 = ALNUM + "+/"
URLSAFE = ALNUM + "-_"
HEX = "0123456789abcdef"


def rand(n: int, alphabet: str = ALNUM) -> str:
    return "".join(secrets.choice(alphabet) for _ in range(n))


def b64url(data: dict[str, Any]) -> str:
    return base64.urlsafe_b64encode(json.dumps(data).encode()).decode().rstrip("=")


# --- where real code leaks a secret --------------------------------------------------------------------


class EchoingAPI(BaseHTTPRequestHandler):
    """An API that rejects every request with 401 and, like many do, echoes what it was given: the key
    it refused (the big model APIs' ``Incorrect API key provided: …``) and, in debug mode, the headers."""

    def do_GET(self) -> None:
        auth = self.headers.get("Authorization", "")
        given = auth.split(" ", 1)[-1] if auth else self.headers.get("x-api-key", "")
        body = json.dumps({
            "error": {"message": f"Incorrect API key provided: {given}", "type": "invalid_request_error"},
            "debug": {"path": self.path, "headers": dict(self.headers.items())},
        })
        self.send_response(401)
        self.send_header("Content-Type", "application/json")
        self.end_headers()
        self.wfile.write(body.encode())

    def log_message(self, format: str, *args: Any) -> None:
        return None


@dataclass(frozen=True)
class Env:
    base: str  # the echoing API on 127.0.0.1
    closed_port: int  # nothing listens here
    folder: Path


def http_status(env: Env, url: str, headers: dict[str, str] | None = None) -> None:
    """A real request; a tool that raises the client's own status error (it names the URL)."""
    httpx.get(url, headers=headers or {}, timeout=10).raise_for_status()


def http_body(env: Env, headers: dict[str, str]) -> None:
    """A real request; a tool that reports the API's error body, as agents' HTTP tools do."""
    response = httpx.get(f"{env.base}/v1/chat/completions", headers=headers, timeout=10)
    if response.is_error:
        raise RuntimeError(f"API returned {response.status_code}: {response.text}")


def argv(env: Env, args: list[str]) -> None:
    """A real failing process; ``check=True`` puts its argv into the CalledProcessError."""
    subprocess.run([sys.executable, "-c", "import sys; sys.exit(3)", *args], check=True, capture_output=True)


def shell(env: Env, command: str) -> None:
    """A real failing shell command; the CalledProcessError quotes the command string."""
    subprocess.run(f"{command} >/dev/null 2>&1; exit 2", shell=True, check=True)


def ini(env: Env, text: str) -> None:
    """A real config parser quoting the first line of a file with no section header."""
    configparser.ConfigParser().read_string(text, source=str(env.folder / "app.ini"))


def json_settings(env: Env, text: str) -> None:
    """A real JSON error, re-raised quoting the offending line (what settings loaders do)."""
    path = env.folder / "settings.json"
    path.write_text(text, encoding="utf-8")
    document = path.read_text(encoding="utf-8")
    try:
        json.loads(document)
    except json.JSONDecodeError as exc:
        line = document.splitlines()[exc.lineno - 1]
        raise ValueError(f"{path.name}: invalid settings at line {exc.lineno}: {line.strip()}") from exc


def wrapped_connection(env: Env, dsn: str) -> None:
    """A real connection failure, wrapped by code that names the DSN it was using."""
    try:
        redis.Redis(host="127.0.0.1", port=env.closed_port, socket_connect_timeout=2).ping()
    except redis.exceptions.ConnectionError as exc:
        raise ConnectionError(f"could not reach {dsn}: {exc}") from exc


def formatted(env: Env, message: str) -> None:
    """Code that formats a credential-bearing value into its error message, after a real failure."""
    try:
        httpx.post(f"http://127.0.0.1:{env.closed_port}/hook", timeout=2)
    except httpx.ConnectError as exc:
        raise RuntimeError(f"{message} failed: {exc}") from exc


@dataclass(frozen=True)
class Kind:
    """One kind of secret: its parts (what must never leak) and the real failure that carries it."""

    name: str
    parts: tuple[str, ...]
    leak: Callable[[Env], None]


def _kinds() -> list[Kind]:
    k: list[Kind] = []

    def add(name: str, parts: tuple[str, ...] | str, leak: Callable[[Env], None]) -> None:
        k.append(Kind(name, (parts,) if isinstance(parts, str) else parts, leak))

    s = "sk-proj-" + rand(48, URLSAFE)
    add("openai key echoed by the API", s, lambda e, s=s: http_body(e, {"Authorization": f"Bearer {s}"}))
    s = "sk-ant-api03-" + rand(93, URLSAFE) + "AA"
    add("anthropic key in x-api-key", s, lambda e, s=s: http_body(e, {"x-api-key": s}))
    kid, ksec = "AKIA" + rand(16, UPPER_DIGITS), rand(40, B64)
    add("aws id:secret without a label", (kid, ksec), lambda e, a=kid, b=ksec: argv(e, ["s3sync", f"{a}:{b}"]))
    ksec2 = rand(40, B64)
    add("aws labelled secret in ini", ksec2,
        lambda e, b=ksec2: ini(e, f"aws_secret_access_key = {b}\n[default]\n"))
    s = "ghp_" + rand(36)
    add("github token in an Authorization: token header", s,
        lambda e, s=s: http_body(e, {"Authorization": f"token {s}"}))
    s = "github_pat_" + rand(22) + "_" + rand(59)
    add("github PAT as URL user", s, lambda e, s=s: http_status(e, e.base.replace("://", f"://{s}@") + "/repo.git"))
    s = "glpat-" + rand(20, URLSAFE)
    add("gitlab token by its shape", s, lambda e, s=s: argv(e, ["glab", "login", s]))
    s = "ya29." + rand(120, URLSAFE)
    add("google oauth token by its shape", s, lambda e, s=s: formatted(e, f"refresh gave {s}; upload"))
    s = f"xoxb-{rand(12, string.digits)}-{rand(13, string.digits)}-{rand(24)}"
    add("slack bot token", s, lambda e, s=s: http_body(e, {"Authorization": f"Bearer {s}"}))
    s = f"T{rand(10, UPPER_DIGITS)}/B{rand(10, UPPER_DIGITS)}/{rand(24)}"
    add("slack webhook URL", s, lambda e, s=s: formatted(e, f"POST https://hooks.slack.com/services/{s}"))
    s = f"{rand(18, string.digits)}/{rand(68, URLSAFE)}"
    add("discord webhook URL", s, lambda e, s=s: formatted(e, f"POST https://discord.com/api/webhooks/{s}"))
    s = "AIza" + rand(35, URLSAFE)
    add("google api key in a query", s, lambda e, s=s: http_status(e, f"{e.base}/v1/models?key={s}"))
    s = "sk_live_" + rand(24)
    add("stripe secret key", s, lambda e, s=s: http_body(e, {"Authorization": f"Bearer {s}"}))
    s = "whsec_" + rand(32)
    add("stripe webhook secret", s, lambda e, s=s: ini(e, f"STRIPE_WEBHOOK_SIGNING={s}\n"))
    s = "hf_" + rand(34)
    add("hugging face token in argv", s, lambda e, s=s: argv(e, ["huggingface-cli", "login", s]))
    s = "npm_" + rand(36)
    add("npm token in .npmrc", s, lambda e, s=s: ini(e, f"//127.0.0.1:4873/:_authToken={s}\n"))
    s = f"SG.{rand(22, URLSAFE)}.{rand(43, URLSAFE)}"
    add("sendgrid key", s, lambda e, s=s: http_body(e, {"Authorization": f"Bearer {s}"}))
    s = f"{b64url({'alg': 'HS256', 'typ': 'JWT'})}.{b64url({'sub': rand(8), 'iat': 1})}.{rand(43, URLSAFE)}"
    add("JSON web token", s, lambda e, s=s: http_body(e, {"Authorization": f"Bearer {s}"}))
    body = "\n".join(rand(64, B64) for _ in range(6))
    pem = f"-----BEGIN RSA PRIVATE KEY-----\n{body}\n-----END RSA PRIVATE KEY-----"
    add("PEM private key", tuple(body.splitlines()), lambda e, p=pem: formatted(e, f"signing with key\n{p}\n"))
    user, pw = rand(6).lower(), rand(16)
    s = base64.b64encode(f"{user}:{pw}".encode()).decode()
    add("basic auth header", (s, pw), lambda e, s=s: http_body(e, {"Authorization": f"Basic {s}"}))
    s = f"{rand(5)}@{rand(5)}/{rand(6)}"
    add("URL password with @ and /", s,
        lambda e, s=s: wrapped_connection(e, f"postgresql://app:{s}@127.0.0.1:5432/app"))
    s = rand(24)
    add("redis password with empty user", s, lambda e, s=s: wrapped_connection(e, f"redis://:{s}@127.0.0.1:6379/0"))
    s = f"correct horse {rand(8)} staple"
    add("JSON password with spaces", s,
        lambda e, s=s: json_settings(e, '{\n  "user": "app",\n  "password": "' + s + '" "port": 5432\n}\n'))
    s = f"{rand(6)} {rand(6)} {rand(6)}"
    add("python dict repr password", s, lambda e, s=s: formatted(e, f"login with {{'user': 'app', 'password': '{s}'}}"))
    s = rand(86, B64) + "=="
    add("azure AccountKey", s, lambda e, s=s: ini(
        e, f"DefaultEndpointsProtocol=https;AccountName=acct;AccountKey={s};EndpointSuffix=core.windows.net\n"))
    s = rand(43, B64) + "="
    add("azure SharedAccessKey", s, lambda e, s=s: formatted(
        e, f"Endpoint=sb://ns.servicebus.windows.net/;SharedAccessKeyName=RootManageSharedAccessKey;"
           f"SharedAccessKey={s}"))
    s = rand(43, ALNUM) + "%3D"
    add("azure SAS sig", s, lambda e, s=s: http_status(
        e, f"{e.base}/container/blob.txt?sv=2022-11-02&ss=b&sp=rl&se=2030-01-01&sig={s}"))
    s = rand(32, HEX)
    add("Ocp-Apim-Subscription-Key", s, lambda e, s=s: http_body(e, {"Ocp-Apim-Subscription-Key": s}))
    s = "django-insecure-" + rand(50, ALNUM + "!@#$^&*(-_=+)")
    add("django SECRET_KEY", s, lambda e, s=s: ini(e, f"SECRET_KEY = '{s}'\nDEBUG = False\n"))
    s = rand(20)
    add("PGPASSWORD in a shell command", s, lambda e, s=s: shell(e, f"PGPASSWORD={s} psql -h 127.0.0.1 -U app"))
    s = f"{rand(7)} {rand(7)}"
    add("DB_PASS in an env file, quoted with a space", s, lambda e, s=s: ini(e, f"DB_PASS='{s}'\nDB_HOST=db\n"))
    s = rand(40, B64)
    add("camelCase secretKey in JSON", s, lambda e, s=s: json_settings(e, '{"secretKey": "' + s + '",}'))
    s = "s%3A" + rand(32, URLSAFE) + "." + rand(43, URLSAFE)
    add("connect.sid session cookie", s, lambda e, s=s: http_body(e, {"Cookie": f"connect.sid={s}; theme=dark"}))
    s = rand(32, string.ascii_lowercase + string.digits)
    add("django sessionid cookie", s, lambda e, s=s: http_body(e, {"Cookie": f"csrftoken=x1; sessionid={s}"}))
    s = rand(18)
    add("--password flag in argv", s, lambda e, s=s: argv(e, ["mysql", "-u", "root", "--password", s]))
    s = rand(40, URLSAFE)
    add("client_secret in a query", s,
        lambda e, s=s: http_status(e, f"{e.base}/oauth/token?client_id=app&client_secret={s}"))
    s = rand(32, HEX)
    add("x-api-key header", s, lambda e, s=s: http_body(e, {"X-API-Key": s}))
    s = rand(48, URLSAFE)
    add("access_token in a query", s, lambda e, s=s: http_status(e, f"{e.base}/me?access_token={s}"))
    s = rand(44, B64)
    add("private_key in a service-account JSON", s, lambda e, s=s: json_settings(
        e, '{"type": "service_account", "private_key": "-----BEGIN PRIVATE KEY-----\\n' + s + '\\n"'))
    s = rand(40, URLSAFE)
    add("opaque bearer token", s, lambda e, s=s: http_body(e, {"Authorization": f"Bearer {s}"}))
    s = rand(14)
    add("mysql DSN in argv", s, lambda e, s=s: argv(e, ["migrate", "--database", f"mysql://root:{s}@127.0.0.1/app"]))
    return k


KINDS = _kinds()


@pytest.fixture(scope="module")
def api() -> Iterator[str]:
    with loopback_server(EchoingAPI) as base:
        yield base


def _closed_port() -> int:
    import socket

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _exported_text(otel: OTel) -> str:
    """Everything the in-memory exporters received, as one string."""
    chunks: list[str] = []
    for span in otel.spans():
        chunks.append(span.name)
        chunks.append(json.dumps(dict(span.attributes or {}), default=str))
        chunks.append(str(span.status.description))
        for event in span.events:
            chunks.append(event.name + json.dumps(dict(event.attributes or {}), default=str))
    for log in otel.logs():
        record = log.log_record
        chunks.append(json.dumps(record.body, default=str))
        chunks.append(json.dumps(dict(record.attributes or {}), default=str))
    return "\n".join(chunks)


def _fragments(part: str) -> set[str]:
    """The secret and the pieces of it that would still betray it (a cut-off head or tail)."""
    pieces = {part}
    if len(part) >= 20:
        pieces |= {part[:16], part[-12:]}
    return pieces


def test_the_corpus_covers_forty_kinds() -> None:
    assert len(KINDS) >= 40
    assert len({kind.name for kind in KINDS}) == len(KINDS)


@pytest.mark.parametrize("kind", KINDS, ids=[kind.name for kind in KINDS])
def test_no_secret_leaves_through_digests_blocks_spans_or_logs(
    kind: Kind, api: str, tmp_path: Path, make_otel: Callable[..., OTel]
) -> None:
    otel = make_otel(consecutive=2, budget=2, action="human", capture_arguments=True)
    env = Env(api, _closed_port(), tmp_path)

    @otel.ec.tool(name="call_service")
    def call_service(credential: str) -> str:
        kind.leak(env)
        return "ok"

    with otel.ec.conversation("conv-secrets"), otel.tracer.start_as_current_span(
        "invoke_agent support", attributes={"gen_ai.operation.name": "invoke_agent"}
    ):
        returned = [call_service(kind.parts[0]) for _ in range(2)]
        block = otel.ec.context("conv-secrets")

    records = otel.records()
    raw = records[0].raw_error
    # The failure really carried the secret: the store keeps the raw error in full (the policy).
    assert any(part in raw for part in kind.parts), raw
    assert any(part in str(records[0].tool_arguments) for part in kind.parts)
    assert "Escalated" in block and "(×2)" in block
    exported = _exported_text(otel)
    assert "errcompact.escalation" in exported and "errcompact.trajectory" in exported
    assert "call_service" in exported  # the digest and context are still there, only the secret is not
    for part in kind.parts:
        for fragment in _fragments(part):
            for where, text in (("returned error", "\n".join(returned)), ("block", block), ("telemetry", exported)):
                assert fragment not in text, f"{kind.name}: {fragment!r} reached the {where}:\n{text[:3000]}"


def test_redaction_at_rest_keeps_the_local_store_free_of_secrets(
    api: str, tmp_path: Path, make_otel: Callable[..., OTel]
) -> None:
    jsonl = tmp_path / "t.jsonl"
    otel = make_otel(redact_at_rest=True, capture_arguments=True, jsonl_path=jsonl)
    env = Env(api, _closed_port(), tmp_path)
    key = "sk-proj-" + rand(48, URLSAFE)

    @otel.ec.tool
    def chat(api_key: str) -> str:
        http_body(env, {"Authorization": f"Bearer {key}"})
        return "ok"

    chat(key)
    records = otel.records()
    assert records and "Incorrect API key provided" in records[0].raw_error
    assert key not in records[0].to_json()
    assert REDACTED in records[0].raw_error
    assert key not in jsonl.read_text(encoding="utf-8")


class OTLPLogReceiver(BaseHTTPRequestHandler):
    """An OTLP/HTTP log receiver: keeps the body of every ``/v1/logs`` export as it came over the wire."""

    exports: ClassVar[list[bytes]] = []

    def do_POST(self) -> None:
        type(self).exports.append(self.rfile.read(int(self.headers.get("Content-Length") or 0)))
        self.send_response(200)
        self.send_header("Content-Type", "application/x-protobuf")
        self.send_header("Content-Length", "0")
        self.end_headers()

    def log_message(self, format: str, *args: Any) -> None:
        return None


def _plain(value: AnyValue) -> Any:
    """An OTLP ``AnyValue`` as the Python value it encodes."""
    kind = value.WhichOneof("value")
    if kind == "kvlist_value":
        return {pair.key: _plain(pair.value) for pair in value.kvlist_value.values}
    if kind == "array_value":
        return [_plain(item) for item in value.array_value.values]
    return getattr(value, kind) if kind else None


def _trajectory_bodies(exports: list[bytes]) -> list[dict[str, Any]]:
    """The bodies of the ``errcompact.trajectory`` log records in the OTLP exports."""
    bodies: list[dict[str, Any]] = []
    for export in exports:
        request = ExportLogsServiceRequest.FromString(export)
        for resource_logs in request.resource_logs:
            for scope_logs in resource_logs.scope_logs:
                bodies += [_plain(r.body) for r in scope_logs.log_records if r.event_name == "errcompact.trajectory"]
    return bodies


@pytest.mark.parametrize("at_rest", [False, True], ids=["store keeps them", "redacted at rest"])
def test_secrets_named_by_their_attribute_name_never_reach_the_otlp_log(
    at_rest: bool, api: str, tmp_path: Path
) -> None:
    """An HTTP tool span records the header it sent (``http.request.header.x-api-key``, a sequence) and a
    database password; a resource attribute carries an access token. None of the values has a known
    shape: only the name says it is a secret, so only the name can keep it out of the export, as
    ``x-api-key: …`` in text. The store keeps them (the audit copy), unless redaction at rest is on."""
    api_key, password, token = rand(14), "hunter2-" + rand(8), rand(24)
    OTLPLogReceiver.exports.clear()
    with loopback_server(OTLPLogReceiver) as receiver:
        tracer_provider = TracerProvider(
            resource=Resource.create({"service.name": "checkout-agent", "collector.access_token": token})
        )
        logger_provider = LoggerProvider()
        logger_provider.add_log_record_processor(
            BatchLogRecordProcessor(
                OTLPLogExporter(endpoint=f"{receiver}/v1/logs", timeout=10, compression=Compression.NoCompression)
            )
        )
        ec = otel_errcompact.init(
            tracer_provider=tracer_provider, logger_provider=logger_provider, meter_provider=MeterProvider(),
            sqlite_path=tmp_path / "t.sqlite3", redact_at_rest=at_rest,
        )
        try:
            tracer = tracer_provider.get_tracer("tests.agent")
            with pytest.raises(httpx.HTTPStatusError), tracer.start_as_current_span(
                "execute_tool fetch_order",
                attributes={
                    "gen_ai.operation.name": "execute_tool", "gen_ai.tool.name": "fetch_order",
                    "http.request.header.x-api-key": (api_key,), "db.password": password,
                },
            ):
                http_status(Env(api, _closed_port(), tmp_path), f"{api}/orders/42", headers={"x-api-key": api_key})
            assert ec.flush(30.0)
            assert logger_provider.force_flush(30_000)
            with TrajectoryStore(tmp_path / "t.sqlite3") as store:
                stored = [store.get(summary.record_id) for summary in store.list(limit=100)]
        finally:
            ec.shutdown()
            logger_provider.shutdown()
            tracer_provider.shutdown()

    bodies = _trajectory_bodies(OTLPLogReceiver.exports)
    assert bodies and all("401 Unauthorized" in body["raw_error"] for body in bodies)
    for body in bodies:
        assert body["attributes"]["http.request.header.x-api-key"] == [REDACTED]
        assert body["attributes"]["db.password"] == REDACTED
        assert body["resource"]["collector.access_token"] == REDACTED
        assert body["resource"]["service.name"] == "checkout-agent"
        assert body["attributes"]["gen_ai.tool.name"] == "fetch_order"
    for secret in (api_key, password, token):
        assert not any(secret.encode() in export for export in OTLPLogReceiver.exports), secret

    assert len(stored) == 1 and stored[0] is not None
    attributes, resource = stored[0].attributes, stored[0].resource
    if at_rest:
        assert (attributes["db.password"], resource["collector.access_token"]) == (REDACTED, REDACTED)
        assert attributes["http.request.header.x-api-key"] == [REDACTED]
    else:  # the audit copy: every value as the span carried it
        assert (attributes["db.password"], resource["collector.access_token"]) == (password, token)
        assert attributes["http.request.header.x-api-key"] == [api_key]


def test_structured_arguments_are_redacted_by_their_keys(tmp_path: Path) -> None:
    """A record of one's own with structured arguments, written through ``RedactingSink`` to a real JSONL
    file: a value under a secret-naming key is masked whole, in a nested mapping or list too, though
    neither ``hunter2 prod;eu`` nor a PIN looks like a secret; what names no secret stays."""
    password, api_key = "hunter2 prod;" + rand(6), rand(12)
    try:
        {"eu-west": 1}["us-east"]
    except KeyError:
        raw = traceback.format_exc()
    bare_token = rand(20)  # a captured Authorization header holds the credential, with or without a scheme
    arguments = {
        "user": "bob", "password": password, "max_tokens": 4096, "api_key": None,
        "options": {"headers": {"X-Api-Key": [api_key], "Authorization": [bare_token]}, "pin_password": 4711,
                    "retry": True},
    }
    path = tmp_path / "own.jsonl"
    sink = RedactingSink(JSONLSink(path))
    sink.write([TrajectoryRecord(source="api", raw_error=raw, tool_arguments=arguments)])
    sink.close()
    written = path.read_text(encoding="utf-8")
    assert password not in written and api_key not in written and "4711" not in written
    assert bare_token not in written
    (record,) = read_jsonl(path)
    assert record.tool_arguments == {
        "user": "bob", "password": REDACTED, "max_tokens": 4096, "api_key": None,
        "options": {"headers": {"X-Api-Key": [REDACTED], "Authorization": [REDACTED]}, "pin_password": REDACTED,
                    "retry": True},
    }
    assert "KeyError: 'us-east'" in record.raw_error


@pytest.mark.parametrize("source", ["init", "environment"])
def test_own_patterns_are_masked_everywhere(
    source: str, api: str, tmp_path: Path, make_otel: Callable[..., OTel], monkeypatch: pytest.MonkeyPatch,
    request: pytest.FixtureRequest,
) -> None:
    request.addfinalizer(clear_patterns)  # the registry is process-wide
    own = [r"acme_[a-z0-9]{24}", r"CUST-(?P<secret>[0-9]{8})"]
    if source == "environment":
        monkeypatch.setenv("OTEL_ERRCOMPACT_REDACT_PATTERNS", json.dumps(own))
        otel = make_otel()
    else:
        otel = make_otel(redact_patterns=own)
    env = Env(api, _closed_port(), tmp_path)
    token, customer = "acme_" + rand(24, string.ascii_lowercase + string.digits), rand(8, string.digits)

    @otel.ec.tool
    def lookup() -> str:
        formatted(env, f"lookup of CUST-{customer} with {token}")
        return "ok"

    error = lookup()
    exported = _exported_text(otel)
    for text in (error, exported, otel.ec.context()):
        assert token not in text and customer not in text
    assert "CUST-[REDACTED]" in error  # a named group masks only itself
    assert token in otel.records()[0].raw_error


def test_a_pattern_that_does_not_compile_is_a_configuration_error(make_otel: Callable[..., OTel]) -> None:
    from otel_errcompact import ConfigurationError

    with pytest.raises(ConfigurationError, match="redact pattern"):
        make_otel(redact_patterns=["(unclosed"])


def test_arguments_follow_the_genai_content_capture_switch(
    make_otel: Callable[..., OTel], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT", "true")
    otel = make_otel()

    @otel.ec.tool
    def login(user: str, password: str) -> str:
        return {"ann": "ok"}[user]

    login("bob", "hunter2-" + rand(8))
    span = otel.spans("execute_tool login")[0]
    arguments = json.loads(str((span.attributes or {})["gen_ai.tool.call.arguments"]))
    assert arguments == {"user": "bob", "password": REDACTED}
    assert "hunter2-" in str(otel.records()[0].tool_arguments)


def test_secrets_hidden_by_invisible_or_fullwidth_characters_are_still_masked() -> None:
    key = "sk-proj-" + rand(40)
    hidden = key[:8] + "\u200b" + key[8:]
    fullwidth = "".join(chr(ord(c) + 0xFEE0) if "!" <= c <= "~" else c for c in key)
    for text in (f"401: Incorrect API key provided: {hidden}", f"401: key {fullwidth} rejected"):
        line = compact_text(text).line
        assert key[8:20] not in line and REDACTED in line, line


@pytest.mark.parametrize(
    ("text", "kept"),
    [
        ("KeyError: 'user_id'", "KeyError: 'user_id'"),
        ("ValueError: max_tokens=4096 exceeds the limit", "max_tokens=4096"),
        ("ConnectionError: http://127.0.0.1:8080/v1/items refused", "http://127.0.0.1:8080/v1/items"),
        ("token expired at 12:00", "token expired at 12:00"),
        ("sessions.py line 589 in request", "sessions.py line 589 in request"),
    ],
)
def test_ordinary_error_text_is_not_masked(text: str, kept: str) -> None:
    assert kept in redact(text)


class RefusingAPI(BaseHTTPRequestHandler):
    """Refuses every request with 401 and the reason its path names, in prose, as services word it."""

    def do_GET(self) -> None:
        body = urllib.parse.unquote(self.path.lstrip("/")).encode()
        self.send_response(401)
        self.send_header("Content-Type", "text/plain")
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, format: str, *args: Any) -> None:
        return None


@pytest.mark.parametrize(
    "reason",
    [
        "The security token included in the request is invalid.",  # AWS STS's wording
        "Basic authentication required",
        "Invalid token provided for this workspace",
        "Token expired.",
    ],
)
def test_a_refusal_worded_in_prose_keeps_its_words(reason: str) -> None:
    """A scheme word (``Bearer``, ``Basic``, ``token``) followed by a word of prose names no credential:
    masking that word loses the cause, and makes refusals worded differently share one dedup key."""
    with loopback_server(RefusingAPI) as base:
        response = httpx.get(f"{base}/{urllib.parse.quote(reason)}", timeout=10)
    try:
        raise RuntimeError(f"API returned {response.status_code}: {response.text}")
    except RuntimeError:
        digest = compact_text(traceback.format_exc())
    assert reason.rstrip(".") in digest.line and REDACTED not in digest.line, digest.line


def _argparse_error(argv: list[str]) -> str:
    """A real command-line error about a secret-naming flag, as a tool that parses its arguments raises it."""
    parser = argparse.ArgumentParser(prog="deploy", exit_on_error=False)
    parser.add_argument("--api-key")
    parser.add_argument("--token", type=int)
    parser.add_argument("--password")
    try:
        parser.parse_args(argv)
    except argparse.ArgumentError:
        return traceback.format_exc()
    raise AssertionError(f"{argv} parsed")


@pytest.mark.parametrize(
    ("argv", "kept"),
    [
        (["--api-key"], "argument --api-key: expected one argument"),
        (["--token", "abc"], "argument --token: invalid int value"),
        (["--password"], "argument --password: expected one argument"),
    ],
)
def test_an_argument_error_about_a_secret_flag_keeps_its_message(argv: list[str], kept: str) -> None:
    """``--api-key: expected one argument`` is argparse naming the flag, not the flag's value: a flag takes
    its value after a space or ``=``, never after a colon."""
    assert kept in compact_text(_argparse_error(argv)).line


def test_an_unset_credential_is_named_unset() -> None:
    """``api_key=None`` is the cause (the key is not set), and no secret: it stays."""
    key = os.environ.get("OTEL_ERRCOMPACT_TEST_KEY_NEVER_SET")
    try:
        if key is None:
            raise RuntimeError(f"cannot call the search API: api_key={key}, session_id={key}")
    except RuntimeError:
        line = compact_text(traceback.format_exc()).line
    assert "api_key=None, session_id=None" in line, line


def test_a_word_of_prose_after_a_key_of_random_values_stays() -> None:
    """A token, a signature or a session id is random text: a word after its name is the message's, and
    the cause ("signature: mismatch"). A password may be a word: it is masked all the same."""
    body = b'{"event": "push"}'
    sent = hmac.new(b"old-secret", body, hashlib.sha256).hexdigest()
    try:
        if not hmac.compare_digest(sent, hmac.new(b"new-secret", body, hashlib.sha256).hexdigest()):
            raise PermissionError("webhook signature: mismatch; token: expired")
    except PermissionError:
        line = compact_text(traceback.format_exc()).line
    assert "signature: mismatch; token: expired" in line, line
    assert redact("password: letmein") == f"password: {REDACTED}"


def test_add_pattern_is_the_public_one_place(request: pytest.FixtureRequest) -> None:
    request.addfinalizer(clear_patterns)
    ticket = "TCK" + rand(10, string.digits)
    assert ticket in compact_text(f"RuntimeError: ticket {ticket} rejected").line
    add_pattern(r"TCK[0-9]{10}")
    assert len(patterns()) == 1
    line = compact_text(f"RuntimeError: ticket {ticket} rejected again").line
    assert ticket not in line and REDACTED in line


def test_a_bytes_pattern_is_refused_when_added_and_redaction_goes_on(request: pytest.FixtureRequest) -> None:
    """A bytes pattern cannot match text: registered, it made every later redact() raise, and a failing
    tool's digest lost its cause. It is refused when added, and nothing is registered."""
    request.addfinalizer(clear_patterns)
    for pattern in (rb"TCK[0-9]{10}", re.compile(rb"TCK[0-9]{10}")):
        with pytest.raises(TypeError, match=r"expected a str pattern, not bytes"):
            add_pattern(pattern)  # type: ignore[arg-type]
    assert patterns() == ()
    key = "sk-proj-" + rand(48, URLSAFE)
    assert redact(f"key {key} rejected") == f"key {REDACTED} rejected"


def test_spans_of_other_instrumentation_get_redacted_annotations_and_log_events(
    api: str, tmp_path: Path, make_otel: Callable[..., OTel]
) -> None:
    """A framework's own tool span (OpenInference kind TOOL) records the raw exception itself: that event
    is the framework's, not ours. What this library adds — the digest attributes, the escalation event and
    log, the trajectory log records — carries no secret; the local store keeps it."""
    otel = make_otel(consecutive=2, action="human")
    env = Env(api, _closed_port(), tmp_path)
    key = "sk-proj-" + rand(48, URLSAFE)
    with otel.tracer.start_as_current_span(
        "invoke_agent support", attributes={"gen_ai.operation.name": "invoke_agent"}
    ):
        for _ in range(2):
            with otel.tracer.start_as_current_span(
                "chat_tool", attributes={"openinference.span.kind": "TOOL", "tool.name": "chat"},
                record_exception=False, set_status_on_exception=False,
            ) as span:
                try:
                    http_body(env, {"Authorization": f"Bearer {key}"})
                except RuntimeError as exc:
                    span.record_exception(exc)
                    span.set_status(StatusCode.ERROR, str(exc))
    assert key in otel.records()[0].raw_error
    ours: list[str] = []
    for exported in otel.spans():
        ours += [f"{k}={v}" for k, v in (exported.attributes or {}).items() if k.startswith("errcompact.")]
        ours += [
            e.name + json.dumps(dict(e.attributes or {})) for e in exported.events if e.name.startswith("errcompact.")
        ]
    for log in otel.logs():
        record = log.log_record
        ours.append(
            f"{record.event_name} {json.dumps(record.body, default=str)} {json.dumps(dict(record.attributes or {}))}"
        )
    assert any("errcompact.digest" in text for text in ours) and any("errcompact.escalation" in t for t in ours)
    for text in ours:
        assert key not in text and key[-12:] not in text, text


def test_the_redaction_docstring_examples_hold() -> None:
    import doctest
    import importlib

    for name in ("otel_errcompact.redact", "otel_errcompact.sinks.redacting"):
        result = doctest.testmod(importlib.import_module(name))
        assert result.attempted > 0 and result.failed == 0, name


def test_the_remembered_anchors_are_the_anchors_of_the_text() -> None:
    """``redact`` remembers which anchors occur by the text with its digits read as 0: checked against the
    direct scan on real corpus lines, on the same lines with other digits (planted first, so a wrong
    reuse would show), and on fresh credentials whose anchor holds digits (Google's ``ya29.``)."""
    import importlib
    import random

    from tests.test_normalize import _corpus_lines

    redaction = importlib.import_module("otel_errcompact.redact")  # the package exports a function so named

    rng = random.Random(11)
    token = "ya29." + "".join(rng.choice(string.ascii_letters + string.digits) for _ in range(40))
    lines = [*_corpus_lines(), f"auth failed for {token}", f"ya19.{token[5:]} rejected", "key 0x12 at 7"]
    remembered, direct = [], []
    for line in lines:
        redaction.redact("".join(rng.choice("0123456789") if c.isdigit() else c for c in line))
        remembered.append(redaction.redact(line))
    keep = redaction._MAX_REMEMBERED
    try:
        redaction._MAX_REMEMBERED = -1  # every text scanned directly
        direct = [redaction.redact(line) for line in lines]
    finally:
        redaction._MAX_REMEMBERED = keep
    assert remembered == direct
    assert token not in remembered[-3]


def test_a_pattern_registered_after_a_text_was_compacted_masks_it_the_next_time(tmp_path: Path) -> None:
    """The compactor caches digests by text: a pattern registered (or forgotten) later must still change
    the next digest of the same text, not serve the one cached before."""
    text = python_error(tmp_path, "raise KeyError('ACME-884411')\n")
    compactor = Compactor()
    assert "ACME-884411" in compactor.compact(text).line
    try:
        add_pattern(r"ACME-[0-9]{6}")
        assert "ACME-884411" not in compactor.compact(text).line
    finally:
        clear_patterns()
    assert "ACME-884411" in compactor.compact(text).line


def test_a_pattern_registered_later_masks_a_file_path_seen_before(tmp_path: Path) -> None:
    """Cleaned file and function names are remembered across compactors, by text and by frame: a pattern
    registered later (a customer id in a deployment path) must mask them in every later digest."""
    text = python_error(tmp_path / "ACME-884411", "def load():\n    raise KeyError('x')\nload()\n")
    before = Compactor().compact(text).location
    assert before is not None and "ACME-884411" in before.file
    try:
        add_pattern(r"ACME-[0-9]{6}")
        masked = Compactor().compact(text).location
        assert masked is not None and "ACME-884411" not in masked.file and REDACTED in masked.file
    finally:
        clear_patterns()
    again = Compactor().compact(text).location
    assert again is not None and again.file == before.file
