"""Proactive pacing: read the rate-limit headers of every response and slow down before a 429.

Headers understood (case-insensitive):

- OpenAI ``x-ratelimit-{limit,remaining,reset}-{requests,tokens}``; resets are durations (``6m0s``,
  ``1.5s``, ``12ms``) until the budget is full again;
- Anthropic ``anthropic-ratelimit-{requests,tokens,input-tokens,output-tokens}-{limit,remaining,reset}``;
  resets are RFC 3339 times;
- IETF ``RateLimit: "default";r=50;t=30`` with ``RateLimit-Policy: "default";q=100;w=60`` (and the older
  ``RateLimit-Limit`` / ``-Remaining`` / ``-Reset`` fields and ``RateLimit: limit=…, remaining=…, reset=…``).

Before each request, per budget, a request waits for the later of two times::

    unit    = window / limit
    full_at = max(reset_at, now + (limit - remaining) * unit)      # a token bucket (OpenAI, Anthropic)
            = reset_at + (limit - remaining) * unit                # a fixed window (the IETF fields)
    turn    = full_at + (in_flight - 1) * unit - (limit - 1) * unit                       # GCRA
    share   = min((reset_at - now) - (remaining - in_flight) * unit,                      # spread to the reset,
                  (reset_at - now) + max(0, in_flight - limit) * unit)                    # full again at it
    delay   = max(0, turn - now, share)

The *turn* is the generic cell rate algorithm (GCRA, :func:`~otel_errcompact.recovery.state.pacing_delay`):
requests go one unit apart, at most ``limit - 1`` units ahead of the time the budget would be full again;
``full_at`` only moves later, so a response read out of order (an older count after a newer one) never
hands back units that later requests spent. The *share*
(:func:`~otel_errcompact.recovery.state.share_delay`) keeps the share of the window used from outrunning
the share elapsed: what is left, spread evenly, must reach to the reset. It guards against callers of the
same key that this pacer does not see (other services, or workers without a shared store), which read the
same reports and wait the same way. ``in_flight`` counts the requests reserved and not answered, this one
included: every request reserves one unit of the host's ``requests`` budget until its response is back,
from the very first request on (token budgets are paced by what the server reports; a request's token cost
is not known beforehand). Requests sent before any response has reported a budget cannot be paced; a
report then counts the ones still in flight.

The window is the IETF policy's ``w``; the providers do not send one, so it is inferred from their token
bucket: ``reset`` is the time to refill the missing units, which ``remaining``, a whole count, gives to
within one, so ``window = reset * limit / (limit - remaining - 1)``, never shorter than the true one. A
nearly full bucket keeps the window inferred last, and a full one with none known is taken as 60 s (the
providers' per-minute limits). A 429 with ``retry-after`` holds
every caller of that host until then, and the host's own budget paces them after it (a bucket that
refused a request is empty, so no burst follows the hold). The delay of one call is capped
(``max_delay_s``, default 60 s) so pacing never parks an agent indefinitely.

``pace(client)`` hooks a pacer into an httpx (or httpx2) client, sync or async, or into the client inside
an ``openai`` / ``anthropic`` SDK client, through httpx event hooks. State lives in a
:class:`~otel_errcompact.recovery.state.RecoveryStateStore` (process-wide in memory by default), so all
clients of a process, or of a fleet with a shared store, pace against the same budget.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import inspect
import logging
import re
import sys
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import replace
from datetime import datetime
from typing import Any, TypeVar

from otel_errcompact._forked import new_locks_in_child
from otel_errcompact.recovery.classify import retry_after_from_headers
from otel_errcompact.recovery.state import (
    InMemoryStateStore,
    RateBudget,
    RecoveryStateStore,
    Refill,
    off_loop,
    waits_on_io,
)

__all__ = ["Pacer", "default_pacer", "pace", "parse_duration", "parse_rate_limit_headers"]

_log = logging.getLogger("otel_errcompact")
C = TypeVar("C")
V = TypeVar("V")

_DEFAULT_WINDOW_S = 60.0
_HOLD = "retry-after"
"""The budget a 429's retry-after holds: nothing before it, and the host's own budgets after it."""
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
    """A token bucket's window (the time to refill all ``limit`` units) from one report.

    ``remaining`` is a whole count of a bucket that may hold up to one unit more, so the ``time_left`` to
    full refills between ``limit - remaining - 1`` and ``limit - remaining`` units. Dividing by the
    smaller never makes the window shorter than it is: pacing errs slow, by at most one unit in
    ``limit - remaining``. With fewer than two units missing one report cannot bound it from above;
    :class:`Pacer` then keeps the window it inferred last.
    """
    missing = limit - remaining
    if time_left > 0 and _bounded_window(limit, remaining):
        return time_left * limit / (missing - 1)
    if time_left > 0 and missing > 0:
        return time_left * limit / missing
    return _DEFAULT_WINDOW_S


def _bounded_window(limit: float, remaining: float) -> bool:
    """Whether one report bounds a bucket's window from above (two units or more missing)."""
    return limit - remaining >= 2


