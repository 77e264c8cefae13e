"""Where trajectory records go: the writer that batches them off the hot path, and the sinks.

::

    TrajectoryWriter      bounded queue + worker thread; submit() never raises, waits only when the queue is full
    Spool                 the append-only log submit() writes first: records survive kill -9, replayed on start
    TrajectorySink        the protocol: write(records) with upsert-by-record_id semantics, close()
    ├── SQLiteSink        the default: one WAL-mode file, raw text once, four indexes (TrajectoryStore reads it)
    ├── JSONLSink         append-only JSON Lines; a later line with the same record_id supersedes
    ├── OTLPLogSink       one OTel log event "errcompact.trajectory" per record, correlated with the span
    └── RedactingSink     wraps another sink and hands it redacted records (exported ones, at-rest opt-in)
"""

from otel_errcompact.sinks._base import FlushableSink, TrajectorySink
from otel_errcompact.sinks.jsonl import JSONLSink, read_jsonl
from otel_errcompact.sinks.otlp import OTLPLogSink
from otel_errcompact.sinks.redacting import RedactingSink, redact_record
from otel_errcompact.sinks.spool import Spool
from otel_errcompact.sinks.sqlite import (
    AmbiguousRecordId,
    SQLiteSink,
    TrajectoryStore,
    TrajectorySummary,
)
from otel_errcompact.sinks.writer import TrajectoryWriter

__all__ = [
    "AmbiguousRecordId",
    "FlushableSink",
    "JSONLSink",
    "OTLPLogSink",
    "RedactingSink",
    "SQLiteSink",
    "Spool",
    "TrajectorySink",
    "TrajectoryStore",
    "TrajectorySummary",
    "TrajectoryWriter",
    "read_jsonl",
    "redact_record",
]
