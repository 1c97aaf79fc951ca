"""The console's store on Redis (store/console.py).

Layout, under the store's prefix:
- `roll:{res}:{t}` hash per bucket (res 60, 3600, 86400 s), one field per `{model}\\x1f{provider}\\x1f{key}`
  and sum (`r` requests, `e` errors, `i`/`o` tokens, `c` cost, `h{n}` the TTFT histogram), added to
  with HINCRBY/HINCRBYFLOAT as each record ends and expiring with its resolution's retention.
- `console:gens` zset of ended records' ids by created_at: Redis keeps no index by time, and the
  log pages on it (a record still running is not in it).
- `audit` zset of `{ulid}\\x00{json}` members, all score 0: lexicographic order is time order.
- `bodies:{id}` a JSON string expiring with the body retention.
- `console:secret` the console's session-signing secret, set once (SET NX), never expiring.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, cast

import orjson

from ..console import (
    HIST_BUCKETS,
    RESOLUTIONS,
    AuditEntry,
    Bodies,
    Bucket,
    LogFilter,
    Rollup,
    SeriesQuery,
)

if TYPE_CHECKING:
    from ...records import GenerationRecord
    from .store import RedisStore

from .rollups import _SEP, _SUM

_PAGE = 200  # ids read from `console:gens` per round while a filtered page fills
_SCAN_LIMIT = 20_000  # records looked at for one filtered page at most (Redis has no per-filter index)


def _buckets(t: float, flat: dict[bytes, bytes], q: SeriesQuery) -> dict[str, Bucket]:
    found: dict[str, Bucket] = {}
    index = {"model": 0, "provider": 1, "key": 2}.get(q.by)
    for raw, value in flat.items():
        name, _, field = raw.decode().rpartition(_SUM)
        model, provider, key_id = name.split(_SEP)
        if (
            (q.model and model != q.model)
            or (q.provider and provider != q.provider)
            or (q.key_id and key_id != q.key_id)
        ):
            continue
        group = (model, provider, key_id)[index] if index is not None else "all"
        b = found.setdefault(group, Bucket(t, group))
        if field == "r":
            b.requests += int(value)
        elif field == "e":
            b.errors += int(value)
        elif field == "i":
            b.input_tokens += int(value)
        elif field == "o":
            b.output_tokens += int(value)
        elif field == "c":
            b.cost += float(value)
        elif field.startswith("h") and int(field[1:]) < HIST_BUCKETS:
            b.hist[int(field[1:])] += int(value)
    return found


class RedisConsole:
    def __init__(self, store: RedisStore) -> None:
        self.store = store

    async def series(self, query: SeriesQuery) -> list[Bucket]:
        await self.store.rollups.flush()  # this process's latest records, summed but not yet written
        starts = range(int(query.start), int(query.end), query.bucket_s)
        pipe = self.store._redis.pipeline(transaction=False)
        for t in starts:
            pipe.hgetall(self.store._k("roll", str(query.bucket_s), str(t)))
        found: list[Bucket] = []
        for t, flat in zip(starts, await pipe.execute(), strict=True):
            found.extend(_buckets(float(t), flat, query).values())
        return found

    async def generations(self, where: LogFilter, limit: int) -> list[GenerationRecord]:
        redis, index = self.store._redis, self.store._k("console", "gens")
        if where.id is not None:
            record = await self.store.get_generation(where.id)
            return [record] if record is not None and _matches(record, where) else []
        high = "+inf" if where.before is None else repr(where.before[0])
        low = "-inf" if where.since is None else repr(where.since)
        found: list[GenerationRecord] = []
        looked, offset = 0, 0
        while len(found) < limit and looked < _SCAN_LIMIT:
            ids = cast(
                "list[tuple[bytes, float]]",
                await redis.zrevrangebyscore(index, high, low, start=offset, num=_PAGE, withscores=True),
            )
            if not ids:
                break
            offset += len(ids)
            looked += len(ids)
            records = await self._records([gid.decode() for gid, _ in ids])
            found.extend(r for r in records if _matches(r, where))
        found.sort(key=lambda r: (r.created_at, r.id), reverse=True)
        return found[:limit]

    async def _records(self, ids: list[str]) -> list[GenerationRecord]:
        from .store import _gen_from

        pipe = self.store._redis.pipeline(transaction=False)
        for gid in ids:
            pipe.hgetall(self.store._k("gen", gid))
        return [
            _gen_from({k.decode(): orjson.loads(v) for k, v in flat.items()}) for flat in await pipe.execute() if flat
        ]

    def count(self, rollup: Rollup) -> None:
        self.store.rollups.count(rollup)

    async def add_audit(self, entry: AuditEntry) -> None:
        member = entry.id + "\x00" + orjson.dumps(entry.public()).decode()
        await self.store._redis.zadd(self.store._k("audit"), {member: 0})

    async def audit(self, limit: int, before: str | None) -> list[AuditEntry]:
        high = "+" if before is None else "(" + before
        raw = cast(
            "list[bytes]", await self.store._redis.zrevrangebylex(self.store._k("audit"), high, "-", start=0, num=limit)
        )
        entries = []
        for member in raw:
            d = orjson.loads(member.split(b"\x00", 1)[1])
            actor = d["actor"]
            entries.append(AuditEntry(d["id"], d["at"], actor["key_id"], actor["name"], d["action"], d["target"],
                                      d["detail"]))  # fmt: skip
        return entries

    async def save_bodies(self, generation_id: str, at: float, bodies: Bodies, ttl_s: float) -> None:
        value = orjson.dumps({"request": bodies.request, "response": bodies.response})
        await self.store._redis.set(self.store._k("bodies", generation_id), value, ex=max(1, int(ttl_s)))

    async def bodies(self, generation_id: str) -> Bodies | None:
        raw = await self.store._redis.get(self.store._k("bodies", generation_id))
        if raw is None:
            return None
        d = orjson.loads(raw)
        return Bodies(d["request"], d["response"])

    async def prune(self, now: float, body_retention_s: float) -> int:
        """Buckets and bodies expire by themselves; the log's index forgets records past the hours' retention."""
        removed = await self.store._redis.zremrangebyscore(
            self.store._k("console", "gens"), "-inf", now - RESOLUTIONS[3600]
        )
        return int(removed)

    async def session_secret(self, candidate: bytes) -> bytes:
        key = self.store._k("console", "secret")
        await self.store._redis.set(key, candidate, nx=True)
        stored = cast("bytes | None", await self.store._redis.get(key))
        return stored if stored is not None else candidate


def _matches(r: GenerationRecord, where: LogFilter) -> bool:
    if where.before is not None and (r.created_at, r.id) >= where.before:
        return False
    if where.until is not None and r.created_at >= where.until:
        return False
    if where.since is not None and r.created_at < where.since:
        return False
    for name in ("key_id", "model", "provider", "status", "id"):
        value = getattr(where, name)
        if value is not None and getattr(r, name) != value:
            return False
    return where.session is None or getattr(r, "agent_session", None) == where.session
