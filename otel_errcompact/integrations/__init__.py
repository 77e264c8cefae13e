"""Bridges to agent frameworks: :mod:`otel_errcompact.langgraph` and :mod:`otel_errcompact.openai_agents`.

Each bridge hooks into the framework's own extension points (LangGraph's ``ToolNode(wrap_tool_call=…)``
and ``pre_model_hook``; the Agents SDK's ``failure_error_function`` and dynamic ``instructions``) so that
a failed tool call reaches the model as one digest line with its count, a breach stops the run with an
exception the framework does not swallow, the history scope follows the framework's own notion of a
conversation, and the ``[RECENT ERRORS]`` block is rebuilt for each model call instead of piling up.
The framework packages are imported only by the bridge modules, never by the core.
"""

from __future__ import annotations

import importlib.metadata
import re
from typing import TYPE_CHECKING

from otel_errcompact.exceptions import ConfigurationError

if TYPE_CHECKING:
    from otel_errcompact.api import ErrCompact


def framework_missing(bridge: str, extra: str, error: Exception) -> ImportError:
    """The error a bridge raises when its framework is missing or older than it supports. The bare
    ImportError (a name that cannot be imported from deep inside the framework) says neither which
    versions the bridge needs nor how to get them: this one names the requirements of the package's
    extra ``extra``, read from its installed metadata (pyproject.toml's optional dependencies), and
    keeps the original error at the end and as the cause."""
    needs = ", ".join(_requirements_of(extra)) or "its framework"
    return ImportError(f"{bridge} needs {needs}: pip install 'otel-errcompact[{extra}]' ({error})")


def bridged_handle(bridge: str, ec: object) -> ErrCompact:
    """``ec``, refused with a ConfigurationError naming the bridge unless it is the handle ``init()``
    returns: a bridge reads it only inside the framework's tool calls and model calls, where anything
    else failed in the agent's run, raised past the framework's error handling."""
    from otel_errcompact.api import ErrCompact

    if not isinstance(ec, ErrCompact):
        raise ConfigurationError(f"{bridge}(ec={ec!r}): expected the handle otel_errcompact.init() returns")
    return ec


def _requirements_of(extra: str) -> list[str]:
    """The requirements of one extra of the installed otel-errcompact, without their markers."""
    try:
        requires = importlib.metadata.requires("otel-errcompact") or []
    except importlib.metadata.PackageNotFoundError:  # imported from a source tree, not installed
        return []
    marker = re.compile(r";.*\bextra\s*==\s*['\"]" + re.escape(extra) + r"['\"]")
    return [requirement.split(";", 1)[0].strip() for requirement in requires if marker.search(requirement)]
