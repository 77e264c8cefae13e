"""The harness pre-stage: framing comes off, its exit code goes into the hints, the key stays put."""

from __future__ import annotations

from pathlib import Path

import pytest

from otel_errcompact.compactor import compact_text
from otel_errcompact.parsers._base import Hints
from otel_errcompact.unwrap import harness, unwrap
from tests.realerrors import have, run, write

pytestmark = pytest.mark.skipif(not have("make"), reason="make is not installed")


@pytest.fixture()
def make_error(tmp_path: Path) -> tuple[str, int]:
    write(tmp_path, "Makefile", "app: main.o\n\tcc -o app main.o\n")
    result = run(["make"], cwd=tmp_path)
    assert result.returncode == 2
    return result.output, result.returncode


def framings(output: str, code: int) -> dict[str, str]:
    """The same output as four harnesses frame it (formats from their source; see unwrap/harness.py)."""
    return {
        "mini-swe-agent": f"<returncode>{code}</returncode>\n<output>\n{output}</output>",
        "openhands": f"{output.rstrip()}\n[The command completed with exit code {code}.]\n"
                     f"[Current working directory: /workspace]\n[Python interpreter: /usr/bin/python]\n"
                     f"[Command finished with exit code {code}]",
        "claude-bash": f"Exit code {code}\n{output.rstrip()}",
        "openhands-jupyter": f"{output.rstrip()}\n[Jupyter current working directory: /workspace]\n"
                             "[Jupyter Python interpreter: /usr/bin/python]",
        "swe-agent-reminder": f"{output.rstrip()}\nDO NOT re-run the same failed edit command. "
                              "Running it again will lead to the same error.",
    }


def test_every_framing_gives_the_unframed_key(make_error: tuple[str, int]) -> None:
    output, code = make_error
    raw = compact_text(output, exit_code=code, command="make")
    for name, framed in framings(output, code).items():
        stated = name not in ("swe-agent-reminder", "openhands-jupyter")  # these two state no exit code
        d = compact_text(framed, command="make", exit_code=None if stated else code)
        assert (d.key, d.cause, d.status) == (raw.key, raw.cause, code), name


def test_the_exit_code_moves_into_the_hints(make_error: tuple[str, int]) -> None:
    output, code = make_error
    for name, framed in framings(output, code).items():
        if name in ("swe-agent-reminder", "openhands-jupyter"):
            continue
        text, hints = unwrap(framed, Hints())
        assert hints.exit_code == code, name
        assert text.strip() == output.strip(), name


def test_a_caller_exit_code_wins_over_the_framing(make_error: tuple[str, int]) -> None:
    output, _ = make_error
    _, hints = unwrap(f"Exit code 7\n{output}", Hints(exit_code=2))
    assert hints.exit_code == 2


def test_unframed_text_is_left_alone(make_error: tuple[str, int]) -> None:
    output, _ = make_error
    assert harness.unwrap(output, Hints()) is None
    assert harness.unwrap("ERROR: No matching distribution found for x", Hints()) is None  # pip's, not a banner


def test_a_banner_alone_is_not_removed() -> None:
    d = compact_text("ERROR:")
    assert d.cause  # nothing but the banner: it stays rather than leaving an empty error
