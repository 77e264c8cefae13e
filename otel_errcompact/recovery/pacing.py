"""Proactive pacing: read the rate-limit headers of every response and slow down before a 429.

Headers understood (case-insensitive):

- OpenAI ``x-ratelimit-{limit,remaining,reset}-{requests,tokens}``; resets are durations (``6m0s``,
  ``1.5s``, ``12ms``) until the budget is full again;
- Anthropic ``anthropic-ratelimit-{requests,tokens,input-tokens,output-tokens}-{limit,remaining,reset}``;
  resets are RFC 3339 times;
- IETF ``RateLimit: "default";r=50;t=30`` with ``RateLimit-Policy: "default";q=100;w=60`` (and the older
  ``RateLimit-Limit`` / ``-Remaining`` / ``-Reset`` fields and ``RateLimit: limit=…, remaining=…, reset=…``).

The rule (the seed's "usage outruns the elapsed window fraction"), per budget, before each request::

    used    = (limit - remaining) / limit         # after this request's own unit is taken
    elapsed = 1 - (reset_at - now) / window
    delay   = max(0, (used - elapsed) * window)  =  max(0, (reset_at - now) - remaining * window / limit)

i.e. the remaining units, spread evenly, must last until the reset. The window is the IETF policy's ``w``;
the providers do not send one, so it is inferred from their token bucket (``reset`` is the time to refill
``limit - remaining`` units, so ``window = reset * limit / (limit - remaining)``), or 60 s (their
per-minute limits) when the budget is full. Each request reserves one unit of every ``requests`` budget
(token budgets are paced by what the server reports; a request's token cost is not known beforehand). A
429 with ``retry-after`` holds every caller of that host until then. The delay of one call is capped
(``max_delay_s``, default 60 s) so pacing never parks an agent indefinitely.

``pace(client)`` hooks a pacer into an httpx (or httpx2) client, sync or async, or into the client inside
an ``openai`` / ``anthropic`` SDK client, through httpx event hooks. State lives in a
:class:`~otel_errcompact.recovery.state.RecoveryStateStore` (process-wide in memory by default), so all
clients of a process, or of a fleet with a shared store, pace against the same budget.
"""

from __future__ import annotations

import asyncio
import contextlib
import inspect
import logging
import re
import threading
import time
from collections.abc import Callable, Mapping
from datetime import datetime
from typing import Any, TypeVar

from otel_errcompact.recovery.classify import retry_after_from_headers
from otel_errcompact.recovery.state import InMemoryStateStore, RateBudget, RecoveryStateStore

__all__ = ["Pacer", "default_pacer", "pace", "parse_duration", "parse_rate_limit_headers"]

_log = logging.getLogger("otel_errcompact")
C = TypeVar("C")

_DEFAULT_WINDOW_S = 60.0
_DURATION = re.compile(r"^(?:(\d+(?:\.\d+)?)h)?(?:(\d+(?:\.\d+)?)m(?!s))?(?:(\d+(?:\.\d+)?)s)?(?:(\d+(?:\.\d+)?)ms)?$")
_OPENAI = re.compile(r"^x-ratelimit-(limit|remaining|reset)-([a-z-]+)$")
_ANTHROPIC = re.compile(r"^anthropic-ratelimit-([a-z-]+)-(limit|remaining|reset)$")
_IETF_ITEM = re.compile(r"\b([a-z]+)\s*=\s*\"?([0-9.]+)")


def parse_duration(text: str) -> float | None:
    """OpenAI's reset durations in seconds: ``6m0s`` → 360, ``1.5s`` → 1.5, ``12ms`` → 0.012.

    >>> parse_duration("1m30.5s"), parse_duration("12ms"), parse_duration("soon")
    (90.5, 0.012, None)
    """
    text = text.strip()
    m = _DURATION.match(text)
    if not text or m is None or not any(m.groups()):
        try:
            return float(text)
        except ValueError:
            return None
    h, mi, s, ms = (float(g) if g else 0.0 for g in m.groups())
    return h * 3600 + mi * 60 + s + ms / 1000


def _rfc3339(text: str) -> float | None:
    try:
        return datetime.fromisoformat(text.strip().replace("Z", "+00:00")).timestamp()
    except ValueError:
        return None


