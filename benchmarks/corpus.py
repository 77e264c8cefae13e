"""A corpus of real errors, produced by running real code and real tools in a scratch folder.

Nothing here is typed by hand except the HTTP response bodies, which a real ``http.server`` on 127.0.0.1
serves in the exact envelope shapes the OpenAI and Anthropic APIs use (and an nginx-style 502 page); the
status line, headers and framing come from the real server and are read back by ``urllib``.

Each :class:`Sample` carries the raw text a tool would hand an agent, the hints a runner would know
(exit code, command), and the token that must survive into the digest (the key, module, table, field,
symbol, file name or status code that names the cause).

    >>> from pathlib import Path; import tempfile
    >>> samples = build_corpus(Path(tempfile.mkdtemp()))  # doctest: +SKIP
"""

from __future__ import annotations

import importlib.util
import json
import sys
import urllib.error
import urllib.request
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler
from pathlib import Path
from typing import Any

_ROOT = Path(__file__).resolve().parent.parent
if str(_ROOT) not in sys.path:
    sys.path.insert(0, str(_ROOT))

from tests.realerrors import have, loopback_server, python_error, run, send_body, write  # noqa: E402

__all__ = ["Sample", "build_corpus"]


@dataclass(frozen=True)
class Sample:
    """One real error: where it came from, what it looked like, and what its digest must keep."""

    name: str
    format: str
    raw: str
    token: str
    exit_code: int | None = None
    command: str | None = None
    kind: str | None = None


# ---------------------------------------------------------------------------------------------- HTTP

_NGINX_502 = (
    "<html>\r\n<head><title>502 Bad Gateway</title></head>\r\n<body>\r\n"
    "<center><h1>502 Bad Gateway</h1></center>\r\n<hr><center>nginx/1.25.3</center>\r\n"
    "</body>\r\n</html>\r\n"
)

_ROUTES: dict[str, tuple[int, dict[str, str], str, str]] = {
    "/v1/chat/completions/429": (
        429,
        {"retry-after": "20", "x-request-id": "req_6f1c2bd5a0e84c1f9b7e3d2a1c0b9a88"},
        json.dumps(
            {
                "error": {
                    "message": "Rate limit reached for gpt-4o in organization org-AbCdEf123456 on tokens per "
                    "min (TPM): Limit 30000, Used 29861, Requested 1604. Please try again in 2.93s. Visit "
                    "https://platform.openai.com/account/rate-limits to learn more.",
                    "type": "tokens",
                    "param": None,
                    "code": "rate_limit_exceeded",
                }
            }
        ),
        "application/json",
    ),
    "/v1/messages/500": (
        500,
        {"request-id": "req_011CSHoEeqs5C35K2UUqR7Fy"},
        json.dumps(
            {
                "type": "error",
                "error": {"type": "api_error", "message": "Internal server error"},
                "request_id": "req_011CSHoEeqs5C35K2UUqR7Fy",
            }
        ),
        "application/json",
    ),
    "/v1/messages/429": (
        429,
        {"retry-after": "7", "request-id": "req_011CSJq9w2ZsT4e8Zr6YyV1P"},
        json.dumps(
            {
                "type": "error",
                "error": {
                    "type": "rate_limit_error",
                    "message": "Number of request tokens has exceeded your per-minute rate limit "
                    "(https://docs.anthropic.com/en/api/rate-limits); see the response headers for current "
                    "usage. Please reduce the prompt length or the maximum tokens requested, or try again "
                    "later.",
                },
                "request_id": "req_011CSJq9w2ZsT4e8Zr6YyV1P",
            }
        ),
        "application/json",
    ),
    "/gateway/502": (502, {"Server": "nginx/1.25.3"}, _NGINX_502, "text/html"),
}


class _Handler(BaseHTTPRequestHandler):
    def _answer(self) -> None:
        self.rfile.read(int(self.headers.get("Content-Length") or 0))
        status, headers, body, content_type = _ROUTES[self.path]
        send_body(self, status, body.encode("utf-8"), content_type=content_type, headers=headers)

    do_GET = _answer
    do_POST = _answer

    def log_message(self, format: str, *args: Any) -> None:
        """Keep the benchmark's output clean."""


