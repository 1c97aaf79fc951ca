"""One `GenerationStore` suite, run on SQLite, Redis and PostgreSQL (the SQLite semantics are the spec).

Redis and PostgreSQL are real servers on loopback (see `store_backends.py`); each test gets its own key
prefix / schema and removes it afterwards.
"""

from __future__ import annotations

import asyncio
import dataclasses
import time
import uuid

import pytest

from tests.support.store_backends import OpenStore
from tidegate.records import LOG_EVENT, LOG_FRAME, LOG_JSON, ApiKey, GenerationRecord, LogRun, Usage
from tidegate.store.base import GenerationStore


def gen(
    *,
    key_id: str = "key_a",
    idem: str | None = None,
    request_hash: str | None = "hash-1",
    owner: str = "host:1",
    status: str = "in_progress",
    created_at: float | None = None,
) -> GenerationRecord:
    return GenerationRecord(
        id="gen_" + uuid.uuid4().hex,
        key_id=key_id,
        model="local/smollm2",
        door="chat",
        created_at=time.time() if created_at is None else created_at,
        status=status,
        idempotency_key=idem,
        request_hash=request_hash if idem is not None else None,
        owner=owner,
    )


# --- API keys -----------------------------------------------------------------------------------------


async def test_keys_create_find_list_revoke_count_spend(store: GenerationStore) -> None:
    now = time.time()
    a = ApiKey(id="key_a", name="alpha", secret_hash="h" * 64, created_at=now, credits=5.0)
    b = ApiKey(id="key_b", name="beta", secret_hash="g" * 64, created_at=now + 1.25)
    await store.create_key(b)
    await store.create_key(a)
    assert await store.ping() is True
    assert await store.find_key_by_hash("h" * 64) == a
    assert await store.find_key_by_hash("g" * 64) == b
    assert await store.find_key_by_hash("x" * 64) is None
    assert [k.id for k in await store.list_keys()] == ["key_a", "key_b"]  # by created_at
    assert await store.count_keys() == 2

    await store.settle("key_a", "gen_1", 0.25, 10, 0.0)  # no reservation: the cost is spent all the same
    await store.settle("key_a", "gen_2", 0.25, 10, 0.0)
    await store.settle("key_missing", "gen_3", 1.0, 10, 0.0)  # no such key: nothing happens, no error
    found = await store.find_key_by_hash("h" * 64)
    assert found is not None and found.spent == pytest.approx(0.5) and found.credits == 5.0

    assert await store.revoke_key("alpha") is True  # by name
    assert await store.revoke_key("alpha") is False  # already revoked
    assert await store.count_keys() == 1
    revoked = await store.find_key_by_hash("h" * 64)
    assert revoked is not None and revoked.revoked is True and revoked.spent == pytest.approx(0.5)
    assert await store.revoke_key("key_b") is True  # by id
    assert await store.revoke_key("nobody") is False
    assert await store.count_keys() == 0
    assert [k.revoked for k in await store.list_keys()] == [True, True]  # revoked keys are still listed


async def test_duplicate_key_is_refused(store: GenerationStore) -> None:
    await store.create_key(ApiKey(id="key_a", name="a", secret_hash="s1", created_at=1.0))
    with pytest.raises(Exception):  # noqa: B017 - each backend raises its own driver error
        await store.create_key(ApiKey(id="key_b", name="b", secret_hash="s1", created_at=2.0))
    with pytest.raises(Exception):  # noqa: B017
        await store.create_key(ApiKey(id="key_a", name="c", secret_hash="s2", created_at=3.0))
    assert [k.id for k in await store.list_keys()] == ["key_a"]


# --- generation records --------------------------------------------------------------------------------


