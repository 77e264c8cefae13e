"""The tool boundary's retry policy: transient failures get one more try, with backoff, jitter and
retry-after honoured; everything else surfaces at once (the seed's "max 1 retry, then surface").

Built on tenacity rather than a loop of our own: :meth:`RetryPolicy.retrying` returns a configured
``tenacity.Retrying`` (or ``AsyncRetrying``) whose wait is ``wait_exponential + wait_random`` but never
less than the failure's ``retry_after_s``, whose retry predicate is the error class
(:func:`~otel_errcompact.recovery.classify.classify_exception`), and which re-raises the last error.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import tenacity

from otel_errcompact._checks import check_integer, check_seconds
from otel_errcompact.recovery.classify import RETRYABLE_CLASSES, classify_exception

__all__ = ["NO_RETRY", "RetryPolicy"]


@dataclass(frozen=True, slots=True)
class RetryPolicy:
    """How the tool boundary retries. Plain, immutable, printable.

    ``attempts`` counts the first call (default 2: one retry). The wait before retry *n* is
    ``initial_s * 2**(n-1)`` (at most ``max_s``) plus up to ``jitter_s`` of random jitter, or the failure's
    retry-after when that is longer; a retry-after beyond ``max_retry_after_s`` is not waited for here: the
    failure surfaces with its retry-after, for the agent (or the pacer) to act on.

    >>> RetryPolicy(attempts=3).attempts
    3
    """

    attempts: int = 2
    initial_s: float = 0.5
    max_s: float = 8.0
    jitter_s: float = 0.25
    max_retry_after_s: float = 30.0
    classes: frozenset[str] = field(default_factory=lambda: RETRYABLE_CLASSES)

    def __post_init__(self) -> None:
        check_integer("RetryPolicy", "attempts", self.attempts, 1)
        for name in ("initial_s", "max_s", "jitter_s", "max_retry_after_s"):  # a NaN wait cannot be slept
            check_seconds("RetryPolicy", name, getattr(self, name))

    def should_retry(self, exc: BaseException) -> bool:
        """True for a failure this policy retries (its class, and a retry-after it is willing to wait)."""
        c = classify_exception(exc)
        return c.error_class in self.classes and (c.retry_after_s or 0.0) <= self.max_retry_after_s

    def wait_s(self, retry_state: tenacity.RetryCallState) -> float:
        """tenacity wait: exponential backoff plus jitter, never shorter than the retry-after."""
        backoff = tenacity.wait_exponential(multiplier=self.initial_s, max=self.max_s)(retry_state)
        backoff += tenacity.wait_random(0, self.jitter_s)(retry_state) if self.jitter_s else 0.0
        outcome = retry_state.outcome
        exc = outcome.exception() if outcome is not None and outcome.failed else None
        hint = classify_exception(exc).retry_after_s if exc is not None else None
        return max(backoff, hint or 0.0)

    def _kwargs(self, before_sleep: Callable[[tenacity.RetryCallState], Any] | None) -> dict[str, Any]:
        return {
            "stop": tenacity.stop_after_attempt(self.attempts),
            "wait": self.wait_s,
            "retry": tenacity.retry_if_exception(self.should_retry),
            "reraise": True,
            "before_sleep": before_sleep,
        }

    def retrying(
        self,
        *,
        before_sleep: Callable[[tenacity.RetryCallState], Any] | None = None,
        sleep: Callable[[float], Any] | None = None,
    ) -> tenacity.Retrying:
        """A tenacity ``Retrying`` for sync calls."""
        kwargs = self._kwargs(before_sleep)
        if sleep is not None:
            kwargs["sleep"] = sleep
        return tenacity.Retrying(**kwargs)

    def async_retrying(
        self, *, before_sleep: Callable[[tenacity.RetryCallState], Any] | None = None
    ) -> tenacity.AsyncRetrying:
        """A tenacity ``AsyncRetrying`` for async calls (sleeps with ``asyncio.sleep``)."""
        return tenacity.AsyncRetrying(**self._kwargs(before_sleep))


NO_RETRY = RetryPolicy(attempts=1)
"""Run once; surface every failure."""
