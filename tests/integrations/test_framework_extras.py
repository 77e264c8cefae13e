"""The bridges' framework requirements: what a user sees when a framework is missing or too old, and the
extras that name the versions (``pip install 'otel-errcompact[langgraph]'``), whose lower bounds
``scripts/test-lowest.sh`` runs the framework tests on.

Each import runs in a fresh interpreter in which the framework module is made unimportable the way Python
does it for a module that is not there (``sys.modules[name] = None``), so the bridge meets a real ImportError."""

from __future__ import annotations

import subprocess
import sys
import textwrap
import tomllib
from pathlib import Path

import pytest

from tests.integrations import require

require("langgraph", "langgraph.prebuilt", "langchain_core", "langchain", "agents")

ROOT = Path(__file__).resolve().parents[2]


def _extra(name: str) -> list[str]:
    with (ROOT / "pyproject.toml").open("rb") as f:
        extras: dict[str, list[str]] = tomllib.load(f)["project"]["optional-dependencies"]
    return extras[name]


def _run(blocked: str, body: str) -> subprocess.CompletedProcess[str]:
    script = f"import sys\nsys.modules[{blocked!r}] = None\n" + textwrap.dedent(body)
    return subprocess.run([sys.executable, "-c", script], cwd=ROOT, capture_output=True, text=True,
                          timeout=120, check=False)


@pytest.mark.parametrize(
    ("extra", "blocked", "body"),
    [
        pytest.param("openai-agents", "agents", "import otel_errcompact.openai_agents", id="openai-agents"),
        pytest.param(
            "langgraph", "langgraph.prebuilt.tool_node", "from otel_errcompact.langgraph import LangGraphBridge",
            id="langgraph",
        ),
        pytest.param(
            "langgraph",
            "langchain.agents.middleware",
            """
            import otel_errcompact
            from otel_errcompact.langgraph import LangGraphBridge
            ec = otel_errcompact.init(service_name="extras", sqlite_path=None)
            LangGraphBridge(ec).middleware()
            """,
            id="create_agent-middleware",
        ),
    ],
)
def test_a_missing_framework_names_the_extra_and_its_versions(extra: str, blocked: str, body: str) -> None:
    proc = _run(blocked, body)
    assert proc.returncode == 1, proc.stdout + proc.stderr
    last = proc.stderr.strip().splitlines()[-1]
    assert last.startswith("ImportError: "), proc.stderr
    assert f"pip install 'otel-errcompact[{extra}]'" in last
    for requirement in _extra(extra):  # the installed metadata says what pyproject.toml says
        assert requirement in last, (requirement, last)
    assert f"'{blocked}'" in last or blocked in last  # the framework's own error is kept
    assert "The above exception was the direct cause" in proc.stderr  # ... and chained


def test_the_bridges_import_with_their_frameworks_present() -> None:
    proc = _run("no-such-module", "import otel_errcompact.langgraph, otel_errcompact.openai_agents")
    assert proc.returncode == 0, proc.stderr


@pytest.mark.parametrize("given", [None, "ec", object()], ids=["none", "a-string", "an-object"])
def test_a_bridge_made_from_something_else_than_the_handle_is_refused_when_made(given: object) -> None:
    """A bridge reads its handle only inside the framework's tool and model calls, where anything else than
    the handle ``init()`` returns failed in the agent's run, past the framework's error handling (an
    AttributeError out of ``agent.invoke``). Each bridge refuses it when made, naming itself."""
    from otel_errcompact import ConfigurationError
    from otel_errcompact.langgraph import LangGraphBridge
    from otel_errcompact.openai_agents import AgentsBridge

    with pytest.raises(ConfigurationError, match=r"^LangGraphBridge\(ec=.*\): expected the handle otel_errcompact"):
        LangGraphBridge(given, agent_name="orders-agent")  # type: ignore[arg-type]
    with pytest.raises(ConfigurationError, match=r"^AgentsBridge\(ec=.*\): expected the handle otel_errcompact"):
        AgentsBridge(given)  # type: ignore[arg-type]
