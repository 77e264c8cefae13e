"""Dedup masking (``otel_errcompact.normalize``): variable parts masked, names kept.

Every message here comes from real code: a real exception's ``str()``, a real tool's output, or a value
a real library generated (a UUID, a timestamp, a token). Each rule is checked the way dedup uses it: two
occurrences that differ only in the variable part normalise to the same text, and the placeholder shows.
"""

from __future__ import annotations

import datetime
import os
import secrets
import socket
import sqlite3
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Callable
from pathlib import Path

import pytest

from otel_errcompact import compact_text
from otel_errcompact.normalize import MAX_NORMALIZED_CHARS, normalize_message
from tests.realerrors import have, python_error, run


def _message(action: Callable[[], object]) -> str:
    """``Type: message`` of the exception ``action`` raises, as a traceback's last line shows it."""
    try:
        action()
    except Exception as exc:  # every action here is expected to fail
        return f"{type(exc).__name__}: {exc}"
    raise AssertionError("the action was expected to fail")


def _unused_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
    return port


def _same_after_masking(first: str, second: str, placeholder: str) -> str:
    assert first != second
    masked = normalize_message(first)
    assert masked == normalize_message(second)
    assert placeholder in masked, masked
    return masked


def test_timestamps() -> None:
    iso = [f"deadline passed at {datetime.datetime.now(datetime.UTC).isoformat()}"]
    time.sleep(0.002)
    iso.append(f"deadline passed at {datetime.datetime.now(datetime.UTC).isoformat()}")
    _same_after_masking(*iso, "<ts>")
    ctime = f"cert expired on {time.ctime(1_700_000_000)}", f"cert expired on {time.ctime(1_800_000_123)}"
    assert _same_after_masking(*ctime, "<ts>") == "cert expired on <ts>"


def test_uuids() -> None:
    first = _message(lambda: {}[str(uuid.uuid4())])
    second = _message(lambda: {}[str(uuid.uuid4())])
    assert _same_after_masking(first, second, "<uuid>") == "KeyError: '<uuid>'"


def test_memory_addresses() -> None:
    alive = object(), object()  # two live objects never share an address
    first, second = repr(alive[0]), repr(alive[1])
    masked = _same_after_masking(first, second, "<addr>")
    assert masked == "<object object at <addr>>"


def test_temp_paths_keep_the_file_name(tmp_path: Path) -> None:
    first = _message(lambda: open(os.path.join(tempfile.mkdtemp(), "users.json")))  # noqa: SIM115
    second = _message(lambda: open(tmp_path / "users.json"))  # noqa: SIM115
    masked = _same_after_masking(first, second, "<tmp>/users.json")
    assert masked == "FileNotFoundError: [Errno <n>] No such file or directory: '<tmp>/users.json'"
    other = _message(lambda: open(tmp_path / "orders.json"))  # noqa: SIM115
    assert normalize_message(other) != masked


def test_urls_ips_ports_and_query_values() -> None:
    requests = pytest.importorskip("requests")
    messages = []
    for item in (42, 7):
        port = _unused_port()
        messages.append(_message(lambda port=port, item=item: requests.get(
            f"http://127.0.0.1:{port}/v1/items/{item}?page={item}&sig={secrets.token_hex(8)}", timeout=5)))
    masked = _same_after_masking(*messages, "<ip>")
    assert "port=<n>" in masked and "/v1/items/<n>?page=<v>&sig=<v>" in masked
    assert "127.0.0.1" not in masked


def test_ipv6_and_ip_with_port() -> None:
    first, second = _unused_port(), _unused_port()
    texts = [f"connect to [::1]:{first} failed", f"connect to [::1]:{second} failed"]
    assert _same_after_masking(*texts, "<port>") == "connect to <ip>:<port> failed"
    dsn = [f"could not connect to server at 10.0.0.{n}:{p}" for n, p in ((7, first), (9, second))]
    assert _same_after_masking(*dsn, "<ip>:<port>") == "could not connect to server at <ip>:<port>"


def test_request_and_trace_ids() -> None:
    ids = [f"upstream failed, request id: req_{secrets.token_hex(12)}" for _ in range(2)]
    assert _same_after_masking(*ids, "<id>") == "upstream failed, request id: <id>"
    traces = [f"span ended with error trace_id={secrets.token_hex(16)}" for _ in range(2)]
    assert _same_after_masking(*traces, "<id>") == "span ended with error trace_id=<id>"
    headers = [f"x-request-id: {uuid.uuid4()}" for _ in range(2)]
    assert _same_after_masking(*headers, "<uuid>") == "x-request-id: <uuid>"


