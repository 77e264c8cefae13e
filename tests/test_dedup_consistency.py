"""Dedup consistency: one rule for value versus identifier, keys stable across the forms errors travel in,
and a rendered line that says when one class was seen with different values.

Every error is real: a script run by the real interpreter, a real SDK talking to a 127.0.0.1 server, a real
``subprocess`` failure. Forms are produced by real transformations (``json.dumps``, ``logging``).
"""

from __future__ import annotations

import json
import logging
import socket
import sys
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler
from pathlib import Path
from typing import Any

import pytest

from otel_errcompact import compact_text
from otel_errcompact.history import ErrorHistory, Limits, Thresholds
from otel_errcompact.normalize import normalize_message, value_signature
from tests.realerrors import have, loopback_server, python_error, run, send_body, write

_RESUME = """
    import sys
    SESSIONS = {}

    def resume(session_id):
        return SESSIONS[session_id]

    resume(sys.argv[1])
"""


def _key(folder: Path, source: str, *args: str) -> str:
    return compact_text(python_error(folder, source, args=list(args))).key


def _unused_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
    return port


# --- value versus identifier ---------------------------------------------------------------------------


@pytest.mark.parametrize("ids", [("s-2", "s-17", "s-40213"), ("s_2", "s_44239", "s_9"), ("s.3", "s.812", "s.5")])
def test_ids_with_any_separator_are_one_class(tmp_path: Path, ids: tuple[str, ...]) -> None:
    keys = {_key(tmp_path, _RESUME, value) for value in ids}
    assert len(keys) == 1


def test_separators_are_treated_alike_and_names_stay(tmp_path: Path) -> None:
    masked = [compact_text(python_error(tmp_path, _RESUME, args=[v])).key_parts.message
              for v in ("s-2", "s_44239", "default", "sandbox", "v2")]
    assert masked == ["'s-<n>'", "'s_<n>'", "'default'", "'sandbox'", "'v2'"]


def test_input_literals_are_values(tmp_path: Path) -> None:
    source = """
        import sys

        def parse(text, kind):
            return int(text) if kind == "int" else float(text)

        parse(sys.argv[1], sys.argv[2])
    """
    assert len({_key(tmp_path, source, v, "int") for v in ("abc", "12x", "n/a")}) == 1
    assert len({_key(tmp_path, source, v, "float") for v in ("12,50", "$3")}) == 1
    assert _key(tmp_path, source, "abc", "int") != _key(tmp_path, source, "abc", "float")


@pytest.mark.skipif(not (have("javac") and have("java")), reason="a JDK is not installed")
def test_java_input_strings_are_values(tmp_path: Path) -> None:
    write(tmp_path, "Main.java", """
        public class Main {
            static int parseAge(String text) { return Integer.parseInt(text); }
            public static void main(String[] args) { System.out.println(parseAge(args[0])); }
        }
    """)
    assert run(["javac", "Main.java"], cwd=tmp_path).returncode == 0
    outputs = [run(["java", "-cp", ".", "Main", v], cwd=tmp_path).stderr for v in ("abc", "forty", "1x")]
    assert all('For input string: "' in out for out in outputs)
    digests = [compact_text(out) for out in outputs]
    assert len({d.key for d in digests}) == 1
    assert "parseAge" in digests[0].line and "NumberFormatException" in digests[0].line


@pytest.fixture
def redis_port(tmp_path: Path) -> Iterator[int]:
    """A real redis-server on 127.0.0.1 (a free port), the fleet tests' own."""
    if not have("redis-cli"):
        pytest.skip("redis-cli is not installed")
    from tests.fleet.conftest import REDIS_SERVER, RedisServer

    if REDIS_SERVER is None:
        pytest.skip("redis-server is not installed")
    server = RedisServer(tmp_path)
    server.start()
    try:
        yield server.port
    finally:
        server.stop()


