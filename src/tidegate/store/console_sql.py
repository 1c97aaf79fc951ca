"""The console's SQL, shared by SQLite and PostgreSQL (numbered parameters: `?N` / `$N`)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from .console import GROUP_COLUMNS, HIST_BUCKETS, RESOLUTIONS, Bucket, LogFilter, SeriesQuery
from .rows import GEN_COLUMNS

Placeholder = Callable[[int], str]
_HIST = [f"h{i}" for i in range(HIST_BUCKETS)]
_SUMS = ("requests", "errors", "input_tokens", "output_tokens", "cost", *_HIST)


def rollup_add(p: Placeholder) -> str:
    """A bucket row's upsert with every sum given: (res, t, model, provider, key_id, requests, errors,
    input, output, cost, h0..h24) (the seeding command's, which sums in memory first)."""
    n = 5 + len(_SUMS)
    adds = ", ".join(f"{c} = console_rollup.{c} + excluded.{c}" for c in _SUMS)
    return (
        f"INSERT INTO console_rollup (res, t, model, provider, key_id, {', '.join(_SUMS)})"
        f" VALUES ({', '.join(p(i) for i in range(1, n + 1))})"
        f" ON CONFLICT (res, t, model, provider, key_id) DO UPDATE SET {adds}"
    )


def series_sql(q: SeriesQuery, p: Placeholder) -> tuple[str, list[Any]]:
    """The query's buckets summed per (t, group)."""
    column = GROUP_COLUMNS[q.by]
    group = column if column is not None else "'all'"
    args: list[Any] = [q.bucket_s, int(q.start), int(q.end)]
    where = [f"res = {p(1)}", f"t >= {p(2)}", f"t < {p(3)}"]
    for name in ("model", "provider", "key_id"):
        value = getattr(q, name)
        if value is not None:
            args.append(value)
            where.append(f"{name} = {p(len(args))}")
    sums = ", ".join(f"SUM({c})" for c in _SUMS)
    keys = f"t, {column}" if column is not None else "t"  # (PostgreSQL groups by no constant)
    sql = f"SELECT t, {group}, {sums} FROM console_rollup WHERE {' AND '.join(where)} GROUP BY {keys}"
    return sql, args


def bucket_of(row: Any) -> Bucket:
    n = 2 + len(_SUMS)
    values = [row[i] for i in range(n)]
    return Bucket(
        t=float(values[0]),
        group=str(values[1]),
        requests=int(values[2]),
        errors=int(values[3]),
        input_tokens=int(values[4]),
        output_tokens=int(values[5]),
        cost=float(values[6]),
        hist=[int(v) for v in values[7:]],
    )


def generations_sql(where: LogFilter, limit: int, p: Placeholder, session_column: bool) -> tuple[str, list[Any]]:
    """Keyset paging on (created_at, id) descending: never OFFSET, so a deep page costs what the first does."""
    args: list[Any] = []
    terms: list[str] = []

    def term(sql: str, value: Any) -> None:
        args.append(value)
        terms.append(sql.format(p(len(args))))

    for name in ("key_id", "model", "provider", "status", "id"):
        value = getattr(where, name)
        if value is not None:
            term(f"{name} = {{}}", value)
    if where.session is not None:
        if not session_column:  # no record carries a session before the column exists
            terms.append("1 = 0")
        else:
            term("agent_session = {}", where.session)
    if where.since is not None:
        term("created_at >= {}", float(where.since))
    if where.until is not None:
        term("created_at < {}", float(where.until))
    if where.before is not None:
        args.extend([float(where.before[0]), where.before[1]])
        terms.append(f"(created_at, id) < ({p(len(args) - 1)}, {p(len(args))})")
    args.append(limit)
    clause = f" WHERE {' AND '.join(terms)}" if terms else ""
    sql = f"SELECT {GEN_COLUMNS} FROM generations{clause} ORDER BY created_at DESC, id DESC LIMIT {p(len(args))}"
    return sql, args


AUDIT_COLUMNS = "id, at, actor_key_id, actor_name, action, target, detail"


def audit_sql(before: str | None, p: Placeholder) -> str:
    where = f" WHERE id < {p(2)}" if before is not None else ""
    return f"SELECT {AUDIT_COLUMNS} FROM console_audit{where} ORDER BY id DESC LIMIT {p(1)}"


def prune_rollups_sql(p: Placeholder) -> str:
    return f"DELETE FROM console_rollup WHERE res = {p(1)} AND t < {p(2)}"


def rollup_cutoffs(now: float) -> list[tuple[int, int]]:
    return [(res, int(now - keep)) for res, keep in RESOLUTIONS.items()]
