"""A PostgreSQL record's final update and its console rollups in one statement (docs/console-api.md):
the update as a CTE, the buckets' upsert only from the row it updated, so an ended record costs the
round trip it always did. Apart from postgres/console.py, which reads them, so that the store
imports only what it writes."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from ...records import GenerationRecord
from ..console import HIST_BUCKETS, RESOLUTIONS, Rollup
from ..console_sql import rollup_add
from ..rollup_writer import RollupWriter

_ADD = rollup_add(lambda i: f"${i}")


def final_update(update_sql: str, first: int) -> str:
    """`update_sql` (an UPDATE of one record by id) and, when it updated the row, the record's
    rollups; its own parameters from `$first`: provider, error, input, output, cost, TTFT bucket."""
    p = [f"${first + i}" for i in range(6)]
    widths = ", ".join(f"({res})" for res in RESOLUTIONS)
    hist = ", ".join(f"CASE WHEN {p[5]}::int = {i} THEN 1 ELSE 0 END" for i in range(HIST_BUCKETS))
    sums = ("requests", "errors", "input_tokens", "output_tokens", "cost", *(f"h{i}" for i in range(HIST_BUCKETS)))
    adds = ", ".join(f"{c} = console_rollup.{c} + EXCLUDED.{c}" for c in sums)
    return (
        f"WITH u AS ({update_sql} RETURNING model, key_id, created_at),"
        f" r AS (INSERT INTO console_rollup (res, t, model, provider, key_id, {', '.join(sums)})"
        f" SELECT w.res, (floor(u.created_at / w.res) * w.res)::bigint, u.model, {p[0]}::text, u.key_id,"
        f" 1, {p[1]}::bigint, {p[2]}::bigint, {p[3]}::bigint, {p[4]}::float8, {hist}"
        f" FROM u CROSS JOIN (VALUES {widths}) AS w(res)"
        f" ON CONFLICT (res, t, model, provider, key_id) DO UPDATE SET {adds})"
        " SELECT count(*) FROM u"
    )


def final_params(record: GenerationRecord) -> tuple[Any, ...]:
    r = Rollup.of(record)
    return (r.provider, int(r.error), r.input_tokens, r.output_tokens, r.cost, r.ttft_bucket)


def postgres_rollups(pool: Callable[[], Any]) -> RollupWriter:
    """The rollups counted without a record of their own (a rejected request past the bound on
    records, server/rejections.py): summed in memory and written once a second, as SQLite and
    Redis write all of theirs. `pool`: the store's open pool."""

    async def write_rows(rows: list[tuple[Any, ...]]) -> None:
        await pool().executemany(_ADD, rows)

    return RollupWriter(write_rows)
