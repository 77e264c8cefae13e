"""The trajectory viewer, checked in a real headless Chromium as a person would see it.

The store comes from the demo (an agent whose tools really fail). The viewer runs as installed
(``otel-errcompact viewer``) on 127.0.0.1; Chromium renders each page and the test reads the rendered DOM:
conversations → failures with digest, count, escalation and a trace link, then one record's raw error.
"""

from __future__ import annotations

import contextlib
import html
import os
import re
import shutil
import signal
import socket
import sqlite3
import subprocess
import sys
import time
import urllib.parse
import urllib.request
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from tests.conftest import OTel

CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
pytestmark = [
    pytest.mark.skipif(CHROMIUM is None, reason="chromium (Debian package) not installed"),
    pytest.mark.skipif(
        shutil.which("otel-errcompact") is None and not Path(sys.executable).with_name("otel-errcompact").exists(),
        reason="the otel-errcompact console script is not installed",
    ),
]
TRACE_URL = "http://127.0.0.1:16686/trace/{trace_id}"


def _cli() -> str:
    local = Path(sys.executable).with_name("otel-errcompact")
    return str(local) if local.exists() else str(shutil.which("otel-errcompact"))


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _render(url: str, profile: Path, screenshot: Path | None = None) -> str:
    """The page as Chromium renders it (the DOM after scripts), and optionally a screenshot."""
    flags = [
        str(CHROMIUM), "--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
        "--disable-background-networking", "--disable-component-update", "--disable-sync",
        f"--user-data-dir={profile}", "--window-size=1400,1000", "--virtual-time-budget=3000",
    ]
    if screenshot is not None:
        subprocess.run([*flags, f"--screenshot={screenshot}", url], capture_output=True, timeout=120, check=True)
    done = subprocess.run([*flags, "--dump-dom", url], capture_output=True, text=True, timeout=120, check=True)
    return done.stdout


def _text(dom: str) -> str:
    return html.unescape(re.sub(r"\s+", " ", re.sub(r"<[^>]+>", " ", dom)))


def _env(db: Path) -> dict[str, str]:
    env = {**os.environ, "OTEL_ERRCOMPACT_SQLITE_PATH": str(db)}
    for name in [n for n in env if n.startswith("OTEL_EXPORTER_OTLP")]:
        env.pop(name)
    return env


def _answers(base: str) -> bool:
    try:
        urllib.request.urlopen(f"{base}/-/versions.json", timeout=2).close()
    except OSError:
        return False
    return True


def _start_viewer(db: Path, port: int) -> subprocess.Popen[str]:
    """``otel-errcompact viewer`` on ``port``, once it answers."""
    server = subprocess.Popen(
        [_cli(), "viewer", "--db", str(db), "--port", str(port), "--trace-url", TRACE_URL],
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=_env(db),
    )
    deadline = time.monotonic() + 60
    while not _answers(f"http://127.0.0.1:{port}"):
        if time.monotonic() > deadline or server.poll() is not None:
            server.kill()
            output = server.stdout.read() if server.stdout else ""
            raise AssertionError(f"viewer did not start: {output}")
        time.sleep(0.3)
    return server


def _start_viewer_on_a_port_it_picks(db: Path) -> tuple[subprocess.Popen[str], int]:
    """``otel-errcompact viewer --port 0``, and the port the system gave it (which Datasette prints)."""
    server = subprocess.Popen(
        [_cli(), "viewer", "--db", str(db), "--port", "0", "--trace-url", TRACE_URL],
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=_env(db),
    )
    assert server.stdout is not None
    seen = []
    for line in server.stdout:  # ends when the viewer does
        seen.append(line)
        running = re.search(r"running on http://127\.0\.0\.1:(\d+)", line)
        if running:
            return server, int(running.group(1))
    server.wait(timeout=30)
    raise AssertionError(f"viewer did not start: {''.join(seen)}")


def _get(url: str) -> str:
    with urllib.request.urlopen(url, timeout=30) as response:
        return html.unescape(response.read().decode())


