"""What the SQL stores' caches share (SQLite and PostgreSQL keep the same tables, store/cache.py):
the entry's columns, a row read back, the parameters written, the least-recently-used eviction and the
purge's WHERE clause."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

import orjson

from .cache import CacheCounts, CacheEntry, CountRow

COLUMNS = "entry_key, key_id, model, door, created_at, expires_at, generation_id, usage, cost, events"


def entry_from_row(row: Any) -> CacheEntry:
    return CacheEntry(
        entry_key=row[0],
        key_id=row[1],
        model=row[2],
        door=row[3],
        created_at=float(row[4]),
        expires_at=float(row[5]),
        generation_id=row[6],
        usage=orjson.loads(row[7]),
        cost=float(row[8]),
        events=bytes(row[9]),
        size=int(row[10]) if len(row) > 10 else len(row[9]),
    )


def over_ceiling(total: int, max_total_bytes: int, oldest_first: Iterable[Any]) -> list[str]:
    """The least recently used entries to evict so that `total` comes down to `max_total_bytes`."""
    gone: list[str] = []
    for entry_key, size in oldest_first:
        if total <= max_total_bytes:
            break
        gone.append(str(entry_key))
        total -= int(size)
    return gone


def entry_params(e: CacheEntry) -> tuple[Any, ...]:
    usage = orjson.dumps(e.usage).decode()
    return (
        e.entry_key,
        e.key_id,
        e.model,
        e.door,
        e.created_at,
        e.expires_at,
        e.generation_id,
        usage,
        e.cost,
        e.events,
    )


def purge_where(model: str | None, key_id: str | None, mark: str) -> tuple[str, list[str]]:
    """The WHERE clause (with `mark` as each placeholder: `?`, or `$` for numbered ones) and its values."""
    clauses, values = [], []
    for column, value in (("model", model), ("key_id", key_id)):
        if value is not None:
            values.append(value)
            clauses.append(f"{column} = " + (f"${len(values)}" if mark == "$" else "?"))
    return (" WHERE " + " AND ".join(clauses)) if clauses else "", values


def count_rows(rows: list[Any]) -> list[CountRow]:
    return [CountRow(r[0], r[1], CacheCounts(int(r[2]), int(r[3]), int(r[4]), int(r[5]), float(r[6]))) for r in rows]
