"""Tracebacks in the wild and HTTP as clients print it: real failures, passed on the way people and tools
pass them on (notebooks, Windows paths, log lines, JSON, lost indentation, ``curl -i``, debug pages).

Each error is produced at test time by running real code or real tools; each transformation is a real
one (``json.dumps``, ``logging.Formatter``, IPython's own traceback formatter, stripping).
"""

from __future__ import annotations

import json
import logging
import os
import subprocess
import sys
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler
from pathlib import Path
from typing import Any

import pytest

from otel_errcompact import compact_text
from tests.realerrors import (
    have,
    loopback_server,
    python_error,
    run,
    send_body,
    stdlib_http_server,
    tls_loopback_server,
    write,
)


def _log_each_line(text: str) -> str:
    formatter = logging.Formatter("%(asctime)s %(levelname)s [%(name)s] %(message)s")
    return "\n".join(formatter.format(logging.LogRecord("worker", logging.ERROR, __file__, 0, line, None, None))
                     for line in text.rstrip("\n").split("\n")) + "\n"


def _line_of(path: Path, needle: str) -> int:
    return next(i for i, line in enumerate(path.read_text().splitlines(), 1) if needle in line)


# --- Python in the wild -----------------------------------------------------------------------------

_IPYTHON = r'''
import contextlib, io, sys
from IPython.core.interactiveshell import InteractiveShell
shell = InteractiveShell.instance(colors="NoColor")
shell.execution_count = int(sys.argv[2])
out = io.StringIO()
with contextlib.redirect_stdout(out), contextlib.redirect_stderr(out):
    shell.run_cell(open(sys.argv[1]).read(), store_history=True)
print(out.getvalue())
'''


def test_notebook_traceback_keeps_type_cause_and_cell_frame(tmp_path: Path) -> None:
    pytest.importorskip("IPython")
    cell = write(tmp_path, "cell.py", """
        import json
        USERS = {}

        def load_user(uid):
            return USERS[uid]

        load_user("user_7")
    """)
    outputs = [run([sys.executable, "-c", _IPYTHON, str(cell), str(n)], cwd=tmp_path).stdout for n in (36, 37)]
    assert "Cell In[36], line" in outputs[0] and "Cell In[37], line" in outputs[1]
    one, two = compact_text(outputs[0]), compact_text(outputs[1])
    assert one.type == "KeyError" and one.cause == "'user_7'"
    assert one.location is not None and one.location.func == "load_user"
    assert one.key == two.key  # the cell's execution number is not part of the key

    library = write(tmp_path, "cell2.py", "import json\njson.loads('{bad')\n")
    digest = compact_text(run([sys.executable, "-c", _IPYTHON, str(library), "5"], cwd=tmp_path).stdout)
    assert digest.type == "JSONDecodeError" and "Expecting property name" in digest.cause
    assert digest.location is not None and digest.location.file == "<cell>"  # not json/decoder.py


_WINDOWS = r'''
import linecache, sys, traceback
source = open(sys.argv[1]).read()
name = r"C:\Users\dev\projects\shop\billing.py"
linecache.cache[name] = (len(source), None, source.splitlines(True), name)
try:
    exec(compile(source, name, "exec"), {"__name__": "__main__"})
except Exception:
    sys.stderr.write(traceback.format_exc())
'''


def test_windows_paths(tmp_path: Path) -> None:
    source = write(tmp_path, "billing.py", """
        def charge(amount):
            return 100 / amount

        charge(0)
    """)
    raw = run([sys.executable, "-c", _WINDOWS, str(source)], cwd=tmp_path).stderr
    assert 'File "C:\\Users\\dev\\projects\\shop\\billing.py"' in raw
    digest = compact_text(raw)
    assert digest.line == "[ZeroDivisionError] at billing.py:2 in charge: division by zero"
    assert compact_text(json.dumps(raw)).key == digest.key


def test_raise_from_none_source_line_is_never_the_message(tmp_path: Path) -> None:
    raw = python_error(tmp_path, """
        SETTINGS = {"region": "eu"}

        def get_setting(name):
            try:
                return SETTINGS[name]
            except KeyError:
                raise LookupError(f"missing setting {name!r}") from None

        get_setting("timeout")
    """)
    dedented = "\n".join(line.strip() for line in raw.splitlines())
    for text in (raw, dedented, json.dumps(dedented)):
        digest = compact_text(text)
        assert digest.type == "LookupError"
        assert digest.cause == "missing setting 'timeout'", digest.line
        assert digest.location is not None and digest.location.func == "get_setting"


