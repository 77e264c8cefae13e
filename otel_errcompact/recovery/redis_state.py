"""Breaker and pacer state shared by a fleet of workers through Redis, and a store that survives Redis.

:class:`RedisStateStore` is a peer of :class:`~otel_errcompact.recovery.state.InMemoryStateStore` behind the
same :class:`~otel_errcompact.recovery.state.RecoveryStateStore` protocol. Every operation is one Lua
script on one key, so it is atomic across workers and works on a single Redis, a primary with replicas, or a
cluster:

- all breakers of one tool live in one hash, ``<prefix>:breakers:<tool>``, a field per dedup key holding the
  breaker as JSON (state, failures, digest, opened/retry times, the argument fingerprints that tripped it,
  and the probe lease). Three failures from any workers open it for all; the half-open probe is a *lease*
  (``probe_until``): exactly one worker gets it, and if that worker dies mid-probe the lease runs out after
  ``probe_timeout_s`` and the next caller gets the probe, so a killed worker leaves nothing stuck;
- the pacing budgets of one host and API key live in one hash, ``<prefix>:pace:<host>`` (the key as its
  hash, never the key), a field per dimension. The latest rate-limit headers from any worker replace the
  estimate; every worker's reservation comes off it.

Times are read on Redis's clock: each worker passes its own (wall-clock) time, and the script adds the
offset between that clock and Redis's ``TIME``; the store takes it off the times it returns. The offset
rides on the calls the worker makes anyway: every script reads ``TIME`` and returns it, and the store
measures the offset from it (against its clock before and after the call) at its first call, again
every ``clock_check_s`` seconds, and on any call with a shorter round trip than the one the offset held
was measured on (a client's first call also connects); the very first script, with no offset known
yet, measures it itself from the worker's clock as the call was sent. So no round trip of its own runs
on the agent's thread.
Workers whose clocks disagree (a host without NTP, a VM resumed from a snapshot) so keep
one cooldown and one probe lease: a worker minutes behind would otherwise open breakers that half-open at
once for every other worker, and take probe leases the others see as run out. (A script that reads
``TIME`` and then writes needs Redis 5 or later, which replicates scripts by their effects.)

Footprint is bounded: each hash expires ``ttl_s`` after its last write (default a day), so the budgets of a
key no longer used (rotated out, a tenant gone) leave with it, and a tool keeps at most
``max_breakers_per_tool`` breakers (closed ones are dropped first).

:class:`FailoverStateStore` wraps the Redis store for production: each call has a bounded timeout (the
client's socket timeouts); when Redis is down or slow it answers from a local in-memory store instead,
says so once (a WARNING log and the ``errcompact.state.degraded`` counter), never raises into the host,
tries Redis again every ``retry_s`` seconds, and says when it is back.
"""

from __future__ import annotations

import json
import logging
import threading
import time
from collections.abc import Callable, Mapping
from typing import Any, TypeVar, cast

from otel_errcompact._checks import check_integer, check_seconds
from otel_errcompact._forked import new_locks_in_child
from otel_errcompact.recovery.state import (
    Admission,
    BreakerChange,
    BreakerSnapshot,
    BreakerState,
    BreakerUpdate,
    InMemoryStateStore,
    RateBudget,
    RecoveryStateStore,
)

__all__ = ["FailoverStateStore", "RedisStateStore", "fleet_prefix", "redis_state_store"]

_log = logging.getLogger("otel_errcompact")
V = TypeVar("V")

# Breakers as JSON: {"state", "failures", "digest", "opened_at", "retry_at", "probe_until", "fps": {fp: seen}}.
# cjson encodes an empty Lua table as {}, which decodes to an empty dict: fps stays an object.
_LUA_COMMON = """
local function load(raw)
  local b = cjson.decode(raw)
  if type(b.fps) ~= 'table' then b.fps = {} end
  return b
end
-- Redis's TIME, and the offset of the worker's clock to it: the one the worker knows, else (the worker's
-- first call) measured now from its clock's reading `sent` as it sent the call.
local function on_redis_clock(sent, known)
  local t = redis.call('TIME')
  local server = tonumber(t[1]) + tonumber(t[2]) / 1000000
  if known ~= '' then return server, tonumber(known) end
  return server, server - tonumber(sent)
end
local function out(key, b)
  return {key, b.state, b.failures, b.digest, tostring(b.opened_at or ''), tostring(b.retry_at or ''),
          tostring(b.probe_until or 0)}
end
"""

