"""Putting a context variable back when the block that set it is left, wherever it is left."""

from __future__ import annotations

import contextvars
from contextlib import suppress
from typing import Any

__all__ = ["reset_quietly"]


def reset_quietly(var: contextvars.ContextVar[Any], token: contextvars.Token[Any]) -> None:
    """``var.reset(token)``, when the block that set it is left in the context it was entered in. A
    coroutine suspended inside it may be closed in another one (by the garbage collector, or by an event
    loop that stops on Ctrl-C), which never saw the value: there is nothing to put back then, and the
    ``ValueError`` of ``reset`` would be raised into the code closing it."""
    with suppress(ValueError):
        var.reset(token)
