"""The viewer's child process and signals that arrive while it starts (no browser needed)."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap

import pytest

from otel_errcompact.ops import viewer

pytestmark = pytest.mark.skipif(os.name != "posix", reason="POSIX signals")

# Run in a process of its own: if the viewer let the signal through, it would kill the test runner.
_SIGNALLED_WHILE_STARTING = textwrap.dedent(
    """
    import json, os, signal, subprocess, sys
    from otel_errcompact.ops import viewer

    started = []
    real_popen = subprocess.Popen

    def popen_signalled_meanwhile(args, **kwargs):
        os.kill(os.getpid(), signal.SIGTERM)  # arrives before the child exists
        child = real_popen(args, **kwargs)
        started.append(child)
        return child

    before = signal.getsignal(signal.SIGTERM)
    viewer.subprocess.Popen = popen_signalled_meanwhile
    code = viewer._run_until_stopped([sys.executable, "-c", "import time; time.sleep(30)"])
    print(json.dumps({
        "code": code,
        "children": len(started),
        "child_returncode": started[0].returncode if started else None,
        "handler_restored": signal.getsignal(signal.SIGTERM) is before,
    }))
    """
)


def test_a_sigterm_while_the_server_starts_is_passed_on_to_it() -> None:
    """A SIGTERM that reaches the viewer while it is starting Datasette (the child does not exist yet, so
    nothing can be passed on to it) must neither kill the viewer with the child left running, nor be lost:
    the child is told as soon as it exists, the viewer returns 0, and its own handler is restored."""
    done = subprocess.run([sys.executable, "-c", _SIGNALLED_WHILE_STARTING], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr  # -SIGTERM: the viewer itself was killed
    result = json.loads(done.stdout)
    assert result == {
        "code": 0,
        "children": 1,
        "child_returncode": -signal.SIGTERM,  # stopped by the signal passed on, not done sleeping
        "handler_restored": True,
    }


def test_a_server_killed_by_something_else_is_reported_as_a_shell_would() -> None:
    """Datasette killed by a signal the viewer did not receive: 128 + the signal's number."""
    code = viewer._run_until_stopped([sys.executable, "-c", "import os, signal; os.kill(os.getpid(), signal.SIGKILL)"])
    assert code == 128 + signal.SIGKILL
