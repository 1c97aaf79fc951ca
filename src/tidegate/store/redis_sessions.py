"""Agent sessions on Redis (store/sessions.py): a scan of the record hashes, as the usage report
does (Redis keeps no index by time or session): an operator's view, not a hot path."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import orjson

from .sessions import SessionSummary, summarise_records

if TYPE_CHECKING:
    from .redis import RedisStore

_FIELDS = ("agent_session", "hints", "model", "usage", "cost", "created_at", "key_id", "status")


class RedisSessions:
    def __init__(self, store: RedisStore) -> None:
        self.store = store

    async def sessions(self, since: float, key_id: str | None, limit: int) -> list[SessionSummary]:
        redis = self.store._redis
        records: list[dict[str, Any]] = []
        async for gen_key in redis.scan_iter(match=self.store._k("gen", "*"), count=1000):
            values = await redis.hmget(gen_key, _FIELDS)
            records.append({n: orjson.loads(v) for n, v in zip(_FIELDS, values, strict=True) if v is not None})
        return summarise_records(records, since, key_id, limit)
