"""Generate ``wild.jsonl``: real tracebacks in the forms people and tools pass them on.

Each failure is produced by running real code (python, go, java, g++, requests against a local TLS
server with a self-signed certificate); the "wild" forms are real transformations of that output:

- ``raw``: as the interpreter printed it;
- ``json``: ``json.dumps`` of the traceback (a JSON string with literal ``\\n``);
- ``report``: an error report / API response carrying it (``json.dumps`` of an object);
- ``log``: every line passed through a ``logging.Formatter`` with timestamps and level;
- ``logdefault``: every line through ``logging``'s default ``LEVEL:name:`` format;
- ``dedent``: indentation lost (every line stripped, as pasted into a chat);
- ``cut``: the head cut off (a harness keeping the tail of long output);
- ``windows``: the same code compiled under a Windows path (``C:\\Users\\…``), traceback by CPython;
- ``ipython``: IPython's own traceback formatter (``Cell In[N], line M``), from a real ``InteractiveShell``.

Labels follow the corpus rule: same type + same in-app location + same root cause; data values (ids,
literals, bytes, numbered files, indices, ports) vary within a class.

    python benchmarks/agent_corpus/gen_wild.py
"""

from __future__ import annotations

import json
import logging
import os
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from _gen import near_miss_pairs, write_records

from tests.realerrors import tls_loopback_server

FAMILY = "wild"

# (scenario, function source, call, values, label per value?, tokens). ``{v}`` is the value's repr.
PY_SCENARIOS: list[tuple[str, str, list[str], bool, list[str]]] = [
    ("keyerror-id", 'USERS = {"alice": 1}\n\ndef load_user(uid):\n    return USERS[uid]\n\nload_user({v})\n',
     ["user_17", "user_204", "user_3"], False, ["KeyError", "load_user", "{raw}"]),
    ("keyerror-name", 'CONFIG = {"host": "db"}\n\ndef get_option(name):\n    return CONFIG[name]\n\n'
     "get_option({v})\n", ["email", "password_hash"], True, ["KeyError", "get_option", "{raw}"]),
    ("missing-file", 'import os\n\ndef load_settings(name):\n    with open(os.path.join("conf", name)) as f:\n'
     "        return f.read()\n\nload_settings({v})\n", ["settings_1.json", "settings_15.json", "settings_7.json"],
     False, ["FileNotFoundError", "load_settings", "{raw}"]),
    ("missing-file-name", 'import os\n\ndef load_settings(name):\n'
     '    with open(os.path.join("conf", name)) as f:\n'
     "        return f.read()\n\nload_settings({v})\n", ["secrets.yaml", "tokens.toml"], True,
     ["FileNotFoundError", "{raw}"]),
    ("no-table", 'import sqlite3\n\ndef count_rows(table):\n    db = sqlite3.connect(":memory:")\n'
     '    return db.execute(f"select count(*) from {{table}}").fetchone()\n\ncount_rows({v})\n',
     ["orders", "customers"], True, ["OperationalError", "no such table", "{raw}"]),
    ("int-literal", "def parse_age(text):\n    return int(text)\n\nparse_age({v})\n", ["abc", "n/a", "12x", ""],
     False, ["ValueError", "invalid literal", "parse_age"]),
    ("unicode", "def read_blob(data):\n    return data.decode('utf-8')\n\nread_blob(bytes.fromhex({v}))\n",
     ["61ff00", "6162ff", "78797a80"], False, ["UnicodeDecodeError", "can't decode byte", "read_blob"]),
    ("from-none", 'SETTINGS = {"region": "eu"}\n\ndef get_setting(name):\n    try:\n        return SETTINGS[name]\n'
     "    except KeyError:\n        raise LookupError(f'missing setting {{name!r}}') from None\n\n"
     "get_setting({v})\n", ["timeout", "retries"], True, ["LookupError", "missing setting", "{raw}"]),
    ("wrapper", "class ToolkitError(Exception):\n    pass\n\nTOOLS = {'search': 1}\n\ndef resolve_tool(name):\n"
     "    try:\n        return TOOLS[name]\n    except KeyError as exc:\n"
     "        raise ToolkitError(str(exc)) from exc\n"
     "\nresolve_tool({v})\n", ["weather", "calendar"], True, ["ToolkitError", "KeyError", "{raw}"]),
    ("json-decode", "import json\n\ndef load_payload(text):\n    return json.loads(text)\n\nload_payload({v})\n",
     ['{"a": 1,}', '{"items": [1, 2], "total": 33,}', '{"id": "x-9",}'], False,
     ["JSONDecodeError", "Expecting property name", "load_payload"]),
    ("none-attr", "def order_total(order):\n    return getattr(order, {v})\n\norder_total(None)\n",
     ["items", "customer"], True,
     ["AttributeError", "{raw}", "order_total"]),
]


