"""Every exception otel-errcompact raises, in one place.

::

    ErrCompactError                 base class; catch this to catch anything the library raises on purpose
    ├── ErrorBudgetExceeded         a scope breached its thresholds and the configured action is "halt":
    │                               raised at the next tool boundary or by ``check(scope)``, never from
    │                               inside a span processor
    ├── ConfigurationError          invalid settings given to ``init()`` or read from OTEL_ERRCOMPACT_*
    └── AmbiguousRecordId           a trajectory record-id prefix matched several records (also a LookupError)

    ConfigurationWarning            (a UserWarning) a setting that cannot take effect: an unknown
                                    OTEL_ERRCOMPACT_* variable, a second init() with other settings, an
                                    unusable default trajectory path

The library's own machinery (parsers, processors, sinks) never raises into the host application: failures
there are logged to the ``otel_errcompact`` logger and the agent goes on.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from otel_errcompact.history import Escalation

__all__ = [
    "AmbiguousRecordId",
    "ConfigurationError",
    "ConfigurationWarning",
    "ErrCompactError",
    "ErrorBudgetExceeded",
]


class ErrCompactError(Exception):
    """Base class of the exceptions otel-errcompact raises on purpose."""


class ErrorBudgetExceeded(ErrCompactError):
    """The scope's error thresholds were breached; the agent loop should stop (bounded execution).

    ``escalation`` says why: the reason (``consecutive`` or ``budget``), the error class, the count and
    the threshold. The message is a compact, prompt-safe sentence the agent (or its operator) can read.
    """

    def __init__(self, escalation: Escalation) -> None:
        self.escalation = escalation
        super().__init__(escalation.describe())


class ConfigurationError(ErrCompactError, ValueError):
    """A setting has a value the library cannot use; the message names the setting."""


class ConfigurationWarning(UserWarning):
    """A setting that cannot take effect as given; the library goes on with the one it has."""


class AmbiguousRecordId(ErrCompactError, LookupError):
    """A record-id prefix matched more than one record; ``candidates`` lists some of them, and ``more``
    says whether others matched too (the message then ends with "…", and only then: a list that
    names every match is not cut short)."""

    def __init__(self, prefix: str, candidates: Sequence[str], *, more: bool = False) -> None:
        self.prefix = prefix
        self.candidates = tuple(candidates)
        self.more = more
        listed = ", ".join(self.candidates) + (", …" if more else "")
        super().__init__(f"record id prefix {prefix!r} is ambiguous: {listed}")