def _inferred_window(limit: float, remaining: float, time_left: float) -> float:
    if limit > remaining and time_left > 0:
        return time_left * limit / (limit - remaining)
    return _DEFAULT_WINDOW_S


def _budget(limit: float, remaining: float, reset_at: float, now: float, window: float | None) -> RateBudget:
    time_left = max(0.0, reset_at - now)
    return RateBudget(limit, remaining, reset_at, window or _inferred_window(limit, remaining, time_left))


def parse_rate_limit_headers(headers: Mapping[str, str] | Any, now: float) -> dict[str, RateBudget]:
    """The budgets a response reports, by dimension (``requests``, ``tokens``, ``input-tokens`` …).

    >>> b = parse_rate_limit_headers({"x-ratelimit-limit-requests": "60", "x-ratelimit-remaining-requests": "30",
    ...                               "x-ratelimit-reset-requests": "30s"}, now=0.0)
    >>> b["requests"]
    RateBudget(limit=60.0, remaining=30.0, reset_at=30.0, window_s=60.0)
    """
    parts: dict[str, dict[str, str]] = {}
    ietf: dict[str, str] = {}
    try:
        items = headers.items()
    except Exception:
        return {}
    for raw_name, value in items:
        name = str(raw_name).lower()
        if "ratelimit" not in name:
            continue
        if m := _OPENAI.match(name):
            parts.setdefault(m.group(2), {})[m.group(1)] = str(value)
            parts[m.group(2)]["style"] = "openai"
        elif m := _ANTHROPIC.match(name):
            parts.setdefault(m.group(1), {})[m.group(2)] = str(value)
            parts[m.group(1)]["style"] = "anthropic"
        elif name in ("ratelimit", "ratelimit-policy", "ratelimit-limit", "ratelimit-remaining", "ratelimit-reset"):
            ietf[name] = str(value)
    budgets: dict[str, RateBudget] = {}
    for dimension, p in parts.items():
        try:
            limit, remaining = float(p["limit"]), float(p["remaining"])
        except (KeyError, ValueError):
            continue
        reset = p.get("reset", "")
        if p["style"] == "openai":
            seconds = parse_duration(reset)
            reset_at = now + seconds if seconds is not None else None
        else:
            reset_at = _rfc3339(reset)
        if reset_at is None or limit <= 0:
            continue
        budgets[dimension] = _budget(limit, remaining, reset_at, now, None)
    if ietf:
        ietf_budget = _ietf(ietf, now)
        if ietf_budget is not None:
            budgets.setdefault("requests", ietf_budget)
    return budgets


def _ietf(fields: dict[str, str], now: float) -> RateBudget | None:
    """Both IETF drafts: structured ``RateLimit``/``RateLimit-Policy`` and the older separate fields."""
    values: dict[str, float] = {}
    for name in ("ratelimit-policy", "ratelimit"):
        for key, number in _IETF_ITEM.findall(fields.get(name, "")):
            values.setdefault(key, float(number))
    policy = fields.get("ratelimit-policy", "").split(",")[0]
    if "q" not in values and (lead := re.match(r"\s*(\d+)", policy)):
        values["q"] = float(lead.group(1))  # the older "100;w=60" policy form
    for short, name in (("q", "ratelimit-limit"), ("r", "ratelimit-remaining"), ("t", "ratelimit-reset")):
        if name in fields:
            with contextlib.suppress(ValueError):
                values.setdefault(short, float(fields[name].split(",")[0]))
    limit = values.get("q", values.get("limit"))
    remaining = values.get("r", values.get("remaining"))
    reset = values.get("t", values.get("reset"))
    if limit is None or remaining is None or reset is None or limit <= 0:
        return None
    return _budget(limit, remaining, now + reset, now, values.get("w"))