def _run(cmd: list[str], cwd: Path, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    merged = {**os.environ, "NO_COLOR": "1", "PYTHONDONTWRITEBYTECODE": "1", **(env or {})}
    return subprocess.run(cmd, cwd=cwd, capture_output=True, text=True, timeout=300, env=merged, errors="replace")


_WINDOWS_DRIVER = r'''
import linecache, sys, traceback
source = open(sys.argv[1], encoding="utf-8").read()
name = r"C:\Users\dev\projects\shop\app.py"
linecache.cache[name] = (len(source), None, source.splitlines(True), name)
try:
    exec(compile(source, name, "exec"), {"__name__": "__main__"})
except BaseException:
    sys.stderr.write(traceback.format_exc())
    sys.exit(1)
'''

_IPYTHON_DRIVER = r'''
import contextlib, io, sys
from IPython.core.interactiveshell import InteractiveShell
shell = InteractiveShell.instance(colors="NoColor")
shell.execution_count = int(sys.argv[2])
out = io.StringIO()
with contextlib.redirect_stdout(out), contextlib.redirect_stderr(out):
    shell.run_cell(open(sys.argv[1], encoding="utf-8").read(), store_history=True)
sys.stdout.write(out.getvalue())
'''


def _log_lines(text: str, fmt: str, level: int) -> str:
    formatter = logging.Formatter(fmt)
    out = []
    for line in text.rstrip("\n").split("\n"):
        record = logging.LogRecord("worker.tools", level, __file__, 0, line, None, None)
        out.append(formatter.format(record))
    return "\n".join(out) + "\n"


def _forms(raw: str, folder: Path, script: Path, index: int) -> Iterator[tuple[str, str, str]]:
    lines = raw.rstrip("\n").split("\n")
    last = lines[-1]
    yield "raw", raw, "python app.py"
    yield "json", json.dumps(raw), "json.dumps(stderr)"
    report = {"status": "error", "error": {"type": last.split(":", 1)[0], "message": last, "traceback": raw},
              "tool_call_id": f"call_{index:04d}"}
    yield "report", json.dumps(report), "json.dumps({'error': {'traceback': stderr}})"
    yield "log", _log_lines(raw, "%(asctime)s %(levelname)s [%(name)s] %(message)s", logging.ERROR), \
        "logging.Formatter('%(asctime)s %(levelname)s [%(name)s] %(message)s') per line"
    yield "logdefault", _log_lines(raw, logging.BASIC_FORMAT, logging.ERROR), "logging.BASIC_FORMAT per line"
    yield "dedent", "\n".join(line.strip() for line in lines) + "\n", "every line stripped"
    cut = max(2, len(lines) * 2 // 5)
    yield "cut", "\n".join(lines[cut:]) + "\n", f"first {cut} lines cut off"
    win = _run([sys.executable, "-c", _WINDOWS_DRIVER, str(script)], folder)
    if win.stderr.strip():
        yield "windows", win.stderr, "compiled under a Windows path, traceback.format_exc()"
    ipy = _run([sys.executable, "-c", _IPYTHON_DRIVER, str(script), str(30 + index)], folder)
    if "Traceback" in ipy.stdout:
        yield "ipython", ipy.stdout, "IPython InteractiveShell.run_cell (NoColor)"


def python_records(folder: Path) -> list[dict[str, Any]]:
    records: list[dict[str, Any]] = []
    index = 0
    for name, source, values, per_value, tokens in PY_SCENARIOS:
        for value in values:
            index += 1
            sub = folder / f"{name}-{index}"
            sub.mkdir()
            (sub / "conf").mkdir()
            script = sub / "app.py"
            script.write_text(source.replace("{v}", repr(value)).replace("{{", "{").replace("}}", "}"),
                              encoding="utf-8")
            proc = _run([sys.executable, str(script)], sub)
            assert proc.returncode != 0 and "Traceback" in proc.stderr, proc.stderr
            label = f"wild/py-{name}" + (f"-{value}" if per_value else "")
            want = [t.replace("{raw}", value) for t in tokens]
            for form, text, how in _forms(proc.stderr, sub, script, index):
                # Run in a notebook cell, the same code fails at another place: the cell, not app.py.
                where = "-notebook" if form == "ipython" else ""
                records.append({"id": f"{FAMILY}/py-{name}-{index}-{form}", "format": "wild-python",
                                "source": f"{how}; value {value!r}", "text": text, "exit_code": None,
                                "command": None, "label": label + where, "cause_tokens": want})
    return records


# ---------------------------------------------------------------------------------------------- SSL

_SSL_CLIENTS = {
    "requests": "import sys, requests\n\ndef fetch_report(url):\n    return requests.get(url, timeout=10).text\n\n"
                "fetch_report(sys.argv[1])\n",
    "urllib": "import sys, urllib.request\n\ndef fetch_report(url):\n    return urllib.request.urlopen(url, "
              "timeout=10).read()\n\nfetch_report(sys.argv[1])\n",
}


def ssl_records(folder: Path) -> list[dict[str, Any]]:
    records: list[dict[str, Any]] = []
    with tls_loopback_server(folder) as base:
        for client, source in _SSL_CLIENTS.items():
            script = folder / f"ssl_{client}.py"
            script.write_text(source, encoding="utf-8")
            for rep, path in enumerate(["v1/reports/17?page=2", "v1/reports/2031?page=1", "v1/reports/5?page=10"]):
                proc = _run([sys.executable, str(script), f"{base}/{path}"], folder)
                assert "CERTIFICATE_VERIFY_FAILED" in proc.stderr, proc.stderr[-500:]
                forms = [("raw", proc.stderr), ("json", json.dumps(proc.stderr)),
                         ("log", _log_lines(proc.stderr, "%(asctime)s %(levelname)s %(message)s", logging.ERROR))]
                for form, text in forms:
                    records.append({"id": f"{FAMILY}/ssl-{client}-{rep}-{form}", "format": "wild-ssl",
                                    "source": f"{client} against a self-signed 127.0.0.1 TLS server; {form}",
                                    "text": text, "exit_code": None, "command": None,
                                    "label": f"wild/ssl-{client}", "cause_tokens": ["CERTIFICATE_VERIFY_FAILED"]})
    return records


# ---------------------------------------------------------------------------------------------- Go

_GO = """package main

import (
	"fmt"
	"os"
	"strconv"
	"sync"
	"time"
)

func worker(id int, wg *sync.WaitGroup) {
	defer wg.Done()
	time.Sleep(10 * time.Second)
	fmt.Println(id)
}

func pickItem(items []string, index int) string {
	return items[index]
}

func registerPlugin(registry map[string]int, name string) {
	registry[name] = len(name)
}

func requireEnv(name string) string {
	value, ok := os.LookupEnv(name)
	if !ok {
		panic(fmt.Sprintf("required environment variable %s is not set", name))
	}
	return value
}

func main() {
	var wg sync.WaitGroup
	for i := 0; i < 3; i++ {
		wg.Add(1)
		go worker(i, &wg)
	}
	time.Sleep(20 * time.Millisecond)
	switch os.Args[1] {
	case "index":
		n, _ := strconv.Atoi(os.Args[2])
		fmt.Println(pickItem([]string{"a", "b", "c"}, n))
	case "nilmap":
		var registry map[string]int
		registerPlugin(registry, os.Args[2])
	case "env":
		requireEnv(os.Args[2])
	}
	wg.Wait()
}
"""


def go_records(folder: Path) -> list[dict[str, Any]]:
    if shutil.which("go") is None:
        return []
    src = folder / "gopanic"
    src.mkdir()
    (src / "main.go").write_text(_GO, encoding="utf-8")
    _run(["go", "mod", "init", "example.com/shop"], src)
    build = _run(["go", "build", "-o", "shop", "."], src, env={"GOFLAGS": "-mod=mod", "GOTOOLCHAIN": "local"})
    assert build.returncode == 0, build.stderr
    cases = [
        ("index", ["5", "7", "12"], "wild/go-index", ["panic", "index out of range", "main.go", "pickItem"]),
        ("nilmap", ["auth", "cache"], "wild/go-nilmap", ["panic", "assignment to entry in nil map", "registerPlugin"]),
        ("env", ["DATABASE_URL"], "wild/go-env-DATABASE_URL", ["panic", "DATABASE_URL", "requireEnv"]),
        ("env", ["REDIS_ADDR"], "wild/go-env-REDIS_ADDR", ["panic", "REDIS_ADDR", "requireEnv"]),
    ]
    records = []
    for mode, values, label, tokens in cases:
        for value in values:
            for traceback_mode in ("all", "single"):
                proc = _run([str(src / "shop"), mode, value], src, env={"GOTRACEBACK": traceback_mode})
                assert "panic" in proc.stderr, proc.stderr
                for form, text in (("raw", proc.stderr), ("json", json.dumps(proc.stderr))):
                    records.append({"id": f"{FAMILY}/go-{mode}-{value}-{traceback_mode}-{form}",
                                    "format": "wild-go", "source": f"go build; GOTRACEBACK={traceback_mode}; {form}",
                                    "text": text, "exit_code": proc.returncode, "command": None, "label": label,
                                    "cause_tokens": tokens})
    return records


# ---------------------------------------------------------------------------------------------- JVM

_JAVA = """import java.nio.file.Files;
import java.nio.file.Path;
import java.util.List;

public class Main {
    static int parseAge(String text) {
        return Integer.parseInt(text);
    }

    static List<String> readConfig(String name) throws Exception {
        return Files.readAllLines(Path.of("conf", name));
    }

    public static void main(String[] args) throws Exception {
        if (args[0].equals("age")) {
            System.out.println(parseAge(args[1]));
        } else {
            System.out.println(readConfig(args[1]));
        }
    }
}
"""


def jvm_records(folder: Path) -> list[dict[str, Any]]:
    if shutil.which("javac") is None or shutil.which("java") is None:
        return []
    src = folder / "jvm"
    src.mkdir()
    (src / "Main.java").write_text(_JAVA, encoding="utf-8")
    built = _run(["javac", "Main.java"], src)
    assert built.returncode == 0, built.stderr
    cases = [
        ("age", ["abc", "12x", "forty"], "wild/jvm-parseint",
         ["NumberFormatException", "For input string", "parseAge"]),
        ("config", ["app_1.properties", "app_22.properties"], "wild/jvm-nofile-app",
         ["NoSuchFileException", "readConfig"]),
        ("config", ["secrets.properties"], "wild/jvm-nofile-secrets",
         ["NoSuchFileException", "secrets.properties", "readConfig"]),
    ]
    records = []
    for mode, values, label, tokens in cases:
        for value in values:
            proc = _run(["java", "-cp", ".", "Main", mode, value], src)
            assert "Exception" in proc.stderr, proc.stderr
            for form, text in (("raw", proc.stderr), ("json", json.dumps(proc.stderr)),
                               ("log", _log_lines(proc.stderr, "%(asctime)s %(levelname)s %(message)s",
                                                  logging.ERROR))):
                records.append({"id": f"{FAMILY}/jvm-{mode}-{value}-{form}", "format": "wild-jvm",
                                "source": f"javac + java Main {mode}; {form}", "text": text,
                                "exit_code": proc.returncode, "command": None, "label": label,
                                "cause_tokens": tokens})
    return records


# ---------------------------------------------------------------------------------------------- C++

_CPP = """#include <algorithm>
#include <map>
#include <vector>
{pad}
struct {name} {{
    int x;
    int y;
}};

int main() {{
    std::vector<{name}> items{{{{1, 2}}, {{3, 4}}}};
    std::sort(items.begin(), items.end());
    std::map<{name}, int> index;
    return static_cast<int>(items.size());
}}
"""


def cpp_records(folder: Path) -> list[dict[str, Any]]:
    if shutil.which("g++") is None:
        return []
    records = []
    for name in ("Point", "Segment"):
        for pad in range(3):
            src = folder / f"cpp-{name}-{pad}"
            src.mkdir()
            (src / "main.cpp").write_text(_CPP.format(name=name, pad="\n" * pad * 3), encoding="utf-8")
            proc = _run(["g++", "-std=c++17", "-c", "main.cpp", "-o", "main.o"], src)
            assert proc.returncode != 0, proc.stderr
            records.append({"id": f"{FAMILY}/cpp-{name}-{pad}", "format": "wild-cpp",
                            "source": "g++ -std=c++17 -c main.cpp (std::sort on a type without operator<)",
                            "text": proc.stderr, "exit_code": proc.returncode, "command": "g++ -std=c++17 -c main.cpp",
                            "label": f"wild/cpp-sort-{name}", "cause_tokens": ["main.cpp", "operator<", name]})
    return records


def pairs_for(records: list[dict[str, Any]]) -> list[dict[str, str]]:
    """Near-miss pairs: records of the same scenario whose cause-naming token differs, in the same form."""
    groups = [
        ("wild/py-keyerror-name-email", "wild/py-keyerror-name-password_hash", "different missing key"),
        ("wild/py-missing-file-name-secrets.yaml", "wild/py-missing-file-name-tokens.toml", "different file"),
        ("wild/py-missing-file", "wild/py-missing-file-name-secrets.yaml", "different file"),
        ("wild/py-no-table-orders", "wild/py-no-table-customers", "different missing table"),
        ("wild/py-from-none-timeout", "wild/py-from-none-retries", "different setting"),
        ("wild/py-wrapper-weather", "wild/py-wrapper-calendar", "different tool name"),
        ("wild/py-none-attr-items", "wild/py-none-attr-customer", "different attribute"),
        ("wild/py-keyerror-id", "wild/py-keyerror-name-email", "different function and key"),
        ("wild/go-env-DATABASE_URL", "wild/go-env-REDIS_ADDR", "different variable"),
        ("wild/go-index", "wild/go-nilmap", "different panic"),
        ("wild/jvm-nofile-app", "wild/jvm-nofile-secrets", "different file"),
        ("wild/jvm-parseint", "wild/jvm-nofile-app", "different exception"),
        ("wild/cpp-sort-Point", "wild/cpp-sort-Segment", "different type"),
        ("wild/ssl-requests", "wild/ssl-urllib", "different client"),
    ]
    groups += [(f"{a}-notebook", f"{b}-notebook", why) for a, b, why in groups if a.startswith("wild/py-")]
    return near_miss_pairs(records, groups)


def main() -> None:
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp)
        records = python_records(folder) + ssl_records(folder) + go_records(folder) + jvm_records(folder)
        records += cpp_records(folder)
    pairs = pairs_for(records)
    write_records(FAMILY, records, pairs)


if __name__ == "__main__":
    main()
