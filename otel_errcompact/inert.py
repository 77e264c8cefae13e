"""The tool boundary of a switched-off library (``OTEL_ERRCOMPACT_ENABLED=false``).

Switched off means inert, not quieter: ``@ec.tool`` returns the function itself, so a tool raises
exactly as the bare function does, and ``ec.tool_call(...)`` runs its block and lets exceptions through.
No span is opened, nothing is recorded or counted, and no thread is started. Code written against the
handle runs unchanged with the switch in either position.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

from opentelemetry import trace

from otel_errcompact.boundary import OnError, ToolBoundary, ToolCall, check_options
from otel_errcompact.pipeline import ErrorPipeline
from otel_errcompact.recovery.retry import RetryPolicy

__all__ = ["InertToolBoundary"]


class InertToolBoundary(ToolBoundary):
    """A :class:`ToolBoundary` that wraps nothing and checks nothing but its options."""

    def __init__(self, pipeline: ErrorPipeline) -> None:
        super().__init__(pipeline, trace.NoOpTracer(), None)

    def tool(
        self,
        func: Callable[..., Any] | None = None,
        /,
        *,
        name: str | None = None,
        on_error: OnError | None = None,
        retry: RetryPolicy | int | None = None,
        mutating: bool = False,
        error_of: Callable[[Any], str | None] | None = None,
        description: str | None = None,
    ) -> Any:
        """The function, unwrapped (``@ec.tool`` and ``@ec.tool(name=...)`` alike). Its options are checked
        as when switched on, so code with a bad one fails in either position of the switch."""
        check_options(name=name, on_error=on_error, retry=retry, error_of=error_of, description=description)

        def decorate(fn: Callable[..., Any]) -> Callable[..., Any]:
            return fn

        return decorate(func) if func is not None else decorate

    @contextmanager
    def call(
        self,
        name: str,
        *,
        call_id: str | None = None,
        arguments: Any = None,
        on_error: OnError | None = None,
    ) -> Iterator[ToolCall]:
        """Run the block as it is; its exceptions propagate."""
        check_options(name=name, on_error=on_error)
        yield ToolCall(trace.INVALID_SPAN)

    def check(self, scope: str | None = None) -> None:
        """Never raises: nothing is counted, so nothing can be breached."""
