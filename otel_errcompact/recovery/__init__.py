"""Recovery: classify a failure, then act on it (seed 002).

Plain values and functions, usable without OpenTelemetry; OpenTelemetry is how they are seen (span events
``errcompact.transition`` and ``errcompact.breaker``, counters ``errcompact.transitions`` and
``errcompact.breaker.changes``), not how they work. One module per job:

- :mod:`.classify` — error classes and structured retry-after, from SDK exceptions, digests and spans;
- :mod:`.loop` — the model-call loop and its transitions (sync and async, OpenAI and Anthropic formats);
- :mod:`.compaction` — reactive compaction that keeps tool-call / tool-result pairing valid;
- :mod:`.pacing` — proactive pacing from rate-limit headers, hooked into httpx clients;
- :mod:`.breaker` — circuit breakers keyed by (tool, dedup key);
- :mod:`.retry` — the tool boundary's tenacity retry policy;
- :mod:`.abort` — abort and halt cancellation of in-flight tasks;
- :mod:`.state` — the state-store protocol behind the breaker and the pacer, and its in-memory default;
- :mod:`.observe` — the OpenTelemetry side (events and counters).
"""

from otel_errcompact.recovery.abort import AbortRegistry
from otel_errcompact.recovery.breaker import BreakerPolicy, CircuitBreakers, circuit_open_text
from otel_errcompact.recovery.classify import (
    Classification,
    ErrorClass,
    classify_exception,
    classify_span,
    classify_text,
    retry_after_from_headers,
    retry_after_from_text,
)
from otel_errcompact.recovery.compaction import compact_messages
from otel_errcompact.recovery.loop import (
    AnthropicMessages,
    LoopPolicy,
    LoopResult,
    ModelAdapter,
    OpenAIChat,
    RecoveryLoop,
    Transition,
    TransitionEvent,
)
from otel_errcompact.recovery.pacing import Pacer, pace, parse_rate_limit_headers
from otel_errcompact.recovery.retry import NO_RETRY, RetryPolicy
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
    share_delay,
)

__all__ = [
    "NO_RETRY",
    "AbortRegistry",
    "Admission",
    "AnthropicMessages",
    "BreakerChange",
    "BreakerPolicy",
    "BreakerSnapshot",
    "BreakerState",
    "BreakerUpdate",
    "CircuitBreakers",
    "Classification",
    "ErrorClass",
    "InMemoryStateStore",
    "LoopPolicy",
    "LoopResult",
    "ModelAdapter",
    "OpenAIChat",
    "Pacer",
    "RateBudget",
    "RecoveryLoop",
    "RecoveryStateStore",
    "RetryPolicy",
    "Transition",
    "TransitionEvent",
    "circuit_open_text",
    "classify_exception",
    "classify_span",
    "classify_text",
    "compact_messages",
    "pace",
    "pacing_delay",
    "parse_rate_limit_headers",
    "retry_after_from_headers",
    "retry_after_from_text",
    "share_delay",
]
