"""API keys on PostgreSQL: `PostgresStore`'s key methods. Admission locks the key's row (`FOR UPDATE`)
for one transaction, so gateways on several hosts admit one at a time per key; rate limits and leases
use the database's clock (hosts need not agree on time)."""

from __future__ import annotations

from typing import Any

import asyncpg  # type: ignore[import-untyped]
import orjson

from ...records import ApiKey
from ..admit import Ask, Counters, Decision, charge, correct_tokens, decide, roll_period
from ..rows import FAILED_STATUSES, KEY_COLUMNS, USAGE_GROUPS, key_from_row, key_params, usage_row

_LIVE = (
    "SELECT COUNT(*), COALESCE(SUM(r.amount), 0) FROM reservations r JOIN leases l ON l.owner = r.owner"
    " WHERE r.key_id = $1 AND l.expires_at > now()"
)
# the clock, and the reservations whose owner's lease is live; the dead ones are deleted on the way
# (the delete and the read see the same snapshot, and the join leaves the dead ones out of the sums)
_CLOCK_AND_LIVE = (
    "WITH dead AS (DELETE FROM reservations WHERE key_id = $1"
    " AND owner NOT IN (SELECT owner FROM leases WHERE expires_at > now()))"
    " SELECT EXTRACT(EPOCH FROM now())::float8, COUNT(*), COALESCE(SUM(r.amount), 0)"
    " FROM reservations r JOIN leases l ON l.owner = r.owner WHERE r.key_id = $1 AND l.expires_at > now()"
)
_UPDATE_COUNTERS = "UPDATE api_keys SET spent = $2, period_start = $3, rpm_tat = $4, tpm_tat = $5 WHERE id = $1"
_UPDATE_AND_RESERVE = (
    f"WITH counters AS ({_UPDATE_COUNTERS})"
    " INSERT INTO reservations (generation_id, key_id, owner, amount, tokens) VALUES ($6, $1, $7, $8, $9)"
)
# the generation's reservation released (its tokens, None if it had none) and the key's row locked
_RELEASE_AND_LOCK = (
    "WITH held AS (DELETE FROM reservations WHERE generation_id = $1 RETURNING tokens)"
    " SELECT spent, period_start, settings, tpm_tat, credits, (SELECT tokens FROM held)"
    " FROM api_keys WHERE id = $2 FOR UPDATE"
)
_SELECT = f"SELECT {KEY_COLUMNS} FROM api_keys"


async def create(pool: asyncpg.Pool, key: ApiKey) -> None:
    values = ", ".join(f"${i}" for i in range(1, 10))
    await pool.execute(f"INSERT INTO api_keys ({KEY_COLUMNS}) VALUES ({values})", *key_params(key))


async def find_by_hash(pool: asyncpg.Pool, secret_hash: str) -> ApiKey | None:
    row = await pool.fetchrow(f"{_SELECT} WHERE secret_hash = $1", secret_hash)
    return key_from_row(row) if row is not None else None


async def get(conn: asyncpg.Pool | asyncpg.Connection, key_id: str) -> ApiKey | None:
    row = await conn.fetchrow(f"{_SELECT} WHERE id = $1", key_id)
    if row is None:
        return None
    key = key_from_row(row)
    live = await conn.fetchrow(_LIVE, key_id)
    key.reserved = float(live[1])
    return key


async def list_all(pool: asyncpg.Pool) -> list[ApiKey]:
    return [key_from_row(r) for r in await pool.fetch(f"{_SELECT} ORDER BY created_at, id")]


async def save(pool: asyncpg.Pool, key: ApiKey) -> bool:
    status = await pool.execute(
        "UPDATE api_keys SET name = $2, credits = $3, revoked = $4, settings = $5 WHERE id = $1",
        key.id,
        key.name,
        None if key.credits is None else float(key.credits),
        key.revoked,
        orjson.dumps(key.settings()).decode(),
    )
    return str(status).rsplit(" ", 1)[-1] != "0"