def test_hashes_and_long_ids(tmp_path: Path) -> None:
    if not have("git"):
        pytest.skip("git is not installed")
    run(["git", "init", "-q"], cwd=tmp_path)
    outputs = [run(["git", "cat-file", "-p", secrets.token_hex(20)], cwd=tmp_path).stderr.strip()
               for _ in range(2)]
    assert _same_after_masking(*outputs, "<hex>").startswith("fatal: Not a valid object name <hex>")
    tokens = [f"unknown session {secrets.token_urlsafe(18).replace('-', 'a').replace('_', 'b')}1x"
              for _ in range(2)]
    assert _same_after_masking(*tokens, "<id>") == "unknown session <id>"


def test_durations() -> None:
    texts = [_message(lambda t=t: subprocess.run(["sleep", "5"], timeout=t)) for t in (0.05, 0.1)]
    masked = _same_after_masking(*texts, "<dur>")
    assert masked.endswith("timed out after <dur>")


def test_numbers() -> None:
    # Issue 6 reverses the earlier decision: an exit status names the outcome, so 3 and 4 stay apart.
    codes = [_message(lambda c=c: subprocess.run(["sh", "-c", f"exit {c}"], check=True)) for c in (3, 4)]
    assert normalize_message(codes[0]) != normalize_message(codes[1])
    assert normalize_message(codes[0]).endswith("returned non-zero exit status 3.")
    import json

    broken = [_message(lambda d=d: json.loads(d)) for d in ('{"a": 1,}', '{"abc": 12,}')]
    assert _same_after_masking(*broken, "<n>").endswith("line <n> column <n> (char <n>)")


def test_identifiers_are_never_masked() -> None:
    # Issue 6 reverses the earlier decision for separated digits: ``user_2`` and ``user_3`` are one name
    # with two data values (as ``u-2`` always was); ``user_id`` is another name.
    keys = [_message(lambda k=k: {}[k]) for k in ("user_2", "user_3", "user_id")]
    assert [normalize_message(k) for k in keys] == [
        "KeyError: 'user_<n>'", "KeyError: 'user_<n>'", "KeyError: 'user_id'"]
    db = sqlite3.connect(":memory:")
    tables = [_message(lambda t=t: db.execute(f"select * from {t}")) for t in ("t3_orders", "t4_orders")]
    masked = [normalize_message(t) for t in tables]
    assert masked == [
        "OperationalError: no such table: t3_orders", "OperationalError: no such table: t4_orders"]
    version = _message(lambda: __import__("definitely_missing_v2"))
    assert normalize_message(version) == "ModuleNotFoundError: No module named 'definitely_missing_v2'"
    # Issue 6 reverses the earlier decision: the literal int() rejected is input data, not a name.
    glued = [_message(lambda v=v: int(v)) for v in ("12abc", "n/a")]
    assert _same_after_masking(*glued, "<v>").endswith("invalid literal for int() with base <n>: <v>")


def test_output_is_bounded() -> None:
    huge = _message(lambda: {}["k" * 10_000])
    assert len(normalize_message(huge)) <= MAX_NORMALIZED_CHARS


# --- dedup keys from real failures --------------------------------------------------------------------


_CONNECT = """
    import socket, sys

    def fetch_inventory(port):
        with socket.create_connection(("127.0.0.1", port), timeout=5):
            pass

    fetch_inventory(int(sys.argv[1]))
"""


def test_connection_refused_on_two_ports_is_one_class(tmp_path: Path) -> None:
    first = python_error(tmp_path, _CONNECT, args=[str(_unused_port())])
    second = python_error(tmp_path, _CONNECT, args=[str(_unused_port())])
    assert "ConnectionRefusedError" in first and "ConnectionRefusedError" in second
    one, two = compact_text(first), compact_text(second)
    assert one.key == two.key
    assert one.type == "ConnectionRefusedError"


def test_requests_connection_error_on_two_ports_is_one_class(tmp_path: Path) -> None:
    pytest.importorskip("requests")
    source = """
        import sys, requests

        def fetch_item(port, item):
            requests.get(f"http://127.0.0.1:{port}/v1/items/{item}?page=2", timeout=5)

        fetch_item(int(sys.argv[1]), int(sys.argv[2]))
    """
    ports = [_unused_port(), _unused_port()]
    first = python_error(tmp_path, source, args=[str(ports[0]), "42"])
    second = python_error(tmp_path, source, args=[str(ports[1]), "7"])
    assert str(ports[0]) in first and str(ports[1]) in second
    one, two = compact_text(first), compact_text(second)
    assert one.key == two.key
    assert str(ports[0]) not in one.key_parts.message