def _http_failure(url: str, *, with_headers: bool) -> str:
    """What a Python tool reports for a failed API call: ``str(HTTPError)`` and the body, or the raw
    response (status line, headers, body) when the tool logs the whole response."""
    request = urllib.request.Request(
        url, data=b'{"model": "m", "messages": []}', headers={"Content-Type": "application/json"}
    )
    try:
        urllib.request.urlopen(request, timeout=30)
    except urllib.error.HTTPError as e:
        body = e.read().decode("utf-8", "replace")
        if with_headers:
            head = "".join(f"{k}: {v}\n" for k, v in e.headers.items())
            return f"HTTP/1.1 {e.code} {e.reason}\n{head}\n{body}"
        return f"{e}\n{body}"
    raise AssertionError(f"{url} was expected to fail")


# ---------------------------------------------------------------------------------------------- Python


def _python_samples(folder: Path) -> list[Sample]:
    out: list[Sample] = []

    def py(sample: str, token: str, source: str, **kw: Any) -> None:
        sub = folder / sample
        sub.mkdir(parents=True)
        out.append(Sample(sample, "python", python_error(sub, source, **kw), token))

    py(
        "py_keyerror",
        "'user_id'",
        """
        users = {"alice": {"name": "Alice"}}

        def load_user(user_id):
            return users[user_id]

        def handle(request):
            return load_user(request["id"])

        handle({"id": "user_id"})
        """,
    )
    py(
        "py_chained",
        "db_url",
        """
        import os

        def read_setting(name):
            return os.environ[name]

        def connect():
            try:
                return read_setting("DB_URL_FOR_BENCH")
            except KeyError as exc:
                raise RuntimeError("missing setting db_url") from exc

        connect()
        """,
    )
    py(
        "py_exceptiongroup",
        "inventory",
        """
        import asyncio

        async def fetch(service):
            await asyncio.sleep(0)
            raise ConnectionRefusedError(f"connection refused by {service}")

        async def main():
            async with asyncio.TaskGroup() as tg:
                tg.create_task(fetch("inventory"))
                tg.create_task(fetch("inventory"))

        asyncio.run(main())
        """,
    )
    py(
        "py_syntaxerror",
        "was never closed",
        """
        def total(items):
            return sum(item.price for item in items

        print(total([]))
        """,
        name="report.py",
    )
    py(
        "py_recursion",
        "recursion",
        """
        def walk(node):
            return walk(node + 1)

        walk(0)
        """,
        name="tree.py",
    )
    py(
        "py_json_decode",
        "Expecting",
        """
        import json

        def load_config(text):
            return json.loads(text)

        load_config('{"model": "gpt-4o", "temperature": 0.2,}')
        """,
        name="config.py",
    )
    py(
        "py_sqlite",
        "orders",
        """
        import sqlite3

        def open_orders(db):
            return db.execute("SELECT id, total FROM orders WHERE status = 'open'").fetchall()

        open_orders(sqlite3.connect(":memory:"))
        """,
        name="repo.py",
    )
    py(
        "py_module_not_found",
        "yaml_loader_extras",
        """
        import json

        def plugins():
            import yaml_loader_extras
            return yaml_loader_extras

        plugins()
        """,
        name="plugins.py",
    )
    py(
        "py_attribute",
        "'group'",
        """
        import re

        def title(html):
            return re.search(r"<title>(.*)</title>", html).group(1).strip()

        title("<html><body>no title</body></html>")
        """,
        name="scrape.py",
    )
    py(
        "py_file_not_found",
        "settings.toml",
        """
        from pathlib import Path

        def read_settings():
            return Path("settings.toml").read_text()

        read_settings()
        """,
        name="settings.py",
    )
    if importlib.util.find_spec("pydantic") is not None:
        py(
            "py_pydantic",
            "email",
            """
            from pydantic import BaseModel

            class Signup(BaseModel):
                name: str
                email: str
                age: int

            def parse_signup(payload):
                return Signup.model_validate(payload)

            parse_signup({"name": "Ada", "age": "forty"})
            """,
            name="signup.py",
        )
    # Errors raised deep inside the standard library or an HTTP client: the shape most tool failures
    # take in practice (a short user frame on top of a long library stack, often chained).
    port = _closed_port()
    if importlib.util.find_spec("requests") is not None:
        py(
            "py_requests_refused",
            "Connection refused",
            f"""
            import requests

            def fetch_inventory(sku):
                return requests.get("http://127.0.0.1:{port}/v1/inventory/" + sku, timeout=2).json()

            fetch_inventory("sku-1042")
            """,
            name="inventory.py",
        )
    py(
        "py_urllib_refused",
        "Connection refused",
        f"""
        import urllib.request

        def fetch_report(day):
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/reports/{{day}}", timeout=2) as r:
                return r.read()

        fetch_report("2026-11-21")
        """,
        name="reports.py",
    )
    py(
        "py_asyncio_timeout",
        "TimeoutError",
        """
        import asyncio

        async def slow_lookup():
            await asyncio.sleep(5)

        async def lookup_with_deadline():
            return await asyncio.wait_for(slow_lookup(), timeout=0.01)

        asyncio.run(lookup_with_deadline())
        """,
        name="deadline.py",
    )
    py(
        "py_called_process",
        "no-such-branch",
        """
        import subprocess

        def checkout(branch):
            subprocess.run(["git", "rev-parse", "--verify", branch], check=True, capture_output=True)

        checkout("no-such-branch")
        """,
        name="vcs.py",
    )
    return out