_ADMIT = _LUA_COMMON + """
local server, offset = on_redis_clock(ARGV[4], ARGV[5])
local fp, now, lease = ARGV[1], tonumber(ARGV[2]) + offset, tonumber(ARGV[3])
local all = redis.call('HGETALL', KEYS[1])
for i = 1, #all, 2 do
  local key, b = all[i], load(all[i + 1])
  if b.state ~= 'closed' and b.fps[fp] ~= nil then
    if b.state == 'open' and b.retry_at ~= nil and now >= b.retry_at then
      b.state = 'half_open'
      b.probe_until = now + lease
      redis.call('HSET', KEYS[1], key, cjson.encode(b))
      return {'probe', 'open', out(key, b), tostring(server)}
    end
    if b.state == 'half_open' and (b.probe_until or 0) <= now then
      b.probe_until = now + lease
      redis.call('HSET', KEYS[1], key, cjson.encode(b))
      return {'probe', '', out(key, b), tostring(server)}
    end
    return {'refused', '', out(key, b), tostring(server)}
  end
end
return {'allowed', '', {}, tostring(server)}
"""

_FAILURE = _LUA_COMMON + """
local server, offset = on_redis_clock(ARGV[10], ARGV[11])
local key, fp, digest = ARGV[1], ARGV[2], ARGV[3]
local now, threshold, cooldown = tonumber(ARGV[4]) + offset, tonumber(ARGV[5]), tonumber(ARGV[6])
local ttl, max_breakers, max_fps = tonumber(ARGV[7]), tonumber(ARGV[8]), tonumber(ARGV[9])
local raw = redis.call('HGET', KEYS[1], key)
local b
if raw then
  b = load(raw)
else
  if redis.call('HLEN', KEYS[1]) >= max_breakers then
    local all = redis.call('HGETALL', KEYS[1])
    local victim = nil
    for i = 1, #all, 2 do
      if load(all[i + 1]).state == 'closed' then victim = all[i] break end
    end
    redis.call('HDEL', KEYS[1], victim or all[1])
  end
  b = {state = 'closed', failures = 0, fps = {}}
end
b.failures = b.failures + 1
b.digest = digest
b.fps[fp] = now
local count, oldest, oldest_seen = 0, nil, nil
for f, seen in pairs(b.fps) do
  count = count + 1
  if oldest_seen == nil or seen < oldest_seen then oldest, oldest_seen = f, seen end
end
if count > max_fps then b.fps[oldest] = nil end
local old = b.state
if old == 'half_open' or (old == 'closed' and b.failures >= threshold) then
  b.state, b.opened_at, b.retry_at, b.probe_until = 'open', now, now + cooldown, 0
elseif old == 'open' and b.retry_at ~= nil then
  b.retry_at = math.max(b.retry_at, now + cooldown)
end
redis.call('HSET', KEYS[1], key, cjson.encode(b))
redis.call('EXPIRE', KEYS[1], ttl)
return {old, out(key, b), tostring(server)}
"""

_SUCCESS = _LUA_COMMON + """
local fp = ARGV[1]
local changed = {}
local all = redis.call('HGETALL', KEYS[1])
for i = 1, #all, 2 do
  local key, b = all[i], load(all[i + 1])
  if b.fps[fp] ~= nil then
    redis.call('HDEL', KEYS[1], key)
    if b.state ~= 'closed' then table.insert(changed, out(key, b)) end
  end
end
return changed
"""

_RELEASE = _LUA_COMMON + """
local raw = redis.call('HGET', KEYS[1], ARGV[1])
if raw then
  local b = load(raw)
  if b.state == 'half_open' then
    b.probe_until = 0
    redis.call('HSET', KEYS[1], ARGV[1], cjson.encode(b))
  end
end
return 1
"""

