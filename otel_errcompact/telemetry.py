"""Metrics and log events that make escalations alertable.

Instruments (all counters, on the meter ``otel_errcompact``):

=============================  ==========  ==========================================================
name                           unit        attributes
=============================  ==========  ==========================================================
``errcompact.tool.calls``      {call}      ``gen_ai.tool.name``, ``errcompact.outcome`` (``ok``/``error``)
``errcompact.errors``          {error}     ``gen_ai.tool.name``, ``error.type``, ``errcompact.error_type``,
                                           ``errcompact.new_class``
``errcompact.classes.new``     {class}     ``gen_ai.tool.name``, ``error.type``, ``errcompact.error_type``:
                                           first sight of a dedup key in this process (not per conversation)
``errcompact.escalations``     {escalation} ``gen_ai.tool.name``, ``errcompact.reason``, ``errcompact.action``
``errcompact.tokens.raw``      {token}     ``gen_ai.tool.name``, ``errcompact.basis``: tokens of what the
                                           agent would have received without otel-errcompact
``errcompact.tokens.compact``  {token}     ``gen_ai.tool.name``, ``errcompact.basis``: tokens of their
                                           digest lines
``errcompact.history.evictions`` {scope}   none: conversations dropped at the ``max_scopes`` cap
=============================  ==========  ==========================================================

``errcompact.tool.calls`` is the denominator of an error ratio: every tool span is one call, and a
framework's tool span that wraps an ``@ec.tool`` span is not counted again. ``errcompact.new_class`` on
``errcompact.errors`` means new *in its conversation*; ``errcompact.classes.new`` counts a class once per
process (the last :data:`MAX_SEEN_KEYS` keys are remembered), so 1,000 conversations hitting the same two
errors count 2, not 2,000. Summed over a fleet of N workers it counts a class at most N times.

The token basis (``errcompact.basis``) says what the savings are measured against: ``model_text`` when the
caller knows the text the agent would have received instead (a framework's own error message, passed as
``Failure.model_text`` by the bridges), else ``raw_error`` (the full raw error, an upper bound: some
frameworks never put the full traceback into the context).

``error.type`` is the value the failed span records (the exception's fully-qualified class name at the
tool boundary, ``tool_error`` for an error returned as data), else the exception's type, else the
digest's type: the conventions ask for the same ``error.type`` on a failure's span and its metrics.
``errcompact.error_type`` is the digest's type (``JSONDecodeError``, ``HTTPStatusError 503``, ``HTTP 429``),
the library's finer class, which ``error.type`` held before.

Attributes stay low-cardinality: tool names and error types only; error types beyond the first
:data:`MAX_ERROR_TYPES` distinct ones, and tool names beyond the first :data:`MAX_TOOL_NAMES`, are
reported as ``other`` (an agent that names tools from user input would otherwise fill the SDK's
cardinality limit). Tool names are made prompt-safe and cut to 80 characters. Never the message, the key
or the scope.

Off the agent's thread. Recording a counter with attributes costs the SDK several microseconds, and a
failure records three or four, so when a metric pipeline will read them (a meter provider of the
OpenTelemetry SDK with at least one metric reader, :func:`metrics_are_read`) every count and the token
counts are recorded on one background thread; a metric is read at the next collection anyway. Without a
reader nothing is tokenised at all and the counts are recorded in place (a provider that is not the SDK's
may still read them). Each queued item holds at most :data:`~otel_errcompact.tokens.MAX_COUNTED_CHARS`
characters of the error (the rest is extrapolated from that head), the queue is bounded by characters as
well as items (:data:`MAX_QUEUED_TOKEN_CHARS`), and when it is full the counts are recorded in place:
token counts may be skipped under a flood, call and error counts never. The thread records a batch at a
time, one ``add`` per distinct attribute set, and has every text of a batch counted at once by the
token-counting process (:func:`~otel_errcompact.tokens.background_counter`): the error texts up to
:data:`MAX_SAMPLED_CHARS` per tool and basis, joined, the rest extrapolated, and each distinct digest
line. What it costs the agent's threads is a few microseconds of Python per failure and one round trip on
a pipe per batch; no tokenizer is loaded into the agent's process.

A breach is also emitted as a log event ``errcompact.escalation`` (severity WARN), correlated with the
failed tool span, so log-based alerting works without metrics.
"""

