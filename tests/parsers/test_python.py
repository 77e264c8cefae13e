"""The Python traceback parser, on tracebacks printed by real CPython runs of real scripts."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

from otel_errcompact.compactor import compact_text
from otel_errcompact.digest import Digest
from otel_errcompact.parsers import python
from otel_errcompact.parsers._base import Hints
from tests.realerrors import have, python_error, run, write

LOAD_USER = """
    users = {"alice": {"id": 1}}

    def load_user(name):
        record = users[name]
        return record["user_id"]

    load_user("alice")
"""


def _compact(folder: Path, source: str, **kwargs: object) -> tuple[str, Digest]:
    raw = python_error(folder, source, **kwargs)  # type: ignore[arg-type]
    return raw, compact_text(raw)


# --- plain tracebacks --------------------------------------------------------------------------------


def test_plain_key_error(tmp_path: Path) -> None:
    raw, d = _compact(tmp_path, LOAD_USER)
    assert raw.startswith("Traceback (most recent call last):")
    assert d.line == "[KeyError] at app.py:5 in load_user: 'user_id'"
    assert (d.type, d.cause, d.format) == ("KeyError", "'user_id'", "python")
    assert d.location is not None
    assert (d.location.line, d.location.func) == (5, "load_user")
    assert d.location.file.endswith("app.py")
    parsed = python.parse(raw, Hints())
    assert parsed is not None
    assert [f.func for f in parsed.frames] == ["<module>", "load_user"]  # outermost first


def test_311_position_markers_stay_out_of_the_cause(tmp_path: Path) -> None:
    raw, d = _compact(tmp_path, """
        def total(d):
            return d["a"]["b"] + d["c"]

        total({"a": {}, "c": 1})
    """)
    assert "~~~~~~^^^^^" in raw  # CPython 3.11+ decorates the failing sub-expression
    assert d.line == "[KeyError] at app.py:2 in total: 'b'"
    assert "^" not in d.cause and "~" not in d.cause


def test_exception_without_message(tmp_path: Path) -> None:
    raw, d = _compact(tmp_path, """
        def check():
            raise ValueError

        check()
    """)
    assert raw.rstrip().endswith("\nValueError")
    assert d.line == "[ValueError] at app.py:2 in check: (no message)"


def test_bare_assert_names_the_failing_statement(tmp_path: Path) -> None:
    """A bare ``assert`` raises AssertionError without a message: the statement CPython prints is the
    cause, so two failing asserts of one function are two classes (and the same one fails alike twice)."""
    source = """
        import json, sys

        def check_response(resp):
            assert resp["status"] == 200
            assert "user_id" in resp["body"]

        check_response(json.loads(sys.argv[1]))
    """
    status = compact_text(python_error(tmp_path, source, args=['{"status": 500, "body": {}}']))
    again = compact_text(python_error(tmp_path, source, args=['{"status": 503, "body": {}}']))
    body = compact_text(python_error(tmp_path, source, args=['{"status": 200, "body": {}}']))
    assert status.line == '[AssertionError] at app.py:4 in check_response: assert resp["status"] == 200'
    assert body.line == '[AssertionError] at app.py:5 in check_response: assert "user_id" in resp["body"]'
    assert status.key != body.key
    assert again.key == status.key


def test_module_qualified_and_local_types_use_the_class_name(tmp_path: Path) -> None:
    _, sql = _compact(tmp_path / "sql", """
        import sqlite3

        def count_users():
            return sqlite3.connect(":memory:").execute("select count(*) from users").fetchone()

        count_users()
    """)
    assert sql.line == "[OperationalError] at app.py:4 in count_users: no such table: users"

    raw, local = _compact(tmp_path / "local", """
        def run():
            class QuotaExceeded(Exception):
                pass
            raise QuotaExceeded("plan limit")

        run()
    """)
    assert "run.<locals>.QuotaExceeded: plan limit" in raw
    assert (local.type, local.cause) == ("QuotaExceeded", "plan limit")


def test_http_error_from_a_real_local_server(tmp_path: Path) -> None:
    raw, d = _compact(tmp_path, """
        import threading
        import urllib.request
        from http.server import BaseHTTPRequestHandler, HTTPServer

        class Limited(BaseHTTPRequestHandler):
            def do_GET(self):
                self.send_response(429)
                self.end_headers()

            def log_message(self, *args):
                pass

        server = HTTPServer(("127.0.0.1", 0), Limited)
        threading.Thread(target=server.serve_forever, daemon=True).start()

        def fetch_quota():
            return urllib.request.urlopen(f"http://127.0.0.1:{server.server_port}/quota").read()

        fetch_quota()
    """)
    assert "urllib.error.HTTPError: HTTP Error 429: Too Many Requests" in raw
    assert d.type == "HTTPError"
    assert d.cause == "HTTP Error 429: Too Many Requests"
    assert d.location is not None and d.location.func == "fetch_quota"  # not urllib/request.py


def test_multi_line_message_ending_with_colon_takes_the_next_line(tmp_path: Path) -> None:
    _, d = _compact(tmp_path, """
        def load_settings():
            raise ValueError("invalid settings:\\n  'port' must be an integer\\n  'host' is missing")

        load_settings()
    """)
    assert d.cause == "invalid settings: 'port' must be an integer"


RUN_STEP = """
    import subprocess, sys

    def run_step(command):
        done = subprocess.run(command, shell=True, capture_output=True, text=True)
        if done.returncode:
            raise RuntimeError(f"step failed with exit status {done.returncode}\\n{done.stdout}{done.stderr}")

    run_step(sys.argv[1])
