"""Agent sessions on Redis (store/sessions.py), from the indexes the record scripts keep
(store/redis/scripts.py, `PUT_GEN` and `BEGIN`): `sessions:key:{key_id}` and `sessions:all`, zsets of
the ids of records in an agent session by created_at. A listing reads the ids since `since` from the
caller's index, then those records' session fields: a key's listing never reads another key's
records, and nobody's reads a record outside a session.

Records written before the indexes existed are indexed once, by a scan, the first time sessions are
listed; `sessions:indexed` says it was done (records created meanwhile are indexed by the scripts,
and indexing one twice changes nothing).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import orjson

from ..sessions import SessionSummary, summarise_records

if TYPE_CHECKING:
    from .store import RedisStore

_FIELDS = ("agent_session", "hints", "model", "usage", "cost", "created_at", "key_id", "status")
_BATCH = 500  # records read per pipeline


class RedisSessions:
    def __init__(self, store: RedisStore) -> None:
        self.store = store

    async def sessions(self, since: float, key_id: str | None, limit: int) -> list[SessionSummary]:
        store, redis = self.store, self.store._redis
        if not await redis.exists(store._k("sessions", "indexed")):
            await self._index_older_records()
        index = store._k("sessions", "all") if key_id is None else store._k("sessions", "key", key_id)
        ids: list[bytes] = await store._cmd("ZRANGEBYSCORE", index, repr(float(since)), "+inf")
        records: list[dict[str, Any]] = []
        for i in range(0, len(ids), _BATCH):
            pipe = redis.pipeline(transaction=False)
            for gen_id in ids[i : i + _BATCH]:
                pipe.hmget(store._k("gen", gen_id.decode()), _FIELDS)
            for values in await pipe.execute():
                records.append({n: orjson.loads(v) for n, v in zip(_FIELDS, values, strict=True) if v is not None})
        return summarise_records(records, since, key_id, limit)

    async def _index_older_records(self) -> None:
        store, redis = self.store, self.store._redis
        prefix = store._k("gen", "")
        async for gen_key in redis.scan_iter(match=store._k("gen", "*"), count=1000):
            session, key_id, created = await redis.hmget(gen_key, ("agent_session", "key_id", "created_at"))
            if session is None or orjson.loads(session) is None or key_id is None or created is None:
                continue
            gen_id, score = gen_key.decode().removeprefix(prefix), float(orjson.loads(created))
            pipe = redis.pipeline(transaction=False)
            pipe.zadd(store._k("sessions", "key", orjson.loads(key_id)), {gen_id: score})
            pipe.zadd(store._k("sessions", "all"), {gen_id: score})
            await pipe.execute()
        await redis.set(store._k("sessions", "indexed"), "1")
