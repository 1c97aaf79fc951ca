"""The response cache on Redis (store/cache.py): an entry is a hash that expires with its TTL, found
for a purge through sets per model and per key (members whose entry expired are dropped as a purge or
the prune path meets them); the counters are a hash per hour, kept 31 days. The ceiling: a sorted
set of last uses (`lru`), each entry's size (`sizes`) and their total, moved by the scripts that
write and drop an entry; an entry Redis expired keeps its size counted until the prune or an
eviction meets it."""

from __future__ import annotations

from typing import Any

import orjson

from ..cache import CacheCounts, CacheEntry, CountRow, hour_of
from .store import RedisStore

COUNTS_KEPT_S = 31 * 86400
_FIELDS = ("hits", "misses", "bypasses", "bytes", "saved_cost")
_SEP = "\x1f"


# the entry written, then the least recently used popped off `lru` until the total fits (an entry
# that already expired is popped like any: its size still counted)
PUT = """
local member, size = ARGV[1], tonumber(ARGV[2])
local old = redis.call('HGET', KEYS[3], member)
if old then redis.call('DECRBY', KEYS[4], old) end
redis.call('DEL', KEYS[1])
redis.call('HSET', KEYS[1], unpack(ARGV, 8))
redis.call('PEXPIREAT', KEYS[1], ARGV[4])
redis.call('SADD', KEYS[5], member)
redis.call('SADD', KEYS[6], member)
redis.call('SADD', KEYS[7], member)
redis.call('ZADD', KEYS[2], ARGV[3], member)
redis.call('HSET', KEYS[3], member, size)
local total = redis.call('INCRBY', KEYS[4], size)
local evicted = 0
while total > tonumber(ARGV[5]) do
  local popped = redis.call('ZPOPMIN', KEYS[2])
  if #popped == 0 then break end
  local victim = popped[1]
  local vsize = redis.call('HGET', KEYS[3], victim)
  redis.call('HDEL', KEYS[3], victim)
  if vsize then total = redis.call('DECRBY', KEYS[4], vsize) end
  local vkey = ARGV[6] .. victim
  local mk = redis.call('HMGET', vkey, 'model', 'key_id')
  evicted = evicted + redis.call('DEL', vkey)
  redis.call('SREM', KEYS[5], victim)
  if mk[1] then
    redis.call('SREM', ARGV[7] .. 'm:' .. mk[1], victim)
    redis.call('SREM', ARGV[7] .. 'k:' .. mk[2], victim)
  end
end
return evicted
"""
# one entry gone (ARGV[3] "0": only if Redis expired it already), its size off the total
DROP = """
local mk = redis.call('HMGET', KEYS[1], 'model', 'key_id')
if ARGV[3] == '0' and mk[1] then return 0 end
local deleted = redis.call('DEL', KEYS[1])
redis.call('SREM', KEYS[5], ARGV[1])
if mk[1] then
  redis.call('SREM', ARGV[2] .. 'm:' .. mk[1], ARGV[1])
  redis.call('SREM', ARGV[2] .. 'k:' .. mk[2], ARGV[1])
end
redis.call('ZREM', KEYS[2], ARGV[1])
local size = redis.call('HGET', KEYS[3], ARGV[1])
if size then
  redis.call('HDEL', KEYS[3], ARGV[1])
  redis.call('DECRBY', KEYS[4], size)
end
return deleted
"""
_META = ("key_id", "model", "door", "created_at", "expires_at", "generation_id", "usage", "cost")


class RedisCache:
    def __init__(self, store: RedisStore) -> None:
        self.store = store
        self._scripts: dict[str, Any] = {}

    def _script(self, name: str) -> Any:
        if name not in self._scripts:
            self._scripts[name] = self._redis.register_script(PUT if name == "put" else DROP)
        return self._scripts[name]

    def _ledger(self) -> list[str]:
        """The keys every write of an entry moves: last uses, sizes, the total, the set of all."""
        return [self._k("lru"), self._k("sizes"), self._k("total"), self._k("all")]

    @property
    def _redis(self) -> Any:
        """The store's client (its replies are bytes: no decoding configured)."""
        return self.store._redis

    def _k(self, *parts: str) -> str:
        return self.store._k("cache", *parts)

    async def get(self, entry_key: str, now: float, *, events: bool = True) -> CacheEntry | None:
        key = self._k("e", entry_key)
        fields = (*_META, "events") if events else _META
        async with self._redis.pipeline(transaction=False) as pipe:
            pipe.hmget(key, fields)
            pipe.zadd(self._k("lru"), {entry_key: now}, xx=True)  # its last use (only if it is there)
            pipe.hget(self._k("sizes"), entry_key)
            values, _, size = await pipe.execute()
        if values[0] is None:
            return None
        f = dict(zip(fields, values, strict=True))
        if float(f["expires_at"]) <= now:  # its TTL is the same instant: only a clock skew sees this
            await self._drop_one(entry_key, delete=True)
            return None
        data = f["events"] if events else b""
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
            events=data,
            size=len(data) if events else int(size or 0),
        )

    async def put(self, entry: CacheEntry, max_total_bytes: int) -> int:
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
        lru, sizes, total, every = self._ledger()
        keys = [self._k("e", entry.entry_key), lru, sizes, total, every]
        keys += [self._k("m", entry.model), self._k("k", entry.key_id)]
        args: list[Any] = [
            entry.entry_key,
            len(entry.events),
            repr(entry.created_at),
            int(entry.expires_at * 1000),
            max_total_bytes,
            self._k("e", ""),
            self._k(""),
        ]
        for name, value in mapping.items():
            args += [name, value]
        evicted = await self._script("put")(keys=keys, args=args)
        return int(evicted)

    async def purge(self, *, model: str | None = None, key_id: str | None = None) -> int:
        r = self._redis
        sets = [self._k("m", model)] if model is not None else []
        sets += [self._k("k", key_id)] if key_id is not None else []
        members: set[bytes] = await r.sinter(sets) if sets else await r.smembers(self._k("all"))
        return await self._drop(members, delete=True)

    async def _drop(self, members: set[bytes], delete: bool) -> int:
        """Delete (or, `delete` False, only forget the expired of) these entries and their set members."""
        gone = 0
        for entry_key in [m.decode() for m in members]:
            gone += await self._drop_one(entry_key, delete)
        return gone

    async def _drop_one(self, entry_key: str, delete: bool) -> int:
        keys = [self._k("e", entry_key), *self._ledger()]
        deleted = await self._script("drop")(keys=keys, args=[entry_key, self._k(""), "1" if delete else "0"])
        return int(deleted)

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