async def test_generation_round_trips_every_field(store: GenerationStore) -> None:
    minimal = gen()
    await store.create_generation(minimal)
    assert await store.get_generation(minimal.id) == minimal  # all the None / default values

    full = GenerationRecord(
        id="gen_full",
        key_id="key_z",
        model="openai/gpt-4o",
        door="responses",
        created_at=1712345678.123456,
        status="in_progress",
        idempotency_key="idem-é-1",
        request_hash="ab" * 32,
        provider="openai",
        served_model="gpt-4o-2024-08-06",
        attempts=2,
        finish_reason=None,
        usage=Usage(prompt_tokens=11, completion_tokens=7, total_tokens=18, reasoning_tokens=3, cached_tokens=4),
        usage_estimated=True,
        cost=0.000123456789,
        output_text='héllo "world"\n\t🌊',
        error=None,
        ttft_ms=12.5,
        duration_ms=None,
        owner="host-a:8080",
        route_reason="policy=cheapest chose cheap/model (needs tools); skipped big: the request has tools",
    )
    await store.create_generation(full)
    assert await store.get_generation("gen_full") == full

    changed = dataclasses.replace(
        full,
        status="failed",
        provider="anthropic",
        served_model="claude",
        attempts=3,
        finish_reason="error",
        usage=Usage(prompt_tokens=1, completion_tokens=2, total_tokens=3),
        usage_estimated=False,
        cost=1.5,
        output_text="partial",
        error={"code": "upstream_error", "message": "boom", "status": 502, "nested": {"a": [1, 2.5, None]}},
        ttft_ms=None,
        duration_ms=987.25,
        mcp_calls=[{"name": "add", "server_label": "calc", "arguments_bytes": 16, "duration_ms": 3.5, "error": None}],
        dropped=["web_search", "generationConfig.topK"],
    )
    await store.update_generation(changed)
    assert await store.get_generation("gen_full") == changed
    assert await store.get_generation(minimal.id) == minimal  # the other record is untouched
    assert await store.get_generation("gen_missing") is None

    ghost = gen()
    await store.update_generation(ghost)  # updating an unknown id creates nothing
    assert await store.get_generation(ghost.id) is None


# --- begin_generation ---------------------------------------------------------------------------------


async def test_begin_generation_outcomes(store: GenerationStore) -> None:
    first = gen(idem="k1")
    r = await store.begin_generation(first)
    assert r.outcome == "created" and r.record == first
    assert await store.get_generation(first.id) == first  # durable
    assert await store.find_idempotent("key_a", "k1") == first

    again = gen(idem="k1")
    r = await store.begin_generation(again)
    assert (r.outcome, r.record.id) == ("in_progress", first.id)
    assert await store.get_generation(again.id) is None  # nothing new was created

    other_body = gen(idem="k1", request_hash="hash-2")
    r = await store.begin_generation(other_body)
    assert (r.outcome, r.record.id) == ("mismatch", first.id)
    assert await store.get_generation(other_body.id) is None

    done = dataclasses.replace(first, status="completed", finish_reason="stop", output_text="hi")
    await store.update_generation(done)
    r = await store.begin_generation(gen(idem="k1"))
    assert (r.outcome, r.record) == ("completed", done)
    r = await store.begin_generation(gen(idem="k1", request_hash="hash-2"))
    assert (r.outcome, r.record.id) == ("mismatch", first.id)

    # the key is scoped to the API key
    elsewhere = gen(idem="k1", key_id="key_b")
    assert (await store.begin_generation(elsewhere)).outcome == "created"
    assert await store.find_idempotent("key_b", "k1") == elsewhere
    assert await store.find_idempotent("key_a", "k1") == done
    assert await store.find_idempotent("key_a", "nope") is None

    # without a key every request is a new generation
    plain1, plain2 = gen(), gen()
    assert (await store.begin_generation(plain1)).outcome == "created"
    assert (await store.begin_generation(plain2)).outcome == "created"
    assert await store.get_generation(plain1.id) == plain1 and await store.get_generation(plain2.id) == plain2


@pytest.mark.parametrize("ended", ["failed", "cancelled", "interrupted"])
async def test_begin_after_an_ended_generation_creates_and_repoints(store: GenerationStore, ended: str) -> None:
    first = gen(idem="retry")
    assert (await store.begin_generation(first)).outcome == "created"
    await store.update_generation(dataclasses.replace(first, status=ended, finish_reason="error"))

    # a different body still conflicts with the key, whatever the earlier generation's end
    r = await store.begin_generation(gen(idem="retry", request_hash="hash-other"))
    assert (r.outcome, r.record.id) == ("mismatch", first.id)

    second = gen(idem="retry")
    r = await store.begin_generation(second)
    assert r.outcome == "created" and r.record == second
    assert await store.find_idempotent("key_a", "retry") == second  # the key now points at the new one
    old = await store.get_generation(first.id)
    assert old is not None and old.status == ended  # the ledger keeps the earlier attempt
    r = await store.begin_generation(gen(idem="retry"))
    assert (r.outcome, r.record.id) == ("in_progress", second.id)