from __future__ import annotations

import logging
import threading
from collections import Counter, OrderedDict, deque
from functools import lru_cache
from typing import Any

from opentelemetry._logs import Logger, SeverityNumber
from opentelemetry.metrics import CallbackOptions, Meter
from opentelemetry.metrics import Observation as MetricObservation

from otel_errcompact._forked import new_locks_in_child, rebuild_in_child
from otel_errcompact._observed import observe
from otel_errcompact._sampled import span_context_of as sampled_context_of
from otel_errcompact._sanitize import prompt_text
from otel_errcompact._worker import BackgroundQueue
from otel_errcompact.history import ErrorHistory, Escalation
from otel_errcompact.pipeline import Failure, Outcome
from otel_errcompact.semconv import error_type_of
from otel_errcompact.tokens import MAX_COUNTED_CHARS, background_counter

__all__ = [
    "MAX_ERROR_TYPES",
    "MAX_QUEUED_TOKEN_CHARS",
    "MAX_SAMPLED_CHARS",
    "MAX_SEEN_KEYS",
    "MAX_TOOL_NAMES",
    "OVERFLOW",
    "ErrorMetrics",
    "EscalationLog",
    "metrics_are_read",
    "span_context_of",
    "tool_label",
]

_log = logging.getLogger("otel_errcompact")

MAX_ERROR_TYPES = 64
MAX_SEEN_KEYS = 65_536
MAX_TOOL_NAMES = 128
OVERFLOW = "other"
"""The attribute value that stands for every value beyond a cap."""
_MAX_TOOL_NAME_CHARS = 80


class _CappedValues:
    """The first ``cap`` distinct values pass; later new ones become :data:`OVERFLOW`. Thread-safe.
    ``overflowed`` counts the values folded; the first fold is logged."""

    def __init__(self, cap: int, what: str) -> None:
        self._cap = cap
        self._what = what
        self._seen: set[str] = set()
        self._lock = threading.Lock()
        new_locks_in_child(self, "_lock")
        self.overflowed = 0

    def __call__(self, value: str) -> str:
        if value in self._seen:  # set membership is atomic under the GIL; the lock guards the add
            return value
        with self._lock:
            if len(self._seen) < self._cap:
                self._seen.add(value)
                return value
            self.overflowed += 1
            first = self.overflowed == 1
        if first:
            _log.warning(
                "otel-errcompact: more than %d distinct %s; further ones are reported as %r in metrics",
                self._cap, self._what, OVERFLOW,
            )
        return OVERFLOW


@lru_cache(maxsize=4096)
def tool_label(name: str | None) -> str:
    """A tool name as an attribute value: prompt-safe, bounded, ``unknown`` when absent. Cached: the same
    few names come back on every call, and this runs on the agent's thread."""
    if not name:
        return "unknown"
    return prompt_text(name)[:_MAX_TOOL_NAME_CHARS] or "unknown"
_SEPARATOR = " x\n"
MAX_SAMPLED_CHARS = 256 * 1024
"""Characters of a batch's error texts (per tool and basis) encoded for the token metrics; the tokens of
the rest are extrapolated at the rate measured on them."""
_SUCCESS_BATCH = 1024
"""Queued successful calls at which the metrics thread is asked to count them (between collections)."""
MAX_QUEUED_TOKEN_CHARS = 8 * 1024 * 1024
"""Characters of error text waiting for token counting at most; beyond it counts are recorded in place."""

# (baseline head or None for a success, baseline length, digest line, tool, basis, error types (see
# _ErrorTypes), new in its conversation, dedup key)
_ErrorTypes = tuple[str, str]
"""A failure's ``error.type`` (the conventional one, see the module) and its digest's type."""
_Item = tuple[str | None, int, str, str, str, _ErrorTypes, bool, str]