def test_missing_files_with_different_names_are_two_classes(tmp_path: Path) -> None:
    source = """
        import sys

        def load_config(path):
            with open(path) as handle:
                return handle.read()

        load_config(sys.argv[1])
    """
    users = python_error(tmp_path, source, args=[str(tmp_path / "users.json")])
    orders = python_error(tmp_path, source, args=[str(tmp_path / "orders.json")])
    one, two = compact_text(users), compact_text(orders)
    assert one.type == two.type == "FileNotFoundError"
    assert one.key != two.key
    assert "users.json" in one.key_parts.message and "orders.json" in two.key_parts.message

    elsewhere = Path(tempfile.mkdtemp())
    again = python_error(elsewhere, source, args=[str(elsewhere / "users.json")])
    assert compact_text(again).key == one.key  # same file name under another temp dir


def test_missing_keys_are_two_classes(tmp_path: Path) -> None:
    source = """
        import sys

        def load_user(users, user_id):
            return users[user_id]

        load_user({"user_1": {}}, sys.argv[1])
    """
    keys = {compact_text(python_error(tmp_path, source, args=[name])).key for name in ("user_id", "email")}
    assert len(keys) == 2
    # Issue 6: the same missing key shape with another id is one class (the id is a data value).
    ids = {compact_text(python_error(tmp_path, source, args=[name])).key for name in ("user_2", "user_3")}
    assert len(ids) == 1


def test_key_explains_what_it_was_built_from(tmp_path: Path) -> None:
    traceback = python_error(tmp_path, _CONNECT, args=[str(_unused_port())])
    explained = compact_text(traceback).explain()
    assert "ConnectionRefusedError" in explained
    assert "line numbers ignored" in explained
    assert sys.executable not in explained


def test_guards_read_the_text_as_earlier_rules_left_it() -> None:
    """A uuid is masked only where an ASCII digit occurs: once the timestamp rule took the only digits,
    an all-letter uuid stays, and one digit anywhere after it brings the rule back."""
    letters = "abcdefab-abcd-abcd-abcd-abcdefabcdef"
    assert normalize_message(f"at 12:34:56 {letters}") == f"at <ts> {letters}"
    assert normalize_message(f"at 12:34:56 {letters} x1") == "at <ts> <uuid> x1"


def _corpus_lines() -> list[str]:
    import json

    corpus = Path(__file__).resolve().parent.parent / "benchmarks" / "agent_corpus"
    lines: list[str] = []
    for path in sorted(corpus.glob("*.jsonl")):
        if not path.name.endswith(".pairs.jsonl"):
            for record in path.read_text(encoding="utf-8").splitlines():
                if record.strip():
                    lines += [line for line in json.loads(record)["text"].splitlines() if line.strip()][:40]
    return lines


def test_a_guard_answers_alike_whatever_the_digits_1_to_9() -> None:
    """The guard plans are remembered by the text with its digits 2-9 read as 1 (``normalize._ONES``): that
    is exact only while no guard tells those digits apart. Checked on every line of the corpus, each with
    its digits shifted, and against the direct path that asks every guard."""
    import random

    from otel_errcompact import normalize

    rng = random.Random(7)
    lines = _corpus_lines()
    assert len(lines) > 1000
    digits = "123456789"
    for line in lines:
        text = line[: MAX_NORMALIZED_CHARS * 4]
        shifted = "".join(rng.choice(digits) if c in digits else c for c in text)
        ones = text.translate(str.maketrans("23456789", "11111111"))
        has_digit = any(c in "0123456789" for c in text)
        for rules in (normalize._ALL, normalize._ALL_NO_DIGIT, normalize._NOISE, normalize._NOISE_NO_DIGIT):
            for _, _, guard in rules:
                assert guard(text, has_digit) == guard(shifted, has_digit) == guard(ones, has_digit), (line, guard)
    remembered = []
    for line in lines:  # a plan made on the text with every digit, zero too, another one: it may not be reused
        normalize_message("".join(rng.choice(digits) if c in "0123456789" else c for c in line))
        remembered.append(normalize_message(line))
    direct = normalize._MAX_PLANNED
    try:
        normalize._MAX_PLANNED = -1  # every text takes the direct path
        assert [normalize_message(line) for line in lines] == remembered
    finally:
        normalize._MAX_PLANNED = direct