def test_redis_unknown_command_arguments_are_values(tmp_path: Path, redis_port: int) -> None:
    """Redis names the command it does not know and quotes the arguments it was called with: the command
    is the class, the arguments are data, from redis-cli and from redis-py alike."""
    def cli(*words: str) -> str:
        result = run(["redis-cli", "-p", str(redis_port), *words], cwd=tmp_path)
        assert "with args beginning with:" in result.output
        return compact_text(result.output, exit_code=result.returncode).key

    assert cli("HGETX", "user:1", "name") == cli("HGETX", "order:77", "total") == cli("HGETX", "x")
    assert cli("HGETX", "user:1", "name") != cli("HGETALLX", "user:1", "name")

    pytest.importorskip("redis")
    source = f"""
        import sys
        import redis

        def load(key):
            return redis.Redis(port={redis_port}).execute_command("HGETX", key, "name")

        load(sys.argv[1])
    """
    digests = [compact_text(python_error(tmp_path, source, args=[key])) for key in ("user:1", "order:77")]
    assert digests[0].type == "ResponseError" and "unknown command 'HGETX'" in digests[0].cause
    assert "'user:1'" in digests[0].cause  # shown to the agent, left out of the key
    assert digests[0].key == digests[1].key


def test_unicode_bytes_and_positions_are_values(tmp_path: Path) -> None:
    source = """
        import sys

        def read_blob(hex_text):
            return bytes.fromhex(hex_text).decode("utf-8")

        read_blob(sys.argv[1])
    """
    assert len({_key(tmp_path, source, v) for v in ("61ff00", "6162ff", "78797a80")}) == 1


def test_a_character_a_codec_cannot_encode_is_a_value(tmp_path: Path) -> None:
    """Writing accented text to an ASCII file fails alike whichever letter comes first: one class, with its
    different values told; a codec that fails for another reason stays its own class."""
    source = """
        import sys

        def save_note(text, encoding):
            with open("note.txt", "w", encoding=encoding) as handle:
                handle.write(text)

        save_note(sys.argv[1], sys.argv[2])
    """
    raws = [python_error(tmp_path, source, args=[text, "ascii"]) for text in ("café", "naïve", "a → b")]
    assert "can't encode character '\\xe9'" in raws[0] and "'\\u2192'" in raws[2]
    digests = [compact_text(raw) for raw in raws]
    assert len({d.key for d in digests}) == 1
    assert "encode character <c> in position" in digests[0].key_parts.message
    assert len({value_signature(d.cause) for d in digests}) == 3
    surrogate = compact_text(python_error(tmp_path, source, args=["\udce9", "utf-8"]))
    assert surrogate.key != digests[0].key


def test_numbered_files_are_one_class_named_files_are_not(tmp_path: Path) -> None:
    source = """
        import sys

        def read_part(name):
            with open(name) as handle:
                return handle.read()

        read_part(sys.argv[1])
    """
    numbered = {_key(tmp_path, source, v) for v in ("part-00001.csv", "part-00042.csv", "chunk_7.csv", "chunk_12.csv")}
    assert len(numbered) == 2  # ``part-<n>.csv`` and ``chunk_<n>.csv``
    assert _key(tmp_path, source, "users.csv") != _key(tmp_path, source, "orders.csv")


def test_urls_with_ids_and_ports_are_one_class_resources_are_not(tmp_path: Path) -> None:
    pytest.importorskip("requests")
    source = """
        import sys, requests

        def fetch(port, path):
            requests.get(f"http://127.0.0.1:{port}/v1/{path}?page=2", timeout=5)

        fetch(sys.argv[1], sys.argv[2])
    """
    users = {_key(tmp_path, source, str(_unused_port()), f"users/{n}/orders") for n in (17, 2044)}
    assert len(users) == 1
    invoices = _key(tmp_path, source, str(_unused_port()), "invoices/17")
    assert invoices not in users


def test_exit_statuses_never_merge(tmp_path: Path) -> None:
    source = """
        import os, subprocess, sys

        def run_step(code):
            subprocess.run(["sh", "-c", "exit $CODE"], check=True, env={**os.environ, "CODE": code})

        run_step(sys.argv[1])
    """
    keys = {code: _key(tmp_path, source, code) for code in ("144", "7")}
    assert keys["144"] != keys["7"]
    assert _key(tmp_path, source, "7") == keys["7"]
    assert normalize_message("Exit code 144") != normalize_message("Exit code 7")
    # A count is not a code: only the words code / status / signal / exit make a number a code.
    unpack = """
        import sys

        def split_pair(items):
            first, second = items
            return first, second

        split_pair(list(range(int(sys.argv[1]))))
    """
    assert _key(tmp_path, unpack, "3") == _key(tmp_path, unpack, "5")