# Pacing: each field of the hash is one budget as JSON {"budget": {limit, remaining, reset_at, window_s, refill}
# | absent, "full_at": GCRA's theoretical arrival time | absent, "in_flight": [[expires_at, cost], ...]}: the
# same bookkeeping as InMemoryStateStore, in one atomic script.
_PACE_COMMON = """
local function on_redis_clock(sent, known)  -- as the breakers' scripts
  local t = redis.call('TIME')
  local server = tonumber(t[1]) + tonumber(t[2]) / 1000000
  if known ~= '' then return server, tonumber(known) end
  return server, server - tonumber(sent)
end
local function load(raw)
  local p = {}
  if raw then p = cjson.decode(raw) end
  if type(p.in_flight) ~= 'table' then p.in_flight = {} end
  return p
end
"""

_RESERVE = _PACE_COMMON + """
local server, offset = on_redis_clock(ARGV[4], ARGV[5])
local now, ttl = tonumber(ARGV[1]) + offset, tonumber(ARGV[2])
local delay = 0
for i = 6, #ARGV, 2 do
  local name, cost = ARGV[i], tonumber(ARGV[i + 1])
  local p = load(redis.call('HGET', KEYS[1], name))
  local kept = {}
  for _, r in ipairs(p.in_flight) do
    if r[1] > now then table.insert(kept, r) end
  end
  if cost > 0 then table.insert(kept, {now + ttl, cost}) end
  p.in_flight = kept
  local b = p.budget
  if b ~= nil and b ~= cjson.null then
    if b.refill == 'hold' then
      if b.reset_at - now > delay then delay = b.reset_at - now end
    elseif b.limit > 0 and b.window_s > 0 then
      local unit = b.window_s / b.limit
      local tat = math.max(tonumber(p.full_at) or now, now)
      local wait = tat - math.max(0, b.limit - 1) * unit - now  -- the turn (GCRA)
      if wait > delay then delay = wait end
      local left = b.reset_at - now  -- the share (share_delay)
      if left > 0 then
        local pending = 0
        for _, r in ipairs(kept) do pending = pending + r[2] end
        local share = math.max(0, math.min(left - (b.remaining - pending) * unit,
                                           left + math.max(0, pending - b.limit) * unit))
        if share > delay then delay = share end
      end
      if cost > 0 then p.full_at = tat + cost * unit end
    end
  end
  redis.call('HSET', KEYS[1], name, cjson.encode(p))
end
redis.call('EXPIRE', KEYS[1], tonumber(ARGV[3]))
return {tostring(delay), tostring(server)}
"""

_SETTLE = _PACE_COMMON + """
local budgets, release = cjson.decode(ARGV[1]), cjson.decode(ARGV[2])
for name, cost in pairs(release) do
  local raw = redis.call('HGET', KEYS[1], name)
  if raw then
    local p = load(raw)
    for i, r in ipairs(p.in_flight) do
      if r[2] == cost then table.remove(p.in_flight, i) break end
    end
    redis.call('HSET', KEYS[1], name, cjson.encode(p))
  end
end
local server, offset = on_redis_clock(ARGV[5], ARGV[6])
local now = tonumber(ARGV[4]) + offset
for name, b in pairs(budgets) do
  b.reset_at = b.reset_at + offset
  local p = load(redis.call('HGET', KEYS[1], name))
  local c = p.budget
  if b.refill == 'hold' then
    if c == nil or c == cjson.null or c.refill ~= 'hold' or b.reset_at > c.reset_at then p.budget = b end
  else
    if c == nil or c == cjson.null or c.refill == 'hold' or now >= c.reset_at or b.reset_at >= c.reset_at then
      p.budget = b
    end
    if b.limit > 0 and b.window_s > 0 then
      local unit = b.window_s / b.limit
      local full = now
      if now < b.reset_at then  -- full_at()
        local missing = (b.limit - b.remaining) * unit
        if b.refill == 'window' then full = b.reset_at + missing else full = math.max(b.reset_at, now + missing) end
      end
      local pending = 0
      for _, r in ipairs(p.in_flight) do pending = pending + r[2] end
      full = full + pending * unit
      if p.full_at == nil or full > tonumber(p.full_at) then p.full_at = full end
    end
  end
  redis.call('HSET', KEYS[1], name, cjson.encode(p))
end
redis.call('EXPIRE', KEYS[1], tonumber(ARGV[3]))
return tostring(server)
"""