async def test_concurrent_begin_creates_exactly_one(open_another: OpenStore) -> None:
    # two store instances on the same database stand for two gateway processes
    stores = [await open_another(), await open_another()]
    records = [gen(idem="race") for _ in range(24)]
    results = await asyncio.gather(*(stores[i % 2].begin_generation(r) for i, r in enumerate(records)))
    created = [r for r in results if r.outcome == "created"]
    assert len(created) == 1
    winner = created[0].record.id
    assert all(r.outcome == "in_progress" and r.record.id == winner for r in results if r.outcome != "created")
    found = [await stores[0].get_generation(r.id) for r in records]
    assert [f.id for f in found if f is not None] == [winner]
    assert (await stores[1].find_idempotent("key_a", "race")) == created[0].record


# --- event logs ---------------------------------------------------------------------------------------


async def test_logs_append_and_read_after_seq(store: GenerationStore) -> None:
    g, h = gen(idem="logs"), gen()
    await store.begin_generation(g)
    await store.begin_generation(h)
    frames = [b"id: %d\ndata: {}\n\n" % i for i in range(6)]
    binary = b"\x00\xff\xfe\n\r\x80 not utf-8"
    await store.append_log(g.id, [LogRun(LOG_FRAME, 0, frames[:3]), LogRun(LOG_EVENT, 0, [binary])])
    await store.append_log(g.id, [LogRun(LOG_FRAME, 3, frames[3:]), LogRun(LOG_EVENT, 1, [binary])])
    await store.append_log(g.id, [])
    await store.append_log(g.id, [LogRun(LOG_EVENT, 2, [])])  # an empty run writes nothing
    await store.append_log(h.id, [LogRun(LOG_FRAME, 0, [b"other"])])

    assert await store.read_log(g.id, LOG_FRAME) == list(enumerate(frames))
    assert await store.read_log(g.id, LOG_FRAME, -1) == list(enumerate(frames))
    assert await store.read_log(g.id, LOG_FRAME, 2) == [(i, frames[i]) for i in range(3, 6)]
    assert await store.read_log(g.id, LOG_FRAME, 5) == []
    assert await store.read_log(g.id, LOG_EVENT) == [(0, binary), (1, binary)]  # equal data, two entries
    assert await store.read_log(g.id, LOG_JSON) == []
    assert await store.read_log(h.id, LOG_FRAME) == [(0, b"other")]
    assert await store.read_log("gen_missing", LOG_FRAME) == []

    await store.append_log(g.id, [LogRun(LOG_JSON, 0, [b'{"a":1}'])])
    await store.append_log(g.id, [LogRun(LOG_JSON, 0, [b'{"a":2}'])])  # the same seq again replaces it
    assert await store.read_log(g.id, LOG_JSON) == [(0, b'{"a":2}')]


async def test_a_run_written_again_from_its_first_seq_replaces_the_first_write(store: GenerationStore) -> None:
    """A flush that failed (whether or not the store kept it) is written again with what came since:
    one run from the same first seq, read back once, in order, not twice."""
    g = gen(idem="rewrite")
    await store.begin_generation(g)
    frames = [b"id: %d\ndata: {}\n\n" % i for i in range(8)]
    await store.append_log(g.id, [LogRun(LOG_FRAME, 0, frames[:2]), LogRun(LOG_EVENT, 0, [b"e0"])])
    await store.append_log(g.id, [LogRun(LOG_FRAME, 2, frames[2:4]), LogRun(LOG_EVENT, 1, [b"e1"])])
    await store.append_log(g.id, [LogRun(LOG_FRAME, 2, frames[2:6]), LogRun(LOG_EVENT, 1, [b"e1", b"e2"])])
    await store.append_log(g.id, [LogRun(LOG_FRAME, 6, frames[6:])])
    assert await store.read_log(g.id, LOG_FRAME) == list(enumerate(frames))
    assert await store.read_log(g.id, LOG_FRAME, 3) == [(i, frames[i]) for i in range(4, 8)]
    assert await store.read_log(g.id, LOG_EVENT) == [(0, b"e0"), (1, b"e1"), (2, b"e2")]
    assert await store.read_log(g.id, LOG_EVENT, 1) == [(2, b"e2")]


