"""Real exceptions with deep, realistic tracebacks (40-46 lines), for tests and benchmarks.

An agent's tool usually fails many frames below its entry point: a handler calls a service, which calls
a repository, which calls a codec, which calls the standard library. :func:`deep_app` writes such a small
application (four modules, fourteen frames deep) into a folder and imports it, and
:func:`deep_exception` runs it until it fails. Nothing is typed by hand: every traceback is the
interpreter's own, and the variable part (an order number) makes every raw text distinct while the
failing code path (``i % 5``) picks one of five real failure kinds: a missing key, bad JSON (which adds
a standard-library frame), a missing SQLite table, a bad integer literal, and a missing attribute.
"""

from __future__ import annotations

import importlib.util
import sys
import traceback
from pathlib import Path
from types import ModuleType

__all__ = ["deep_app", "deep_exception", "deep_traceback"]


_LEAF = '''
import json
import sqlite3

_decoder = json.JSONDecoder()


def fail(order: int) -> object:
    kind = order % 5
    if kind == 0:
        return {}[f"order-{order}"]
    if kind == 1:
        return _decoder.raw_decode("[" + "1," * (order % 4999))
    if kind == 2:
        return sqlite3.connect(":memory:").execute(f"SELECT total FROM orders_{order}")
    if kind == 3:
        return int(f"{order}x")
    return getattr(None, f"price_{order}")
'''
_FRAMES = {"handlers": 2, "service": 3, "repository": 4}  # pass-through functions per module


def _chain_module(name: str, calls: tuple[str, str], depth: int) -> str:
    lines = [f"from {calls[0]} import {calls[1]} as _next", ""]
    for k in range(depth):
        target = f"_{name}_{k + 1}" if k + 1 < depth else "_next"
        lines += ["", f"def _{name}_{k}(order: int) -> object:", f"    return {target}(order)", ""]
    lines += ["", "def enter(order: int) -> object:", f"    return _{name}_0(order)", ""]
    return "\n".join(lines)


def deep_app(folder: Path) -> ModuleType:
    """Write the application into ``folder/deepapp`` and import it; its ``handle(order)`` fails."""
    pkg = folder / "deepapp"
    pkg.mkdir(parents=True, exist_ok=True)
    (pkg / "__init__.py").write_text("from deepapp.handlers import enter as handle\n", encoding="utf-8")
    (pkg / "codec.py").write_text(_LEAF, encoding="utf-8")
    for name, calls in (("repository", "deepapp.codec:fail"), ("service", "deepapp.repository:enter"),
                        ("handlers", "deepapp.service:enter")):
        target, func = calls.split(":")
        (pkg / f"{name}.py").write_text(_chain_module(name, (target, func), _FRAMES[name]), encoding="utf-8")
    if str(folder) not in sys.path:
        sys.path.insert(0, str(folder))
    spec = importlib.util.spec_from_file_location("deepapp", pkg / "__init__.py")
    if "deepapp" in sys.modules:
        return sys.modules["deepapp"]
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules["deepapp"] = module
    spec.loader.exec_module(module)
    return module


def deep_exception(app: ModuleType, order: int) -> BaseException:
    """The real exception ``app.handle(order)`` raises."""
    try:
        app.handle(order)
    except Exception as exc:
        return exc
    raise AssertionError(f"deepapp.handle({order}) did not fail")


def deep_traceback(app: ModuleType, order: int) -> str:
    """The traceback text of :func:`deep_exception`, as the SDK's ``record_exception`` formats it."""
    exc = deep_exception(app, order)
    return "".join(traceback.format_exception(type(exc), exc, exc.__traceback__))
