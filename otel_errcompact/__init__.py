"""otel-errcompact: keep tool errors from eating an agent's context window, without losing a byte.

Core (no OpenTelemetry needed)::

    from otel_errcompact import compact_text, ErrorHistory, Thresholds

    d = compact_text(raw_traceback)          # "[KeyError] at app.py:42 in load_user: 'user_id'"
    h = ErrorHistory(Thresholds(consecutive=3, budget=20))
    v = h.observe("conv-1", d)               # new class appended, or its (×N) counter incremented
    v.escalation                             # None, or why the thresholds were breached
    h.render("conv-1")                       # the [RECENT ERRORS] block, "" when nothing failed
"""

from otel_errcompact.compactor import MAX_CAUSE_CHARS, Compactor, Summarizer, compact_text
from otel_errcompact.digest import DedupKey, Digest, Location
from otel_errcompact.events import digest_event, render_events
from otel_errcompact.exceptions import (
    AmbiguousRecordId,
    ConfigurationError,
    ErrCompactError,
    ErrorBudgetExceeded,
)
from otel_errcompact.history import Action, ErrorHistory, Escalation, Limits, Observation, Thresholds
from otel_errcompact.parsers import Frame, Hints, Parsed
from otel_errcompact.redact import redact
from otel_errcompact.tokens import count_tokens

__version__ = "0.1.0"

__all__ = [
    "MAX_CAUSE_CHARS",
    "Action",
    "Compactor",
    "ConfigurationError",
    "DedupKey",
    "Digest",
    "ErrCompactError",
    "ErrorBudgetExceeded",
    "ErrorHistory",
    "Escalation",
    "Frame",
    "Hints",
    "Limits",
    "Location",
    "Observation",
    "Parsed",
    "Summarizer",
    "Thresholds",
    "__version__",
    "compact_text",
    "count_tokens",
    "digest_event",
    "redact",
    "render_events",
]

from otel_errcompact.api import ErrCompact, HumanReviewHook, init, instance
from otel_errcompact.boundary import ToolErrorText, conversation
from otel_errcompact.sinks import (
    JSONLSink,
    OTLPLogSink,
    SQLiteSink,
    TrajectorySink,
    TrajectoryStore,
    TrajectoryWriter,
    read_jsonl,
)
from otel_errcompact.trajectory import DigestInfo, TrajectoryRecord

__all__ += [
    "AmbiguousRecordId",
    "DigestInfo",
    "ErrCompact",
    "HumanReviewHook",
    "JSONLSink",
    "OTLPLogSink",
    "SQLiteSink",
    "ToolErrorText",
    "TrajectoryRecord",
    "TrajectorySink",
    "TrajectoryStore",
    "TrajectoryWriter",
    "conversation",
    "init",
    "instance",
    "read_jsonl",
]

from otel_errcompact.recovery import (  # noqa: E402
    AbortRegistry,
    AnthropicMessages,
    BreakerPolicy,
    CircuitBreakers,
    Classification,
    InMemoryStateStore,
    LoopPolicy,
    LoopResult,
    OpenAIChat,
    Pacer,
    RecoveryLoop,
    RecoveryStateStore,
    RetryPolicy,
    TransitionEvent,
    classify_exception,
    compact_messages,
    pace,
)

__all__ += [
    "AbortRegistry",
    "AnthropicMessages",
    "BreakerPolicy",
    "CircuitBreakers",
    "Classification",
    "InMemoryStateStore",
    "LoopPolicy",
    "LoopResult",
    "OpenAIChat",
    "Pacer",
    "RecoveryLoop",
    "RecoveryStateStore",
    "RetryPolicy",
    "TransitionEvent",
    "classify_exception",
    "compact_messages",
    "pace",
]
