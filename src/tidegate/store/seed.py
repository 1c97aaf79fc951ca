"""`tidegate seed-generations`: N realistic generation records and their rollups, written fast
(docs/console.md, "Scale"): SQLite by executemany in transactions of 50,000 rows, PostgreSQL by COPY.
For trying the console at scale and for bench/console_scale.py; never on a store that serves users'
traffic (the records are made up, their keys real but unused)."""

from __future__ import annotations

import os
import random
import sqlite3
import time
from collections.abc import Iterator
from typing import Any

from ..ids import _ALPHABET
from ..records import GenerationRecord, Usage
from .base import GenerationStore
from .console import Rollup, RollupBuffer
from .console_sql import rollup_add
from .rows import GEN_COLUMNS, record_params

# (model, provider, served model, $ per 1M input tokens, $ per 1M output tokens)
MODELS = (
    ("gpt-4o", "openai", "gpt-4o-2024-11-20", 2.5, 10.0),
    ("gpt-4o-mini", "openai", "gpt-4o-mini", 0.15, 0.6),
    ("claude-sonnet", "anthropic", "claude-sonnet-4-5", 3.0, 15.0),
    ("claude-haiku", "bedrock", "anthropic.claude-haiku-4-5", 1.0, 5.0),
    ("gemini-flash", "gemini", "gemini-2.5-flash", 0.3, 2.5),
    ("llama-local", "local", "llama-3.1-8b", 0.0, 0.0),
)
MODEL_WEIGHTS = (30, 25, 20, 10, 10, 5)
DAYS = 30
BATCH = 50_000


def ulid_at(ts: float, rng: random.Random) -> str:
    """A ULID for the time `ts` (seeded records sort by id as they do by time)."""
    value = (int(ts * 1000) << 80) | rng.getrandbits(80)
    return "".join(_ALPHABET[(value >> (5 * i)) & 31] for i in range(25, -1, -1))


def fake_records(count: int, key_ids: list[str], now: float, seed: int = 54) -> Iterator[GenerationRecord]:
    """`count` records over the last 30 days, oldest first: several models, providers and keys (a few
    keys do most of the traffic), 3 % failed and 1 % cancelled."""
    rng = random.Random(seed)
    key_weights = [1.0 / (i + 1) for i in range(len(key_ids))]
    start = now - DAYS * 86_400
    times = sorted(rng.uniform(start, now) for _ in range(count))
    for created in times:
        model, provider, served, price_in, price_out = rng.choices(MODELS, MODEL_WEIGHTS)[0]
        roll = rng.random()
        status = "failed" if roll < 0.03 else "cancelled" if roll < 0.04 else "completed"
        prompt = int(rng.lognormvariate(6.0, 1.0))
        completion = int(rng.lognormvariate(5.0, 0.8)) if status != "failed" else 0
        ttft = None if status == "failed" else round(rng.lognormvariate(5.6, 0.6), 3)
        record = GenerationRecord(
            id=ulid_at(created, rng),
            key_id=rng.choices(key_ids, key_weights)[0],
            model=model,
            door="chat",
            created_at=created,
            status=status,
            provider=provider,
            served_model=served,
            attempts=1,
            finish_reason="stop" if status == "completed" else "error",
            usage=Usage(prompt, completion, prompt + completion),
            cost=round((prompt * price_in + completion * price_out) / 1e6, 10),
            output_text="" if status == "failed" else "a seeded answer",
            error={"code": "upstream_error", "message": "seeded failure"} if status == "failed" else None,
            ttft_ms=ttft,
            duration_ms=None if ttft is None else round(ttft + completion * 8.0, 3),
            owner="seed",
        )
        yield record


async def seed_keys(store: GenerationStore, count: int) -> list[str]:
    from ..keys import make_key

    ids = []
    for i in range(count):
        key, _secret = make_key(f"seed-{i:02d}")  # the secret is dropped: nobody uses these keys
        await store.create_key(key)
        ids.append(key.id)
    return ids


def seed_sqlite(path: str, records: Iterator[GenerationRecord]) -> int:
    db = sqlite3.connect(path, isolation_level=None)
    db.execute("PRAGMA journal_mode=WAL")
    db.execute("PRAGMA synchronous=OFF")  # a bulk load: a crash halfway leaves a half-seeded store, not a broken one
    columns = GEN_COLUMNS.split(", ")
    insert = f"INSERT INTO generations ({GEN_COLUMNS}) VALUES ({', '.join('?' * len(columns))})"
    rollups, written, batch = RollupBuffer(), 0, []
    for record in records:
        batch.append(record_params(record))
        rollups.add(Rollup.of(record))
        if len(batch) >= BATCH:
            written += _sqlite_batch(db, insert, batch)
    written += _sqlite_batch(db, insert, batch)
    db.execute("BEGIN")
    db.executemany(rollup_add(lambda i: f"?{i}"), rollups.take())
    db.execute("COMMIT")
    db.execute("ANALYZE")
    db.close()
    return written


def _sqlite_batch(db: sqlite3.Connection, insert: str, batch: list[tuple[Any, ...]]) -> int:
    n = len(batch)
    if n:
        db.execute("BEGIN")
        db.executemany(insert, batch)
        db.execute("COMMIT")
        batch.clear()
    return n


async def seed_postgres(pool: Any, records: Iterator[GenerationRecord]) -> int:
    columns = GEN_COLUMNS.split(", ")
    rollups, written, batch = RollupBuffer(), 0, []
    for record in records:
        batch.append(record_params(record))
        rollups.add(Rollup.of(record))
        if len(batch) >= BATCH:
            await pool.copy_records_to_table("generations", records=batch, columns=columns)
            written += len(batch)
            batch = []
    if batch:
        await pool.copy_records_to_table("generations", records=batch, columns=columns)
        written += len(batch)
    await pool.executemany(rollup_add(lambda i: f"${i}"), rollups.take())
    await pool.execute("ANALYZE generations")
    await pool.execute("ANALYZE console_rollup")
    return written


async def seed(store: GenerationStore, count: int, keys: int = 12) -> tuple[int, float]:
    """Seed `count` records (and `keys` keys) into the open `store`; (records written, seconds)."""
    from .postgres import PostgresStore
    from .sqlite import SQLiteStore

    began = time.monotonic()
    key_ids = await seed_keys(store, keys)
    records = fake_records(count, key_ids, time.time(), seed=int.from_bytes(os.urandom(2), "big"))
    if isinstance(store, SQLiteStore):
        written = seed_sqlite(store.path, records)
    elif isinstance(store, PostgresStore):
        written = await seed_postgres(store.pool, records)
    else:
        raise ValueError("seed-generations writes to a SQLite or PostgreSQL store")
    return written, time.monotonic() - began