async def test_an_outcome_written_with_the_last_log_entries_carries_both(store: GenerationStore) -> None:
    g = gen(idem="final-log")
    await store.begin_generation(g)
    await store.append_log(g.id, [LogRun(LOG_FRAME, 0, [b"id: 0\n\n"]), LogRun(LOG_EVENT, 0, [b"e0"])])
    big = b"x" * 100_000  # over the size SQLite writes in place: the store thread's path
    done = dataclasses.replace(g, status="completed", finish_reason="stop", output_text="hi")
    last = [LogRun(LOG_FRAME, 1, [b"id: 1\n\n"]), LogRun(LOG_EVENT, 1, [big]), LogRun(LOG_JSON, 0, [b"{}"])]
    await store.update_generation(done, last)
    assert await store.get_generation(g.id) == done
    assert await store.read_log(g.id, LOG_FRAME) == [(0, b"id: 0\n\n"), (1, b"id: 1\n\n")]
    assert await store.read_log(g.id, LOG_EVENT) == [(0, b"e0"), (1, big)]
    assert await store.read_log(g.id, LOG_JSON) == [(0, b"{}")]

    h = gen(idem="final-log-small")
    await store.begin_generation(h)
    ended = dataclasses.replace(h, status="failed", finish_reason="error")
    await store.update_generation(ended, [LogRun(LOG_JSON, 0, [b'{"small":1}'])])
    assert await store.get_generation(h.id) == ended
    assert await store.read_log(h.id, LOG_JSON) == [(0, b'{"small":1}')]
    # an outcome is written once: a record no longer running keeps the one it has
    assert await store.update_generation(dataclasses.replace(ended, output_text="x"), []) is False
    assert await store.get_generation(h.id) == ended
    i = gen(idem="final-log-none")
    await store.begin_generation(i)
    ended = dataclasses.replace(i, status="failed", finish_reason="error", output_text="x")
    assert await store.update_generation(ended, []) is True  # no entries: the outcome only
    assert await store.get_generation(i.id) == ended


# --- leases and retention ---------------------------------------------------------------------


async def _expire(seconds: float = 0.35) -> None:
    await asyncio.sleep(seconds)  # past a 0.2 s lease on the store's clock


async def test_a_sweep_marks_only_the_running_records_of_owners_whose_lease_expired(store: GenerationStore) -> None:
    assert await store.renew_lease("me:1", 0.2) is False  # a first lease
    assert await store.renew_lease("them:2", 60) is False
    assert await store.renew_lease("them:2", 60) is True  # renewed
    mine_running = gen(owner="me:1", idem="m1")
    mine_plain = gen(owner="me:1")
    mine_done = gen(owner="me:1")
    mine_finished_later = gen(owner="me:1")
    theirs = gen(owner="them:2")
    await store.begin_generation(mine_running)
    await store.create_generation(mine_plain)
    await store.create_generation(dataclasses.replace(mine_done, status="completed", finish_reason="stop"))
    await store.create_generation(mine_finished_later)
    assert await store.update_generation(dataclasses.replace(mine_finished_later, status="cancelled")) is True
    await store.begin_generation(theirs)
    assert await store.sweep_leases() == 0  # every lease still held

    await _expire()
    assert await store.sweep_leases() == 2
    for rec in (mine_running, mine_plain):
        got = await store.get_generation(rec.id)
        assert got is not None
        assert (got.status, got.finish_reason) == ("interrupted", "error")
        assert got.error is not None and got.error["code"] == "interrupted"
        assert dataclasses.replace(got, status="in_progress", finish_reason=None, error=None) == rec
    for rec, status in ((mine_done, "completed"), (mine_finished_later, "cancelled")):
        untouched = await store.get_generation(rec.id)
        assert untouched is not None and untouched.status == status
    assert await store.get_generation(theirs.id) == theirs
    assert await store.sweep_leases() == 0
    assert await store.sweep_leases(orphans=True) == 0

    # the paused owner wakes: its outcome does not overwrite the sweep's, and it learns it lost the lease
    late = dataclasses.replace(mine_running, status="completed", finish_reason="stop", output_text="late")
    assert await store.update_generation(late) is False
    got = await store.get_generation(mine_running.id)
    assert got is not None and got.status == "interrupted"
    assert await store.renew_lease("me:1", 0.2) is False
    # what it runs under its new lease is swept when that one expires, and only that
    next_run = gen(owner="me:1")
    await store.create_generation(next_run)
    await _expire()
    assert await store.sweep_leases() == 1
    got = await store.get_generation(next_run.id)
    assert got is not None and got.status == "interrupted"
    # an interrupted generation's key can be used again
    assert (await store.begin_generation(gen(owner="me:1", idem="m1"))).outcome == "created"


