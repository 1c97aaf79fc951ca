"""Keys, admission and settlement (docs/api-operations.md §11) on every store: the same cases on SQLite, Redis and
PostgreSQL, with several store objects standing for several gateway processes."""

from __future__ import annotations

import asyncio
import time

import pytest

from tests.support.store_backends import OpenStore
from tidegate.records import ApiKey, GenerationRecord, KeyLimits, Usage
from tidegate.store.admit import Ask, period_floor
from tidegate.store.base import GenerationStore

LIVE, DEAD = "host/1/live", "host/2/dead"


async def _key(store: GenerationStore, key_id: str = "key_k", **fields: object) -> ApiKey:
    key = ApiKey(id=key_id, name=key_id, secret_hash=key_id.ljust(64, "0"), created_at=time.time(), **fields)  # type: ignore[arg-type]
    await store.create_key(key)
    await store.renew_lease(LIVE, 60)
    return key


def _ask(gen: str, amount: float = 0.0, tokens: int = 0, owner: str = LIVE, floor: float = 0.0) -> Ask:
    return Ask("key_k", gen, owner, amount, tokens, floor)


async def test_settings_round_trip_save_and_top_up(store: GenerationStore) -> None:
    key = await _key(
        store,
        credits=2.0,
        budget_period="daily",
        limits=KeyLimits(rpm=60, tpm=None, concurrent=3),
        models=("chat-a",),
        expires_at=2_000_000_000.0,
        admin=True,
        metadata={"team": "search"},
        jurisdictions=("eu",),
    )
    got = await store.get_key("key_k")
    assert got is not None and got.settings() == key.settings() and got.credits == 2.0
    assert await store.get_key("key_missing") is None

    got.name, got.limits, got.models = "renamed", KeyLimits(tpm=1000), None
    assert await store.save_key(got) is True
    again = await store.find_key_by_hash(key.secret_hash)
    assert again is not None and again.name == "renamed" and again.limits == KeyLimits(tpm=1000)
    assert again.models is None and again.metadata == {"team": "search"}

    topped = await store.top_up("key_k", 0.5)
    assert topped is not None and topped.credits == pytest.approx(2.5)
    await _key(store, "key_free")
    assert await store.top_up("key_free", 1.0) is None  # unlimited: nothing to add to
    ghost = ApiKey(id="key_ghost", name="g", secret_hash="z" * 64, created_at=0.0)
    assert await store.save_key(ghost) is False


async def test_credits_reserve_then_settle(store: GenerationStore) -> None:
    await _key(store, credits=1.0)
    for i in range(3):
        assert (await store.admit(_ask(f"g{i}", 0.3), time.time())).admitted
    refused = await store.admit(_ask("g3", 0.3), time.time())
    assert not refused.admitted and refused.refusal == "credits"
    assert refused.balance == pytest.approx(0.1)
    key = await store.get_key("key_k")
    assert key is not None and key.reserved == pytest.approx(0.9) and key.spent == 0.0

    await store.settle("key_k", "g0", 0.1, 50, 0.0)  # cheaper than reserved: the rest comes back
    key = await store.get_key("key_k")
    assert key is not None and key.reserved == pytest.approx(0.6) and key.spent == pytest.approx(0.1)
    assert (await store.admit(_ask("g4", 0.3), time.time())).admitted  # 0.1 + 0.6 + 0.3 = 1.0
    assert not (await store.admit(_ask("g5", 0.01), time.time())).admitted


async def test_a_dead_owners_reservations_stop_counting(store: GenerationStore) -> None:
    await _key(store, credits=1.0, limits=KeyLimits(concurrent=1))
    await store.renew_lease(DEAD, 0.2)
    assert (await store.admit(_ask("g_dead", 0.9, owner=DEAD), time.time())).admitted
    refused = await store.admit(_ask("g1", 0.5), time.time())
    assert refused.refusal == "concurrent"
    await asyncio.sleep(0.5)  # the dead gateway's lease runs out (it never renews)
    assert (await store.admit(_ask("g1", 0.5), time.time())).admitted
    key = await store.get_key("key_k")
    assert key is not None and key.reserved == pytest.approx(0.5)


async def test_concurrency_slot_comes_back_at_settle(store: GenerationStore) -> None:
    await _key(store, limits=KeyLimits(concurrent=2))
    assert (await store.admit(_ask("a"), time.time())).admitted
    assert (await store.admit(_ask("b"), time.time())).admitted
    third = await store.admit(_ask("c"), time.time())
    assert third.refusal == "concurrent" and third.retry_after == 1.0
    await store.settle("key_k", "a", 0.0, 0, 0.0)
    assert (await store.admit(_ask("c"), time.time())).admitted