def _state(value: Any) -> BreakerState:
    text = value.decode() if isinstance(value, bytes) else str(value)
    if text not in ("closed", "open", "half_open"):
        raise ValueError(f"unknown breaker state {text!r} in the shared store")
    return cast(BreakerState, text)


def _snapshot(tool: str, row: list[Any], offset: float, server_now: float) -> BreakerSnapshot:
    """A breaker as a script returned it, its times taken back from Redis's clock to the worker's."""
    key, state, failures, digest, opened_at, retry_at, probe_until = (
        v.decode() if isinstance(v, bytes) else v for v in row
    )
    return BreakerSnapshot(
        tool=tool,
        key=str(key),
        state=_state(state),
        failures=int(failures),
        digest=str(digest),
        opened_at=float(opened_at) - offset if opened_at else None,
        retry_at=float(retry_at) - offset if retry_at else None,
        probe_out=state == "half_open" and float(probe_until or 0) > server_now,
    )


class RedisStateStore:
    """The recovery state of a whole fleet, in one Redis (see the module docstring).

    ``client`` is a ``redis.Redis``; give it short ``socket_timeout`` and ``socket_connect_timeout`` (as
    :func:`redis_state_store` does) and wrap the store in :class:`FailoverStateStore` so a slow or missing
    Redis never stalls or breaks an agent.
    """

    def __init__(
        self,
        client: Any,
        *,
        prefix: str = "errcompact",
        probe_timeout_s: float = 30.0,
        ttl_s: int = 86_400,
        max_breakers_per_tool: int = 64,
        max_fingerprints: int = 16,
        reservation_ttl_s: float = 60.0,
        clock: Callable[[], float] = time.time,
        clock_check_s: float = 60.0,
    ) -> None:
        check_seconds("RedisStateStore", "probe_timeout_s", probe_timeout_s, zero=False)
        check_integer("RedisStateStore", "ttl_s", ttl_s, 1)
        check_integer("RedisStateStore", "max_breakers_per_tool", max_breakers_per_tool, 1)
        check_integer("RedisStateStore", "max_fingerprints", max_fingerprints, 1)
        check_seconds("RedisStateStore", "reservation_ttl_s", reservation_ttl_s, zero=False)
        check_seconds("RedisStateStore", "clock_check_s", clock_check_s, zero=False)
        self.client = client
        self.clock = clock
        """The clock the callers' times come from (the breakers' and the pacer's; wall-clock seconds)."""
        self.clock_check_s = clock_check_s
        self._offset: float | None = None  # Redis's clock minus this worker's; None until a script returned
        self._offset_due = float("-inf")  # time.monotonic() at which the offset is measured again
        self._round_trip = float("inf")  # of the call the offset held was measured on
        self.prefix = prefix
        self.probe_timeout_s = probe_timeout_s
        self.ttl_s = ttl_s
        self.max_breakers_per_tool = max_breakers_per_tool
        self.max_fingerprints = max_fingerprints
        self.reservation_ttl_s = reservation_ttl_s
        self._admit = client.register_script(_ADMIT)
        self._failure = client.register_script(_FAILURE)
        self._success = client.register_script(_SUCCESS)
        self._release = client.register_script(_RELEASE)
        self._reserve = client.register_script(_RESERVE)
        self._settle = client.register_script(_SETTLE)

    def _clock_args(self) -> tuple[float, float | None, list[str]]:
        """This worker's clock as a call is sent and the offset to Redis's clock known then (None before
        the first call), with the two script arguments that pass them."""
        sent, known = self.clock(), self._offset
        return sent, known, [repr(sent), "" if known is None else repr(known)]

    def _offset_used(self, sent: float, known: float | None, server: Any) -> float:
        """The offset a script used (the one known, else the one it measured), after measuring it again
        from the ``TIME`` it returned: against this worker's clock before and after the call.

        A measurement is off by up to half its round trip, so one taken when due is kept only until a
        call with a shorter round trip comes: the first call of a client also connects, and Redis reads
        ``TIME`` at the end of that, so its offset runs ahead by half the connect (on loopback a first
        call took 0.5 ms against 0.1 ms for the next ones, up to 5.6 ms on a busy machine; a TLS
        handshake or a network adds round trips), and a breaker opened with it would half-open that much
        late for every other worker."""
        received = self.clock()
        server_time = float(server.decode() if isinstance(server, bytes) else server)
        round_trip = received - sent
        checked = time.monotonic()
        due = known is None or checked >= self._offset_due
        if due or 0.0 <= round_trip < self._round_trip:
            self._offset = server_time - (sent + received) / 2
            self._round_trip = round_trip if round_trip >= 0.0 else float("inf")
            if due:
                self._offset_due = checked + self.clock_check_s
        return known if known is not None else server_time - sent

    def _breakers(self, tool: str) -> str:
        return f"{self.prefix}:breakers:{tool}"

    def _pace(self, host: str) -> str:
        return f"{self.prefix}:pace:{host}"

    # -- breaker -------------------------------------------------------------------------------------

    def breaker_admit(self, tool: str, fingerprint: str, now: float) -> Admission:
        sent, known, clock_args = self._clock_args()
        verdict, changed_from, row, server = self._admit(
            keys=[self._breakers(tool)], args=[fingerprint, repr(now), repr(self.probe_timeout_s), *clock_args]
        )
        verdict = verdict.decode() if isinstance(verdict, bytes) else verdict
        offset = self._offset_used(sent, known, server)
        if verdict == "allowed":
            return Admission(True)
        snapshot = _snapshot(tool, row, offset, self.clock() + offset)
        changes: tuple[BreakerChange, ...] = ()
        if changed_from:
            changes = (BreakerChange(tool, snapshot.key, "open", "half_open", snapshot.failures, snapshot.digest),)
        if verdict == "probe":
            return Admission(True, snapshot, probe=True, changes=changes)
        return Admission(False, snapshot)

    def breaker_failure(
        self, tool: str, key: str, fingerprint: str, digest: str, now: float, *, threshold: int, cooldown_s: float
    ) -> BreakerUpdate:
        sent, known, clock_args = self._clock_args()
        old, row, server = self._failure(
            keys=[self._breakers(tool)],
            args=[
                key, fingerprint, digest, repr(now), max(1, threshold), repr(max(0.0, cooldown_s)),
                self.ttl_s, self.max_breakers_per_tool, self.max_fingerprints, *clock_args,
            ],
        )
        before = _state(old)
        offset = self._offset_used(sent, known, server)
        snapshot = _snapshot(tool, row, offset, self.clock() + offset)
        if before == snapshot.state:
            return BreakerUpdate(snapshot)
        return BreakerUpdate(snapshot, (BreakerChange(tool, key, before, snapshot.state, snapshot.failures, digest),))

    def breaker_success(self, tool: str, fingerprint: str, now: float) -> tuple[BreakerChange, ...]:
        rows = self._success(keys=[self._breakers(tool)], args=[fingerprint])
        changes = []
        offset = self._offset or 0.0  # a change's times are not read: the latest offset known serves
        for row in rows:
            s = _snapshot(tool, row, offset, self.clock() + offset)
            changes.append(BreakerChange(tool, s.key, s.state, "closed", s.failures, s.digest))
        return tuple(changes)

    def breaker_release(self, tool: str, key: str) -> None:
        self._release(keys=[self._breakers(tool)], args=[key])

    def breaker_snapshot(self, tool: str, key: str) -> BreakerSnapshot | None:
        """The breaker as Redis holds it, read with Redis's ``TIME`` in one round trip (its times are
        taken back to this worker's clock)."""
        pipe = self.client.pipeline(transaction=False)
        pipe.hget(self._breakers(tool), key)
        pipe.time()
        before = self.clock()
        raw, (seconds, micros) = pipe.execute()
        after = self.clock()
        if raw is None:
            return None
        server_now = float(seconds) + float(micros) / 1e6 + (after - before) / 2
        b = json.loads(raw)
        row = [key, b["state"], b["failures"], b.get("digest", ""), b.get("opened_at"), b.get("retry_at"),
               b.get("probe_until")]  # fmt: skip
        return _snapshot(tool, row, server_now - after, server_now)

    # -- pacer ---------------------------------------------------------------------------------------

    def pace_reserve(self, costs: Mapping[str, float], now: float) -> float:
        delay = 0.0
        for host, group in _by_host(costs).items():
            sent, known, clock_args = self._clock_args()
            args: list[Any] = [repr(now), repr(self.reservation_ttl_s), self.ttl_s, *clock_args]
            for name, cost in group.items():
                args += [name, repr(float(cost))]
            wait, server = self._reserve(keys=[self._pace(host)], args=args)
            self._offset_used(sent, known, server)
            delay = max(delay, float(wait))
        return delay

    def pace_settle(
        self, budgets: Mapping[str, RateBudget], now: float, release: Mapping[str, float] | None = None
    ) -> None:
        if not budgets and not release:
            return
        by_host = _by_host(budgets)
        released = _by_host(release or {})
        for host in by_host.keys() | released.keys():
            encoded = {
                name: {
                    "limit": b.limit,
                    "remaining": b.remaining,
                    "reset_at": b.reset_at,  # the script adds the offset
                    "window_s": b.window_s,
                    "refill": b.refill,
                }
                for name, b in by_host.get(host, {}).items()
            }
            sent, known, clock_args = self._clock_args()
            server = self._settle(
                keys=[self._pace(host)],
                args=[
                    json.dumps(encoded) if encoded else "{}",
                    json.dumps(released[host]) if host in released else "{}",
                    self.ttl_s,
                    repr(now),
                    *clock_args,
                ],
            )
            self._offset_used(sent, known, server)


