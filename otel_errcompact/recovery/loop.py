"""The model-call loop with its transitions (seed 002), sync and async, OpenAI- or Anthropic-style.

Every iteration calls the model and ends in one transition:

============================== ========= =========================================================
transition                     kind      when
============================== ========= =========================================================
``completed``                  terminal  the reply has no tool call
``tool_use``                   continue  run the tools, append their results, loop
``reactive_compact_retry``     continue  prompt too long: compact once and retry; a second time ends
                                         in ``model_error`` (one-shot per run)
``max_output_tokens_recovery`` continue  truncated reply: double ``max_tokens`` and retry, at most 3
                                         times, then ``model_error``
``model_error``                terminal  a permanent error (auth, validation, quota …), or a limit above
``max_turns``                  terminal  the safety cap on model calls
``aborted_streaming``          terminal  ``abort(scope)``: in-flight model call and read-only tools
                                         cancelled, mutating tools let finish
``retry_wait``                 continue  rate limited or transient (429, 5xx, 529, timeouts): sleep for
                                         the retry-after (else exponential backoff), with jitter, then
                                         retry; the seed loops back here without naming the step
============================== ========= =========================================================

The sleeps of one run add up to at most ``LoopPolicy.max_total_wait_s``; beyond it the run ends in
``model_error``. **SDK retries:** the ``openai`` and ``anthropic`` clients retry 429/5xx themselves
(``max_retries``, default 2, honouring retry-after). Stacked under this loop that multiplies the waits and
the calls, so build the clients with ``max_retries=0`` when this loop drives them; the loop then owns every
retry and each one is visible as a transition.

Each transition goes to ``on_transition`` (a plain callable) and, when the loop has a tracer, becomes a span
event ``errcompact.transition`` (``errcompact.transition``, ``errcompact.reason``, ``errcompact.attempt``)
on the loop's ``invoke_agent`` span.
"""

from __future__ import annotations

import asyncio
import contextlib
import contextvars
import inspect
import json
import logging
import random
import threading
import time
import uuid
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal, Protocol

from opentelemetry import trace

from otel_errcompact.exceptions import ConfigurationError
from otel_errcompact.recovery.abort import AbortRegistry, owner_cancelled
from otel_errcompact.recovery.classify import classify_exception
from otel_errcompact.recovery.compaction import compact_messages

__all__ = [
    "TERMINAL",
    "AnthropicMessages",
    "LoopPolicy",
    "LoopResult",
    "ModelAdapter",
    "ModelTurn",
    "OpenAIChat",
    "RecoveryLoop",
    "ToolRequest",
    "Transition",
    "TransitionEvent",
]

_log = logging.getLogger("otel_errcompact")

Transition = Literal[
    "completed",
    "tool_use",
    "reactive_compact_retry",
    "max_output_tokens_recovery",
    "model_error",
    "max_turns",
    "aborted_streaming",
    "retry_wait",
]
TERMINAL: frozenset[str] = frozenset({"completed", "model_error", "max_turns", "aborted_streaming"})


@dataclass(frozen=True, slots=True)
class TransitionEvent:
    """One transition: what, why, at which model call, and the wait or error class when there is one."""

    transition: Transition
    reason: str
    attempt: int
    error_class: str | None = None
    wait_s: float | None = None

    @property
    def terminal(self) -> bool:
        return self.transition in TERMINAL

    def to_attributes(self) -> dict[str, str | int | float]:
        attrs: dict[str, str | int | float] = {
            "errcompact.transition": self.transition,
            "errcompact.reason": self.reason,
            "errcompact.attempt": self.attempt,
        }
        if self.error_class:
            attrs["errcompact.error_class"] = self.error_class
        if self.wait_s is not None:
            attrs["errcompact.wait_s"] = round(self.wait_s, 3)
        return attrs