class _BadKey(BaseHTTPRequestHandler):
    """Answers like the OpenAI API to a wrong key: the key's head and tail echoed between asterisks."""

    tails = iter(("4d03", "9a1f", "77c2", "0b5e"))

    def do_POST(self) -> None:
        self.rfile.read(int(self.headers.get("Content-Length") or 0))
        tail = next(self.tails)
        body = json.dumps({"error": {"message": f"Incorrect API key provided: sk-proj-{tail}{'*' * 36}{tail}. You "
                                     "can find your API key at https://platform.openai.com/account/api-keys.",
                                     "type": "invalid_request_error", "param": None, "code": "invalid_api_key"}})
        send_body(self, 401, body.encode())

    def log_message(self, format: str, *args: Any) -> None:
        """Quiet."""


def test_the_visible_tail_of_a_redacted_key_is_a_value(tmp_path: Path) -> None:
    pytest.importorskip("openai")
    source = """
        import sys, openai

        def ask(base):
            client = openai.OpenAI(base_url=base, api_key="sk-test-" + "x" * 24, max_retries=0)
            client.chat.completions.create(model="m", messages=[{"role": "user", "content": "hi"}])

        ask(sys.argv[1])
    """
    with loopback_server(_BadKey) as base:
        raws = [python_error(tmp_path, source, args=[base + "/v1"]) for _ in range(2)]
    assert raws[0] != raws[1] and "AuthenticationError" in raws[0]
    one, two = compact_text(raws[0]), compact_text(raws[1])
    assert one.key == two.key
    # The echoed tail is masked for the key (``<key>``) or redacted away entirely: either way no tail remains.
    message = one.key_parts.message
    assert ("<key>" in message or "[REDACTED]" in message) and "****" not in message and "401" in one.line


_ASK_OPENAI = """
    import sys, openai

    def ask(base, model):
        client = openai.OpenAI(base_url=base, api_key="sk-test-" + "x" * 24, max_retries=0)
        client.chat.completions.create(model=model, messages=[{"role": "user", "content": "hi"}])

    ask(sys.argv[1], sys.argv[2])
"""
"""A chat completion asked of the real OpenAI client, against the API at ``argv[1]``, for model ``argv[2]``."""


class _NoSuchModel(BaseHTTPRequestHandler):
    """Answers like the OpenAI API to a model it does not serve: the requested model named in the message."""

    def do_POST(self) -> None:
        model = json.loads(self.rfile.read(int(self.headers.get("Content-Length") or 0)))["model"]
        body = json.dumps({"error": {"message": f"The model `{model}` does not exist or you do not have access to "
                                     "it.", "type": "invalid_request_error", "param": None,
                                     "code": "model_not_found"}})
        send_body(self, 404, body.encode())

    def log_message(self, format: str, *args: Any) -> None:
        """Quiet."""


def test_model_names_never_merge(tmp_path: Path) -> None:
    """A model's name is what was asked for: ``gpt-4`` and ``gpt-5`` are two failures, though the digits
    after a hyphen of an id (``s-2``, ``s-17``) are one value."""
    pytest.importorskip("openai")
    models = ("gpt-4", "gpt-5", "gpt-4.1-nano", "gpt-4.5-nano")
    with loopback_server(_NoSuchModel) as base:
        digests = {model: compact_text(python_error(tmp_path, _ASK_OPENAI, args=[base + "/v1", model]))
                   for model in models}
    assert {d.type for d in digests.values()} == {"NotFoundError"}
    assert all(f"`{model}`" in digests[model].cause for model in models)
    assert len({d.key for d in digests.values()}) == len(models)
    assert _key(tmp_path, _RESUME, "s-2") == _key(tmp_path, _RESUME, "s-17")


