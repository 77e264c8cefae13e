"""The error processor and the provider's ``BatchSpanProcessor`` as one entry of the provider's list.

Why. The SDK calls every span processor on a provider three times per span (``on_start``,
``_on_ending``, ``on_end``), in a Python loop over its list. A ``BatchSpanProcessor``'s first two are
empty, and any second processor's three calls cost a span 1.5-3 % by themselves, before the processor
does anything (``benchmarks/bench_processor.py``'s "second span processor that does nothing" row).
Most spans are not failed tool spans, so those calls are most of what the library costs them.

:func:`fuse` puts a :class:`FusedSpanProcessor` in the place of the provider's first
``BatchSpanProcessor``: its ``on_start`` and ``_on_ending`` are the error processor's bound methods, its
``on_end`` the batch processor's. The SDK then makes the same three calls per span as without the
library, two of them into the library's code instead of into empty methods, and none through a
wrapper. The error processor's own ``on_end`` has nothing to do under the SDK's
``SynchronousMultiSpanProcessor``, which calls ``_on_ending`` first for every span.

Both keep working as they did: the batch processor is the same object (a caller holding it flushes or
shuts it down as before), ``shutdown`` and ``force_flush`` reach both, batch processor first, in the
order the provider called them when they were two entries. Where the provider is not the SDK's, or has
no ``BatchSpanProcessor``, nothing is fused and the error processor is added as a processor of its own.
"""

from __future__ import annotations

import time

from opentelemetry.sdk.trace import SpanProcessor, SynchronousMultiSpanProcessor, TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor

__all__ = ["FusedSpanProcessor", "fuse", "unfused"]


class FusedSpanProcessor(SpanProcessor):
    """``processor``'s ``on_start`` and ``_on_ending`` with ``batch``'s ``on_end``, as one processor."""

    def __init__(self, processor: SpanProcessor, batch: BatchSpanProcessor) -> None:
        self.processor = processor
        self.batch = batch
        # Bound methods as instance attributes: the SDK's loop calls them directly, with no frame of ours.
        self.on_start = processor.on_start  # type: ignore[method-assign]
        self._on_ending = processor._on_ending  # type: ignore[method-assign]
        self.on_end = batch.on_end  # type: ignore[method-assign]

    def shutdown(self) -> None:
        try:
            self.batch.shutdown()  # type: ignore[no-untyped-call]
        finally:
            self.processor.shutdown()

    def force_flush(self, timeout_millis: int = 30000) -> bool:
        """Both processors within ``timeout_millis`` in all, as the SDK's loop gives its processors one
        deadline: the error processor gets what the batch processor left of it."""
        deadline = time.monotonic() + timeout_millis / 1000
        flushed = self.batch.force_flush(timeout_millis)
        left = max(0, int((deadline - time.monotonic()) * 1000))
        return self.processor.force_flush(left) and bool(flushed)

    def __repr__(self) -> str:
        return f"FusedSpanProcessor({self.processor!r}, {self.batch!r})"


def unfused(entry: SpanProcessor) -> tuple[SpanProcessor, ...]:
    """The processors an entry of a provider's list stands for: a fused entry's two, else the entry."""
    if type(entry) is FusedSpanProcessor:
        return (entry.batch, entry.processor)
    return (entry,)


def fuse(provider: TracerProvider, processor: SpanProcessor) -> bool:
    """Put ``processor`` with ``provider``'s first ``BatchSpanProcessor`` in its place (see the module
    docstring); False, changing nothing, when the provider's internals are not the SDK's or it has no
    batch processor: the caller then adds ``processor`` as one of its own."""
    active = getattr(provider, "_active_span_processor", None)
    if type(active) is not SynchronousMultiSpanProcessor:
        return False
    lock = getattr(active, "_lock", None)
    if lock is None:
        return False
    with lock:  # the lock add_span_processor replaces the tuple under
        processors = getattr(active, "_span_processors", None)
        if type(processors) is not tuple:
            return False
        for index, entry in enumerate(processors):
            if type(entry) is BatchSpanProcessor:
                fused = FusedSpanProcessor(processor, entry)
                active._span_processors = (*processors[:index], fused, *processors[index + 1:])
                return True
    return False