def _closed_port() -> int:
    """A loopback port nothing listens on (bound, then released)."""
    import socket

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


# ---------------------------------------------------------------------------------------------- toolchains


def _toolchain_samples(folder: Path) -> list[Sample]:
    out: list[Sample] = []

    def tool(name: str, fmt: str, token: str, files: dict[str, str], cmd: list[str] | str,
             *, shell: bool = False, command: str | None = None, hints: bool = False) -> None:
        sub = folder / name
        sub.mkdir(parents=True)
        for file_name, source in files.items():
            write(sub, file_name, source)
        result = run(cmd, cwd=sub, shell=shell)
        assert result.returncode != 0, f"{name} was expected to fail:\n{result.output}"
        shown = " ".join(cmd) if isinstance(cmd, list) else cmd
        out.append(
            Sample(
                name,
                fmt,
                result.output,
                token,
                exit_code=result.returncode if hints else None,
                command=(command or shown) if hints else None,
            )
        )

    if have("gcc"):
        tool(
            "gcc_undeclared",
            "gcc",
            "count",
            {
                "stats.c": """
                #include <stdio.h>

                int mean(const int *xs, int n) {
                    int sum = 0;
                    for (int i = 0; i < n; i++) sum += xs[i];
                    return sum / count;
                }

                int main(void) { int xs[] = {1, 2, 3}; printf("%d\\n", mean(xs, 3)); return 0; }
                """
            },
            ["gcc", "-Wall", "-c", "stats.c", "-o", "stats.o"],
        )
    if have("g++"):
        tool(
            "gxx_no_member",
            "gcc",
            "push",
            {
                "queue.cpp": """
                #include <vector>
                #include <string>

                struct Job { std::string name; };

                void enqueue(std::vector<Job>& jobs, const Job& job) {
                    jobs.push(job);
                }

                int main() { std::vector<Job> jobs; enqueue(jobs, Job{"a"}); return 0; }
                """
            },
            ["g++", "-c", "queue.cpp", "-o", "queue.o"],
        )
    if have("javac"):
        tool(
            "javac_cannot_find_symbol",
            "javac",
            "userCount",
            {
                "Report.java": """
                public class Report {
                    static int total(int[] xs) {
                        int sum = 0;
                        for (int x : xs) sum += x;
                        return sum / userCount;
                    }
                    public static void main(String[] args) { System.out.println(total(new int[]{1})); }
                }
                """
            },
            ["javac", "Report.java"],
        )
    if have("javac") and have("java"):
        tool(
            "java_caused_by",
            "jvm",
            "port",
            {
                "Server.java": """
                public class Server {
                    static int parsePort(String value) {
                        return Integer.parseInt(value);
                    }
                    static void start(String value) {
                        try {
                            parsePort(value);
                        } catch (NumberFormatException e) {
                            throw new IllegalStateException("invalid port setting", e);
                        }
                    }
                    public static void main(String[] args) { start("80a"); }
                }
                """
            },
            "javac Server.java && java Server",
            shell=True,
        )
    if have("node"):
        tool(
            "node_typeerror",
            "node",
            "'name'",
            {
                "render.js": """
                function greet(user) {
                  return "Hello, " + user.profile.name;
                }
                function main() {
                  const users = [{ id: 1 }];
                  console.log(greet(users[0]));
                }
                main();
                """
            },
            ["node", "render.js"],
        )
        tool(
            "node_enoent",
            "node",
            "input.json",
            {
                "triage.js": """
                const fs = require("fs");
                const data = fs.readFileSync("input.json", "utf8");
                console.log(JSON.parse(data));
                """
            },
            ["node", "triage.js"],
        )
    if have("go"):
        tool(
            "go_panic_index",
            "go",
            "index out of range",
            {
                "go.mod": "module bench\n\ngo 1.20\n",
                "main.go": """
                package main

                import "fmt"

                func pick(items []string, i int) string {
                \treturn items[i]
                }

                func main() {
                \tfmt.Println(pick([]string{"a", "b"}, 5))
                }
                """,
            },
            ["go", "run", "main.go"],
        )
    if have("mypy"):
        tool(
            "mypy_incompatible",
            "mypy",
            "str",
            {
                "billing.py": """
                def cents(amount: float) -> int:
                    return round(amount * 100)

                def label(amount: float) -> str:
                    return cents(amount)
                """
            },
            [sys.executable, "-m", "mypy", "--no-incremental", "--strict", "billing.py"],
        )
    tool(
        "pytest_failure",
        "pytest",
        "test_discount",
        {
            "test_pricing.py": """
            def discount(price, percent):
                return price - price * percent / 10

            def test_discount():
                assert discount(200, 15) == 170
            """
        },
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "test_pricing.py"],
    )
    tool(
        "bash_command_not_found",
        "shell",
        "nosuchcmd",
        {},
        ["bash", "-c", "nosuchcmd --input data.csv"],
        command="nosuchcmd --input data.csv",
        hints=True,
    )
    tool(
        "cat_missing_file",
        "shell",
        "missing.txt",
        {},
        ["cat", "missing.txt"],
        hints=True,
    )
    return out


