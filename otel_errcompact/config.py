"""Settings for ``init()``, read from ``OTEL_ERRCOMPACT_*`` environment variables.

Every field maps one to one onto an environment variable (``sqlite_path`` ↔ ``OTEL_ERRCOMPACT_SQLITE_PATH``)
and onto a keyword argument of :func:`otel_errcompact.init`; an argument wins over the environment, the
environment over the default. Exporter endpoints, protocols, headers, the service name and resource
attributes are *not* here: they follow the standard ``OTEL_*`` variables of the OpenTelemetry SDK.
"""

from __future__ import annotations

import os
import re
from pathlib import Path
from typing import Literal, get_args

from pydantic import Field, ValidationError, field_validator
from pydantic_settings import BaseSettings, SettingsConfigDict, SettingsError

from otel_errcompact.config_check import describe_errors, env_lookup, env_name, origin_of, warn_unknown_variables
from otel_errcompact.exceptions import ConfigurationError
from otel_errcompact.history import Limits, Thresholds

__all__ = ["ENV_PREFIX", "Settings", "default_sqlite_path", "genai_content_capture", "load_settings", "setting_origin"]

_CAPTURE_ON = {"true", "1", "yes", "on", "span_only", "span_and_event"}


def default_sqlite_path() -> Path:
    """``$XDG_DATA_HOME/otel-errcompact/trajectories.sqlite3`` (``~/.local/share/…`` when unset)."""
    base = os.environ.get("XDG_DATA_HOME") or os.path.join(os.path.expanduser("~"), ".local", "share")
    return Path(base) / "otel-errcompact" / "trajectories.sqlite3"


def genai_content_capture() -> bool:
    """Whether ``OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT`` asks for content on spans: the
    ecosystem's switch for prompts and tool arguments, off by default."""
    value = os.environ.get("OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT", "")
    return value.strip().lower() in _CAPTURE_ON


_DAY = 86_400.0
"""Seconds in a day: the bound of the duration settings."""
_REDIS_SCHEMES = ("redis://", "rediss://", "unix://")
"""The URL schemes redis-py's ``Redis.from_url`` accepts."""