"""


@pytest.mark.skipif(not have("ls"), reason="ls is not installed")
def test_a_message_that_only_says_it_failed_keeps_the_line_that_says_why(tmp_path: Path) -> None:
    """A tool that puts a command's output under its message (``step failed with exit status 2`` then what
    the command printed): the output's line naming the failure is the cause, so two missing files are two
    classes, and the progress printed above it is not."""
    digests = {name: compact_text(python_error(tmp_path, RUN_STEP, args=[f"echo checking; ls {name}"]))
               for name in ("dist", "build")}
    assert digests["dist"].cause == (
        "step failed with exit status 2: ls: cannot access 'dist': No such file or directory"
    )
    assert digests["dist"].key != digests["build"].key


LOAD_CONFIG = """
    import configparser, sys
    import yaml

    def load(path):
        if path.endswith(".ini"):
            parser = configparser.ConfigParser()
            parser.read(path)
            return parser
        with open(path) as f:
            return yaml.safe_load(f)

    load(sys.argv[1])
"""


def test_a_message_keeps_the_line_naming_its_file(tmp_path: Path) -> None:
    """PyYAML and configparser name the broken file on the line under the message: it stays, so the same
    mistake in two files is two classes."""
    pytest.importorskip("yaml")
    files = {"app.yaml": "name: x\nport: 80: 81\n", "db.yaml": "db:\n  host: y\n  user: z: q\n",
             "app.ini": "debug = true\n", "db.ini": "host = db1\n"}
    digests = {name: compact_text(python_error(tmp_path, LOAD_CONFIG, name="load_config.py", args=[name],
                                               extra_files=files))
               for name in files}
    assert digests["app.yaml"].cause == 'mapping values are not allowed here in "app.yaml", line 2, column 9'
    assert digests["app.ini"].cause == "File contains no section headers. file: 'app.ini', line: 1"
    for name, digest in digests.items():
        assert name in digest.cause, digest.line
    assert digests["app.yaml"].key != digests["db.yaml"].key
    assert digests["app.ini"].key != digests["db.ini"].key


def test_a_yaml_context_line_keeps_the_problem_under_it(tmp_path: Path) -> None:
    """PyYAML opens some messages with their context (``while parsing a flow sequence``) and says what went
    wrong on a later line: that problem is the cause, so two mistakes in one kind of block are two
    classes, and the same mistake with other values is one."""
    pytest.importorskip("yaml")
    contents = {"colon": "hosts: [a, b\nport: 80\n", "end": "hosts: [a, b\n", "colon again": "users: [x, y\nmax: 3\n"}
    digests = {label: compact_text(python_error(tmp_path / label.replace(" ", "_"), LOAD_CONFIG,
                                                name="load_config.py", args=["app.yaml"],
                                                extra_files={"app.yaml": text}))
               for label, text in contents.items()}
    assert digests["colon"].cause == (
        "while parsing a flow sequence: expected ',' or ']', but got ':' in \"app.yaml\", line 2, column 5"
    )
    assert "<stream end>" in digests["end"].cause
    assert digests["colon"].key != digests["end"].key
    assert digests["colon again"].key == digests["colon"].key


# --- chained exceptions --------------------------------------------------------------------------------


def test_direct_cause_keeps_final_type_and_root_token(tmp_path: Path) -> None:
    raw, d = _compact(tmp_path, """
        def load():
            try:
                return open("settings.yaml").read()
            except FileNotFoundError as exc:
                raise RuntimeError("config load failed") from exc

        load()
    """)
    assert "The above exception was the direct cause of the following exception:" in raw
    assert d.type == "RuntimeError"  # what reached the caller
    assert d.cause == (
        "config load failed ← FileNotFoundError: [Errno 2] No such file or directory: 'settings.yaml'"
    )
    assert d.location is not None
    assert (d.location.line, d.location.func) == (5, "load")  # the raise of the final exception


AWAIT_RATES = """
    import asyncio, sys

    async def fetch_rates():
        await asyncio.sleep(10)

    async def fetch_users():
        await asyncio.sleep(10)

    async def refresh(name):
        call = fetch_rates() if name == "rates" else fetch_users()
        if sys.version_info >= (3, 11) and sys.argv[2] == "block":
            async with asyncio.timeout(0.05):
                await call
        else:
            await asyncio.wait_for(call, timeout=0.05)

    asyncio.run(refresh(sys.argv[1]))