@dataclass(frozen=True, slots=True)
class LoopPolicy:
    """The loop's limits. Plain, immutable, printable.

    >>> LoopPolicy().max_token_doublings
    3
    """

    max_turns: int = 20
    max_tokens: int = 1024
    max_token_doublings: int = 3
    max_total_wait_s: float = 120.0
    max_retries: int = 8
    backoff_s: float = 1.0
    jitter: float = 0.1
    keep_recent_tool_results: int = 4

    def __post_init__(self) -> None:
        if self.max_turns < 1 or self.max_tokens < 1 or self.max_retries < 0 or self.max_token_doublings < 0:
            raise ConfigurationError(f"invalid LoopPolicy: {self}")
        if self.max_total_wait_s < 0 or self.backoff_s < 0 or not 0 <= self.jitter <= 1:
            raise ConfigurationError(f"invalid LoopPolicy: {self}")


@dataclass(frozen=True, slots=True)
class ToolRequest:
    """One tool call the model asked for."""

    id: str
    name: str
    arguments: dict[str, Any]


@dataclass(frozen=True, slots=True)
class ModelTurn:
    """One model reply, in the adapter's own message format."""

    message: dict[str, Any]
    tool_calls: tuple[ToolRequest, ...]
    truncated: bool
    text: str


class ModelAdapter(Protocol):
    """Calls one model API and speaks its message format."""

    def call(self, messages: list[dict[str, Any]], max_tokens: int) -> ModelTurn: ...

    async def acall(self, messages: list[dict[str, Any]], max_tokens: int) -> ModelTurn: ...

    def tool_results(self, results: Sequence[tuple[ToolRequest, str, bool]]) -> list[dict[str, Any]]:
        """The messages that carry ``(request, text, is_error)`` results back to the model."""
        ...


def _dump(obj: Any) -> dict[str, Any]:
    dump = getattr(obj, "model_dump", None)
    data = dump(exclude_none=True) if callable(dump) else dict(obj)
    return data if isinstance(data, dict) else {}


class OpenAIChat:
    """Chat Completions through an ``openai.OpenAI`` / ``AsyncOpenAI`` client (``max_retries=0``)."""

    def __init__(self, client: Any, model: str, *, tools: Sequence[dict[str, Any]] = (), **create: Any) -> None:
        self.client, self.model, self.tools, self.create = client, model, list(tools), create

    def _kwargs(self, messages: list[dict[str, Any]], max_tokens: int) -> dict[str, Any]:
        kwargs: dict[str, Any] = {"model": self.model, "messages": messages, "max_tokens": max_tokens}
        kwargs.update(self.create)
        if self.tools:
            kwargs["tools"] = self.tools
        return kwargs

    def _turn(self, response: Any) -> ModelTurn:
        choice = response.choices[0]
        message = _dump(choice.message)
        message = {k: v for k, v in message.items() if k in ("role", "content", "tool_calls")}
        message.setdefault("content", None)
        calls = tuple(
            ToolRequest(c.id, c.function.name, _loads(c.function.arguments))
            for c in (choice.message.tool_calls or ())
        )
        return ModelTurn(message, calls, choice.finish_reason == "length", choice.message.content or "")

    def call(self, messages: list[dict[str, Any]], max_tokens: int) -> ModelTurn:
        return self._turn(self.client.chat.completions.create(**self._kwargs(messages, max_tokens)))

    async def acall(self, messages: list[dict[str, Any]], max_tokens: int) -> ModelTurn:
        return self._turn(await self.client.chat.completions.create(**self._kwargs(messages, max_tokens)))

    def tool_results(self, results: Sequence[tuple[ToolRequest, str, bool]]) -> list[dict[str, Any]]:
        return [{"role": "tool", "tool_call_id": r.id, "content": text} for r, text, _ in results]


