"""The response cache on Redis (store/cache.py): an entry is a hash that expires with its TTL, found
for a purge through sets per model and per key (members whose entry expired are dropped as a purge or
the prune path meets them); the counters are a hash per hour, kept 31 days."""

from __future__ import annotations

from typing import Any

import orjson

from .cache import CacheCounts, CacheEntry, CountRow, hour_of
from .redis import RedisStore

COUNTS_KEPT_S = 31 * 86400
_FIELDS = ("hits", "misses", "bypasses", "bytes", "saved_cost")
_SEP = "\x1f"


class RedisCache:
    def __init__(self, store: RedisStore) -> None:
        self.store = store

    @property
    def _redis(self) -> Any:
        """The store's client (its replies are bytes: no decoding configured)."""
        return self.store._redis

    def _k(self, *parts: str) -> str:
        return self.store._k("cache", *parts)

    async def get(self, entry_key: str, now: float) -> CacheEntry | None:
        raw: dict[bytes, bytes] = await self._redis.hgetall(self._k("e", entry_key))
        if not raw:
            return None
        f = {k.decode(): v for k, v in raw.items()}
        if float(f["expires_at"]) <= now:  # its TTL is the same instant: only a clock skew sees this
            await self._redis.delete(self._k("e", entry_key))
            return None
        return CacheEntry(
            entry_key=entry_key,
            key_id=f["key_id"].decode(),
            model=f["model"].decode(),
            door=f["door"].decode(),
            created_at=float(f["created_at"]),
            expires_at=float(f["expires_at"]),
            generation_id=f["generation_id"].decode(),
            usage=orjson.loads(f["usage"]),
            cost=float(f["cost"]),
            events=f["events"],
        )

    async def put(self, entry: CacheEntry) -> None:
        key = self._k("e", entry.entry_key)
        mapping: dict[str, Any] = {
            "key_id": entry.key_id,
            "model": entry.model,
            "door": entry.door,
            "created_at": repr(entry.created_at),
            "expires_at": repr(entry.expires_at),
            "generation_id": entry.generation_id,
            "usage": orjson.dumps(entry.usage),
            "cost": repr(entry.cost),
            "events": entry.events,
        }
        async with self._redis.pipeline(transaction=True) as pipe:
            pipe.delete(key)
            pipe.hset(key, mapping=mapping)
            pipe.pexpireat(key, int(entry.expires_at * 1000))
            pipe.sadd(self._k("all"), entry.entry_key)
            pipe.sadd(self._k("m", entry.model), entry.entry_key)
            pipe.sadd(self._k("k", entry.key_id), entry.entry_key)
            await pipe.execute()

    async def purge(self, *, model: str | None = None, key_id: str | None = None) -> int:
        r = self._redis
        sets = [self._k("m", model)] if model is not None else []
        sets += [self._k("k", key_id)] if key_id is not None else []
        members: set[bytes] = await r.sinter(sets) if sets else await r.smembers(self._k("all"))
        return await self._drop(members, delete=True)

    async def _drop(self, members: set[bytes], delete: bool) -> int:
        """Delete (or, `delete` False, only forget the expired of) these entries and their set members."""
        r, gone = self._redis, 0
        for entry_key in [m.decode() for m in members]:
            key = self._k("e", entry_key)
            model, key_id = await r.hmget(key, ["model", "key_id"])
            if not delete and model is not None:
                continue
            async with r.pipeline(transaction=True) as pipe:
                pipe.delete(key)
                pipe.srem(self._k("all"), entry_key)
                if model is not None:
                    pipe.srem(self._k("m", model.decode()), entry_key)
                    pipe.srem(self._k("k", key_id.decode()), entry_key)
                deleted, *_ = await pipe.execute()
            gone += int(deleted)
        return gone

    async def prune(self, now: float) -> int:
        """Redis expired the entries itself: what is left is the index members that point nowhere
        (a per-model or per-key member of an expired entry goes at the next purge that meets it)."""
        members: set[bytes] = await self._redis.smembers(self._k("all"))
        await self._drop(members, delete=False)
        return 0

    async def count(self, model: str, key_id: str, counts: CacheCounts, now: float) -> None:
        hour = hour_of(now)
        key = self._k("counts", repr(hour))
        prefix = model + _SEP + key_id + _SEP
        async with self._redis.pipeline(transaction=False) as pipe:
            for name in _FIELDS[:4]:
                value = getattr(counts, name)
                if value:
                    pipe.hincrby(key, prefix + name, value)
            if counts.saved_cost:
                pipe.hincrbyfloat(key, prefix + "saved_cost", counts.saved_cost)
            pipe.expire(key, COUNTS_KEPT_S)
            pipe.zadd(self._k("hours"), {repr(hour): hour})
            await pipe.execute()

    async def counts(self, since: float) -> list[CountRow]:
        r = self._redis
        hours: list[bytes] = await r.zrangebyscore(self._k("hours"), hour_of(since), "+inf")
        rows: dict[tuple[str, str], CountRow] = {}
        for hour in hours:
            raw: dict[bytes, bytes] = await r.hgetall(self._k("counts", hour.decode()))
            for field, value in raw.items():
                model, key_id, name = field.decode().split(_SEP)
                row = rows.setdefault((model, key_id), CountRow(model, key_id))
                if name == "saved_cost":
                    row.counts.saved_cost += float(value)
                else:
                    setattr(row.counts, name, getattr(row.counts, name) + int(value))
        return list(rows.values())
