"""Running a fleet: the shared state store chosen by settings, and the per-worker signals an operator
aggregates across workers.

``init(redis_url=…)`` or ``OTEL_ERRCOMPACT_REDIS_URL`` selects :func:`fleet_store`: the breaker and pacer
state of every worker in one Redis, behind a local fallback (see
:mod:`otel_errcompact.recovery.redis_state`). Without it each process keeps its own state.

Two counters make the fleet visible (meter ``otel_errcompact``; low-cardinality: the tool name only):

=================================  =========  ========================================================
``errcompact.breaker.refusals``    {call}     ``gen_ai.tool.name``: calls this worker did not run because
                                              a breaker was open. Counted per worker, so the collector can
                                              count *workers* refusing one tool (the fleet alert).
``errcompact.state.degraded``      {outage}   ``errcompact.reason``: times this worker lost the shared
                                              store and fell back to its own state.
=================================  =========  ========================================================
"""

from __future__ import annotations

from opentelemetry.metrics import Meter

from otel_errcompact.recovery.redis_state import FailoverStateStore, redis_state_store
from otel_errcompact.recovery.state import InMemoryStateStore, RecoveryStateStore

__all__ = ["FleetMetrics", "fleet_store"]

_MAX_TOOLS = 256


class FleetMetrics:
    """The two fleet counters; plug ``on_refusal`` into ``CircuitBreakers.add_refusal_listener`` and
    ``on_degraded`` into :func:`fleet_store`."""

    def __init__(self, meter: Meter) -> None:
        self._refusals = meter.create_counter(
            "errcompact.breaker.refusals", unit="{call}", description="Tool calls refused by an open circuit breaker"
        )
        self._degraded = meter.create_counter(
            "errcompact.state.degraded", unit="{outage}", description="Shared recovery state lost; local state used"
        )
        self._tools: set[str] = set()

    def on_refusal(self, tool: str) -> None:
        if tool not in self._tools and len(self._tools) >= _MAX_TOOLS:
            tool = "other"
        else:
            self._tools.add(tool)
        self._refusals.add(1, {"gen_ai.tool.name": tool})

    def on_degraded(self, reason: str) -> None:
        self._degraded.add(1, {"errcompact.reason": reason[:64]})

    def watch(self, store: RecoveryStateStore) -> None:
        """Count ``store``'s outages, when it is a store that falls back (one :func:`fleet_store` built).
        ``init()`` builds the store before any provider exists, so that a store it cannot build fails
        it with nothing attached; the counter comes later, from the meter."""
        if isinstance(store, FailoverStateStore):
            store.on_degraded = self.on_degraded


def fleet_store(
    redis_url: str | None, metrics: FleetMetrics | None = None, *, namespace: str | None = None
) -> RecoveryStateStore:
    """The shared store for ``redis_url``, or this process's own state when it is empty. Its keys are
    under ``errcompact:<namespace>`` (``init()`` passes the service name): the workers of one service
    share breakers and budgets, other services on the same Redis do not."""
    if not redis_url:
        return InMemoryStateStore()
    store: FailoverStateStore = redis_state_store(
        redis_url, namespace=namespace, on_degraded=metrics.on_degraded if metrics is not None else None
    )
    return store