def _budget(
    limit: float, remaining: float, reset_at: float, now: float, window: float | None, refill: Refill = "bucket"
) -> RateBudget:
    time_left = max(0.0, reset_at - now)
    return RateBudget(limit, remaining, reset_at, window or _inferred_window(limit, remaining, time_left), refill)


def parse_rate_limit_headers(headers: Mapping[str, str] | Any, now: float) -> dict[str, RateBudget]:
    """The budgets a response reports, by dimension (``requests``, ``tokens``, ``input-tokens`` …).

    >>> b = parse_rate_limit_headers({"x-ratelimit-limit-requests": "60", "x-ratelimit-remaining-requests": "30",
    ...                               "x-ratelimit-reset-requests": "30s"}, now=0.0)
    >>> b["requests"]
    RateBudget(limit=60.0, remaining=30.0, reset_at=30.0, window_s=62.06896551724138, refill='bucket')
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
    return _budget(limit, remaining, now + reset, now, values.get("w"), "window")


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
        self._windows: dict[str, float] = {}
        self._lock = threading.Lock()
        new_locks_in_child(self, "_lock")
        self.delays = 0
        self.delayed_s = 0.0

    @property
    def blocking(self) -> bool:
        """Whether the store's operations may wait on I/O: any store but the in-process one (a shared
        store's round trip, or up to its timeout while the server is down). The async hooks of
        :func:`pace` run them off the event loop then."""
        return waits_on_io(self.store)

    def reserve(self, host: str) -> float:
        """Reserve one request on ``host``'s budgets; seconds to wait before sending it (0 when none)."""
        try:
            costs = self._costs(host)
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
        """Every request reserves one unit of ``requests``, from the first one on: requests sent before
        the first response are in flight too, and the first report does not count them. The 429 hold is
        always asked, though this pacer may never have seen one: with a shared store another worker's
        429 holds its callers too."""
        costs = {f"{host}|{d}": 0.0 for d in self._dimensions.get(host, ())}
        costs[f"{host}|{_HOLD}"] = 0.0
        costs[f"{host}|requests"] = 1.0
        return costs

    def observe(self, host: str, status: int, headers: Mapping[str, str] | Any, reserved: bool = True) -> None:
        """Store the budgets a response from ``host`` reported (and a 429's retry-after); release the
        request's reservation when it made one."""
        try:
            release = {f"{host}|requests": 1.0} if reserved else {}  # the one unit _costs reserves
            now = self._clock()
            budgets = self._known_windows(host, parse_rate_limit_headers(headers, now), now)
            if status == 429:
                wait = retry_after_from_headers(headers, now=now)
                if wait is not None and wait > 0:
                    budgets[_HOLD] = RateBudget(1.0, 0.0, now + wait, wait, "hold")
            if budgets:
                with self._lock:
                    self._dimensions[host] = self._dimensions.get(host, frozenset()) | frozenset(budgets)
            if budgets or release:
                self.store.pace_settle({f"{host}|{d}": b for d, b in budgets.items()}, now, release)
        except Exception:
            _log.debug("otel-errcompact: could not read rate-limit headers", exc_info=True)

    def _known_windows(self, host: str, budgets: dict[str, RateBudget], now: float) -> dict[str, RateBudget]:
        """Narrow each bucket's window over its reports.

        One report bounds the window between ``reset * limit / missing`` and ``reset * limit / (missing -
        1)``; the true window lies in every report's range, so the smallest upper bound seen is kept while
        it stays above the latest lower bound (when it does not, the limit changed: start again). A nearly
        full bucket's report bounds nothing and takes the window kept.
        """
        for dimension, budget in budgets.items():
            if budget.refill != "bucket":
                continue
            key = f"{host}|{dimension}"
            with self._lock:
                kept = self._windows.get(key)
                if _bounded_window(budget.limit, budget.remaining):
                    low = (budget.reset_at - now) * budget.limit / (budget.limit - budget.remaining)
                    kept = budget.window_s if kept is None or kept < low else min(kept, budget.window_s)
                    self._windows[key] = kept
            if kept is not None:
                budgets[dimension] = replace(budget, window_s=kept)
        return budgets