def test_wrapper_quoting_the_real_exception_keeps_its_type(tmp_path: Path) -> None:
    raw = python_error(tmp_path, """
        class ToolkitError(Exception):
            pass

        TOOLS = {"search": 1}

        def resolve_tool(name):
            try:
                return TOOLS[name]
            except KeyError as exc:
                raise ToolkitError(str(exc)) from exc

        resolve_tool("weather")
    """)
    digest = compact_text(raw)
    assert digest.type == "ToolkitError"
    assert "'weather'" in digest.cause and "KeyError" in digest.cause
    assert compact_text(_log_each_line(raw)).key == digest.key


def test_log_prefix_on_every_line(tmp_path: Path) -> None:
    raw = python_error(tmp_path, """
        import sqlite3

        def count_rows(table):
            return sqlite3.connect(":memory:").execute(f"select * from {table}").fetchone()

        count_rows("orders")
    """)
    logged = _log_each_line(raw)
    assert logged.count(" ERROR [worker] ") == len(raw.rstrip("\n").split("\n"))
    digest = compact_text(logged)
    assert digest.line.startswith("[OperationalError] at app.py:")
    assert "no such table: orders" in digest.line and "ERROR" not in digest.line
    assert digest.key == compact_text(raw).key


# --- SSL --------------------------------------------------------------------------------------------


@pytest.fixture
def tls_url(tmp_path: Path) -> Iterator[str]:
    if not have("openssl"):
        pytest.skip("openssl is not installed")
    with tls_loopback_server(tmp_path) as url:
        yield url


@pytest.mark.parametrize("client", ["requests", "urllib"])
def test_ssl_chain_keeps_certificate_verify_failed(tmp_path: Path, tls_url: str, client: str) -> None:
    if client == "requests":
        pytest.importorskip("requests")
    call = "requests.get(url, timeout=10)" if client == "requests" else "urllib.request.urlopen(url, timeout=10)"
    source = f"""
        import sys, requests, urllib.request

        def fetch_report(url):
            return {call}

        fetch_report(sys.argv[1])
    """
    if client == "urllib":
        source = source.replace("requests, ", "")
    raws = [python_error(tmp_path, source, args=[f"{tls_url}/v1/reports/{n}?page={n}"]) for n in (17, 2031)]
    digests = [compact_text(raw) for raw in raws]
    for digest in digests:
        assert "CERTIFICATE_VERIFY_FAILED" in digest.line, digest.line
        assert digest.location is not None and digest.location.func == "fetch_report"
    assert digests[0].key == digests[1].key == compact_text(json.dumps(raws[0])).key


# --- Go, JVM, C++ -----------------------------------------------------------------------------------


@pytest.mark.skipif(not have("go"), reason="go is not installed")
def test_go_panic_with_goroutine_dump(tmp_path: Path) -> None:
    main = write(tmp_path, "main.go", """
        package main

        import (
            "fmt"
            "os"
            "time"
        )

        func worker() { time.Sleep(10 * time.Second) }

        func requireEnv(name string) string {
            value, ok := os.LookupEnv(name)
            if !ok {
                panic(fmt.Sprintf("required environment variable %s is not set", name))
            }
            return value
        }

        func main() {
            for i := 0; i < 3; i++ {
                go worker()
            }
            time.Sleep(20 * time.Millisecond)
            requireEnv(os.Args[1])
        }
    """)
    env = {"GOCACHE": str(tmp_path / "cache"), "GOPATH": str(tmp_path / "gopath"), "GO111MODULE": "off",
           "GOFLAGS": "", "GOPROXY": "off", "GOTOOLCHAIN": "local", "GOTRACEBACK": "all",
           "HOME": os.environ.get("HOME", str(tmp_path))}
    raws = {name: run(["go", "run", "main.go", name], cwd=tmp_path, env=env).stderr
            for name in ("DATABASE_URL", "REDIS_ADDR")}
    assert raws["DATABASE_URL"].count("goroutine ") >= 4
    digest = compact_text(raws["DATABASE_URL"])
    assert digest.type == "panic" and "DATABASE_URL" in digest.cause
    assert digest.location is not None
    assert (Path(digest.location.file).name, digest.location.line, digest.location.func) == (
        "main.go", _line_of(main, "panic(fmt.Sprintf"), "main.requireEnv")
    assert compact_text(json.dumps(raws["DATABASE_URL"])).key == digest.key
    assert compact_text(raws["REDIS_ADDR"]).key != digest.key