class _RateLimited(BaseHTTPRequestHandler):
    """Answers like the OpenAI API to a model past its rate limit, in the words OpenAI's help center quotes
    (https://help.openai.com/en/articles/5955604: "Rate limit reached for gpt-3.5-turbo in organization
    org-exampleorgid123 on tokens per min. Limit: 10000.000000 / min. Current: 10020.000000 / min."), with
    the requested model in its place: the message names the model without the word "model"."""

    def do_POST(self) -> None:
        model = json.loads(self.rfile.read(int(self.headers.get("Content-Length") or 0)))["model"]
        body = json.dumps({"error": {"message": f"Rate limit reached for {model} in organization "
                                     "org-exampleorgid123 on tokens per min. Limit: 10000.000000 / min. "
                                     "Current: 10020.000000 / min.", "type": "tokens", "param": None,
                                     "code": "rate_limit_exceeded"}})
        send_body(self, 429, body.encode())

    def log_message(self, format: str, *args: Any) -> None:
        """Quiet."""


def test_rate_limits_of_two_models_never_merge(tmp_path: Path) -> None:
    """``Rate limit reached for gpt-4`` and ``… for gpt-5`` are two limits; an id in the same place
    (``for s-2``, ``for s-17``) is still one value."""
    pytest.importorskip("openai")
    names = ("gpt-4", "gpt-5", "gpt-4.1-nano", "gpt-4.5-nano", "s-2", "s-17")
    with loopback_server(_RateLimited) as base:
        digests = {name: compact_text(python_error(tmp_path, _ASK_OPENAI, args=[base + "/v1", name])) for name in names}
    assert {d.type for d in digests.values()} == {"RateLimitError"}
    assert all(f"Rate limit reached for {name} " in digests[name].cause for name in names)
    models = names[:4]
    assert len({digests[model].key for model in models}) == len(models)
    assert digests["s-2"].key == digests["s-17"].key


# --- key stability across forms ---------------------------------------------------------------------


def _log_each_line(text: str, fmt: str) -> str:
    formatter = logging.Formatter(fmt)
    return "\n".join(formatter.format(logging.LogRecord("tool", logging.ERROR, __file__, 0, line, None, None))
                     for line in text.rstrip("\n").split("\n")) + "\n"


def test_same_failure_same_key_raw_escaped_logged_dedented_or_cut(tmp_path: Path) -> None:
    source = """
        import sqlite3

        def count_rows(table):
            db = sqlite3.connect(":memory:")
            return db.execute(f"select count(*) from {table}").fetchone()

        def report():
            return count_rows("orders")

        report()
    """
    raw = python_error(tmp_path, source)
    lines = raw.rstrip("\n").split("\n")
    forms = {
        "raw": raw,
        "json string": json.dumps(raw),
        "json report": json.dumps({"status": "error", "error": {"traceback": raw, "code": 1}}),
        "jupyter-style lines": json.dumps({"ename": "OperationalError", "traceback": lines}),
        "double json": json.dumps(json.dumps(raw)),
        "timestamped lines": _log_each_line(raw, "%(asctime)s %(levelname)s [%(name)s] %(message)s"),
        "basic logging lines": _log_each_line(raw, logging.BASIC_FORMAT),
        "indentation lost": "\n".join(line.strip() for line in lines),
        "head cut": "\n".join(lines[3:]),
    }
    digests = {name: compact_text(text) for name, text in forms.items()}
    expected = digests["raw"]
    assert expected.line.startswith("[OperationalError] at app.py:")
    assert "no such table: orders" in expected.line and "count_rows" in expected.line
    for name, digest in digests.items():
        assert digest.key == expected.key, (name, digest.line)


def test_a_table_name_still_separates_in_every_form(tmp_path: Path) -> None:
    source = """
        import sqlite3, sys

        def count_rows(table):
            return sqlite3.connect(":memory:").execute(f"select * from {table}").fetchone()

        count_rows(sys.argv[1])
    """
    orders, users = (python_error(tmp_path, source, args=[t]) for t in ("orders", "users"))
    for transform in (lambda t: t, json.dumps, lambda t: _log_each_line(t, "%(asctime)s %(message)s")):
        assert compact_text(transform(orders)).key != compact_text(transform(users)).key