def metrics_are_read(meter_provider: Any) -> bool:
    """True when ``meter_provider`` is the SDK's and has a metric reader, i.e. counters reach someone.

    The API's no-op and proxy providers (no SDK configured) and an SDK provider built without readers
    drop every measurement; counting tokens for them would be work nobody sees.
    """
    try:
        from opentelemetry.sdk.metrics import MeterProvider
    except ImportError:  # pragma: no cover - the SDK is a dependency
        return False
    if not isinstance(meter_provider, MeterProvider):
        return False
    if getattr(meter_provider, "_disabled", False):  # OTEL_SDK_DISABLED=true
        return False
    readers = getattr(meter_provider, "_metric_readers", None)  # the constructor's metric_readers (1.45)
    # An SDK whose internals moved: keep counting rather than silently losing the metric.
    return bool(readers) if readers is not None else True


_DRAIN_SUCCESSES: _Item = (None, 0, "", "", "", ("", ""), False, "")
"""The metrics thread's item for "count the queued successful calls"."""


def _error_types(failure: Failure, digest_type: str) -> _ErrorTypes:
    """``(error.type, digest type)`` of a failure (see :func:`~otel_errcompact.semconv.error_type_of`)."""
    return error_type_of(failure.error_type, failure.exception_type, digest_type), digest_type


def _item_cost(item: _Item) -> int:
    return len(item[0] or "") + len(item[2])


def span_context_of(trace_id: str | None, span_id: str | None) -> Any:
    """A context whose current span has these ids and its trace's flags (see :mod:`otel_errcompact._sampled`),
    so a log record is correlated with that span."""
    return sampled_context_of(trace_id, span_id)