@pytest.mark.skipif(not (have("javac") and have("java")), reason="a JDK is not installed")
def test_jvm_trace_thrown_inside_a_library_keeps_the_users_frame(tmp_path: Path) -> None:
    main = write(tmp_path, "Main.java", """
        import java.nio.file.Files;
        import java.nio.file.Path;

        public class Main {
            static String readConfig(String name) throws Exception {
                return Files.readString(Path.of("conf", name));
            }

            public static void main(String[] args) throws Exception {
                System.out.println(readConfig(args[0]));
            }
        }
    """)
    assert run(["javac", "Main.java"], cwd=tmp_path).returncode == 0
    raw = run(["java", "-cp", ".", "Main", "app_3.properties"], cwd=tmp_path).stderr
    assert "java.nio.file.NoSuchFileException" in raw and "at java.base/" in raw
    digest = compact_text(raw)
    assert digest.type == "NoSuchFileException" and "app_3.properties" in digest.cause
    assert digest.location is not None
    assert (Path(digest.location.file).name, digest.location.line) == (
        "Main.java", _line_of(main, "Files.readString"))
    other = compact_text(run(["java", "-cp", ".", "Main", "app_12.properties"], cwd=tmp_path).stderr)
    assert other.key == digest.key  # a numbered file name is a value
    assert compact_text(_log_each_line(raw)).key == digest.key


@pytest.mark.skipif(not have("g++"), reason="g++ is not installed")
def test_cpp_template_error_located_where_the_user_instantiated_it(tmp_path: Path) -> None:
    main = write(tmp_path, "main.cpp", """
        #include <algorithm>
        #include <vector>

        struct Point {
            int x;
            int y;
        };

        int main() {
            std::vector<Point> items{{1, 2}, {3, 4}};
            std::sort(items.begin(), items.end());
            return 0;
        }
    """)
    result = run(["g++", "-std=c++17", "-c", "main.cpp", "-o", "main.o"], cwd=tmp_path)
    assert result.returncode != 0 and "required from here" in result.stderr
    digest = compact_text(result.stderr, exit_code=result.returncode, command="g++ -c main.cpp")
    assert digest.location is not None
    assert (digest.location.file, digest.location.line) == ("main.cpp", _line_of(main, "std::sort"))
    assert "operator<" in digest.cause and "Point" in digest.cause


# --- HTTP as clients print it -----------------------------------------------------------------------


class _ModelApi(BaseHTTPRequestHandler):
    """Error envelopes shaped like the SDKs' own types (``openai/types/shared/error_object.py``)."""

    def do_POST(self) -> None:
        self.rfile.read(int(self.headers.get("Content-Length") or 0))
        headers = {"x-request-id": "req_" + os.urandom(16).hex()}
        if self.path.endswith("/missing"):
            status = 404
            error = {"message": "The model `gpt-5-turbo` does not exist or you do not have access to it.",
                     "type": "invalid_request_error", "param": None, "code": "model_not_found"}
        else:
            status = 429
            headers["retry-after"] = "7"
            error = {"message": "Rate limit reached for gpt-4o in organization org-AbCdEf123456 on tokens per min "
                     "(TPM): Limit 30000, Used 29861, Requested 1604. Please try again in 6.93s. Visit "
                     "https://platform.openai.com/account/rate-limits to learn more.", "type": "tokens",
                     "param": None, "code": "rate_limit_exceeded"}
        send_body(self, status, json.dumps({"error": error}, indent=2).encode(), headers=headers)

    def log_message(self, format: str, *args: Any) -> None:
        """Quiet."""


def _curl(*args: str) -> str:
    proc = subprocess.run(["curl", "-sS", *args], capture_output=True, text=True, timeout=60)
    return proc.stdout + proc.stderr


needs_curl = pytest.mark.skipif(not have("curl"), reason="curl is not installed")


@needs_curl
def test_curl_i_keeps_envelope_code_and_message_never_a_header() -> None:
    with loopback_server(_ModelApi) as base:
        missing = _curl("-i", "-X", "POST", "-w", "\ntime_total: %{time_total}s\n", f"{base}/v1/missing")
        limited = _curl("-i", "-X", "POST", f"{base}/v1/limited")
    assert missing.startswith("HTTP/1.0 404") and "time_total" in missing
    digest = compact_text(missing)
    assert digest.line.startswith("[HTTP 404]: model_not_found: The model `gpt-5-turbo` does not exist")
    assert "time_total" not in digest.line and "x-request-id" not in digest.line

    rate = compact_text(limited)
    assert rate.line.startswith("[HTTP 429]: rate_limit_exceeded: ")
    assert "Limit 30000" in rate.line and rate.line.endswith("(retry after 7s)")
    assert "org-" not in rate.line and "Visit" not in rate.line
    assert len(rate.line) <= 150, rate.line


