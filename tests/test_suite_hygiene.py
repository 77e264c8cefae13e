"""The test suite itself, run the ways people run it: as a background job of a script (SIGINT ignored),
and through ``scripts/test.sh`` inside a virtual environment."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
SIGINT_TEST = "tests/parsers/test_python.py::test_keyboard_interrupt_and_system_exit"


def test_the_sigint_test_passes_when_started_as_a_background_job() -> None:
    """``cmd &`` in a non-interactive shell starts ``cmd`` with SIGINT ignored, which Python children
    inherit; the test that sends itself SIGINT must not depend on that disposition."""
    script = (
        f'"{sys.executable}" -m pytest -q -p no:cacheprovider {SIGINT_TEST} &\n'
        "job=$!\n"
        # Prove the premise: the background job really has SIGINT ignored (bit 2 of SigIgn).
        'grep -q "^SigIgn:" /proc/$job/status && ignored=$(( 0x$(awk \'/^SigIgn:/ {print $2}\' '
        "/proc/$job/status) & 2 )) && echo \"sigint-ignored=$ignored\"\n"
        "wait $job\n"
    )
    env = {**os.environ, "PYTEST_DISABLE_PLUGIN_AUTOLOAD": "1"}
    proc = subprocess.run(["bash", "-c", script], cwd=ROOT, env=env, capture_output=True, text=True,
                          timeout=240, check=False)
    assert "sigint-ignored=2" in proc.stdout, proc.stdout + proc.stderr
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert re.search(r"\b1 passed\b", proc.stdout), proc.stdout


def test_the_test_script_uses_the_active_venv_and_sudo_only_when_needed() -> None:
    """``scripts/test.sh`` runs pip and pytest with the active interpreter (a venv's, when one is
    active), and prefixes apt-get with sudo only when not root."""
    text = (ROOT / "scripts" / "test.sh").read_text()
    probe = subprocess.run(
        ["bash", "-c", 'source <(sed -n "/^# --- interpreter ---/,/^# --- end interpreter ---/p" '
         'scripts/test.sh); echo "PY=$PY"; echo "SUDO=$SUDO"'],
        cwd=ROOT, env={**os.environ, "VIRTUAL_ENV": str(Path(sys.executable).parent.parent),
                       "PATH": f"{Path(sys.executable).parent}:{os.environ['PATH']}"},
        capture_output=True, text=True, timeout=60, check=False,
    )
    assert probe.returncode == 0, probe.stderr
    values = dict(line.split("=", 1) for line in probe.stdout.strip().splitlines())
    assert Path(values["PY"]).resolve() == Path(sys.executable).resolve()
    assert values["SUDO"] == ("" if os.geteuid() == 0 else "sudo")
    assert "python3 -m pip" not in text and "python3 -m pytest" not in text