async def top_up(pool: asyncpg.Pool, key_id: str, amount: float) -> ApiKey | None:
    async with pool.acquire() as conn, conn.transaction():
        status = await conn.execute(
            "UPDATE api_keys SET credits = credits + $2 WHERE id = $1 AND credits IS NOT NULL", key_id, float(amount)
        )
        return await get(conn, key_id) if status.rsplit(" ", 1)[-1] != "0" else None


async def admit(pool: asyncpg.Pool, ask: Ask) -> Decision:
    """Four statements in one transaction: lock the key's row, then read the clock and the live
    reservations (a statement after the lock, so its snapshot holds every reservation committed
    before it; dead owners' reservations go in the same statement), then write what was decided.
    Each statement is a round trip and about 100 µs of the gateway's CPU (asyncpg's protocol), so
    none is spent on what one statement can do."""
    async with pool.acquire() as conn, conn.transaction():
        row = await conn.fetchrow(
            "SELECT credits, spent, period_start, settings, rpm_tat, tpm_tat FROM api_keys WHERE id = $1 FOR UPDATE",
            ask.key_id,
        )
        if row is None:
            return Decision(admitted=False, refusal="credits", balance=0.0)
        limits: dict[str, Any] = orjson.loads(row[3]).get("limits") or {}
        c = Counters(
            row[0], row[1], row[2], limits.get("rpm"), limits.get("tpm"), limits.get("concurrent"), row[4], row[5]
        )
        clock = await conn.fetchrow(_CLOCK_AND_LIVE, ask.key_id)
        now, c.live, c.reserved = float(clock[0]), int(clock[1]), float(clock[2])
        rolled = roll_period(c, ask.period_floor)
        decision = decide(c, ask, now)
        counters = (ask.key_id, c.spent, c.period_start, c.rpm_tat, c.tpm_tat)
        if decision.admitted:
            reservation = (ask.generation_id, ask.owner, float(ask.amount), ask.tokens)
            await conn.execute(_UPDATE_AND_RESERVE, *counters, *reservation)
        elif rolled:
            await conn.execute(_UPDATE_COUNTERS, *counters)
        return decision


async def settle(pool: asyncpg.Pool, key_id: str, generation_id: str, cost: float, tokens: int, floor: float) -> None:
    """The reservation's delete and the key row's lock are one statement, the charge a second."""
    async with pool.acquire() as conn, conn.transaction():
        row = await conn.fetchrow(_RELEASE_AND_LOCK, generation_id, key_id)
        if row is None:
            return
        spent, period_start = (0.0, floor) if floor > row[1] else (row[0], row[1])
        tpm = (orjson.loads(row[2]).get("limits") or {}).get("tpm")
        held = row[5]
        tpm_tat = correct_tokens(row[3], tpm, held, tokens) if held is not None else row[3]
        await conn.execute(
            "UPDATE api_keys SET spent = $2, period_start = $3, tpm_tat = $4 WHERE id = $1",
            key_id,
            charge(spent, float(cost), None if row[4] is None else float(row[4])),
            period_start,
            tpm_tat,
        )


async def usage(pool: asyncpg.Pool, start: float, end: float, group_by: str) -> list[dict[str, Any]]:
    group = USAGE_GROUPS[group_by].format(day="to_char(to_timestamp(created_at) AT TIME ZONE 'UTC', 'YYYY-MM-DD')")
    rows = await pool.fetch(
        f"SELECT {group}, COUNT(*), COUNT(*) FILTER (WHERE status IN {FAILED_STATUSES}),"
        " SUM((usage->>'prompt_tokens')::bigint), SUM((usage->>'completion_tokens')::bigint),"
        " SUM(cost), COUNT(*) FILTER (WHERE usage_estimated) FROM generations"
        " WHERE created_at >= $1 AND created_at < $2 AND status <> 'rejected'"  # refused: nothing to bill
        " GROUP BY 1 ORDER BY 1",
        float(start),
        float(end),
    )
    return [usage_row(r) for r in rows]