_default: Pacer | None = None
_default_lock = threading.Lock()
new_locks_in_child(sys.modules[__name__], "_default_lock")


def default_pacer() -> Pacer:
    """The process-wide pacer ``pace(client)`` uses when none is given."""
    global _default
    with _default_lock:
        if _default is None:
            _default = Pacer()
        return _default


# The headers model APIs take their key in: a provider's rate limits are per key (per organisation or
# project behind it), so two keys to one host are two budgets.
_KEY_HEADERS = ("authorization", "x-api-key", "api-key", "x-goog-api-key")


def _host(request: Any) -> str:
    """The budget a request draws on: its host, and a fingerprint of the API key it sends (a hash: the key
    itself is never kept, nor shared through a fleet's store)."""
    url = request.url
    host = f"{url.host}:{url.port}" if url.port else str(url.host)
    headers = request.headers
    for name in _KEY_HEADERS:
        key = headers.get(name)
        if key:
            return f"{host}#{hashlib.sha256(key.encode('utf-8', 'surrogateescape')).hexdigest()[:12]}"
    return host


def _settled(request: Any) -> bool:
    """Whether ``request`` holds a reservation (see :func:`pace`), which its response now settles."""
    reserved = bool(request.extensions.get("errcompact_paced"))
    request.extensions["errcompact_paced"] = False
    return reserved


def _release(pacer: Pacer, request: Any) -> None:
    """A send that raised before a response settled ``request`` (a dropped connection, a timeout): its
    reservation is given back, else it counted as in flight, slowing every request to the host, until it
    expired a minute later. Its turn stays spent: the request may have reached the server."""
    try:
        if _settled(request):
            pacer.observe(_host(request), 0, {}, True)
    except Exception:
        _log.debug("otel-errcompact: could not release a pacing reservation", exc_info=True)


async def _off_loop(pacer: Pacer, operation: Callable[..., V], *args: Any) -> V:
    """An operation of ``pacer`` from an async hook: on one of the library's threads when its store waits
    on I/O (:func:`~otel_errcompact.recovery.state.off_loop`), so the host's event loop runs its other
    tasks meanwhile; in line for the in-process store."""
    if not pacer.blocking:
        return operation(*args)
    return await off_loop(operation, *args)


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
            request.extensions["errcompact_paced"] = True
            delay = await _off_loop(p, p.reserve, _host(request))
            if delay > 0:
                await asyncio.sleep(delay)

        async def after_async(response: Any) -> None:
            request = response.request
            await _off_loop(p, p.observe, _host(request), response.status_code, response.headers, _settled(request))

        send_async = http.send

        async def paced_send_async(request: Any, *args: Any, **kwargs: Any) -> Any:
            try:
                return await send_async(request, *args, **kwargs)
            except BaseException:
                if request.extensions.get("errcompact_paced"):
                    await _off_loop(p, _release, p, request)
                raise

        hooks.setdefault("request", []).append(before_async)
        hooks.setdefault("response", []).append(after_async)
        http.send = paced_send_async
    else:

        def before(request: Any) -> None:
            request.extensions["errcompact_paced"] = True
            delay = p.reserve(_host(request))
            if delay > 0:
                time.sleep(delay)

        def after(response: Any) -> None:
            p.observe(_host(response.request), response.status_code, response.headers, _settled(response.request))

        send = http.send

        def paced_send(request: Any, *args: Any, **kwargs: Any) -> Any:
            try:
                return send(request, *args, **kwargs)
            except BaseException:
                _release(p, request)
                raise

        hooks.setdefault("request", []).append(before)
        hooks.setdefault("response", []).append(after)
        http.send = paced_send
    http.event_hooks = hooks
    http._errcompact_paced = True
    return client