class Settings(BaseSettings):
    """All settings, with their defaults. See the README's configuration table."""

    model_config = SettingsConfigDict(env_prefix="OTEL_ERRCOMPACT_", extra="forbid", frozen=True)

    enabled: bool = True
    """Master switch: ``false`` makes ``init()`` return a handle that does nothing."""

    sqlite_path: Path | None = Field(default_factory=default_sqlite_path)
    """Trajectory store (embedded default). Empty string or ``none`` disables it."""
    jsonl_path: Path | None = None
    """Also append trajectory records as JSON lines to this file."""
    spool: bool = True
    """Append each trajectory record to a spool beside the store (``<store>-spool/``) before the failed
    tool call returns, so that ``kill -9`` loses nothing; the next start recovers what was left."""
    otlp_logs: bool = True
    """Emit each trajectory record as an OTLP log record (``errcompact.trajectory``) when a log pipeline
    with an exporter exists (the application's own, or one created from OTEL_EXPORTER_OTLP_*)."""

    consecutive: int = Field(default=3, ge=1)
    """Escalate when the same error class fails this many times in a row."""
    budget: int | None = Field(default=20, ge=1)
    """Escalate when a scope has failed this many times in all (empty or ``none`` for no budget)."""
    action: Literal["halt", "human"] = "halt"
    """On breach: ``halt`` raises ErrorBudgetExceeded at the next tool call; ``human`` calls the review hook."""

    on_tool_error: Literal["digest", "raise"] = "digest"
    """What the tool boundary does with a tool's exception: return the compact digest, or re-raise."""
    capture_arguments: bool = Field(default_factory=lambda: genai_content_capture())
    """Record tool-call arguments: on the tool boundary's span (``gen_ai.tool.call.arguments``, redacted)
    and in trajectory records. Off unless turned on here or by the GenAI convention's
    ``OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT``."""
    redact_at_rest: bool = False
    """Redact trajectory records in the local stores (SQLite, JSONL) too; exported ones always are."""
    redact_patterns: tuple[str, ...] = ()
    """Regular expressions of your own secret shapes (a JSON list in the environment), masked everywhere
    :func:`otel_errcompact.redact.redact` runs; see :func:`otel_errcompact.redact.add_pattern`."""

    breaker_threshold: int = Field(default=3, ge=0)
    """Open a tool's circuit breaker after this many identical failures (process-wide); 0 turns it off."""
    breaker_cooldown_s: float = Field(default=30.0, ge=0, le=_DAY, allow_inf_nan=False)
    """How long an open breaker refuses calls before one half-open probe."""
    retry_attempts: int = Field(default=2, ge=1)
    """Attempts of a tool call at the boundary when it fails transiently (2 = one retry)."""

    max_classes: int = Field(default=32, ge=1)
    max_scopes: int = Field(default=10_000, ge=1)
    idle_seconds: float = Field(default=3600.0, gt=0, le=365 * _DAY, allow_inf_nan=False)
    max_lines: int = Field(default=8, ge=1)
    max_chars: int = Field(default=2000, ge=200)
    max_values: int = Field(default=16, ge=1)
    """Distinct data values told apart per class for ``(×N, M different values)``."""

    compaction_process: Literal["auto"] | bool = "auto"
    """Make failed spans' digests in a child process (with the default compactor), so the digest thread
    holds the GIL only to hand the texts over (see :mod:`otel_errcompact._compacting_process`). ``auto``
    (the default): when this process may run on at least 4 cores, where the child has a core of its own;
    on 2 cores it competes with the agent's threads for them and measured no gain."""

    max_queue_size: int = Field(default=65_536, ge=1)
    """Trajectory records waiting for the writer thread; beyond this, new records are counted as dropped."""
    max_batch_size: int = Field(default=512, ge=1)
    schedule_delay_s: float = Field(default=0.2, gt=0, le=3600, allow_inf_nan=False)
    shutdown_timeout_s: float = Field(default=30.0, gt=0, le=_DAY, allow_inf_nan=False)
    """Finite and at most a day: a timeout past what the clock can add to now (``inf``) failed at shutdown."""

    redis_url: str | None = None
    """Share circuit breakers and rate-limit pacing with every worker pointed at this Redis
    (``redis://host:6379/0``); empty: each process keeps its own state."""
    fleet_namespace: str | None = None
    """The namespace of the fleet's keys in that Redis (``errcompact:<namespace>:…``); empty: the
    OpenTelemetry resource's ``service.name``, so two services sharing one Redis share no breaker or budget."""

    trace_url: str | None = None
    """Trace link template with ``{trace_id}`` for ``otel-errcompact viewer`` (declared here so that the
    variable is a known setting; the viewer reads it)."""

    @field_validator("redact_patterns")
    @classmethod
    def _patterns_compile(cls, value: tuple[str, ...]) -> tuple[str, ...]:
        for pattern in value:
            try:
                re.compile(pattern)
            except re.error as exc:
                raise ValueError(f"redact pattern {pattern!r} does not compile: {exc}") from None
        return value

    @field_validator("redis_url")
    @classmethod
    def _redis_url_parses(cls, value: str | None) -> str | None:
        """Checked here, not when the store is built: ``init()`` must refuse a URL redis-py cannot read
        before it attaches anything, and say which setting to fix."""
        if value is None:
            return None
        if not value.startswith(_REDIS_SCHEMES):
            raise ValueError("a Redis URL starting with redis://, rediss:// or unix:// (such as redis://host:6379/0)")
        try:
            from redis.connection import parse_url
        except ImportError:  # the store's own import error says which extra to install
            return value
        try:
            parse_url(value)  # type: ignore[no-untyped-call]
        except ValueError as exc:  # a port or a query argument redis-py cannot read
            raise ValueError(f"redis-py cannot read it: {exc}") from None
        return value

    @field_validator(
        "consecutive", "budget", "breaker_threshold", "breaker_cooldown_s", "retry_attempts", "max_classes",
        "max_scopes", "idle_seconds", "max_lines", "max_chars", "max_values", "max_queue_size", "max_batch_size",
        "schedule_delay_s", "shutdown_timeout_s", mode="before",
    )
    @classmethod
    def _no_boolean_number(cls, value: object) -> object:
        """Refuse ``True``/``False`` for a number: pydantic reads them as 1 and 0, so ``consecutive=True``
        halted at the first failure and ``breaker_threshold=False`` turned the breaker off, without a word."""
        if isinstance(value, bool):
            raise ValueError("expected a number, not a boolean")
        return value

    @field_validator("sqlite_path", "jsonl_path", "budget", "redis_url", "fleet_namespace", mode="before")
    @classmethod
    def _empty_is_none(cls, value: object) -> object:
        if isinstance(value, str) and value.strip().lower() in {"", "none", "off", "false"}:
            return None
        return value

    def spool_dir(self) -> Path | None:
        """The spool folder beside the SQLite store (else the JSONL file); ``None`` when off."""
        if not self.spool:
            return None
        store = self.sqlite_path or self.jsonl_path
        return None if store is None else store.with_name(store.name + "-spool")

    def thresholds(self) -> Thresholds:
        """The escalation thresholds these settings describe."""
        return Thresholds(consecutive=self.consecutive, budget=self.budget, action=self.action)

    def limits(self) -> Limits:
        """The history bounds these settings describe."""
        return Limits(
            max_classes=self.max_classes,
            max_scopes=self.max_scopes,
            idle_seconds=self.idle_seconds,
            max_lines=self.max_lines,
            max_chars=self.max_chars,
            max_values=self.max_values,
        )