# --- "(×N, M different values)" ---------------------------------------------------------------------


def test_rendered_line_counts_different_values(tmp_path: Path) -> None:
    history = ErrorHistory(Thresholds(consecutive=10))
    for value in ("s-2", "s-17", "s-40213"):
        history.observe("conv", compact_text(python_error(tmp_path, _RESUME, args=[value])))
    block = history.render("conv")
    assert "(×3, 3 different values)" in block, block

    same = ErrorHistory(Thresholds(consecutive=10))
    digest = compact_text(python_error(tmp_path, _RESUME, args=["s-2"]))
    for _ in range(3):
        same.observe("conv", digest)
    assert "(×3)" in same.render("conv") and "different values" not in same.render("conv")


def test_values_count_right_across_renders_in_between(tmp_path: Path) -> None:
    """A class's one waiting cause is signed when the block is rendered; values seen before and after
    a render add up, and a value seen again after it is not counted twice."""
    digests = {value: compact_text(python_error(tmp_path, _RESUME, args=[value])) for value in ("s-2", "s-17")}
    history = ErrorHistory(Thresholds(consecutive=10))
    history.observe("conv", digests["s-2"])
    history.observe("conv", digests["s-2"])
    assert "(×2)" in history.render("conv")
    history.observe("conv", digests["s-17"])
    assert "(×3, 2 different values)" in history.render("conv"), history.render("conv")
    history.observe("conv", digests["s-2"])
    assert "(×4, 2 different values)" in history.render("conv"), history.render("conv")


def test_noise_is_not_a_different_value(tmp_path: Path) -> None:
    source = """
        import sys, socket

        def fetch_inventory(port):
            socket.create_connection(("127.0.0.1", port), timeout=5)

        fetch_inventory(int(sys.argv[1]))
    """
    history = ErrorHistory(Thresholds(consecutive=10))
    for _ in range(3):
        history.observe("conv", compact_text(python_error(tmp_path, source, args=[str(_unused_port())])))
    block = history.render("conv")
    assert "(×3)" in block and "different values" not in block, block
    assert value_signature("10.0.0.7:5432 after 3.2s") == value_signature("10.0.0.9:6543 after 1.1s")


def test_different_values_are_counted_up_to_a_bound(tmp_path: Path) -> None:
    script = write(tmp_path, "many.py", """
        import json, traceback
        SESSIONS = {}

        def resume(session_id):
            return SESSIONS[session_id]

        for n in range(6):
            try:
                resume(f"s-{n}")
            except KeyError:
                print(json.dumps(traceback.format_exc()))
    """)
    out = run([sys.executable, str(script)], cwd=tmp_path).stdout.splitlines()
    history = ErrorHistory(Thresholds(consecutive=100), Limits(max_values=4))
    for line in out:
        history.observe("conv", compact_text(json.loads(line)))
    assert "(×6, 4+ different values)" in history.render("conv")


def test_the_values_bound_is_a_setting(monkeypatch: pytest.MonkeyPatch) -> None:
    from otel_errcompact.config import load_settings

    monkeypatch.setenv("OTEL_ERRCOMPACT_MAX_VALUES", "5")
    assert load_settings().limits().max_values == 5


def test_values_beyond_the_waiting_bound_are_still_counted_right() -> None:
    """Causes are reduced to value signatures in bulk (at render, or when 4 × max_values distinct ones
    wait): many causes that differ only by noise still count as one value, and real values still stop
    at the bound."""
    limits = Limits(max_values=4)
    noise = ErrorHistory(Thresholds(consecutive=1000), limits)
    for i in range(40):  # 40 distinct causes, one value: the address and the duration are noise
        noise.observe("conv", compact_text(f"ConnectionError: connect to 10.0.{i}.7:5432 failed after {i}.2s"))
    block = noise.render("conv")
    assert "(×40)" in block and "different values" not in block, block

    values = ErrorHistory(Thresholds(consecutive=1000), limits)
    for i in range(40):
        values.observe("conv", compact_text(f"KeyError: 'session s-{i}'"))
    block = values.render("conv")
    assert "(×40, 4+ different values)" in block, block