class AnthropicMessages:
    """Messages API through an ``anthropic.Anthropic`` / ``AsyncAnthropic`` client (``max_retries=0``)."""

    def __init__(
        self,
        client: Any,
        model: str,
        *,
        tools: Sequence[dict[str, Any]] = (),
        system: str | None = None,
        **create: Any,
    ) -> None:
        self.client, self.model, self.tools, self.system, self.create = client, model, list(tools), system, create

    def _kwargs(self, messages: list[dict[str, Any]], max_tokens: int) -> dict[str, Any]:
        kwargs: dict[str, Any] = {"model": self.model, "messages": messages, "max_tokens": max_tokens}
        kwargs.update(self.create)
        if self.tools:
            kwargs["tools"] = self.tools
        if self.system:
            kwargs["system"] = self.system
        return kwargs

    def _turn(self, response: Any) -> ModelTurn:
        blocks = [_dump(b) for b in response.content]
        blocks = [{k: v for k, v in b.items() if k in ("type", "text", "id", "name", "input")} for b in blocks]
        calls = tuple(
            ToolRequest(b["id"], b["name"], dict(b.get("input") or {})) for b in blocks if b["type"] == "tool_use"
        )
        text = "".join(b.get("text", "") for b in blocks if b["type"] == "text")
        return ModelTurn({"role": "assistant", "content": blocks}, calls, response.stop_reason == "max_tokens", text)

    def call(self, messages: list[dict[str, Any]], max_tokens: int) -> ModelTurn:
        return self._turn(self.client.messages.create(**self._kwargs(messages, max_tokens)))

    async def acall(self, messages: list[dict[str, Any]], max_tokens: int) -> ModelTurn:
        return self._turn(await self.client.messages.create(**self._kwargs(messages, max_tokens)))

    def tool_results(self, results: Sequence[tuple[ToolRequest, str, bool]]) -> list[dict[str, Any]]:
        blocks = [
            {"type": "tool_result", "tool_use_id": r.id, "content": text, **({"is_error": True} if err else {})}
            for r, text, err in results
        ]
        return [{"role": "user", "content": blocks}] if blocks else []


def _loads(text: str | None) -> dict[str, Any]:
    try:
        value = json.loads(text or "{}")
    except ValueError:
        return {"_raw": text}
    return value if isinstance(value, dict) else {"_value": value}


@dataclass
class LoopResult:
    """How a run ended: the terminal transition, the conversation, the final text, every transition."""

    transition: Transition
    reason: str
    messages: list[dict[str, Any]]
    text: str = ""
    turns: int = 0
    transitions: list[TransitionEvent] = field(default_factory=list)
    error: BaseException | None = None


@dataclass
class _Run:
    messages: list[dict[str, Any]]
    max_tokens: int
    compacted: bool = False
    doublings: int = 0
    retries: int = 0
    waited_s: float = 0.0
    turns: int = 0
    transitions: list[TransitionEvent] = field(default_factory=list)


