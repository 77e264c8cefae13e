"""Integration tests: real agent frameworks, run offline with scripted models, traced by their real
OpenTelemetry instrumentations into the ``make_otel`` pipeline.

The framework packages are optional (``bash .ci/integrations-install.sh`` installs the pinned set).
A module whose packages are missing is skipped, except on CI (``CI=true``) where that is a failure.
"""

from __future__ import annotations

import importlib.util
import os
from collections.abc import Callable, Iterator
from typing import Any

import pytest


def require(*modules: str) -> None:
    """Skip the calling test module when a module is not importable; fail instead when ``CI=true``."""
    missing = []
    for name in modules:
        try:
            found = importlib.util.find_spec(name) is not None
        except ModuleNotFoundError:
            found = False
        if not found:
            missing.append(name)
    if not missing:
        return
    reason = f"not installed: {', '.join(missing)} (run: bash .ci/integrations-install.sh)"
    if os.environ.get("CI", "").strip().lower() == "true":
        pytest.fail(f"integration packages missing on CI: {reason}", pytrace=False)
    pytest.skip(reason, allow_module_level=True)


def instrumented(make_otel: Callable[..., Any], instrumentor: Any) -> Iterator[Callable[..., Any]]:
    """The body of a ``traced`` fixture: ``make_otel`` with ``instrumentor`` (an OpenInference
    instrumentor) exporting into each pipeline it builds, uninstrumented at the end if it was used."""
    made: list[Any] = []

    def build(**kwargs: Any) -> Any:
        otel = make_otel(**kwargs)
        instrumentor.instrument(tracer_provider=otel.tracer_provider)
        made.append(otel)
        return otel

    try:
        yield build
    finally:
        if made:
            instrumentor.uninstrument()
