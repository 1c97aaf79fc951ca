"""API keys on SQLite: the statements `SQLiteStore`'s key methods run on a connection, admission and
settlement each in the one transaction they are given (several processes may share the file: the
write lock makes admission atomic across them)."""

from __future__ import annotations

import sqlite3
import time
from typing import Any

import orjson

from ...records import ApiKey
from ..admit import Ask, Counters, Decision, charge, correct_tokens, decide, roll_period
from ..rows import FAILED_STATUSES, KEY_COLUMNS, USAGE_GROUPS, key_from_row, key_params, usage_row

# the live reservations of a key: those whose holder's lease has not expired (a crashed gateway's
# stop counting the moment its lease does)
_LIVE = (
    "SELECT COUNT(*), COALESCE(SUM(r.amount), 0) FROM reservations r JOIN leases l ON l.owner = r.owner"
    " WHERE r.key_id = ? AND l.expires_at > ?"
)
_DEAD = "DELETE FROM reservations WHERE key_id = ? AND owner NOT IN (SELECT owner FROM leases WHERE expires_at > ?)"


def create(db: sqlite3.Connection, key: ApiKey) -> None:
    db.execute(f"INSERT INTO api_keys ({KEY_COLUMNS}) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)", key_params(key))


def find_by_hash(db: sqlite3.Connection, secret_hash: str) -> ApiKey | None:
    row = db.execute(f"SELECT {KEY_COLUMNS} FROM api_keys WHERE secret_hash = ?", (secret_hash,)).fetchone()
    return key_from_row(row) if row else None


def get(db: sqlite3.Connection, key_id: str) -> ApiKey | None:
    row = db.execute(f"SELECT {KEY_COLUMNS} FROM api_keys WHERE id = ?", (key_id,)).fetchone()
    if row is None:
        return None
    key = key_from_row(row)
    key.reserved = float(db.execute(_LIVE, (key_id, time.time())).fetchone()[1])
    return key


def list_all(db: sqlite3.Connection) -> list[ApiKey]:
    rows = db.execute(f"SELECT {KEY_COLUMNS} FROM api_keys ORDER BY created_at, id").fetchall()
    return [key_from_row(r) for r in rows]


def save(db: sqlite3.Connection, key: ApiKey) -> bool:
    cur = db.execute(
        "UPDATE api_keys SET name = ?, credits = ?, revoked = ?, settings = ? WHERE id = ?",
        (key.name, key.credits, int(key.revoked), orjson.dumps(key.settings()).decode(), key.id),
    )
    return cur.rowcount > 0


def top_up(db: sqlite3.Connection, key_id: str, amount: float) -> ApiKey | None:
    cur = db.execute("UPDATE api_keys SET credits = credits + ? WHERE id = ? AND credits IS NOT NULL", (amount, key_id))
    return get(db, key_id) if cur.rowcount else None


def admit(db: sqlite3.Connection, ask: Ask, now: float) -> Decision:
    row = db.execute(
        "SELECT credits, spent, period_start, settings, rpm_tat, tpm_tat FROM api_keys WHERE id = ?", (ask.key_id,)
    ).fetchone()
    if row is None:
        return Decision(admitted=False, refusal="credits", balance=0.0)
    limits: dict[str, Any] = orjson.loads(row[3]).get("limits") or {}
    c = Counters(row[0], row[1], row[2], limits.get("rpm"), limits.get("tpm"), limits.get("concurrent"), row[4], row[5])
    db.execute(_DEAD, (ask.key_id, now))
    c.live, c.reserved = db.execute(_LIVE, (ask.key_id, now)).fetchone()
    rolled = roll_period(c, ask.period_floor)
    decision = decide(c, ask, now)
    if decision.admitted:
        db.execute(
            "UPDATE api_keys SET spent = ?, period_start = ?, rpm_tat = ?, tpm_tat = ? WHERE id = ?",
            (c.spent, c.period_start, c.rpm_tat, c.tpm_tat, ask.key_id),
        )
        db.execute(
            "INSERT INTO reservations (generation_id, key_id, owner, amount, tokens) VALUES (?, ?, ?, ?, ?)",
            (ask.generation_id, ask.key_id, ask.owner, ask.amount, ask.tokens),
        )
    elif rolled:
        db.execute("UPDATE api_keys SET spent = 0, period_start = ? WHERE id = ?", (c.period_start, ask.key_id))
    return decision


def settle(db: sqlite3.Connection, key_id: str, generation_id: str, cost: float, tokens: int, floor: float) -> None:
    held = db.execute("DELETE FROM reservations WHERE generation_id = ? RETURNING tokens", (generation_id,)).fetchone()
    row = db.execute(
        "SELECT spent, period_start, settings, tpm_tat, credits FROM api_keys WHERE id = ?", (key_id,)
    ).fetchone()
    if row is None:
        return
    spent, period_start = (0.0, floor) if floor > row[1] else (row[0], row[1])
    tpm = (orjson.loads(row[2]).get("limits") or {}).get("tpm")
    tpm_tat = correct_tokens(row[3], tpm, held[0], tokens) if held is not None else row[3]
    db.execute(
        "UPDATE api_keys SET spent = ?, period_start = ?, tpm_tat = ? WHERE id = ?",
        (charge(spent, cost, row[4]), period_start, tpm_tat, key_id),
    )


def usage(db: sqlite3.Connection, start: float, end: float, group_by: str) -> list[dict[str, Any]]:
    group = USAGE_GROUPS[group_by].format(day="strftime('%Y-%m-%d', created_at, 'unixepoch')")
    rows = db.execute(
        f"SELECT {group}, COUNT(*), SUM(status IN {FAILED_STATUSES}),"
        " SUM(json_extract(usage, '$.prompt_tokens')), SUM(json_extract(usage, '$.completion_tokens')),"
        " SUM(cost), SUM(usage_estimated) FROM generations WHERE created_at >= ? AND created_at < ?"
        " AND status <> 'rejected'"  # refused before a generation began: nothing to bill
        f" GROUP BY {group} ORDER BY {group}",
        (start, end),
    ).fetchall()
    return [usage_row(r) for r in rows]
