"""A halted run must not show a green root in a trace UI.

When a breach with the ``halt`` action stops a run, the exception it raises normally ends the agent's and
the root's spans with status ERROR. Some instrumentations set status OK on the root unconditionally when
their trace ends (OpenInference's openai-agents processor does, even when the run raised), and OK is the
one status the SDK refuses to change afterwards. The choice made here: the root span (no parent, or a
remote one) of a trace in which a ``halt`` breach happened gets status ERROR with the breach's
description, written in the span processor's ``_on_ending`` just before export, unless it is already
ERROR. A breach whose action is ``human`` changes no status: the run did not fail, and the
``errcompact.escalation`` event on the agent span says what happened.
"""

from __future__ import annotations

import logging
import threading
from collections import OrderedDict
from collections.abc import Sequence

from opentelemetry.sdk.trace import ReadableSpan, Span
from opentelemetry.trace import Status, StatusCode

from otel_errcompact._forked import new_locks_in_child
from otel_errcompact.history import Escalation

__all__ = ["HaltedTraces"]

_log = logging.getLogger("otel_errcompact")
_MAX_TRACES = 4096


class HaltedTraces:
    """Trace ids with a ``halt`` breach (bounded), and the status fix-up of their root span."""

    def __init__(self) -> None:
        self.pending: OrderedDict[int, str] = OrderedDict()
        """Halted trace ids whose root has not ended, with the breach's description. Read without the
        lock by the span processor as a cheap "anything to do?" test on every ending span."""
        self._lock = threading.Lock()
        new_locks_in_child(self, "_lock")

    def note(self, trace_id: int, escalation: Escalation) -> None:
        """Remember that ``trace_id`` was halted by ``escalation``."""
        if escalation.action != "halt":
            return
        with self._lock:
            self.pending[trace_id] = escalation.describe()
            while len(self.pending) > _MAX_TRACES:
                self.pending.popitem(last=False)

    def on_export(self, spans: Sequence[ReadableSpan]) -> None:
        """:meth:`on_ending` for root spans that ended before their trace's breach was counted (its
        digest made after the span ended, see :mod:`otel_errcompact.deferred`): they are marked as
        they are exported."""
        if not self.pending:
            return
        for span in spans:
            description = self._take(span)
            if description is not None:
                span._status = Status(StatusCode.ERROR, description)

    def _take(self, span: ReadableSpan) -> str | None:
        """The breach's description when ``span`` is the root of a halted trace and not ERROR yet (the
        trace is then no longer pending); None otherwise."""
        parent, context = span.parent, span.context
        if (parent is not None and not parent.is_remote) or context is None:
            return None
        with self._lock:
            description = self.pending.pop(context.trace_id, None)
        if description is None or span.status.status_code is StatusCode.ERROR:
            return None
        return description

    def on_ending(self, span: Span) -> bool:
        """Mark the ending span ERROR when it is the root of a halted trace (see the module docstring);
        True when it was marked."""
        description = self._take(span)
        if description is None:
            return False
        try:
            # The public set_status ignores any change after OK; the span is still ours to annotate here.
            lock = span._lock
            with lock:
                span._status = Status(StatusCode.ERROR, description)
            return True
        except Exception:
            _log.debug("otel-errcompact: could not mark a halted root span", exc_info=True)
            return False
