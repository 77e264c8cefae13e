"""Which tool call a framework bridge is handling itself, so the span processor leaves it alone.

A bridge (``otel_errcompact.langgraph``) runs the framework's tool call and handles its failure with
everything the framework knows (thread, tool-call id, agent) on a span of its own. The framework's
instrumentation may report the same failure on its own tool span, which ends *inside* the bridged call;
counting both would double every count. While a call is claimed (a context variable, so it follows the
call across threads and tasks that copy the context), the processor hands the tool spans that end in it
to the :class:`Claim` instead of counting them: the bridge can still use the stack trace they recorded
when the framework turned the exception into a message before the bridge could see it.
"""

from __future__ import annotations

import contextvars
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

from otel_errcompact import semconv

__all__ = ["Claim", "claimed", "current_claim"]


@dataclass
class Claim:
    """One claimed call: the stack traces of failed tool spans that ended inside it, newest last."""

    stacktraces: list[str] = field(default_factory=list)

    def note(self, failed: bool, events: Iterable[Any]) -> None:
        """Keep the stack trace of a tool span that ended in the call, when it failed with one."""
        if not failed:
            return
        exception = semconv.exception_from_events(events)
        if exception is not None and exception[2]:
            self.stacktraces.append(exception[2])


_claim: contextvars.ContextVar[Claim | None] = contextvars.ContextVar("otel_errcompact_claim", default=None)


@contextmanager
def claimed() -> Iterator[Claim]:
    """Run a block whose tool failures the caller handles and counts itself."""
    claim = Claim()
    token = _claim.set(claim)
    try:
        yield claim
    finally:
        _claim.reset(token)


current_claim: Callable[[], Claim | None] = _claim.get
"""The claim of the call in progress, if a bridge claimed it. The context variable's own ``get``, not a
function around it: every ending tool span asks."""
