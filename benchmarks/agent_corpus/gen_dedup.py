"""Generate ``dedup.jsonl``: one failure with many data values, and near misses that differ in a name.

Every record is a real run: Python scripts whose input varies (ids with ``-`` and ``_`` separators,
numbered files, URLs with ids and ports, exit statuses), and the real OpenAI and Anthropic SDKs calling a
127.0.0.1 server that answers with their error envelopes (key tails, models, request ids vary). Each
traceback is also passed on JSON-escaped and through a logging formatter, so the key must hold across forms.

The classes test the value-versus-identifier rule in ``otel_errcompact/normalize.py``: a class collects
every data value; a near-miss pair differs in what names the cause (exit status, resource, model, key
name, separator-free name).

    python benchmarks/agent_corpus/gen_dedup.py
"""

from __future__ import annotations

import json
import logging
import os
import secrets
import socket
import subprocess
import sys
import tempfile
from http.server import BaseHTTPRequestHandler
from pathlib import Path
from typing import Any

from _gen import near_miss_pairs, write_records

from tests.realerrors import loopback_server, send_body

FAMILY = "dedup"

# (scenario, source, values, label-per-value?, cause tokens). ``{v}`` is the value's repr; ``{raw}`` in a
# token is the value itself.
SCENARIOS: list[tuple[str, str, list[str], bool, list[str]]] = [
    ("exit-status", "import os, subprocess\n\ndef run_step(code):\n    subprocess.run(['sh', '-c', 'exit $CODE'], "
     "check=True, env={**os.environ, 'CODE': code})\n\nrun_step({v})\n", ["144", "7", "2"], True,
     ["CalledProcessError", "exit status {raw}"]),
    ("hyphen-id", "SESSIONS = {}\n\ndef resume(session_id):\n    return SESSIONS[session_id]\n\nresume({v})\n",
     ["s-2", "s-17", "s-40213"], False, ["KeyError", "resume", "{raw}"]),
    ("underscore-id", "SESSIONS = {}\n\ndef resume(session_id):\n    return SESSIONS[session_id]\n\nresume({v})\n",
     ["s_2", "s_44239", "s_9"], False, ["KeyError", "resume", "{raw}"]),
    ("dotted-id", "SESSIONS = {}\n\ndef resume(session_id):\n    return SESSIONS[session_id]\n\nresume({v})\n",
     ["s.3", "s.812"], False, ["KeyError", "resume", "{raw}"]),
    ("name-key", "SESSIONS = {}\n\ndef resume(session_id):\n    return SESSIONS[session_id]\n\nresume({v})\n",
     ["default", "sandbox"], True, ["KeyError", "{raw}"]),
    ("numbered-part", "def read_part(name):\n    with open(name) as f:\n        return f.read()\n\nread_part({v})\n",
     ["part-00001.csv", "part-00042.csv", "part-00917.csv"], False, ["FileNotFoundError", "{raw}"]),
    ("float-literal", "def parse_price(text):\n    return float(text)\n\nparse_price({v})\n",
     ["12,50", "n/a", "$3"], False, ["ValueError", "could not convert", "parse_price"]),
    ("url-users", "import sys, requests\n\ndef fetch_orders(port, user):\n    requests.get(f'http://127.0.0.1:{port}/v1/users/"
     "{user}/orders?page=2', timeout=5)\n\nfetch_orders(sys.argv[1], {v})\n", ["17", "2044", "88"], False,
     ["ConnectionError", "/v1/users/", "fetch_orders"]),
    ("url-invoices", "import sys, requests\n\ndef fetch_orders(port, user):\n    requests.get(f'http://127.0.0.1:{port}/v1/"
     "invoices/{user}', timeout=5)\n\nfetch_orders(sys.argv[1], {v})\n", ["17", "31"], False,
     ["ConnectionError", "/v1/invoices/", "fetch_orders"]),
]


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
    return port


def _run(cmd: list[str], cwd: Path) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "NO_COLOR": "1", "PYTHONDONTWRITEBYTECODE": "1"}
    return subprocess.run(cmd, cwd=cwd, capture_output=True, text=True, timeout=120, env=env, errors="replace")


def _log_lines(text: str) -> str:
    formatter = logging.Formatter("%(asctime)s.%(msecs)03d %(levelname)s %(name)s: %(message)s", "%H:%M:%S")
    records = [logging.LogRecord("agent.tool", logging.ERROR, __file__, 0, line, None, None)
               for line in text.rstrip("\n").split("\n")]
    return "\n".join(formatter.format(record) for record in records) + "\n"


def _forms(raw: str) -> list[tuple[str, str]]:
    return [("raw", raw), ("json", json.dumps({"ok": False, "error": raw})), ("log", _log_lines(raw))]


def script_records(folder: Path) -> list[dict[str, Any]]:
    records: list[dict[str, Any]] = []
    for name, source, values, per_value, tokens in SCENARIOS:
        for index, value in enumerate(values):
            sub = folder / f"{name}-{index}"
            sub.mkdir()
            script = sub / "tool.py"
            script.write_text(source.replace("{v}", repr(value)), encoding="utf-8")
            for rep in range(2):
                proc = _run([sys.executable, str(script), str(_free_port())], sub)
                assert "Traceback" in proc.stderr, proc.stderr
                label = f"{FAMILY}/{name}" + (f"-{value}" if per_value else "")
                want = [t.replace("{raw}", value) for t in tokens]
                for form, text in _forms(proc.stderr):
                    records.append({"id": f"{FAMILY}/{name}-{index}-{rep}-{form}", "format": "dedup-python",
                                    "source": f"python tool.py (value {value!r}); {form}", "text": text,
                                    "exit_code": None, "command": None, "label": label, "cause_tokens": want})
    return records