ENV_PREFIX = "OTEL_ERRCOMPACT_"

_NULLABLE = frozenset(
    name for name, field in Settings.model_fields.items() if type(None) in get_args(field.annotation)
)
"""The settings for which None is a value of its own (off, none), not "use the default"."""


def load_settings(**overrides: object) -> Settings:
    """Settings from the environment with ``overrides`` on top.

    A bad value raises ConfigurationError naming the keyword or variable and the value
    (``OTEL_ERRCOMPACT_CONSECUTIVE='banana': expected an integer ≥ 1``); an ``OTEL_ERRCOMPACT_*``
    variable that names no setting gives a ConfigurationWarning with a "did you mean".
    """
    # None is "not given" (init's own keywords default to it), except for the settings where None is a value:
    # sqlite_path=None turns the store off, as an empty variable does, rather than keeping the default store.
    clean = {k: v for k, v in overrides.items() if v is not None or k in _NULLABLE}
    warn_unknown_variables(Settings.model_fields, ENV_PREFIX)
    try:
        return Settings(**clean)  # type: ignore[arg-type]
    except ValidationError as exc:
        problems = "; ".join(describe_errors(exc, Settings.model_fields, clean, ENV_PREFIX))
        raise ConfigurationError(f"invalid otel-errcompact settings: {problems}") from None
    except SettingsError as exc:  # a complex setting (a list) whose variable is not JSON
        raise ConfigurationError(f"invalid otel-errcompact settings: {_not_json(exc)}") from None


def _not_json(exc: SettingsError) -> str:
    """``OTEL_ERRCOMPACT_REDACT_PATTERNS='ACME-[0-9]+': expected a JSON list``: the variable and its value,
    read back from the field pydantic-settings names (its own message names neither)."""
    named = re.search(r'field "(\w+)"', str(exc))
    found = env_lookup(env_name(ENV_PREFIX, named.group(1)), os.environ) if named else None
    if found is None:
        return f"{exc} (give a JSON list)"
    return f"{found[0]}={found[1]!r}: expected a JSON list, such as '[\"ACME-[0-9]+\"]'"


def setting_origin(field: str, overrides: dict[str, object] | None = None) -> str:
    """How the user set ``field``: ``sqlite_path=``, ``OTEL_ERRCOMPACT_SQLITE_PATH`` or the default."""
    return origin_of(field, overrides or {}, ENV_PREFIX)