@pytest.fixture(scope="module")
def viewer(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[str, Path]]:
    tmp = tmp_path_factory.mktemp("viewer")
    db = tmp / "store.sqlite3"
    demo = subprocess.run([_cli(), "demo", "--db", str(db)], capture_output=True, text=True, env=_env(db),
                          timeout=300)
    assert demo.returncode == 0, demo.stdout + demo.stderr
    port = _free_port()
    server = _start_viewer(db, port)
    try:
        yield f"http://127.0.0.1:{port}", db
    finally:
        server.terminate()
        server.wait(timeout=30)


def test_the_viewer_binds_loopback_only(viewer: tuple[str, Path]) -> None:
    base, _db = viewer
    assert base.startswith("http://127.0.0.1:")


def test_a_person_goes_from_conversations_to_a_failure_and_its_trace(
    viewer: tuple[str, Path], tmp_path: Path
) -> None:
    base, db = viewer
    rows = sqlite3.connect(db).execute(
        "select coalesce(conversation_id, scope), trace_id, digest_line, count, id from trajectory "
        "where escalated = 1"
    ).fetchall()
    assert rows, "the demo escalates"
    conversation, trace_id, digest, count, row_id = rows[0]

    shot = tmp_path / "conversations.png"
    page = _render(f"{base}/trajectories/conversations", tmp_path / "profile", screenshot=shot)
    assert shot.stat().st_size > 10_000
    text = _text(page)
    assert "Conversations" in text and conversation in text
    failures_path = f"/trajectories/failures?conversation={conversation}"
    assert f'href="{html.escape(failures_path)}"' in page or f'href="{failures_path}"' in page
    failures_url = base + failures_path

    page = _render(failures_url, tmp_path / "profile")
    text = _text(page)
    assert digest in text
    assert "consecutive" in text  # the escalated failure says why
    assert re.search(rf"\b{count}\b", text)
    trace_link = TRACE_URL.format(trace_id=trace_id)
    assert f'href="{trace_link}"' in page  # a clickable link to the trace UI

    record_page = _render(f"{base}/trajectories/trajectory/{row_id}", tmp_path / "profile")
    record_text = _text(record_page)
    assert "Traceback (most recent call last)" in record_text  # the raw error, in full
    assert "no such table" in record_text


def test_the_viewers_links_open_on_a_port_the_system_picked(viewer: tuple[str, Path]) -> None:
    """``--port 0`` (or ``--host 0.0.0.0``) is an address no browser opens: the links from conversations to
    failures to a record open on the host and port the page came from, followed here as a browser follows
    them (each href resolved against its page's URL) with a real HTTP client."""
    _base, db = viewer
    row_id, digest = sqlite3.connect(db).execute(
        "select id, digest_line from trajectory where escalated = 1"
    ).fetchone()
    server, port = _start_viewer_on_a_port_it_picks(db)
    try:
        page_url = f"http://127.0.0.1:{port}/trajectories/conversations"
        hrefs = re.findall(r'href="([^"]*/failures\?conversation=[^"]*)"', _get(page_url))
        assert hrefs
        records: list[str] = []
        for href in hrefs:
            failures_url = urllib.parse.urljoin(page_url, href)
            records += [urllib.parse.urljoin(failures_url, h)
                        for h in re.findall(r'href="([^"]*/trajectory/\d+)"', _get(failures_url))]
        opened = [url for url in records if url.endswith(f"/trajectory/{row_id}")]
        assert opened, records
        assert urllib.parse.urlsplit(opened[0]).netloc == f"127.0.0.1:{port}"
        record_page = _get(opened[0])
        assert digest in record_page and "Traceback (most recent call last)" in record_page  # the record
    finally:
        server.terminate()
        server.wait(timeout=30)


