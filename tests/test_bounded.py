"""Bounded calls where no thread can be started (Python 3.12+ at interpreter exit, or a thread limit).

Run in a child process: the refusal is made there by replacing ``threading``'s thread-start primitive
(see ``tests/atexit_threads.py``), which must not touch the test runner's own threads.
"""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap

from tests.atexit_threads import REFUSE_THREADS_AT_EXIT

CHILD = textwrap.dedent(
    """
    import json, logging, threading, time
    from otel_errcompact import _bounded

    logging.basicConfig(level=logging.WARNING, format="%(message)s")
    _bounded.reserve(1)
    refuse_threads_now()
    ran, release = [], threading.Event()

    def hangs():
        ran.append(threading.current_thread().name)
        release.wait()

    started = time.monotonic()
    first = _bounded.call_within(hangs, 0.3, "hangs")  # the one helper takes it, and stays busy
    second = _bounded.call_within(lambda: ran.append("second"), 5.0, "second")  # none left: not run
    second_s = time.monotonic() - started
    release.set()
    time.sleep(0.2)  # the helper is idle again
    third = _bounded.call_within(lambda: ran.append("third"), 5.0, "third")
    print(json.dumps({"first": first, "second": second, "third": third, "second_s": second_s, "ran": ran}))
    """
)


def test_calls_run_on_reserved_helpers_and_give_up_at_once_when_none_is_left() -> None:
    proc = subprocess.run(
        [sys.executable, "-c", REFUSE_THREADS_AT_EXIT + CHILD], capture_output=True, text=True, timeout=60
    )
    assert proc.returncode == 0, proc.stderr
    out = json.loads(proc.stdout.strip().splitlines()[-1])
    assert out["first"] is False  # ran, on the reserved helper, past its timeout
    assert out["ran"][0].startswith("otel_errcompact.standby-")
    assert out["second"] is False and "second" not in out["ran"]
    assert out["second_s"] < 3.0  # answered without waiting out its 5 s
    assert "second was not run: no thread could be started for it" in proc.stderr
    assert out["third"] is True and out["ran"][-1] == "third"
