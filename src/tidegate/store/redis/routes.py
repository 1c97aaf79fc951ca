"""Route health shared through Redis (docs/api-operations.md §12): instances on one Redis see each other's breakers.

Keys (under the store's prefix): `route:{route}:failures` the consecutive failures before the first
byte, counted by every instance (forgotten 10 minutes after the last); `route:{route}:open` the wall
clock time until which the route is open, expiring then; `route:{route}:probe` the instance that
claimed the route's one half-open probe after the cooldown (expiring after another cooldown, so a
prober that died does not hold it). Only failures and the first success after
them write; the instances read the open routes once a second (`gateway/health.py`), never per request.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

import redis.asyncio as aioredis

FAILURES_TTL_MS = 600_000

# INCR the count; at the threshold, open the route for everyone (the longer of any open already set)
_FAILED = """
local n = redis.call('INCR', KEYS[1])
redis.call('PEXPIRE', KEYS[1], ARGV[4])
if n >= tonumber(ARGV[1]) then
  local old = tonumber(redis.call('GET', KEYS[2]) or '0')
  local untl = tonumber(ARGV[2])
  if old > untl then untl = old end
  redis.call('SET', KEYS[2], tostring(untl), 'PX', math.max(1, math.ceil((untl - tonumber(ARGV[3])) * 1000)))
  return tostring(untl)
end
return false
"""


class RedisRouteHealth:
    def __init__(self, client: Callable[[], aioredis.Redis], key: Callable[..., str]) -> None:
        self._client = client
        self._key = key

    async def route_failed(self, route: str, threshold: int, open_s: float) -> float | None:
        """Count a failure everywhere; the wall-clock time the route is open until, once it opened."""
        now = time.time()
        script = self._client().register_script(_FAILED)
        keys = [self._key("route", route, "failures"), self._key("route", route, "open")]
        out: Any = await script(keys=keys, args=[threshold, now + open_s, now, FAILURES_TTL_MS])
        return None if out is None else float(out)

    async def route_recovered(self, route: str) -> None:
        keys = [self._key("route", route, part) for part in ("failures", "open", "probe")]
        await self._client().delete(*keys)

    async def claim_probe(self, route: str, ttl_s: float) -> bool:
        key = self._key("route", route, "probe")
        return bool(await self._client().set(key, "1", nx=True, px=max(1, int(ttl_s * 1000))))

    async def recovered_routes(self, routes: list[str]) -> set[str]:
        if not routes:
            return set()
        values = await self._client().mget([self._key("route", r, "failures") for r in routes])
        return {r for r, v in zip(routes, values, strict=True) if v is None}

    async def open_routes(self, routes: list[str]) -> dict[str, float]:
        """The routes open now, with the wall-clock time each stays open until."""
        if not routes:
            return {}
        values = await self._client().mget([self._key("route", r, "open") for r in routes])
        return {r: float(v) for r, v in zip(routes, values, strict=True) if v is not None}