"""


@pytest.mark.parametrize("form", ["wait_for", "block"])
def test_an_asyncio_timeout_names_the_timeout_and_the_awaited_call(tmp_path: Path, form: str) -> None:
    """``asyncio.wait_for`` and ``asyncio.timeout`` raise a bare ``TimeoutError`` from the ``CancelledError`` of
    the call they cancelled: the cause says it timed out and which call was awaited, so timeouts of two
    calls are two classes."""
    raw, rates = _compact(tmp_path, AWAIT_RATES, args=["rates", form])
    assert "CancelledError" in raw and raw.rstrip().endswith("TimeoutError")
    assert rates.type == "TimeoutError"
    assert rates.cause == "timed out awaiting fetch_rates (app.py:4)"
    assert rates.location is not None and rates.location.func == "refresh"
    _, users = _compact(tmp_path, AWAIT_RATES, args=["users", form])
    assert users.cause == "timed out awaiting fetch_users (app.py:7)"
    assert rates.key != users.key
    _, moved = _compact(tmp_path, AWAIT_RATES.replace("import asyncio", "import os\n    import asyncio"),
                           args=["rates", form])
    assert moved.key == rates.key and moved.cause == "timed out awaiting fetch_rates (app.py:5)"


def test_during_handling_keeps_the_context(tmp_path: Path) -> None:
    raw, d = _compact(tmp_path, """
        def ratio(stats):
            try:
                return stats["hits"] / stats["total"]
            except KeyError:
                return 1 / 0

        ratio({})
    """)
    assert "During handling of the above exception, another exception occurred:" in raw
    assert d.line == "[ZeroDivisionError] at app.py:5 in ratio: division by zero ← KeyError: 'hits'"


def test_root_already_quoted_by_the_wrapper_is_not_repeated(tmp_path: Path) -> None:
    _, d = _compact(tmp_path, """
        def load():
            try:
                return open("settings.yaml").read()
            except OSError as exc:
                raise RuntimeError(f"config load failed: {exc}") from exc

        load()
    """)
    assert d.type == "RuntimeError"
    assert d.cause.count("settings.yaml") == 1
    assert "←" not in d.cause


def test_wrapper_raised_by_a_library_points_at_the_users_call(tmp_path: Path) -> None:
    raw, d = _compact(tmp_path, """
        import json

        def read_config(text):
            return json.loads(text)

        read_config('{"port": 80,}')
    """)
    assert "json/decoder.py" in raw
    assert d.type == "JSONDecodeError"
    try:  # the message this interpreter gives (3.13 words it differently)
        json.loads('{"port": 80,}')
    except json.JSONDecodeError as exc:
        expected = exc.msg
    assert d.cause.startswith(expected)
    assert d.location is not None
    assert (d.location.file.endswith("app.py"), d.location.func, d.location.line) == (True, "read_config", 4)
    parsed = python.parse(raw, Hints())
    assert parsed is not None
    assert [f.in_app for f in parsed.frames] == [True, True, False, False, False]


def test_long_chain_is_bounded(tmp_path: Path) -> None:
    raw, d = _compact(tmp_path, """
        def step(n):
            if n == 0:
                raise LookupError("no route for 'orders'")
            try:
                step(n - 1)
            except Exception as exc:
                raise RuntimeError(f"step {n} failed") from exc

        step(60)
    """)
    assert raw.count("direct cause") == 60
    assert d.type == "RuntimeError"
    assert d.cause == "step 60 failed ← LookupError: no route for 'orders'"


# --- exception groups ----------------------------------------------------------------------------------

TASK_GROUP = """
    import asyncio

    async def fetch(item_id):
        raise ValueError(f"bad id {item_id!r}")

    async def lookup(key):
        return {}[key]

    async def batch():
        async with asyncio.TaskGroup() as tg:
            tg.create_task(lookup("k"))

    async def main():
        async with asyncio.TaskGroup() as tg:
            tg.create_task(fetch("x"))
            tg.create_task(batch())

    asyncio.run(main())