# ------------------------------------------------------------------------------------------------- SDKs

def _key_tail() -> str:
    return f"sk-proj-{secrets.token_hex(2)}" + "*" * 36 + secrets.token_hex(2)


class _Api(BaseHTTPRequestHandler):
    """OpenAI- and Anthropic-shaped error responses (fields as in the SDKs' ErrorObject/ErrorResponse)."""

    def _answer(self) -> None:
        self.rfile.read(int(self.headers.get("Content-Length") or 0))
        body: dict[str, Any]
        headers: dict[str, str] = {}
        if "badkey" in self.path:
            status = 401
            body = {"error": {"message": f"Incorrect API key provided: {_key_tail()}. You can find your API key "
                              "at https://platform.openai.com/account/api-keys.", "type": "invalid_request_error",
                              "param": None, "code": "invalid_api_key"}}
        elif "model-" in self.path:
            status = 404
            model = self.path.split("model-", 1)[1].split("/", 1)[0]
            body = {"error": {"message": f"The model `{model}` does not exist or you do not have access to it.",
                              "type": "invalid_request_error", "param": None, "code": "model_not_found"}}
        else:
            status = 429
            request_id = "req_011C" + secrets.token_hex(10)
            headers = {"retry-after": str(secrets.randbelow(50) + 1), "request-id": request_id}
            body = {"type": "error", "error": {"type": "rate_limit_error", "message": "This request would exceed "
                    "the rate limit for your organization of 50,000 input tokens per minute."},
                    "request_id": request_id}
        send_body(self, status, json.dumps(body).encode("utf-8"), headers=headers)

    do_GET = _answer
    do_POST = _answer

    def log_message(self, format: str, *args: Any) -> None:
        """Quiet."""


_OPENAI = """import sys, openai

def ask(base, model):
    client = openai.OpenAI(base_url=base, api_key="sk-test-" + "x" * 24, max_retries=0)
    return client.chat.completions.create(model=model, messages=[{"role": "user", "content": "hi"}])

ask(sys.argv[1], sys.argv[2])
"""

_ANTHROPIC = """import sys, anthropic

def ask(base):
    client = anthropic.Anthropic(base_url=base, api_key="sk-ant-test", max_retries=0)
    return client.messages.create(model="claude-sonnet-4-5", max_tokens=64,
                                  messages=[{"role": "user", "content": "hi"}])

ask(sys.argv[1])
"""


def sdk_records(folder: Path) -> list[dict[str, Any]]:
    records: list[dict[str, Any]] = []
    (folder / "ask_openai.py").write_text(_OPENAI, encoding="utf-8")
    (folder / "ask_anthropic.py").write_text(_ANTHROPIC, encoding="utf-8")
    with loopback_server(_Api) as base:
        cases = [
            ("openai-badkey", ["ask_openai.py", f"{base}/badkey/v1", "gpt-4o"], "AuthenticationError",
             ["AuthenticationError", "401", "Incorrect API key"]),
            ("openai-model-gpt-4.1-nano", ["ask_openai.py", f"{base}/model-gpt-4.1-nano/v1", "gpt-4.1-nano"],
             "NotFoundError", ["NotFoundError", "404", "gpt-4.1-nano"]),
            ("openai-model-o3-pro", ["ask_openai.py", f"{base}/model-o3-pro/v1", "o3-pro"], "NotFoundError",
             ["NotFoundError", "404", "o3-pro"]),
            ("anthropic-429", ["ask_anthropic.py", f"{base}/limited"], "RateLimitError",
             ["RateLimitError", "rate_limit_error"]),
        ]
        for name, args, expect, tokens in cases:
            for rep in range(3):
                proc = _run([sys.executable, *args], folder)
                assert expect in proc.stderr, proc.stderr[-800:]
                for form, text in _forms(proc.stderr):
                    records.append({"id": f"{FAMILY}/sdk-{name}-{rep}-{form}", "format": "dedup-sdk",
                                    "source": f"python {args[0]} against 127.0.0.1; {form}", "text": text,
                                    "exit_code": None, "command": None, "label": f"{FAMILY}/sdk-{name}",
                                    "cause_tokens": tokens})
    return records


def pairs_for(records: list[dict[str, Any]]) -> list[dict[str, str]]:
    groups = [
        ("dedup/exit-status-144", "dedup/exit-status-7", "different exit status"),
        ("dedup/exit-status-7", "dedup/exit-status-2", "different exit status"),
        ("dedup/name-key-default", "dedup/name-key-sandbox", "different key name"),
        ("dedup/hyphen-id", "dedup/name-key-default", "an id versus a name"),
        ("dedup/url-users", "dedup/url-invoices", "different resource"),
        ("dedup/sdk-openai-model-gpt-4.1-nano", "dedup/sdk-openai-model-o3-pro", "different model"),
        ("dedup/sdk-openai-badkey", "dedup/sdk-openai-model-o3-pro", "different error"),
    ]
    return near_miss_pairs(records, groups)


def main() -> None:
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp)
        records = script_records(folder) + sdk_records(folder)
    pairs = pairs_for(records)
    write_records(FAMILY, records, pairs)


if __name__ == "__main__":
    main()
