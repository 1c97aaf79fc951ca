"""Agent sessions on PostgreSQL (store/sessions.py)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from ..sessions import SessionSummary, models_sql, sessions_sql, summaries

if TYPE_CHECKING:
    from .store import PostgresStore


def _p(i: int) -> str:
    return f"${i}"


def _tokens(name: str) -> str:
    return f"(usage->>'{name}')::bigint"


_AGENT = "(hints->>'agent')"
_ALL, _BY_KEY = sessions_sql(_p, False, _tokens, _AGENT), sessions_sql(_p, True, _tokens, _AGENT)


class PostgresSessions:
    def __init__(self, store: PostgresStore) -> None:
        self.store = store

    async def sessions(self, since: float, key_id: str | None, limit: int) -> list[SessionSummary]:
        pool = self.store.pool
        if key_id is None:
            groups = await pool.fetch(_ALL, since, limit)
        else:
            groups = await pool.fetch(_BY_KEY, since, limit, key_id)
        if not groups:
            return []
        names = [g[0] for g in groups]
        if key_id is None:
            models = await pool.fetch(models_sql(_p, len(names)), since, *names)
        else:
            models = await pool.fetch(models_sql(_p, len(names), by_key=True), since, *names, key_id)
        return summaries(groups, models)