def build_corpus(workdir: Path) -> list[Sample]:
    """Run every error-producing program in ``workdir`` and return the real errors they printed.

    Tools that are not installed (``go``, ``javac`` …) are skipped, so the corpus shrinks rather than
    fails on a machine without them.
    """
    workdir.mkdir(parents=True, exist_ok=True)
    samples = _python_samples(workdir / "python")
    samples += _toolchain_samples(workdir / "tools")
    with loopback_server(_Handler) as base:
        http: list[tuple[str, str, str, bool]] = [
            ("http_openai_429", "/v1/chat/completions/429", "429", False),
            ("http_anthropic_500", "/v1/messages/500", "500", False),
            ("http_anthropic_429_raw", "/v1/messages/429", "429", True),
            ("http_html_502", "/gateway/502", "502", True),
        ]
        for name, path, token, with_headers in http:
            samples.append(Sample(name, "http", _http_failure(base + path, with_headers=with_headers), token))
    return samples


def _main(argv: list[str]) -> int:
    """Print the corpus (name, size, digest) for a quick look: ``python benchmarks/corpus.py``."""
    import tempfile

    from otel_errcompact.compactor import compact_text

    with tempfile.TemporaryDirectory() as tmp:
        for s in build_corpus(Path(tmp)):
            d = compact_text(s.raw, exit_code=s.exit_code, command=s.command, kind=s.kind)
            ok = "ok " if s.token in d.line else "LOST"
            print(f"{ok} {s.name:28} {s.format:7}->{d.format:8} {len(s.raw):6}  {d.line}")
    return 0


if __name__ == "__main__":
    raise SystemExit(_main(sys.argv[1:]))