async def test_records_of_an_owner_that_never_held_a_lease_are_swept_as_orphans_only(store: GenerationStore) -> None:
    await store.renew_lease("live:1", 60)
    legacy = gen(owner="oldhost:8080")
    live = gen(owner="live:1")
    await store.create_generation(legacy)
    await store.create_generation(live)
    assert await store.sweep_leases() == 0
    assert await store.sweep_leases(orphans=True) == 1
    got = await store.get_generation(legacy.id)
    assert got is not None and got.status == "interrupted"
    assert await store.get_generation(live.id) == live


async def test_release_marks_what_the_owner_still_runs_and_ends_its_lease(store: GenerationStore) -> None:
    await store.renew_lease("me:1", 60)
    running = gen(owner="me:1")
    done = gen(owner="me:1")
    await store.create_generation(running)
    await store.create_generation(done)
    await store.update_generation(dataclasses.replace(done, status="completed", finish_reason="stop"))
    await store.release_lease("me:1")
    got = await store.get_generation(running.id)
    assert got is not None and got.status == "interrupted"
    got = await store.get_generation(done.id)
    assert got is not None and got.status == "completed"
    assert await store.renew_lease("me:1", 60) is False


async def test_prune_forgets_old_keys_and_logs_but_keeps_records(store: GenerationStore) -> None:
    now = time.time()
    old_done = gen(idem="old-done", created_at=now - 100 * 3600)
    old_running = gen(idem="old-running", created_at=now - 100 * 3600)
    old_plain = gen(created_at=now - 50 * 3600)
    fresh = gen(idem="fresh", created_at=now - 60)
    for rec in (old_done, old_running, old_plain, fresh):
        await store.begin_generation(rec)
        await store.append_log(rec.id, [LogRun(LOG_FRAME, 0, [b"f0"]), LogRun(LOG_EVENT, 0, [b"e0"])])
    await store.update_generation(dataclasses.replace(old_done, status="completed"))
    await store.update_generation(dataclasses.replace(old_plain, status="failed"))

    assert await store.prune(now - 24 * 3600) == 2  # the two old idempotency keys
    assert await store.find_idempotent("key_a", "old-done") is None
    assert await store.find_idempotent("key_a", "old-running") is None
    assert await store.find_idempotent("key_a", "fresh") == fresh
    for rec in (old_done, old_running, old_plain, fresh):  # the ledger stays
        assert await store.get_generation(rec.id) is not None
    for rec in (old_done, old_plain):
        assert await store.read_log(rec.id, LOG_FRAME) == [] and await store.read_log(rec.id, LOG_EVENT) == []
    for rec in (old_running, fresh):  # a running generation's log is never pruned
        assert await store.read_log(rec.id, LOG_FRAME) == [(0, b"f0")]
        assert await store.read_log(rec.id, LOG_EVENT) == [(0, b"e0")]
    assert await store.prune(now - 24 * 3600) == 0

    # a forgotten key starts a new generation; the fresh one is still answered from the store
    assert (await store.begin_generation(gen(idem="old-done"))).outcome == "created"
    r = await store.begin_generation(gen(idem="fresh"))
    assert (r.outcome, r.record.id) == ("in_progress", fresh.id)