def _by_host(named: Mapping[str, V]) -> dict[str, dict[str, V]]:
    """Budgets (``host|dimension``) grouped by their host and API key: each group is one hash with its own
    expiry, so a key no longer used leaves nothing behind while others stay busy (and one script touches
    one key, as a cluster needs)."""
    groups: dict[str, dict[str, V]] = {}
    for name, value in named.items():
        groups.setdefault(name.rpartition("|")[0], {})[name] = value
    return groups


class FailoverStateStore:
    """A shared store with a local fallback: Redis when it answers, in-process state when it does not.

    Never raises into the host. The first failure of an outage is logged once at WARNING and counted
    (``on_degraded``, wired by ``init()`` to the ``errcompact.state.degraded`` counter); calls then go to
    the local store without touching Redis until ``retry_s`` has passed, when one call tries Redis again.
    The return to Redis is logged at INFO. State written locally during an outage stays local: the fleet
    view resumes from what Redis holds.
    """

    def __init__(
        self,
        primary: RecoveryStateStore,
        fallback: RecoveryStateStore | None = None,
        *,
        retry_s: float = 5.0,
        on_degraded: Callable[[str], None] | None = None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.primary = primary
        self.fallback: RecoveryStateStore = fallback or InMemoryStateStore()
        self.retry_s = retry_s
        self.on_degraded = on_degraded
        """Called with the exception's type name at the first failure of each outage; ``init()`` sets it
        once its meter exists (see :meth:`FleetMetrics.watch <otel_errcompact.recovery.fleet.FleetMetrics.watch>`)."""
        self._clock = clock
        self._lock = threading.Lock()
        new_locks_in_child(self, "_lock")
        self._down_until = 0.0
        self.degraded = False
        """True while calls are answered from the local store."""

    def _call(self, name: str, *args: Any, **kwargs: Any) -> Any:
        retrying = False  # this call claimed the retry (see _retry_due)
        if self.degraded:
            if not self._retry_due():
                return getattr(self.fallback, name)(*args, **kwargs)
            retrying = True
        try:
            result = getattr(self.primary, name)(*args, **kwargs)
        except Exception as exc:  # redis errors, timeouts, a dead connection: all mean "use local state"
            with self._lock:
                first = not self.degraded
                self.degraded = True
                self._down_until = self._clock() + self.retry_s
            if first:
                _log.warning(
                    "otel-errcompact: shared recovery state unavailable (%s: %s); using this process's own "
                    "state until it answers again",
                    type(exc).__name__, exc,
                )
                on_degraded = self.on_degraded
                if on_degraded is not None:
                    try:
                        on_degraded(type(exc).__name__)
                    except Exception:
                        _log.debug("otel-errcompact: degraded listener failed", exc_info=True)
            return getattr(self.fallback, name)(*args, **kwargs)
        except BaseException:  # interrupted (KeyboardInterrupt, a thread's exit): the retry it claimed ends here
            if retrying:
                with self._lock:
                    self._down_until = self._clock() + self.retry_s
            raise
        if self.degraded:
            with self._lock:
                was, self.degraded = self.degraded, False
            if was:
                _log.info("otel-errcompact: shared recovery state is back; breakers and pacing are shared again")
        return result

    def _retry_due(self) -> bool:
        """Whether this call is the one that tries Redis again during an outage: the first after
        ``retry_s``, which claims the retry until it has its answer, so the callers that come meanwhile
        (other threads of a busy worker) keep their local answers instead of each waiting out the
        timeout on a Redis still down, however long that timeout is against ``retry_s``."""
        with self._lock:
            if self._clock() < self._down_until:
                return False
            self._down_until = float("inf")  # until the try fails (then retry_s again) or Redis answers
            return True

    def breaker_admit(self, tool: str, fingerprint: str, now: float) -> Admission:
        result: Admission = self._call("breaker_admit", tool, fingerprint, now)
        return result

    def breaker_failure(
        self, tool: str, key: str, fingerprint: str, digest: str, now: float, *, threshold: int, cooldown_s: float
    ) -> BreakerUpdate:
        result: BreakerUpdate = self._call(
            "breaker_failure", tool, key, fingerprint, digest, now, threshold=threshold, cooldown_s=cooldown_s
        )
        return result

    def breaker_success(self, tool: str, fingerprint: str, now: float) -> tuple[BreakerChange, ...]:
        result: tuple[BreakerChange, ...] = self._call("breaker_success", tool, fingerprint, now)
        return result

    def breaker_release(self, tool: str, key: str) -> None:
        self._call("breaker_release", tool, key)

    def breaker_snapshot(self, tool: str, key: str) -> BreakerSnapshot | None:
        result: BreakerSnapshot | None = self._call("breaker_snapshot", tool, key)
        return result

    def pace_reserve(self, costs: Mapping[str, float], now: float) -> float:
        result: float = self._call("pace_reserve", costs, now)
        return result

    def pace_settle(
        self, budgets: Mapping[str, RateBudget], now: float, release: Mapping[str, float] | None = None
    ) -> None:
        self._call("pace_settle", budgets, now, release)


def fleet_prefix(namespace: str | None) -> str:
    """The key prefix of a fleet: ``errcompact:<namespace>`` (``init()`` passes the service name, or
    ``OTEL_ERRCOMPACT_FLEET_NAMESPACE``), so two services sharing one Redis, a tool name and its arguments
    do not share breakers or budgets; ``errcompact`` alone without one."""
    return f"errcompact:{namespace}" if namespace else "errcompact"


def redis_state_store(
    url: str,
    *,
    timeout_s: float = 0.25,
    prefix: str | None = None,
    namespace: str | None = None,
    on_degraded: Callable[[str], None] | None = None,
) -> FailoverStateStore:
    """The fleet store ``init(redis_url=…)`` builds: Redis at ``url`` with ``timeout_s`` socket timeouts,
    behind a local fallback; its keys under ``prefix``, else under :func:`fleet_prefix` of ``namespace``.
    Raises ``ImportError`` with the install hint when ``redis`` is missing."""
    try:
        import redis
    except ImportError as exc:  # pragma: no cover - depends on the environment
        raise ImportError("a Redis state store needs redis-py: pip install 'otel-errcompact[redis]'") from exc
    client = redis.Redis.from_url(
        url,
        socket_timeout=timeout_s,
        socket_connect_timeout=timeout_s,
        retry_on_timeout=False,
        health_check_interval=0,
    )
    store = RedisStateStore(client, prefix=prefix if prefix is not None else fleet_prefix(namespace))
    return FailoverStateStore(store, on_degraded=on_degraded)
