"""Agent sessions on SQLite (store/sessions.py): two reads on the store's own connection."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from ..sessions import SessionSummary, models_sql, sessions_sql, summaries

if TYPE_CHECKING:
    from .store import SQLiteStore


def _p(i: int) -> str:
    return f"?{i}"


def _tokens(name: str) -> str:
    return f"json_extract(usage, '$.{name}')"


_AGENT = "json_extract(hints, '$.agent')"
_ALL, _BY_KEY = sessions_sql(_p, False, _tokens, _AGENT), sessions_sql(_p, True, _tokens, _AGENT)


class SQLiteSessions:
    def __init__(self, store: SQLiteStore) -> None:
        self.store = store

    async def sessions(self, since: float, key_id: str | None, limit: int) -> list[SessionSummary]:
        def _query() -> tuple[list[Any], list[Any]]:
            db = self.store._db()
            args: tuple[Any, ...] = (since, limit) if key_id is None else (since, limit, key_id)
            groups = db.execute(_ALL if key_id is None else _BY_KEY, args).fetchall()
            if not groups:
                return groups, []
            names = [g[0] for g in groups]
            if key_id is None:
                return groups, db.execute(models_sql(_p, len(names)), (since, *names)).fetchall()
            by_key = models_sql(_p, len(names), by_key=True)
            return groups, db.execute(by_key, (since, *names, key_id)).fetchall()

        groups, models = await self.store._run(_query)
        return summaries(groups, models)
