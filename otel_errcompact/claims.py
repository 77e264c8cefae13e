"""Which tool call a framework bridge is handling itself, so the span processor leaves it alone.

A bridge (``otel_errcompact.langgraph``) runs the framework's tool call and handles its failure with
everything the framework knows (thread, tool-call id, agent) on a span of its own. The framework's
instrumentation may report the same failure on its own tool span, which ends *inside* the bridged call;
counting both would double every count. While a call is claimed (a context variable, so it follows the
call across threads and tasks that copy the context), the processor hands the call's own tool spans that
end in it to the :class:`Claim` instead of counting them (the tool spans of an agent the tool runs are
not the call's: they are counted as usual): the bridge can still use the stack trace they recorded
when the framework turned the exception into a message before the bridge could see it.
"""

from __future__ import annotations

import contextvars
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

from otel_errcompact import semconv
from otel_errcompact._contextvars import reset_quietly

__all__ = ["Claim", "claimed", "current_claim"]


@dataclass
class Claim:
    """One claimed call: the stack traces of failed tool spans that ended inside it, newest last.

    ``parents``: the ids of the spans the call's own tool spans are children of (the bridge's span of the
    call, and the framework's span it was opened under). A tool span whose parent is another span is
    not the call's: it belongs to work nested in the tool (an agent the tool runs, with tools of its
    own), whose failures are counted as any other. Empty: every tool span ending in the call is its own.
    """

    stacktraces: list[str] = field(default_factory=list)
    parents: frozenset[int] = frozenset()

    def covers(self, parent: Any) -> bool:
        """Whether a tool span with the parent span context ``parent`` (None for a root) is the call's own."""
        if not self.parents:
            return True
        return parent is not None and getattr(parent, "span_id", None) in self.parents

    def note(self, failed: bool, events: Iterable[Any]) -> None:
        """Keep the stack trace of a tool span that ended in the call, when it failed with one."""
        if not failed:
            return
        exception = semconv.exception_from_events(events)
        if exception is not None and exception[2]:
            self.stacktraces.append(exception[2])


_claim: contextvars.ContextVar[Claim | None] = contextvars.ContextVar("otel_errcompact_claim", default=None)


@contextmanager
def claimed(parents: Iterable[int] = ()) -> Iterator[Claim]:
    """Run a block whose tool failures the caller handles and counts itself: those of the tool spans
    that are children of the spans ``parents`` names (any tool span ending in the block when empty)."""
    claim = Claim(parents=frozenset(parents))
    token = _claim.set(claim)
    try:
        yield claim
    finally:
        reset_quietly(_claim, token)  # the block may be closed in another context


current_claim: Callable[[], Claim | None] = _claim.get
"""The claim of the call in progress, if a bridge claimed it. The context variable's own ``get``, not a
function around it: every ending tool span asks."""