"""


def test_task_group_with_nested_group(tmp_path: Path) -> None:
    raw, d = _compact(tmp_path, TASK_GROUP)
    assert "+-+---------------- 1 ----------------" in raw
    assert raw.count("Exception Group Traceback") == 2  # nested
    assert d.type == "ExceptionGroup"
    assert d.cause == (
        "unhandled errors in a TaskGroup (2 sub-exceptions): ValueError: bad id 'x'; KeyError: 'k'"
    )
    assert d.location is not None
    assert (d.location.func, d.location.line) == ("fetch", 4)  # first sub-exception, not asyncio/


def test_large_group_is_summarised(tmp_path: Path) -> None:
    raw, d = _compact(tmp_path, """
        def validate(rows):
            errors = [ValueError(f"row {i}: missing 'sku'") for i in range(18)] + [KeyError("price")]
            raise ExceptionGroup("validation failed", errors)

        validate([])
    """)
    assert "and 4 more exceptions" in raw
    assert d.type == "ExceptionGroup"
    assert d.cause == (
        "validation failed (19 sub-exceptions): ValueError: row 0: missing 'sku'; "
        "ValueError: row 1: missing 'sku'; ValueError: row 2: missing 'sku'; +16 more"
    )
    assert d.location is not None and d.location.func == "validate"


def test_identical_leaves_are_counted(tmp_path: Path) -> None:
    _, d = _compact(tmp_path, """
        import asyncio

        async def call_tool(n):
            raise TimeoutError("tool did not answer")

        async def main():
            async with asyncio.TaskGroup() as tg:
                for n in range(3):
                    tg.create_task(call_tool(n))

        asyncio.run(main())
    """)
    assert d.cause == (
        "unhandled errors in a TaskGroup (3 sub-exceptions): TimeoutError: tool did not answer (×3)"
    )
    assert d.location is not None and d.location.func == "call_tool"


def test_a_group_of_one_failure_over_other_data_is_one_class(tmp_path: Path) -> None:
    """A batch whose tasks fail alike, each for its own item, is one class whatever its size; a batch with a
    second kind of failure in it is another."""
    source = """
        import asyncio
        import sys

        USERS = {}

        async def load_user(user_id):
            if user_id.startswith("bad"):
                raise ValueError(f"malformed id {user_id!r}")
            return USERS[user_id]

        async def main(ids):
            async with asyncio.TaskGroup() as tg:
                for user_id in ids:
                    tg.create_task(load_user(user_id))

        asyncio.run(main(sys.argv[1:]))
    """
    two = compact_text(python_error(tmp_path, source, args=["u_42", "u_43"]))
    three = compact_text(python_error(tmp_path, source, args=["u_7", "u_8", "u_9"]))
    one = compact_text(python_error(tmp_path, source, args=["u_5"]))
    mixed = compact_text(python_error(tmp_path, source, args=["u_5", "bad-1"]))
    assert two.cause == "unhandled errors in a TaskGroup (2 sub-exceptions): KeyError: 'u_42'; KeyError: 'u_43'"
    assert two.key == three.key == one.key
    assert mixed.key != two.key
    assert "ValueError: malformed id 'bad-1'" in mixed.cause


def test_base_exception_group_and_group_chained_to_plain(tmp_path: Path) -> None:
    _, base = _compact(tmp_path / "base", """
        def stop():
            raise BaseExceptionGroup("shutdown", [KeyboardInterrupt(), ValueError("late")])

        stop()
    """)
    assert base.type == "BaseExceptionGroup"
    assert base.cause == "shutdown (2 sub-exceptions): KeyboardInterrupt; ValueError: late"

    raw, wrapped = _compact(tmp_path / "wrapped", """
        def run_all():
            try:
                raise ExceptionGroup("batch", [KeyError("tenant_id")])
            except ExceptionGroup as group:
                raise RuntimeError("batch aborted") from group

        run_all()
    """)
    assert "Exception Group Traceback" in raw
    assert wrapped.line == "[RuntimeError] at app.py:5 in run_all: batch aborted ← KeyError: 'tenant_id'"


# --- compile errors ------------------------------------------------------------------------------------


def test_syntax_error_of_the_script_itself(tmp_path: Path) -> None:
    raw, d = _compact(tmp_path, """
        import os

        def handler(event:
            return event
    """)
    assert "Traceback" not in raw  # the script never started
    assert d.type == "SyntaxError"
    assert d.location is not None
    assert (d.location.line, d.location.func) == (3, None)
    assert d.line.startswith("[SyntaxError] at app.py:3: ")
    assert d.cause.endswith("— def handler(event:")


def test_indentation_error(tmp_path: Path) -> None:
    _, d = _compact(tmp_path, """
        def handler(event):
        return event
    """)
    assert d.type == "IndentationError"
    assert d.line == (
        "[IndentationError] at app.py:2: expected an indented block after function definition on line 1"
        " — return event"
    )


def test_syntax_error_in_an_imported_module(tmp_path: Path) -> None:
    raw, d = _compact(tmp_path, "import tools\n", extra_files={"tools.py": "def run(:\n    pass\n"})
    assert raw.startswith("Traceback (most recent call last):")
    assert d.line == "[SyntaxError] at tools.py:1: invalid syntax — def run(:"


def test_syntax_error_from_compile_of_a_string(tmp_path: Path) -> None:
    _, d = _compact(tmp_path, """
        def build(expr):
            return compile(expr, "<string>", "eval")

        build("(1 +")
    """)
    assert d.type == "SyntaxError"
    assert d.location is not None
    assert (d.location.func, d.location.line) == ("build", 2)  # <string> is not a place to open


# --- recursion and size --------------------------------------------------------------------------------


def test_recursion_error(tmp_path: Path) -> None:
    raw, d = _compact(tmp_path, """
        def walk(node):
            return walk(node)

        walk(0)
    """)
    assert "more times]" in raw
    assert d.line == "[RecursionError] at app.py:2 in walk: maximum recursion depth exceeded"


@pytest.mark.timeout(60)  # a hang guard against catastrophic backtracking; speed is measured in benchmarks/
def test_five_thousand_frames_parse_to_a_bounded_digest(tmp_path: Path) -> None:
    raw = python_error(tmp_path, """
        import sys
        import traceback
        sys.setrecursionlimit(20000)
        sys.tracebacklimit = 20000

        def ping(n):
            return pong(n - 1)

        def pong(n):
            if n <= 0:
                return {}["bottom"]
            return ping(n)

        try:
            ping(5000)
        except KeyError:
            traceback.print_exc()  # every frame: Python 3.13's own hook prints only the last thousand
            sys.exit(1)
    """)
    assert raw.count('  File "') > 5000
    parsed = python.parse(raw, Hints())
    assert parsed is not None
    assert (parsed.type, parsed.cause) == ("KeyError", "'bottom'")
    assert parsed.location is not None and parsed.location.func == "pong"
    assert len(parsed.frames) <= 64  # bounded head and tail
    assert parsed.frames[0].func == "<module>" and parsed.frames[-1].func == "pong"
    doubled = raw * 2  # the second copy is an unrelated later traceback: the last one wins
    assert python.parse(doubled, Hints()) is not None
    d = compact_text(raw)  # the compactor keeps the head and tail of text this large
    assert d.line == "[KeyError] at app.py:11 in pong: 'bottom'"


def test_huge_one_line_message_keeps_its_head(tmp_path: Path) -> None:
    raw, d = _compact(tmp_path, """
        import json

        def check(payload):
            raise ValueError(f"unexpected payload for 'orders': {json.dumps(payload)}")

        check({"rows": list(range(20000))})
    """)
    assert len(raw.splitlines()[-1]) > 100_000
    assert d.type == "ValueError"
    assert d.cause.startswith("unexpected payload for 'orders': {\"rows\": [0, 1, 2")
    assert len(d.cause) <= 240
    assert d.location is not None and d.location.func == "check"


# --- errors inside libraries ---------------------------------------------------------------------------


def test_pydantic_validation_error_keeps_the_field(tmp_path: Path) -> None:
    pytest.importorskip("pydantic")
    raw, d = _compact(tmp_path, """
        from pydantic import BaseModel

        class User(BaseModel):
            name: str
            age: int

        def make_user():
            return User(name="ada", age="old")

        make_user()
    """)
    assert "site-packages/pydantic" in raw and "input_value=" in raw
    assert d.type == "ValidationError"
    assert d.cause.startswith("1 validation error for User: age — Input should be a valid integer")
    assert "input_value" not in d.cause and "errors.pydantic.dev" not in d.cause
    assert d.location is not None and d.location.func == "make_user"


JINJA = """
    import sys
    from jinja2 import Environment, FileSystemLoader, Template

    def render_page(name):
        env = Environment(loader=FileSystemLoader("templates"))
        return env.get_template(name).render(title="t")

    def render_card():
        return Template("<p>{{ user.name }}</p>").render()

    def render_list():
        return Template("{% for x in items %}<p>{{ x }}</p>").render()

    {"card": render_card, "list": render_list}.get(sys.argv[1], lambda: render_page(sys.argv[1]))()
"""


def test_jinja2_errors_are_located_at_the_render_call_or_the_template_file(tmp_path: Path) -> None:
    """A template made from a string runs as ``<template>`` (``<unknown>`` when it does not parse), which
    no one can open: the user's call that rendered it is the place. A template file keeps its name and line."""
    pytest.importorskip("jinja2")
    write(tmp_path, "templates/page.html", "<h1>{{ title }}</h1>\n<p>{{ user.name }}</p>\n")
    raws = {which: python_error(tmp_path, JINJA, args=[which]) for which in ("card", "list", "page.html")}
    assert 'File "<template>", line 1' in raws["card"] and 'File "<unknown>", line 1' in raws["list"]
    script = tmp_path / "app.py"
    card, listing, page = (compact_text(raws[which]) for which in ("card", "list", "page.html"))
    assert (card.type, card.cause) == ("UndefinedError", "'user' is undefined")
    assert card.location is not None
    assert (Path(card.location.file).name, card.location.func) == ("app.py", "render_card")
    assert card.location.line == _line_of(script, 'Template("<p>')
    assert listing.type == "TemplateSyntaxError" and listing.cause.startswith("Unexpected end of template.")
    assert listing.location is not None
    assert (Path(listing.location.file).name, listing.location.func) == ("app.py", "render_list")
    assert listing.location.line == _line_of(script, 'Template("{% for')
    assert page.location is not None and (Path(page.location.file).name, page.location.line) == ("page.html", 2)
    assert card.key != page.key


def _line_of(path: Path, needle: str) -> int:
    """The 1-based line of ``path`` that holds ``needle``."""
    return next(no for no, line in enumerate(path.read_text().splitlines(), 1) if needle in line)


def test_jsonschema_validation_error_keeps_the_field(tmp_path: Path) -> None:
    """jsonschema names the failing field after a blank line (``On instance['age']:``): two fields failing
    alike are two classes, and the same field failing again is one."""
    pytest.importorskip("jsonschema")
    source = """
        import sys
        import jsonschema

        SCHEMA = {"type": "object", "properties": {"age": {"type": "integer"}, "zip": {"type": "integer"},
                  "items": {"type": "array", "items": {"type": "object", "properties": {"qty": {"type": "integer"}}}}}}

        def check(doc):
            jsonschema.validate(doc, SCHEMA)

        field, index = sys.argv[1], int(sys.argv[2])
        check({"items": [{"qty": 1}] * index + [{"qty": "abc"}]} if field == "items" else {field: "abc"})
    """
    raws = {args: python_error(tmp_path, source, args=list(args))
            for args in (("age", "0"), ("zip", "0"), ("items", "0"), ("items", "2"))}
    assert "\n\nOn instance['age']:\n" in raws[("age", "0")]
    digests = {args: compact_text(raw) for args, raw in raws.items()}
    assert digests[("age", "0")].cause == "'abc' is not of type 'integer' on instance['age']"
    assert digests[("zip", "0")].cause == "'abc' is not of type 'integer' on instance['zip']"
    assert digests[("items", "2")].cause == "'abc' is not of type 'integer' on instance['items'][2]['qty']"
    assert digests[("age", "0")].key != digests[("zip", "0")].key
    assert digests[("items", "0")].key == digests[("items", "2")].key  # the index is a value
    assert all(d.type == "ValidationError" and d.location is not None and d.location.func == "check"
               for d in digests.values())


def test_pydantic_several_errors_name_each_field(tmp_path: Path) -> None:
    pytest.importorskip("pydantic")
    _, d = _compact(tmp_path, """
        from pydantic import BaseModel

        class Order(BaseModel):
            sku: str
            qty: int
            price: float
            notes: str

        def make_order():
            return Order(qty="many", price="free", notes=1)

        make_order()
    """)
    assert d.cause.startswith("4 validation errors for Order: sku — Field required; qty — Input should be")
    assert "price — Input should be a valid number" in d.cause
    assert d.cause.endswith("+1 more")


def test_a_compiled_extension_frame_is_not_the_users(tmp_path: Path) -> None:
    """pandas raises from its Cython parser, whose frames name the relative ``.pyx`` path it was built from
    (``pandas/_libs/parsers.pyx``): the location is the user's call, so two functions reading broken CSV
    files are two classes, not one located inside pandas."""
    pytest.importorskip("pandas")
    source = """
        import io
        import sys
        import pandas as pd

        def load_orders():
            return pd.read_csv(io.StringIO("id,sku\\n1,a\\n2,b,extra\\n"))

        def load_users():
            return pd.read_csv(io.StringIO("id,name\\n1,ada\\n2,bob,extra\\n"))

        load_orders() if sys.argv[1] == "orders" else load_users()
    """
    raw, orders = _compact(tmp_path, source, args=["orders"])
    users = compact_text(python_error(tmp_path, source, args=["users"]))
    assert 'File "pandas/_libs/parsers.pyx"' in raw
    assert orders.line == (
        "[ParserError] at app.py:6 in load_orders: Error tokenizing data. C error: Expected 2 fields in line 3, saw 3"
    )
    assert users.location is not None and users.location.func == "load_users"
    assert orders.key != users.key


def test_missing_module(tmp_path: Path) -> None:
    _, d = _compact(tmp_path, """
        import os
        import nonexistent_module
    """)
    assert d.line == "[ModuleNotFoundError] at app.py:2 in <module>: No module named 'nonexistent_module'"


# --- surroundings --------------------------------------------------------------------------------------


def test_traceback_inside_log_noise(tmp_path: Path) -> None:
    raw, d = _compact(tmp_path, """
        import logging
        import sys

        logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
        log = logging.getLogger("worker")
        log.info("starting job 42 on port 8080")

        def handle(payload):
            return payload["order_id"]

        try:
            handle({})
        except KeyError:
            log.exception("job failed: ValueError suspected")
        log.warning("Error: shutting down after 1 failure")
        sys.exit(1)
    """)
    lines = raw.splitlines()
    assert "starting job" in lines[0] and "shutting down" in lines[-1]
    assert d.line == "[KeyError] at app.py:9 in handle: 'order_id'"


def test_a_logging_error_is_the_exception_at_the_logging_call(tmp_path: Path) -> None:
    """A record the logging module cannot format prints ``--- Logging error ---``, the exception, then the
    logging call's ``Call stack:`` and the record's ``Message:`` and ``Arguments:`` lines: the exception is
    the failure, located at the logging call (its own frames are all inside ``logging``)."""
    source = """
        import logging
        import sys

        log = logging.getLogger("orders")

        def record_order(order_id):
            log.warning("order %s shipped to %s", order_id)

        def record_refund(refund_id):
            log.warning("refund %d", refund_id)

        record_refund(sys.argv[2]) if sys.argv[1] == "refund" else record_order(sys.argv[2])
        sys.exit(1)
    """
    raw, order = _compact(tmp_path, source, args=["order", "A-17"])
    again = compact_text(python_error(tmp_path, source, args=["order", "B-99"]))
    refund = compact_text(python_error(tmp_path, source, args=["refund", "R-3"]))
    assert raw.startswith("--- Logging error ---") and "\nCall stack:\n" in raw and "\nArguments: ('A-17',)" in raw
    assert order.line == "[TypeError] at app.py:7 in record_order: not enough arguments for format string"
    assert refund.line == "[TypeError] at app.py:10 in record_refund: %d format: a real number is required, not str"
    assert again.key == order.key != refund.key


def test_prefixed_log_lines(tmp_path: Path) -> None:
    write(tmp_path, "app.py", LOAD_USER)
    out = run(f"{sys.executable} app.py 2>&1 | sed 's/^/api-1  | /'", tmp_path, shell=True)
    assert out.stdout.startswith("api-1  | Traceback (most recent call last):")
    assert compact_text(out.stdout).line == "[KeyError] at app.py:5 in load_user: 'user_id'"


def test_the_last_of_several_tracebacks_wins(tmp_path: Path) -> None:
    raw, d = _compact(tmp_path, """
        import traceback

        def warm_cache():
            return {}["warm"]

        def serve():
            raise PermissionError("socket bind denied")

        try:
            warm_cache()
        except KeyError:
            traceback.print_exc()
        serve()
    """)
    assert raw.count("Traceback (most recent call last):") == 2
    assert d.line == "[PermissionError] at app.py:7 in serve: socket bind denied"


def test_keyboard_interrupt_and_system_exit(tmp_path: Path) -> None:
    raw, d = _compact(tmp_path / "sigint", """
        import os
        import signal
        import time

        def wait_for_job():
            # A job started in the background inherits SIGINT ignored, and Python then installs no
            # handler of its own: install it, so the signal raises KeyboardInterrupt whatever the parent.
            signal.signal(signal.SIGINT, signal.default_int_handler)
            os.kill(os.getpid(), signal.SIGINT)
            deadline = time.monotonic() + 60  # bounded: a lost signal fails the test, it does not hang it
            while time.monotonic() < deadline:
                pass

        wait_for_job()
    """)
    assert raw.rstrip().endswith("KeyboardInterrupt")
    assert d.type == "KeyboardInterrupt"
    assert d.location is not None and d.location.func == "wait_for_job"

    _, d = _compact(tmp_path / "exit", """
        import sys
        import traceback

        def main():
            sys.exit("config missing")

        try:
            main()
        except SystemExit:
            traceback.print_exc()
        sys.exit(1)
    """)
    assert d.line == "[SystemExit] at app.py:5 in main: config missing"


def test_bare_exception_line_only_when_the_caller_says_python(tmp_path: Path) -> None:
    raw = python_error(tmp_path, """
        import sys
        import traceback

        try:
            {}["token"]
        except KeyError as exc:
            sys.stderr.write("".join(traceback.format_exception_only(exc)))
        sys.exit(1)
    """)
    assert python.parse(raw, Hints()) is None
    parsed = python.parse(raw, Hints(kind="python"))
    assert parsed is not None
    assert (parsed.type, parsed.cause) == ("KeyError", "'token'")


def test_other_formats_are_not_claimed(tmp_path: Path) -> None:
    shell = run(["bash", "-c", "ls /definitely/not/here"], tmp_path)
    assert shell.returncode != 0
    assert python.parse(shell.output, Hints()) is None
    if have("node"):
        node = run(["node", "-e", "const cfg = {}; cfg.db.host"], tmp_path)
        assert "TypeError" in node.output
        assert python.parse(node.output, Hints()) is None


def test_truncated_tracebacks_never_raise(tmp_path: Path) -> None:
    raw = python_error(tmp_path, TASK_GROUP)
    for cut in range(0, len(raw), 7):
        for piece in (raw[:cut], raw[cut:]):
            result = python.parse(piece, Hints(kind="python"))
            assert result is None or result.type


# --- dedup keys ----------------------------------------------------------------------------------------

CONNECT = """
    import socket
    import uuid

    def open_session(user):
        probe = socket.socket()
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
        raise ConnectionError(f"session {uuid.uuid4()} for {user!r} refused by 127.0.0.1:{port}")

    open_session("alice")
"""


def test_same_failure_in_two_runs_shares_a_key(tmp_path: Path) -> None:
    raw_a, a = _compact(tmp_path / "run-a", CONNECT)
    raw_b, b = _compact(tmp_path / "run-b", CONNECT)
    assert raw_a != raw_b  # different paths, session ids and ports
    assert a.cause != b.cause
    assert a.key == b.key
    assert a.key_parts.where == "app.py:open_session"


def test_different_key_name_or_function_gives_a_different_key(tmp_path: Path) -> None:
    _, base = _compact(tmp_path / "base", LOAD_USER)
    _, other_key = _compact(tmp_path / "key", LOAD_USER.replace('record["user_id"]', 'record["email"]'))
    _, other_func = _compact(tmp_path / "func", LOAD_USER.replace("load_user", "fetch_user"))
    assert other_key.cause == "'email'" and other_func.location is not None
    assert other_func.location.func == "fetch_user"
    assert len({base.key, other_key.key, other_func.key}) == 3


def test_shifted_line_numbers_keep_the_key(tmp_path: Path) -> None:
    _, before = _compact(tmp_path / "before", LOAD_USER)
    edited = LOAD_USER.replace("    def load_user", "    import os\n    import json\n\n\n    def load_user")
    _, after = _compact(tmp_path / "after", edited)
    assert before.location is not None and after.location is not None
    assert after.location.line == before.location.line + 4
    assert before.key == after.key


def test_long_wrapper_message_still_names_the_root_cause(tmp_path: Path) -> None:
    # requests wraps ConnectionRefusedError three times and quotes it only at the end of a ~300-character
    # message; the digest must still say "Connection refused" after the message is cut.
    pytest.importorskip("requests")
    import socket

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    raw, digest = _compact(tmp_path, f"""
        import requests

        def fetch_inventory(sku):
            return requests.get("http://127.0.0.1:{port}/v1/inventory/" + sku, timeout=2)

        fetch_inventory("sku-1042")
    """)
    assert "Max retries exceeded" in raw and "Connection refused" in raw
    assert digest.type == "ConnectionError"
    assert digest.location is not None and digest.location.func == "fetch_inventory"
    assert "Connection refused" in digest.cause
    assert "ConnectionRefusedError" in digest.cause
