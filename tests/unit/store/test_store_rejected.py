"""A rejected request's record and its count (server/rejections.py), on SQLite, Redis and PostgreSQL:
the record is written as it is, found by id, listed under the `rejected` status filter, and counted
in the console's rollups, and a rollup counted without a record is there too."""

from __future__ import annotations

import time
import uuid

from tidegate.records import GenerationRecord
from tidegate.store.base import GenerationStore
from tidegate.store.console import LogFilter, Rollup, SeriesQuery
from tidegate.store.facets import console_of


def rejected(key_id: str, code: str, status: int) -> GenerationRecord:
    return GenerationRecord(
        id="gen_" + uuid.uuid4().hex,
        key_id=key_id,
        model="",
        door="/v1/chat/completions",
        created_at=time.time(),
        status="rejected",
        error={"code": code, "message": "refused", "status": status, "model": "nope", "path": "/v1/chat/completions"},
    )


async def test_a_rejected_record_is_found_listed_and_counted(store: GenerationStore) -> None:
    console = console_of(store)
    unauthenticated, unknown_model = rejected("", "unauthorized", 401), rejected("key_a", "model_not_found", 404)
    for record in (unauthenticated, unknown_model):
        await store.create_generation(record)
        console.count(
            Rollup(record.created_at, "", "rejected:" + record.error["code"], record.key_id, True, 0, 0, 0.0, -1)
        )  # type: ignore[index]
    console.count(
        Rollup(time.time(), "", "rejected:unauthorized", "", True, 0, 0, 0.0, -1)
    )  # past the bound: no record

    found = await store.get_generation(unknown_model.id)
    assert found is not None and found.status == "rejected" and found.key_id == "key_a"
    assert found.error == unknown_model.error
    listed = await console.generations(LogFilter(status="rejected"), 10)
    assert [r.id for r in listed] == [unknown_model.id, unauthenticated.id]
    assert [r.id for r in await console.generations(LogFilter(status="rejected", key_id="key_a"), 10)] == [
        unknown_model.id
    ]
    assert await console.generations(LogFilter(status="failed"), 10) == []

    minute = int(time.time() // 60) * 60  # the series reads whole buckets, as the stats API asks them
    buckets = await console.series(SeriesQuery(60, minute - 300, minute + 120, by="provider"))
    by_group: dict[str, tuple[int, int]] = {}
    for b in buckets:
        requests, errors = by_group.get(b.group, (0, 0))
        by_group[b.group] = (requests + b.requests, errors + b.errors)
    assert by_group == {"rejected:unauthorized": (2, 2), "rejected:model_not_found": (1, 1)}


async def test_a_rejected_record_is_never_swept_and_is_pruned_with_the_rest(store: GenerationStore) -> None:
    record = rejected("", "unauthorized", 401)
    await store.create_generation(record)
    assert await store.sweep_leases(orphans=True) == 0
    found = await store.get_generation(record.id)
    assert found is not None and found.status == "rejected"


async def test_the_usage_report_bills_no_rejected_request(store: GenerationStore) -> None:
    now = time.time()
    await store.create_generation(rejected("key_a", "rate_limited", 429))
    assert await store.usage(now - 60, now + 60, "key") == []
