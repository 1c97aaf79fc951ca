"""Leases on SQLite (docs/api-operations.md §10): the statements `SQLiteStore`'s lease methods run, each in one
`BEGIN IMMEDIATE` transaction on the store thread (several processes may share the file).

No index on status (it cost each request two WAL frames): generations are never deleted, so their
rowids only grow, and every record an owner makes has a rowid above the newest one when it first
took its lease (`first_rowid`). A sweep marks a dead owner's records from there; the orphan sweep
of a starting gateway looks only above the bound the previous one left (`instance_starts`).
"""

from __future__ import annotations

import sqlite3
import time

import orjson

from ...records import INTERRUPTED_ERROR

_INTERRUPT = (
    "UPDATE generations SET status = 'interrupted', finish_reason = 'error', error = ?"
    " WHERE rowid > ? AND status = 'in_progress' AND owner = ?"
)
_INTERRUPTED_JSON = orjson.dumps(INTERRUPTED_ERROR).decode()
# `instance_starts` row holding the newest rowid the last orphan sweep looked at (records below it
# were all checked once; every owner since holds a lease before it writes a record)
_ORPHAN_BOUND = "*orphans*"


def renew(db: sqlite3.Connection, owner: str, ttl_s: float, first_rowids: dict[str, int]) -> bool:
    """Extend `owner`'s lease; False when it held none (a first lease, or one swept meanwhile: taken
    again with the first rowid it had, which this process remembers in `first_rowids`)."""
    expires = time.time() + ttl_s
    if db.execute("UPDATE leases SET expires_at = ? WHERE owner = ?", (expires, owner)).rowcount:
        return True
    first = first_rowids.get(owner)
    if first is None:
        first = int(db.execute("SELECT COALESCE(MAX(rowid), 0) FROM generations").fetchone()[0])
        first_rowids[owner] = first
    db.execute("INSERT INTO leases (owner, first_rowid, expires_at) VALUES (?, ?, ?)", (owner, first, expires))
    return False


def release(db: sqlite3.Connection, owner: str) -> None:
    row = db.execute("SELECT first_rowid FROM leases WHERE owner = ?", (owner,)).fetchone()
    if row is not None:
        db.execute(_INTERRUPT, (_INTERRUPTED_JSON, row[0], owner))
        db.execute("DELETE FROM leases WHERE owner = ?", (owner,))


def sweep(db: sqlite3.Connection, orphans: bool) -> int:
    marked = 0
    dead = db.execute("SELECT owner, first_rowid FROM leases WHERE expires_at < ?", (time.time(),)).fetchall()
    for owner, first in dead:
        marked += db.execute(_INTERRUPT, (_INTERRUPTED_JSON, first, owner)).rowcount
        db.execute("DELETE FROM leases WHERE owner = ?", (owner,))
    if orphans:
        row = db.execute("SELECT last_rowid FROM instance_starts WHERE owner = ?", (_ORPHAN_BOUND,)).fetchone()
        marked += db.execute(
            "UPDATE generations SET status = 'interrupted', finish_reason = 'error', error = ?"
            " WHERE rowid > ? AND status = 'in_progress' AND owner NOT IN (SELECT owner FROM leases)",
            (_INTERRUPTED_JSON, row[0] if row else 0),
        ).rowcount
        db.execute(
            "INSERT OR REPLACE INTO instance_starts (owner, last_rowid)"
            " VALUES (?, (SELECT COALESCE(MAX(rowid), 0) FROM generations))",
            (_ORPHAN_BOUND,),
        )
    return marked