class RecoveryLoop:
    """Drive a model and its tools to a terminal transition (see the module docstring).

    ``tools`` maps tool names to callables taking the model's arguments as keywords (sync or async; tools
    wrapped by ``@ec.tool`` return their compact error text instead of raising, and tools declared
    ``mutating=True`` there, or named in ``mutating``, are let finish on abort). ``scope`` is what
    ``abort(scope)`` names (default: a fresh id per loop).
    """

    def __init__(
        self,
        model: ModelAdapter,
        tools: Mapping[str, Callable[..., Any]] | None = None,
        *,
        policy: LoopPolicy | None = None,
        summarizer: Callable[[str], str] | None = None,
        compact: Callable[[list[dict[str, Any]]], list[dict[str, Any]]] | None = None,
        on_transition: Callable[[TransitionEvent], None] | None = None,
        aborts: AbortRegistry | None = None,
        scope: str | None = None,
        mutating: Sequence[str] = (),
        tracer: trace.Tracer | None = None,
        agent_name: str = "agent",
        sleep: Callable[[float], None] = time.sleep,
        rng: random.Random | None = None,
    ) -> None:
        self.model = model
        self.tools = dict(tools or {})
        self.policy = policy or LoopPolicy()
        self._summarizer = summarizer
        self._compact = compact
        self._on_transition = on_transition
        self.aborts = aborts or AbortRegistry()
        self.scope = scope or f"loop-{uuid.uuid4().hex[:12]}"
        self._mutating = frozenset(mutating)
        self._tracer = tracer
        self._agent_name = agent_name
        self._sleep = sleep
        self._rng = rng or random.Random()

    # -- shared decisions ------------------------------------------------------------------------------

    def _emit(self, run: _Run, span: trace.Span | None, event: TransitionEvent) -> TransitionEvent:
        run.transitions.append(event)
        if span is not None and span.is_recording():
            span.add_event("errcompact.transition", event.to_attributes())
        if self._on_transition is not None:
            try:
                self._on_transition(event)
            except Exception:
                _log.exception("otel-errcompact: transition listener failed")
        return event

    def _compacted(self, messages: list[dict[str, Any]]) -> list[dict[str, Any]]:
        if self._compact is not None:
            return self._compact(messages)
        return compact_messages(
            messages, keep_recent=self.policy.keep_recent_tool_results, summarizer=self._summarizer
        )

    def _on_error(self, run: _Run, exc: BaseException) -> TransitionEvent:
        """The transition for a failed model call (the sleep, if any, is left to the caller)."""
        c = classify_exception(exc)
        attempt = run.turns
        if c.error_class == "aborted":
            return TransitionEvent("aborted_streaming", "cancelled", attempt, "aborted")
        if c.error_class == "prompt_too_long":
            if run.compacted:
                return TransitionEvent("model_error", "prompt too long after compaction", attempt, c.error_class)
            return TransitionEvent("reactive_compact_retry", "prompt too long", attempt, c.error_class)
        if c.error_class == "output_truncated":
            return self._truncated(run)
        if c.error_class in ("rate_limited", "transient"):
            run.retries += 1
            if run.retries > self.policy.max_retries:
                return TransitionEvent("model_error", f"{c.error_class}: retries exhausted", attempt, c.error_class)
            backoff = self.policy.backoff_s * 2 ** (run.retries - 1)
            base = c.retry_after_s if c.retry_after_s is not None else backoff
            wait = base * (1 + self._rng.uniform(0, self.policy.jitter))
            if run.waited_s + wait > self.policy.max_total_wait_s:
                return TransitionEvent("model_error", f"{c.error_class}: wait cap reached", attempt, c.error_class)
            reason = f"{c.reason}; retry after {base:g}s" if c.retry_after_s is not None else c.reason
            return TransitionEvent("retry_wait", reason, attempt, c.error_class, wait)
        return TransitionEvent("model_error", _digest_line(str(exc)), attempt, c.error_class)

    def _truncated(self, run: _Run) -> TransitionEvent:
        if run.doublings >= self.policy.max_token_doublings:
            reason = f"output truncated after {run.doublings} max_tokens doublings"
            return TransitionEvent("model_error", reason, run.turns, "output_truncated")
        reason = f"max_tokens {run.max_tokens} -> {run.max_tokens * 2}"
        return TransitionEvent("max_output_tokens_recovery", reason, run.turns, "output_truncated")

    def _apply(self, run: _Run, event: TransitionEvent) -> None:
        if event.transition == "reactive_compact_retry":
            run.messages = self._compacted(run.messages)
            run.compacted = True
        elif event.transition == "max_output_tokens_recovery":
            run.doublings += 1
            run.max_tokens *= 2
        elif event.transition == "retry_wait" and event.wait_s is not None:
            run.waited_s += event.wait_s

    def _result(
        self, run: _Run, event: TransitionEvent, text: str = "", error: BaseException | None = None
    ) -> LoopResult:
        if event.transition == "aborted_streaming":
            self.aborts.clear(self.scope)  # this run consumed the abort: the next run starts clean
        return LoopResult(event.transition, event.reason, run.messages, text, run.turns, run.transitions, error)

    def _end(self, run: _Run, span: trace.Span | None, event: TransitionEvent, text: str = "") -> LoopResult:
        return self._result(run, self._emit(run, span, event), text)

    def _span(self) -> Any:
        if self._tracer is None:
            return _NoSpan()
        return self._tracer.start_as_current_span(
            f"invoke_agent {self._agent_name}",
            attributes={"gen_ai.operation.name": "invoke_agent", "gen_ai.agent.name": self._agent_name},
        )

    def _tool_fn(self, name: str) -> Callable[..., Any] | None:
        return self.tools.get(name)

    def _is_mutating(self, name: str) -> bool:
        fn = self.tools.get(name)
        return name in self._mutating or bool(getattr(fn, "__errcompact_mutating__", False))

    # -- sync --------------------------------------------------------------------------------------------

    def run(self, messages: Sequence[dict[str, Any]]) -> LoopResult:
        """Run to a terminal transition. Never raises for model or tool failures."""
        run = _Run(list(messages), self.policy.max_tokens)
        with self._span() as span:
            span = span if isinstance(span, trace.Span) else None
            while True:
                if (stopped := self._next_turn(run, span)) is not None:
                    return stopped
                try:
                    turn = self._call_abortable(run)
                except _AbortedCall:
                    return self._end(run, span, TransitionEvent("aborted_streaming", "abort", run.turns, "aborted"))
                except Exception as exc:
                    event = self._emit(run, span, self._on_error(run, exc))
                    if event.terminal:
                        return self._result(run, event, error=exc)
                    self._apply(run, event)
                    if event.wait_s:
                        self._sleep_unless_aborted(event.wait_s)
                    continue
                try:
                    outcome = self._after_turn(run, span, turn)
                except _Retry:
                    continue
                if outcome is not None:
                    return outcome
                results = [self._run_tool_sync(call) for call in turn.tool_calls]
                run.messages.extend(self.model.tool_results(results))

    def _next_turn(self, run: _Run, span: trace.Span | None) -> LoopResult | None:
        """Before each model call, sync or async: an abort standing or the turn budget spent ends the run
        (its result), else the turn is counted (None)."""
        if self.aborts.aborted(self.scope):
            return self._end(run, span, TransitionEvent("aborted_streaming", "abort", run.turns, "aborted"))
        if run.turns >= self.policy.max_turns:
            return self._end(run, span, TransitionEvent("max_turns", f"{run.turns} model calls", run.turns))
        run.turns += 1
        return None

    def _call_abortable(self, run: _Run) -> ModelTurn:
        """The sync model call on a worker thread, so that ``abort(scope)`` ends the wait at once (within
        10 ms). A sync HTTP request cannot be cancelled from outside: it finishes in the background and its
        answer is dropped. The worker runs in a copy of this context (spans stay in the agent's trace)."""
        box: dict[str, Any] = {}
        done = threading.Event()
        messages, max_tokens = list(run.messages), run.max_tokens

        def work() -> None:
            try:
                box["turn"] = self.model.call(messages, max_tokens)
            except BaseException as exc:  # handed to the loop's thread below
                box["error"] = exc
            finally:
                done.set()

        context = contextvars.copy_context()
        threading.Thread(target=context.run, args=(work,), name="errcompact-model-call", daemon=True).start()
        while not done.wait(0.01):
            if self.aborts.aborted(self.scope):
                raise _AbortedCall
        if "error" in box:
            raise box["error"]
        turn: ModelTurn = box["turn"]
        return turn

    def _sleep_unless_aborted(self, seconds: float) -> None:
        """Sleep ``seconds`` in slices of 50 ms at most, checking for an abort between them. The slices
        slept are added up, not read off the clock: a ``sleep`` given to the loop (a test's, a simulated
        clock's) is then called for the wait, not polled for its length in real time."""
        left = seconds
        while left > 0 and not self.aborts.aborted(self.scope):
            chunk = min(left, 0.05)
            self._sleep(chunk)
            left -= chunk

    def _after_turn(self, run: _Run, span: trace.Span | None, turn: ModelTurn) -> LoopResult | None:
        """Handle a reply: no tool call → completed, tool calls → tool_use (returns None), truncated →
        ``max_output_tokens_recovery`` (raises :class:`_Retry`: call the model again at once)."""
        if turn.truncated:
            event = self._emit(run, span, self._truncated(run))
            if event.terminal:
                return self._result(run, event, turn.text)
            self._apply(run, event)
            raise _Retry
        run.retries = 0
        run.messages.append(turn.message)
        if not turn.tool_calls:
            return self._end(run, span, TransitionEvent("completed", "no tool call", run.turns), turn.text)
        names = ", ".join(c.name for c in turn.tool_calls)
        self._emit(run, span, TransitionEvent("tool_use", names, run.turns))
        return None

    def _run_tool_sync(self, call: ToolRequest) -> tuple[ToolRequest, str, bool]:
        fn = self._tool_fn(call.name)
        if fn is None:
            return call, f"Error: unknown tool {call.name!r}", True
        try:
            value = fn(**call.arguments)
            if inspect.isawaitable(value):
                value = asyncio.run(_awaited(value))
        except Exception as exc:
            return call, f"Error: {_digest_line(_format(exc))}", True
        return call, _as_text(value), _is_error_text(value)

    # -- async -------------------------------------------------------------------------------------------

    async def arun(self, messages: Sequence[dict[str, Any]]) -> LoopResult:
        """Run to a terminal transition (async). ``abort(scope)`` cancels the in-flight model call and
        read-only tools at once; mutating tools finish first. Never raises for model or tool failures."""
        run = _Run(list(messages), self.policy.max_tokens)
        with self._span() as span:
            span = span if isinstance(span, trace.Span) else None
            while True:
                if (stopped := self._next_turn(run, span)) is not None:
                    return stopped
                task = asyncio.ensure_future(self.model.acall(run.messages, run.max_tokens))
                try:
                    with self.aborts.track(self.scope, task, "model"):
                        turn = await task
                except BaseException as exc:
                    if isinstance(exc, asyncio.CancelledError) and (
                        not self.aborts.aborted(self.scope) or owner_cancelled()
                    ):
                        raise  # the host cancelled us: not ours to swallow
                    if not isinstance(exc, Exception | asyncio.CancelledError):
                        raise
                    event = self._emit(run, span, self._on_error(run, exc))
                    if event.terminal:
                        return self._result(run, event, error=None if event.transition == "aborted_streaming" else exc)
                    self._apply(run, event)
                    if event.wait_s:
                        with self.aborts.waiter(self.scope) as aborted, contextlib.suppress(asyncio.TimeoutError):
                            await asyncio.wait_for(aborted.wait(), event.wait_s)
                    continue
                try:
                    outcome = self._after_turn(run, span, turn)
                except _Retry:
                    continue
                if outcome is not None:
                    return outcome
                results = await self._run_tools_async(turn.tool_calls)
                run.messages.extend(self.model.tool_results(results))

    async def _run_tools_async(self, calls: Sequence[ToolRequest]) -> list[tuple[ToolRequest, str, bool]]:
        tasks = [asyncio.ensure_future(self._one_tool(call)) for call in calls]
        results: list[tuple[ToolRequest, str, bool]] = []
        with contextlib.ExitStack() as stack:
            for call, task in zip(calls, tasks, strict=False):
                mutating = self._is_mutating(call.name)
                stack.enter_context(self.aborts.track(self.scope, task, "tool", mutating=mutating))
            done = await asyncio.gather(*tasks, return_exceptions=True)
        for call, value in zip(calls, done, strict=False):
            if isinstance(value, asyncio.CancelledError):
                results.append((call, f"cancelled: {self.aborts.aborted(self.scope) or 'halt'}", True))
            elif isinstance(value, BaseException):
                results.append((call, f"Error: {_digest_line(_format(value))}", True))
            else:
                results.append(value)
        return results

    async def _one_tool(self, call: ToolRequest) -> tuple[ToolRequest, str, bool]:
        fn = self._tool_fn(call.name)
        if fn is None:
            return call, f"Error: unknown tool {call.name!r}", True
        try:
            if inspect.iscoroutinefunction(fn):
                value = await fn(**call.arguments)
            else:
                value = await asyncio.to_thread(fn, **call.arguments)
                if inspect.isawaitable(value):
                    value = await value
        except Exception as exc:
            return call, f"Error: {_digest_line(_format(exc))}", True
        return call, _as_text(value), _is_error_text(value)


class _AbortedCall(Exception):
    """Internal: an abort ended the wait for a sync model call."""


class _Retry(Exception):
    """Internal: the reply asks for another model call at once (truncation recovery)."""


class _NoSpan:
    def __enter__(self) -> None:
        return None

    def __exit__(self, *exc: object) -> None:
        return None


async def _awaited(value: Awaitable[Any]) -> Any:
    return await value


def _digest_line(raw: str) -> str:
    from otel_errcompact.compactor import compact_text  # here: the compactor imports recovery.classify

    return compact_text(raw).line


def _format(exc: BaseException) -> str:
    import traceback

    return "".join(traceback.format_exception(type(exc), exc, exc.__traceback__))


def _as_text(value: Any) -> str:
    if isinstance(value, str):
        return value
    try:
        return json.dumps(value, default=repr, ensure_ascii=False)
    except Exception:
        return repr(value)


def _is_error_text(value: Any) -> bool:
    return type(value).__name__ == "ToolErrorText"