async def test_requests_per_minute_burst_then_exact_retry_after(store: GenerationStore) -> None:
    await _key(store, limits=KeyLimits(rpm=3))
    remaining = []
    for i in range(3):
        d = await store.admit(_ask(f"r{i}"), time.time())
        assert d.admitted
        remaining.append(d.rates["requests"][1])
    assert remaining == [2, 1, 0]
    refused = await store.admit(_ask("r3"), time.time())
    assert refused.refusal == "rpm" and refused.retry_after is not None
    assert 19.0 < refused.retry_after <= 20.0  # one request every 20 s after the burst
    assert refused.rates["requests"][0] == 3 and refused.rates["requests"][1] == 0


async def test_tokens_per_minute_counts_the_reservation_and_settles_to_use(store: GenerationStore) -> None:
    await _key(store, limits=KeyLimits(tpm=1000))
    d = await store.admit(_ask("t1", tokens=600), time.time())
    assert d.admitted and d.rates["tokens"][1] == 400
    refused = await store.admit(_ask("t2", tokens=600), time.time())
    assert refused.refusal == "tpm"
    await store.settle("key_k", "t1", 0.0, 100, 0.0)  # it used 100 of the 600 it reserved
    assert (await store.admit(_ask("t2", tokens=600), time.time())).admitted
    too_big = await store.admit(_ask("t3", tokens=5000), time.time())
    assert too_big.refusal == "tpm" and too_big.retry_after == 60.0


async def test_budget_period_resets_spent_at_the_boundary(store: GenerationStore) -> None:
    await _key(store, credits=1.0, budget_period="daily")
    day1 = period_floor("daily", 1_767_225_599.0)  # 2025-12-31T23:59:59Z
    day2 = period_floor("daily", 1_767_225_600.0)  # 2026-01-01T00:00:00Z
    assert day2 - day1 == 86_400
    assert (await store.admit(_ask("p1", 0.6, floor=day1), time.time())).admitted
    await store.settle("key_k", "p1", 0.6, 10, day1)
    assert not (await store.admit(_ask("p2", 0.6, floor=day1), time.time())).admitted
    key = await store.get_key("key_k")
    assert key is not None and key.spent == pytest.approx(0.6) and key.period_start == day1
    assert (await store.admit(_ask("p2", 0.6, floor=day2), time.time())).admitted  # a new day
    key = await store.get_key("key_k")
    assert key is not None and key.spent == 0.0 and key.period_start == day2


async def test_hundred_parallel_admissions_from_three_processes(open_another: OpenStore) -> None:
    stores = [await open_another() for _ in range(3)]  # the fixture closes them
    await _key(stores[0], credits=1.0)
    asks = [stores[i % 3].admit(_ask(f"par{i}", 0.1), time.time()) for i in range(100)]
    decisions = await asyncio.gather(*asks)
    assert sum(d.admitted for d in decisions) == 10
    key = await stores[1].get_key("key_k")
    assert key is not None and key.reserved == pytest.approx(1.0)


async def test_usage_report_groups(store: GenerationStore) -> None:
    base = 1_767_225_600.0  # 2026-01-01T00:00:00Z
    rows = [
        ("g1", "key_a", "chat-a", "p1", base + 10, "completed", 10, 5, 0.5, False),
        ("g2", "key_a", "chat-b", "p2", base + 86_400 + 5, "failed", 7, 0, 0.0, False),
        ("g3", "key_b", "chat-a", "p1", base + 20, "completed", 3, 2, 0.25, True),
        ("g4", "key_b", "chat-a", "p1", base - 100, "completed", 1, 1, 9.0, False),  # before `from`
    ]
    for gid, key_id, model, provider, created, status, pt, ct, cost, est in rows:
        rec = GenerationRecord(id=gid, key_id=key_id, model=model, door="chat", created_at=created, owner=LIVE)
        await store.create_generation(rec)
        rec.status, rec.provider, rec.cost, rec.usage_estimated = status, provider, cost, est
        rec.usage = Usage(pt, ct, pt + ct)
        await store.update_generation(rec)
    by_key = {g["group"]: g for g in await store.usage(base, base + 2 * 86_400, "key")}
    assert by_key["key_a"] == {
        "group": "key_a",
        "requests": 2,
        "failures": 1,
        "prompt_tokens": 17,
        "completion_tokens": 5,
        "cost": 0.5,
        "estimated_requests": 0,
    }
    assert by_key["key_b"]["requests"] == 1 and by_key["key_b"]["estimated_requests"] == 1
    days = {g["group"]: g["requests"] for g in await store.usage(base, base + 2 * 86_400, "day")}
    assert days == {"2026-01-01": 2, "2026-01-02": 1}
    models = {g["group"]: g["cost"] for g in await store.usage(base, base + 2 * 86_400, "model")}
    assert models == {"chat-a": 0.75, "chat-b": 0.0}
    providers = {g["group"]: g["requests"] for g in await store.usage(base, base + 2 * 86_400, "provider")}
    assert providers == {"p1": 2, "p2": 1}