# --- the live tail ------------------------------------------------------------------------------------


async def test_a_follower_wakes_for_what_another_process_appends_and_for_the_outcome(open_another: OpenStore) -> None:
    writer, follower = await open_another(), await open_another()
    rec = gen(idem="tail")
    await writer.begin_generation(rec)
    loop = asyncio.get_running_loop()
    async with follower.follow(rec.id) as tail:
        assert await follower.read_log(rec.id, LOG_FRAME) == []
        loop.call_later(0.3, lambda: asyncio.ensure_future(writer.append_log(rec.id, [LogRun(LOG_FRAME, 0, [b"f0"])])))
        t0 = loop.time()
        while not await follower.read_log(rec.id, LOG_FRAME):
            await tail.wait()
            assert loop.time() - t0 < 2.5
        woke = loop.time() - t0
        assert woke < 0.6, f"the append was seen {woke:.2f} s after the follower started waiting"
        done = dataclasses.replace(rec, status="completed", finish_reason="stop")
        loop.call_later(0.2, lambda: asyncio.ensure_future(writer.update_generation(done)))
        t0 = loop.time()
        while (await follower.get_generation(rec.id)) != done:
            await tail.wait()
            assert loop.time() - t0 < 2.5
        if type(follower).__name__ == "RedisStore":  # pushed: an idle follower is not woken to poll
            t0 = loop.time()
            await tail.wait()
            assert loop.time() - t0 > 1.0


async def test_hundreds_of_generations_begun_at_once_all_succeed(store: GenerationStore) -> None:
    """A burst of streams starting together: each waits for a connection, none fails (redis-py's
    default pool raised past 100 commands in flight)."""
    records = [gen(idem=f"burst-{i}") for i in range(300)]
    results = await asyncio.gather(*(store.begin_generation(r) for r in records))
    assert [r.outcome for r in results] == ["created"] * 300


# --- shared route health (docs/api-operations.md §12) -----------------------------------------------------------


async def test_route_health_is_shared_by_redis_and_kept_in_process_by_the_sql_stores(
    open_another: OpenStore,
) -> None:
    one, two = await open_another(), await open_another()
    shared, other = one.route_health(), two.route_health()
    if shared is None or other is None:  # SQLite, PostgreSQL: each process keeps its own (docs/routing.md)
        assert shared is None and other is None and type(one).__name__ != "RedisStore"
        return
    assert await shared.route_failed("p/m", 2, 30) is None
    until = await other.route_failed("p/m", 2, 30)  # the second failure, from another process
    assert until is not None and until == pytest.approx(time.time() + 30, abs=2)
    assert await shared.open_routes(["p/m", "p/other"]) == {"p/m": until}
    assert await shared.recovered_routes(["p/m", "p/other"]) == {"p/other"}
    assert await shared.claim_probe("p/m", 30) is True  # one half-open probe for every process
    assert await other.claim_probe("p/m", 30) is False
    await other.route_recovered("p/m")
    assert await shared.open_routes(["p/m"]) == {}
    assert await shared.recovered_routes(["p/m"]) == {"p/m"}
    assert await other.claim_probe("p/m", 0.2) is True  # the probe's claim went with the recovery
    assert await shared.route_failed("p/m", 2, 30) is None  # the count started again


async def test_recent_generations_are_newest_first_and_per_key(store: GenerationStore) -> None:
    records = [
        gen(key_id=k, created_at=1_800_000_000.0 + i) for i, k in enumerate(["key_r", "key_s", "key_r", "key_r"])
    ]
    for record in records:
        await store.create_generation(record)
    newest = await store.recent_generations(3)
    assert [r.id for r in newest] == [records[3].id, records[2].id, records[1].id]
    assert newest[0] == records[3]  # whole records
    assert [r.id for r in await store.recent_generations(5, "key_r")] == [records[3].id, records[2].id, records[0].id]
    assert await store.recent_generations(5, "key_nobody") == []