class Pacer:
    """Delays requests to one or more hosts by the budgets their responses report.

    ``reserve(host)`` returns the seconds to wait before a request (the hooks sleep it); ``observe(host,
    status, headers)`` stores what a response reported. Thread- and task-safe; state in ``store``.
    """

    def __init__(
        self,
        store: RecoveryStateStore | None = None,
        *,
        max_delay_s: float = 60.0,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self.store: RecoveryStateStore = store or InMemoryStateStore()
        self.max_delay_s = max_delay_s
        self._clock = clock
        self._dimensions: dict[str, frozenset[str]] = {}
        self._lock = threading.Lock()
        self.delays = 0
        self.delayed_s = 0.0

    def reserve(self, host: str) -> float:
        """Reserve one request on ``host``'s budgets; seconds to wait before sending it (0 when none)."""
        try:
            costs = self._costs(host)
            if not costs:
                return 0.0
            delay = min(self.max_delay_s, self.store.pace_reserve(costs, self._clock()))
            if delay > 0:
                with self._lock:
                    self.delays += 1
                    self.delayed_s += delay
            return delay
        except Exception:
            _log.debug("otel-errcompact: pacing failed; not delaying", exc_info=True)
            return 0.0

    def _costs(self, host: str) -> dict[str, float]:
        dimensions = self._dimensions.get(host, frozenset())
        return {f"{host}|{d}": (1.0 if d == "requests" else 0.0) for d in dimensions}

    def observe(self, host: str, status: int, headers: Mapping[str, str] | Any, reserved: bool = True) -> None:
        """Store the budgets a response from ``host`` reported (and a 429's retry-after); release the
        request's reservation when it made one."""
        try:
            release = {k: v for k, v in self._costs(host).items() if v} if reserved else {}
            now = self._clock()
            budgets = parse_rate_limit_headers(headers, now)
            if status == 429:
                wait = retry_after_from_headers(headers, now=now)
                if wait is not None and wait > 0:
                    held = budgets.get("requests")
                    limit = held.limit if held is not None else 1.0
                    budgets["requests"] = RateBudget(limit, 0.0, now + wait, wait)
            if budgets:
                with self._lock:
                    self._dimensions[host] = self._dimensions.get(host, frozenset()) | frozenset(budgets)
            if budgets or release:
                self.store.pace_settle({f"{host}|{d}": b for d, b in budgets.items()}, now, release)
        except Exception:
            _log.debug("otel-errcompact: could not read rate-limit headers", exc_info=True)


_default: Pacer | None = None
_default_lock = threading.Lock()


def default_pacer() -> Pacer:
    """The process-wide pacer ``pace(client)`` uses when none is given."""
    global _default
    with _default_lock:
        if _default is None:
            _default = Pacer()
        return _default


def _host(request: Any) -> str:
    url = request.url
    return f"{url.host}:{url.port}" if url.port else str(url.host)


def pace(client: C, pacer: Pacer | None = None) -> C:
    """Pace ``client`` (httpx/httpx2 ``Client`` or ``AsyncClient``, or an ``openai``/``anthropic`` client)
    by the rate-limit headers of its responses; returns the same client. Hooking twice is a no-op.

    >>> import httpx
    >>> c = pace(httpx.Client())
    >>> len(c.event_hooks["request"]), len(pace(c).event_hooks["request"])
    (1, 1)
    """
    http: Any = client if hasattr(client, "event_hooks") else getattr(client, "_client", None)
    if http is None or not hasattr(http, "event_hooks"):
        raise TypeError(f"pace() needs an httpx client or an SDK client built on one, got {type(client).__name__}")
    if getattr(http, "_errcompact_paced", False):
        return client
    p = pacer or default_pacer()
    hooks = {k: list(v) for k, v in http.event_hooks.items()}
    if inspect.iscoroutinefunction(getattr(http, "send", None)):

        async def before_async(request: Any) -> None:
            request.extensions["errcompact_paced"] = bool(p._costs(_host(request)))
            delay = p.reserve(_host(request))
            if delay > 0:
                await asyncio.sleep(delay)

        async def after_async(response: Any) -> None:
            reserved = bool(response.request.extensions.get("errcompact_paced"))
            p.observe(_host(response.request), response.status_code, response.headers, reserved)

        hooks.setdefault("request", []).append(before_async)
        hooks.setdefault("response", []).append(after_async)
    else:

        def before(request: Any) -> None:
            request.extensions["errcompact_paced"] = bool(p._costs(_host(request)))
            delay = p.reserve(_host(request))
            if delay > 0:
                time.sleep(delay)

        def after(response: Any) -> None:
            reserved = bool(response.request.extensions.get("errcompact_paced"))
            p.observe(_host(response.request), response.status_code, response.headers, reserved)

        hooks.setdefault("request", []).append(before)
        hooks.setdefault("response", []).append(after)
    http.event_hooks = hooks
    http._errcompact_paced = True
    return client