def test_the_viewer_is_read_only(viewer: tuple[str, Path]) -> None:
    base, db = viewer
    before = sqlite3.connect(db).execute("select count(*) from trajectory").fetchone()[0]
    url = f"{base}/trajectories.json?sql=delete+from+trajectory&_shape=array"
    try:
        with urllib.request.urlopen(url, timeout=10) as response:
            body = response.read().decode()
    except urllib.error.HTTPError as exc:
        body = exc.read().decode()
    assert "delete" not in body.lower() or "error" in body.lower()
    assert sqlite3.connect(db).execute("select count(*) from trajectory").fetchone()[0] == before


@pytest.mark.skipif(not Path("/proc/self/task").is_dir(), reason="reads a process's children from /proc (Linux)")
def test_a_viewer_stopped_with_sigterm_takes_its_server_and_folder_with_it(viewer: tuple[str, Path]) -> None:
    """A process manager, ``kill`` or a closed terminal signals the viewer alone, not its process group
    as Ctrl+C does: Datasette must stop with it, so that nothing goes on serving the store on the port,
    and the viewer's temporary folder must be removed."""
    _base, db = viewer
    port = _free_port()
    server = _start_viewer(db, port)
    children = [int(pid) for pid in Path(f"/proc/{server.pid}/task/{server.pid}/children").read_text().split()]
    try:
        assert len(children) == 1  # Datasette
        arguments = Path(f"/proc/{children[0]}/cmdline").read_bytes().split(b"\0")
        folder = Path(os.fsdecode(arguments[arguments.index(b"--metadata") + 1])).parent
        assert folder.is_dir()
        server.send_signal(signal.SIGTERM)
        assert server.wait(timeout=30) == 0
        assert not Path(f"/proc/{children[0]}").exists()  # stopped and reaped, not orphaned
        assert not _answers(f"http://127.0.0.1:{port}")
        assert not folder.exists()
    finally:
        for pid in children:  # an orphan left by a failure above must not outlive the test
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)


CONVERSATIONS = ("support#42", "tom&jerry", "c++ help", "sale 50%25", "a=b?c/d")
"""Conversation ids are the application's: a ticket after '#', names with '&', '+' or a space, a '%'."""


def test_each_conversation_link_opens_that_conversations_failures(
    make_otel: Callable[..., OTel], tmp_path: Path
) -> None:
    """A person clicks a conversation and sees its failures: the link carries the id whole, where a '#'
    or '&' cut it short and a '+' became a space (another, empty conversation opened), and an id with a
    space was no link at all."""
    db = tmp_path / "store.sqlite3"
    otel = make_otel(sqlite_path=db)
    for number, conversation in enumerate(CONVERSATIONS):

        @otel.ec.tool(name=f"lookup_{number}")
        def lookup(key: str) -> int:
            return {"known": 1}[key]

        with otel.ec.conversation(conversation):
            lookup(f"missing-{number}")
    assert len(otel.records()) == len(CONVERSATIONS)  # flushed: all are in the store the viewer opens

    port = _free_port()
    server = _start_viewer(db, port)
    try:
        base = f"http://127.0.0.1:{port}"
        page = _render(f"{base}/trajectories/conversations", tmp_path / "profile")
        links = [urllib.parse.urljoin(base, html.unescape(h))
                 for h in re.findall(r'href="([^"]*/failures\?conversation=[^"]*)"', page)]
        assert len(links) == len(CONVERSATIONS), links
        opened: dict[str, str] = {}
        for link in links:
            text = _text(_render(link, tmp_path / "profile"))
            tools = [f"lookup_{n}" for n in range(len(CONVERSATIONS)) if re.search(rf"\blookup_{n}\b", text)]
            assert len(tools) == 1, f"{link} shows the failures of {tools}:\n{text[:2000]}"
            opened[tools[0]] = link
    finally:
        server.terminate()
        server.wait(timeout=30)
    for number, conversation in enumerate(CONVERSATIONS):
        query = urllib.parse.urlsplit(opened[f"lookup_{number}"]).query
        assert urllib.parse.parse_qs(query) == {"conversation": [conversation]}
