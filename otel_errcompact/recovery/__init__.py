"""Recovery: classify a failure, then act on it (seed 002).

Plain values and functions, usable without OpenTelemetry; OpenTelemetry is how they are seen (span events
``errcompact.transition`` and ``errcompact.breaker``, counters ``errcompact.transitions`` and
``errcompact.breaker.changes``), not how they work. One module per job:

- :mod:`.state` — the state-store protocol behind the breaker and the pacer, and its in-memory default.
"""

from otel_errcompact.recovery.state import (
    Admission,
    BreakerChange,
    BreakerSnapshot,
    BreakerState,
    BreakerUpdate,
    InMemoryStateStore,
    RateBudget,
    RecoveryStateStore,
    pacing_delay,
)

__all__ = [
    "Admission",
    "BreakerChange",
    "BreakerSnapshot",
    "BreakerState",
    "BreakerUpdate",
    "InMemoryStateStore",
    "RateBudget",
    "RecoveryStateStore",
    "pacing_delay",
]