class ErrorMetrics:
    """Counts failures, escalations and tokens; plug into a pipeline as failure/escalation listener."""

    def __init__(self, meter: Meter, *, token_counts: bool = True) -> None:
        self._calls = meter.create_counter(
            "errcompact.tool.calls", unit="{call}", description="Tool calls seen by otel-errcompact, by outcome"
        )
        self._errors = meter.create_counter(
            "errcompact.errors", unit="{error}", description="Failed tool calls seen by otel-errcompact"
        )
        self._new_classes = meter.create_counter(
            "errcompact.classes.new",
            unit="{class}",
            description="Error classes (dedup keys) seen for the first time by this process",
        )
        self._seen_keys: OrderedDict[str, None] = OrderedDict()
        self._seen_lock = threading.Lock()
        new_locks_in_child(self, "_seen_lock")
        self._escalations = meter.create_counter(
            "errcompact.escalations", unit="{escalation}", description="Error-threshold breaches"
        )
        self._raw_tokens = meter.create_counter(
            "errcompact.tokens.raw", unit="{token}", description="Tokens of raw error text"
        )
        self._compact_tokens = meter.create_counter(
            "errcompact.tokens.compact", unit="{token}", description="Tokens of the digests that replaced it"
        )
        self._meter = meter
        self._error_type = _CappedValues(MAX_ERROR_TYPES, "error types")
        self._digest_type = _CappedValues(MAX_ERROR_TYPES, "digest types")
        self._tool_name = _CappedValues(MAX_TOOL_NAMES, "tool names")
        self._count = background_counter()
        self._separator_tokens: int | None = None
        # Wakes every 256 items or each second: waking it per item would hand it the GIL in the middle of
        # the agent's work.
        self._tokens: BackgroundQueue[_Item] | None = (
            BackgroundQueue(
                "otel-errcompact-tokens",
                batch_handler=self._record_batch,
                max_size=4096,
                cost=_item_cost,
                max_cost=MAX_QUEUED_TOKEN_CHARS,
                wake_every=256,
                max_delay_s=1.0,
                library_work=True,
            )
            if token_counts
            else None
        )
        self._successes: deque[str | None] = deque()  # successful calls' tool names, not counted yet
        self._drain_asked = False  # a full batch of them was handed to the metrics thread, not counted yet
        rebuild_in_child(self._after_fork_in_child)
        self._history: ErrorHistory | None = None
        # An observable instrument that reports nothing: its callback is the SDK's hook at collection
        # time, where the queued successes are counted (queued with or without the metrics thread).
        observe(
            meter,
            "errcompact.tool.calls.queued",
            self,
            ErrorMetrics._collect_successes,
            unit="{call}",
            description="Reports nothing; counts queued successful calls into errcompact.tool.calls",
        )

    def watch_history(self, history: ErrorHistory) -> None:
        """Export ``history``'s evictions at the scope cap as ``errcompact.history.evictions``.

        An observable counter: read when the metric reader collects, so evictions cost nothing extra on
        the agent's thread.
        """

        self._history = history
        if self._tokens is not None:
            # Successes the span processor queued in the history are resolved (and counted) on the
            # metrics thread when they pile up, not on the agent's.
            history.on_backlog = self._request_drain

        observe(
            self._meter,
            "errcompact.history.evictions",
            history,
            _evictions,
            unit="{scope}",
            description="Conversations evicted from the error history at the max_scopes cap",
        )

    @property
    def counts_tokens(self) -> bool:
        """Whether tokens are counted, and counts recorded off the agent's thread (a reader exists)."""
        return self._tokens is not None

    def _first_sight(self, key: str) -> bool:
        with self._seen_lock:
            return self._sighted(key)

    def _sighted(self, key: str) -> bool:
        """True when ``key`` is seen for the first time (among the last :data:`MAX_SEEN_KEYS`); the
        caller holds ``_seen_lock``."""
        seen = self._seen_keys
        if key in seen:
            seen.move_to_end(key)
            return False
        seen[key] = None
        if len(seen) > MAX_SEEN_KEYS:
            seen.popitem(last=False)
        return True

    def on_success(self, tool_name: str | None) -> None:
        """Success listener: count one successful tool call.

        The call is only appended to a queue (atomic under the GIL, no lock): the queue is counted
        into ``errcompact.tool.calls`` when a reader collects (:meth:`_collect_successes`), on
        :meth:`flush`, and when it grows long, by the metrics thread or, without one (no reader: a
        proxy meter that may get one later), by the caller, a batch at once. Same instrument, unit and
        attributes as a count made per call, which costs a microsecond for each."""
        successes = self._successes
        successes.append(tool_name)
        # Asked once per batch, not "when the length is a multiple of the batch": two threads that
        # append before either reads the length both read past it, and nobody would ask.
        if len(successes) >= _SUCCESS_BATCH and not self._drain_asked:
            self._drain_asked = True
            if not self._request_drain():
                self._count_queued()  # no metrics thread, or it takes no more work: keep the queue bounded

    def _after_fork_in_child(self) -> None:
        """In a process forked from this one (see :mod:`otel_errcompact._forked`): the successful calls
        queued so far were made by the parent, which counts them; counted here too they would be
        counted twice. The queue is emptied in place (:meth:`on_success` appends to it), and a batch the
        parent's metrics thread was asked to count is not this process's to wait for."""
        self._successes.clear()
        self._drain_asked = False

    def _request_drain(self) -> bool:
        return self._tokens is not None and self._tokens.submit(_DRAIN_SUCCESSES, wake=True)

    def _drain_successes(self) -> None:
        """Count the queued successes (any thread; each is popped, so counted, once), after resolving
        those the watched history holds."""
        if self._history is not None:
            self._history.apply_successes()
        self._count_queued()

    def _count_queued(self) -> None:
        """Count the tool names queued by :meth:`on_success` (may run under the history's lock: it
        does not call back into the history)."""
        successes = self._successes
        names: list[str | None] = []
        while successes:
            try:
                names.append(successes.popleft())
            except IndexError:
                break
        self._drain_asked = False  # emptied: the next full batch is asked for again
        if names:
            self._count_successes(names)

    def _count_successes(self, names: list[str | None]) -> None:
        for name, count in Counter(names).items():
            tool = self._tool_name(tool_label(name))
            self._calls.add(count, {"gen_ai.tool.name": tool, "errcompact.outcome": "ok"})

    def _collect_successes(self, _options: CallbackOptions) -> list[MetricObservation]:
        """Called by the SDK at each collection, before it reads the counters: the queued successes are
        counted in time for it. Reports nothing of its own."""
        try:
            self._drain_successes()
        except Exception:
            _log.exception("otel-errcompact: could not count successful tool calls")
        return []

    def on_failure(self, failure: Failure, outcome: Outcome) -> None:
        """Failure listener: count the call, the error, a new class, and the tokens (see the module)."""
        tool = tool_label(failure.tool_name)
        if tool not in self._tool_name._seen:  # a name seen before, as nearly every one is: no call
            tool = self._tool_name(tool)
        digest = outcome.digest
        is_new = outcome.observation.is_new
        types = _error_types(failure, digest.type)
        if self._tokens is not None:
            basis = "model_text" if failure.model_text is not None else "raw_error"
            baseline = failure.model_text if failure.model_text is not None else failure.raw_error
            # Slicing a short string returns the string itself; a huge one is cut to the counted head.
            head = baseline[:MAX_COUNTED_CHARS]
            if self._tokens.submit((head, len(baseline), digest.line, tool, basis, types, is_new, digest.key)):
                return
        self._count_failure(tool, types, is_new, digest.key)

    def _capped(self, types: _ErrorTypes) -> _ErrorTypes:
        """``types`` with each value beyond its cap reported as :data:`OVERFLOW`."""
        return self._error_type(types[0]), self._digest_type(types[1])

    @staticmethod
    def _type_attributes(tool: str, types: _ErrorTypes) -> dict[str, str]:
        return {"gen_ai.tool.name": tool, "error.type": types[0], "errcompact.error_type": types[1]}

    def _count_failure(self, tool_name: str, types: _ErrorTypes, is_new: bool, key: str) -> None:
        attributes = self._type_attributes(tool_name, self._capped(types))
        self._calls.add(1, {"gen_ai.tool.name": tool_name, "errcompact.outcome": "error"})
        self._errors.add(1, {**attributes, "errcompact.new_class": is_new})
        if self._first_sight(key):
            self._new_classes.add(1, attributes)

    def on_escalation(self, escalation: Escalation, failure: Failure) -> None:
        """Escalation listener: count the breach."""
        self._escalations.add(
            1,
            {
                "gen_ai.tool.name": self._tool_name(tool_label(failure.tool_name)),
                "errcompact.reason": escalation.reason,
                "errcompact.action": escalation.action,
            },
        )

    def _record_batch(self, items: list[_Item]) -> None:
        """On the metrics thread: the counts and tokens of a batch, one ``add`` per distinct attribute set.

        Recording a counter costs the SDK several microseconds of Python, all of it holding the GIL the
        agent's threads need; a batch of 256 failures of a few tools and error types becomes a handful
        of ``add`` calls. Tokens: every text of the batch is counted in one call of the counter (one round
        trip to the counting process): per attribute set, the error texts joined (see :meth:`_sample`),
        and each distinct digest line once, however many occurrences of its error class repeat it.
        """
        errors: dict[tuple[str, _ErrorTypes, bool], int] = {}
        texts: dict[tuple[str, str], tuple[list[str], list[int]]] = {}
        lines: dict[tuple[str, str], Counter[str]] = {}
        classes: list[tuple[str, str, _ErrorTypes]] = []  # (key, tool, error types): first sights, below
        capped = self._capped
        drain = False
        for head, length, line, tool, basis, types, is_new, key in items:
            if head is None:
                drain = True  # queued successful calls: counted once per batch, below
                continue
            types = capped(types)
            counted = (tool, types, is_new)
            errors[counted] = errors.get(counted, 0) + 1
            classes.append((key, tool, types))
            text_key = (tool, basis)
            text = texts.get(text_key)
            if text is None:
                text = texts[text_key] = ([], [])
                lines[text_key] = Counter()
            text[0].append(head)
            text[1].append(length)
            lines[text_key][line] += 1
        if drain:
            self._drain_successes()
        calls: dict[str, int] = {}  # each failure is one call of its tool
        for (tool, _, _), n in errors.items():
            calls[tool] = calls.get(tool, 0) + n
        for tool, n in calls.items():
            self._calls.add(n, {"gen_ai.tool.name": tool, "errcompact.outcome": "error"})
        type_attributes = self._type_attributes
        for (tool, types, is_new), n in errors.items():
            self._errors.add(n, {**type_attributes(tool, types), "errcompact.new_class": is_new})
        for (tool, types), n in self._new_classes_of(classes).items():
            self._new_classes.add(n, type_attributes(tool, types))
        if texts:
            self._record_tokens(texts, lines)

    def _record_tokens(
        self, texts: dict[tuple[str, str], tuple[list[str], list[int]]], lines: dict[tuple[str, str], Counter[str]]
    ) -> None:
        """The raw and compact tokens of a batch, per tool and basis, from one call of the counter."""
        samples = {text_key: self._sample(heads) for text_key, (heads, _) in texts.items()}
        distinct = list(dict.fromkeys(line for per_key in lines.values() for line in per_key))
        asked = [_SEPARATOR.join(sample) for sample in samples.values()] + distinct
        if self._separator_tokens is None:
            asked += [f"a{_SEPARATOR}a", "a"]
        counts = self._count(asked)
        if self._separator_tokens is None:
            self._separator_tokens = counts[-2] - 2 * counts[-1]
        line_tokens = dict(zip(distinct, counts[len(samples) :], strict=False))
        for (text_key, sample), joined_tokens in zip(samples.items(), counts, strict=False):
            tool, basis = text_key
            attributes = {"gen_ai.tool.name": tool, "errcompact.basis": basis}
            self._raw_tokens.add(self._raw_tokens_of(sample, joined_tokens, texts[text_key][1]), attributes)
            compact = sum(line_tokens[line] * n for line, n in lines[text_key].items())
            self._compact_tokens.add(compact, attributes)

    def _new_classes_of(
        self, classes: list[tuple[str, str, _ErrorTypes]]
    ) -> dict[tuple[str, _ErrorTypes], int]:
        """The classes seen for the first time among ``(key, tool, error types)``, counted by tool and
        types: :meth:`_sighted` for each, in order, under one taking of the lock."""
        new: dict[tuple[str, _ErrorTypes], int] = {}
        sighted = self._sighted
        with self._seen_lock:
            for key, tool, types in classes:
                if sighted(key):
                    new[(tool, types)] = new.get((tool, types), 0) + 1
        return new

    @staticmethod
    def _sample(heads: list[str]) -> list[str]:
        """The heads of a batch's error texts of one attribute set that are counted, up to
        :data:`MAX_SAMPLED_CHARS` characters (at least one): joined, they are one text to count, so the
        counting process's work per batch is bounded; the rest is extrapolated (:meth:`_raw_tokens_of`)."""
        sample: list[str] = []
        sampled = 0
        for head in heads:
            if sample and sampled + len(head) > MAX_SAMPLED_CHARS:
                break
            sample.append(head)
            sampled += len(head)
        return sample

    def _raw_tokens_of(self, sample: list[str], joined_tokens: int, lengths: list[int]) -> int:
        """Tokens of a batch's baselines of one attribute set, from the tokens of its ``sample`` joined.

        The sample's texts were joined by a separator that is its own tokens whatever surrounds it (a word
        after a space, then a newline), so no text's last token merges with the next one's first; its
        tokens are taken off again. The tokens of the rest of the batch (further heads, text beyond each
        head) are extrapolated at the rate measured on what was counted. Exact within about one token per
        text (at the joins) when the batch fits, a measured estimate beyond.
        """
        sampled = sum(map(len, sample))
        if not sampled:
            return 0
        assert self._separator_tokens is not None
        tokens = max(joined_tokens - (len(sample) - 1) * self._separator_tokens, len(sample))
        total = sum(lengths)
        return tokens if total == sampled else round(tokens * total / sampled)

    def flush(self, timeout_s: float = 10.0) -> bool:
        """Wait for queued counts."""
        self._drain_successes()
        return self._tokens.flush(timeout_s) if self._tokens is not None else True

    def shutdown(self, timeout_s: float = 10.0) -> None:
        self._drain_successes()
        if self._tokens is not None:
            self._tokens.shutdown(timeout_s)


def _evictions(history: ErrorHistory, _options: CallbackOptions) -> list[MetricObservation]:
    return [MetricObservation(history.evicted_at_cap)]


class EscalationLog:
    """Emits each breach as a WARN log event ``errcompact.escalation`` correlated with the failed span."""

    def __init__(self, logger: Logger) -> None:
        self._logger = logger

    def on_escalation(self, escalation: Escalation, failure: Failure) -> None:
        """Escalation listener."""
        attributes: dict[str, Any] = dict(escalation.to_attributes())
        if failure.tool_name:
            attributes["gen_ai.tool.name"] = tool_label(failure.tool_name)
        if failure.conversation_id:
            attributes["gen_ai.conversation.id"] = failure.conversation_id
        self._logger.emit(
            event_name="errcompact.escalation",
            severity_number=SeverityNumber.WARN,
            severity_text="WARN",
            body=escalation.describe(),
            attributes=attributes,
            context=span_context_of(failure.trace_id, failure.span_id),
        )