@needs_curl
def test_curl_verbose_in_either_order_of_the_streams() -> None:
    with loopback_server(_ModelApi) as base:
        proc = subprocess.run(["curl", "-sS", "-v", "-X", "POST", f"{base}/v1/missing"], capture_output=True,
                              text=True, timeout=60)
    assert "< HTTP/1.0 404" in proc.stderr and "* " in proc.stderr
    terminal, joined = compact_text(proc.stderr + proc.stdout), compact_text(proc.stdout + proc.stderr)
    assert terminal.line.startswith("[HTTP 404]: model_not_found: The model `gpt-5-turbo` does not exist")
    assert joined.line == terminal.line and joined.key == terminal.key


@needs_curl
def test_curl_i_against_http_server_404_keeps_the_reason(tmp_path: Path) -> None:
    with stdlib_http_server(tmp_path) as base:
        page = _curl("-i", f"{base}/missing.txt")
    assert "<title>Error response</title>" in page
    assert compact_text(page).line == "[HTTP 404]: File not found"


_DJANGO = r'''
import sqlite3, sys
from django.conf import settings
settings.configure(DEBUG=True, ROOT_URLCONF=__name__, ALLOWED_HOSTS=["127.0.0.1"], SECRET_KEY="k" * 50,
                   MIDDLEWARE=[], INSTALLED_APPS=[])
import django
django.setup()
from django.http import HttpResponse
from django.urls import path
from django.core.wsgi import get_wsgi_application
from wsgiref.simple_server import WSGIRequestHandler, make_server

def report(request, table):
    rows = sqlite3.connect(":memory:").execute(f"select count(*) from {table}").fetchall()
    return HttpResponse(str(rows))

urlpatterns = [path("report/<str:table>", report)]

class Quiet(WSGIRequestHandler):
    def log_message(self, *args):
        pass

server = make_server("127.0.0.1", 0, get_wsgi_application(), handler_class=Quiet)
print(server.server_address[1], flush=True)
server.serve_forever()
'''


def _django_pages(folder: Path, *curl_args: str) -> dict[str, str]:
    """Django's debug page for two missing tables, as ``curl -i`` with ``curl_args`` prints it."""
    pytest.importorskip("django")
    app = write(folder, "site_app.py", _DJANGO)
    server = subprocess.Popen([sys.executable, str(app)], cwd=folder, stdout=subprocess.PIPE,
                              stderr=subprocess.DEVNULL, text=True)
    try:
        assert server.stdout is not None
        port = int(server.stdout.readline())
        return {t: _curl("-i", *curl_args, f"http://127.0.0.1:{port}/report/{t}?page=2")
                for t in ("invoices", "customers")}
    finally:
        server.terminate()
        server.wait(timeout=10)


@needs_curl
def test_django_debug_page_keeps_status_and_exception(tmp_path: Path) -> None:
    pages = _django_pages(tmp_path)
    assert "Traceback (most recent call last)" in pages["invoices"] and len(pages["invoices"]) > 20_000
    digest = compact_text(pages["invoices"])
    assert digest.type == "HTTP 500"
    assert digest.cause == "OperationalError: no such table: invoices"
    assert digest.location is not None and digest.location.func == "report"
    assert Path(digest.location.file).name == "site_app.py"
    assert compact_text(pages["customers"]).key != digest.key


@needs_curl
def test_django_plain_text_debug_page_keeps_status_and_exception(tmp_path: Path) -> None:
    """The page Django serves a client that does not take HTML: the exception is its ``Exception Type`` /
    ``Exception Value``, not a line of the request dump below the frames."""
    plain = _django_pages(tmp_path, "-H", "Accept: application/json")
    assert "text/plain" in plain["invoices"] and "Exception Type: OperationalError" in plain["invoices"]
    digest = compact_text(plain["invoices"])
    assert digest.line == "[HTTP 500] at site_app.py:13 in report: OperationalError: no such table: invoices"
    assert compact_text(plain["customers"]).key != digest.key
    html_page = _django_pages(tmp_path)["invoices"]
    assert compact_text(html_page).key == digest.key  # the same failure, whatever the client accepts


@needs_curl
def test_json_error_body_carrying_the_servers_traceback(tmp_path: Path) -> None:
    traceback_text = python_error(tmp_path, """
        ORDERS = {}

        def get_order(order_id):
            return ORDERS[order_id]

        get_order("o_42")
    """)

    class Debug(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            send_body(self, 500, json.dumps({"detail": "Internal Server Error", "traceback": traceback_text}).encode())

        def log_message(self, format: str, *args: Any) -> None:
            """Quiet."""

    with loopback_server(Debug) as base:
        page = _curl("-i", f"{base}/orders/o_42")
    digest = compact_text(page)
    assert digest.line == "[HTTP 500] at app.py:4 in get_order: KeyError: 'o_42'"
