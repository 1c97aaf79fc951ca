"""Redis store (`redis://host:port/db?prefix=tidegate:&retention_hours=24&max_connections=64`), shared by many gateways.

Layout, every key under `prefix` (default `tidegate:`):
- keys: `key:{id}`, `keyhash:{secret_hash}`, `keys`, `resv:{id}` (store/redis/keys.py).
- `gen:{id}` hash, one JSON-encoded value per `GenerationRecord` field (Lua can read/patch `status`).
- `idem:{len(key_id)}:{key_id}:{idempotency_key}` hash (gen, hash, created_at) + `idem` zset by created_at.
- `log:{id}:{kind}` zset, one member per run of entries a flush wrote (`logpack`: its first seq, every
  length, the bytes; deflated from 8 KiB on) scored by the run's last seq; members written by versions
  before are one entry each (8-byte seq + data, scored by seq) and still read. `logkinds:{id}` set, `logidx` zset of
  generations that have logs, by the generation's created_at (for `prune`).
- `owner:{owner}` set of the generation ids that owner has in progress (what a lease sweep marks).
- `sessions:key:{key_id}` and `sessions:all` zsets of the ids of records in an agent session, by
  created_at, written as the record is created (store/redis/sessions.py).
- `lease:{owner}` a key that expires with the owner's lease (Redis's clock: no skew between hosts);
  `leases` set of the owners that took a lease and have not been swept.

Every multi-key change is one Lua script, so `begin_generation` is atomic across processes.
"""

from __future__ import annotations

import contextlib
import struct
from collections.abc import AsyncIterator
from dataclasses import fields
from typing import Any
from urllib.parse import parse_qsl, urlencode, urlsplit, urlunsplit

import orjson
import redis.asyncio as aioredis
from redis.asyncio.client import PubSub
from redis.commands.core import AsyncScript
from redis.exceptions import RedisError

from ...records import INTERRUPTED_ERROR, ApiKey, BeginResult, GenerationRecord, LogRun, usage_dict, usage_from_dict
from ...store_url import StoreBackend
from .. import logpack
from ..admit import Ask, Decision
from ..base import LogTail, SharedRouteHealth
from . import keys as redis_keys
from . import rollups as redis_rollups
from . import scripts

DEFAULT_PREFIX = "tidegate:"
DEFAULT_MAX_CONNECTIONS = 64  # per gateway process, for commands (`?max_connections=N` in the URL)
_MAX_FOLLOWERS = 1000  # live followers (resume/replay of a generation another instance runs) at once
_GEN_FIELDS = tuple(f.name for f in fields(GenerationRecord))
_IN_PROGRESS = b'"in_progress"'
_SEQ = struct.Struct(">q")


_PRUNE_BATCH = 500
# A follower that hears nothing looks at the record anyway this often (a publish lost with a
# reconnect, or a generation whose owner died without a sweep yet)
_TAIL_SAFETY_S = 2.0


class _PubSubTail:
    def __init__(self, pubsub: PubSub) -> None:
        self._pubsub = pubsub

    async def wait(self) -> None:
        message = await self._pubsub.get_message(ignore_subscribe_messages=True, timeout=_TAIL_SAFETY_S)
        while message is not None:  # several appends announced meanwhile: one read takes them all
            message = await self._pubsub.get_message(ignore_subscribe_messages=True, timeout=0)


def _split_url(url: str) -> tuple[str, dict[str, str]]:
    """The url without tidegate's own query parameters, and those parameters."""
    parts = urlsplit(url)
    ours: dict[str, str] = {}
    rest: list[tuple[str, str]] = []
    for name, value in parse_qsl(parts.query, keep_blank_values=True):
        if name in ("prefix", "retention_hours", "max_connections"):
            ours[name] = value
        else:
            rest.append((name, value))
    return urlunsplit(parts._replace(query=urlencode(rest))), ours


def _enc(value: Any) -> bytes:
    return orjson.dumps(value)


def _gen_fields(record: GenerationRecord) -> list[Any]:
    out: list[Any] = []
    for name in _GEN_FIELDS:
        value = usage_dict(record.usage) if name == "usage" else getattr(record, name)
        out += [name, _enc(value)]
    return out


def _pairs(flat: list[Any]) -> dict[str, Any]:
    return {
        (k.decode() if isinstance(k, bytes) else str(k)): orjson.loads(v)
        for k, v in zip(flat[::2], flat[1::2], strict=True)
    }


def _gen_from(values: dict[str, Any]) -> GenerationRecord:
    values = dict(values)
    values["usage"] = usage_from_dict(values.get("usage", {}))
    return GenerationRecord(**{k: v for k, v in values.items() if k in _GEN_FIELDS})


class RedisStore:
    backend_name: StoreBackend = "redis"

    def __init__(self, url: str, *, prefix: str | None = None, retention_hours: float | None = None) -> None:
        self.url, params = _split_url(url)
        self.prefix = prefix if prefix is not None else params.get("prefix", DEFAULT_PREFIX)
        hours = retention_hours if retention_hours is not None else float(params.get("retention_hours", 0) or 0)
        self._ttl_ms = int(hours * 3_600_000)  # 0: no expiry, `prune` forgets old keys
        self._max_connections = int(params.get("max_connections", 0) or DEFAULT_MAX_CONNECTIONS)
        self._r: aioredis.Redis | None = None
        self._sub: aioredis.Redis | None = None
        self._scripts: dict[str, AsyncScript] = {}
        self.rollups = redis_rollups.redis_rollups(lambda: self._redis, self._k)

    def _k(self, *parts: str) -> str:
        return self.prefix + ":".join(parts)

    @property
    def _redis(self) -> aioredis.Redis:
        if self._r is None:
            raise RuntimeError("the Redis store is not open")
        return self._r

    async def _cmd(self, *args: Any) -> Any:
        return await self._redis.execute_command(*args)  # type: ignore[no-untyped-call]

    async def _run(self, name: str, keys: list[str], args: list[Any]) -> Any:
        return await self._scripts[name](keys=keys, args=args)

    async def open(self) -> None:
        if self._r is not None:
            return
        # A blocking pool: at hundreds of streams starting at once, a command waits (up to 10 s) for
        # one of `max_connections` connections instead of failing (redis-py's default pool raises
        # past 100). Followers' subscriptions hold a connection each for as long as they follow: a
        # pool of their own, so they never take the commands' connections.
        pool = aioredis.BlockingConnectionPool.from_url(
            self.url, max_connections=self._max_connections, timeout=10, socket_connect_timeout=5, socket_timeout=30
        )
        self._r = aioredis.Redis(connection_pool=pool)
        self._sub = aioredis.Redis.from_url(
            self.url, max_connections=_MAX_FOLLOWERS, socket_connect_timeout=5, socket_timeout=None
        )
        sources = {
            "create_key": scripts.CREATE_KEY,
            "scan_keys": scripts.SCAN_KEYS,
            "find_key": scripts.FIND_KEY,
            "admit": scripts.ADMIT,
            "settle": scripts.SETTLE,
            "top_up": scripts.TOP_UP,
            "save_key": scripts.SAVE_KEY,
            "put_gen": scripts.PUT_GEN,
            "begin": scripts.BEGIN,
            "renew_lease": scripts.RENEW_LEASE,
            "sweep_owner": scripts.SWEEP_OWNER,
            "append_log": scripts.APPEND_LOG,
            "prune_idem": scripts.PRUNE_IDEM,
            "prune_logs": scripts.PRUNE_LOGS,
        }
        self._scripts = {name: self._r.register_script(src) for name, src in sources.items()}
        await self._cmd("PING")
        self.rollups.start()

    async def close(self) -> None:
        if self._r is not None:
            await self.rollups.stop()
            await self._r.aclose()
            await self._r.connection_pool.disconnect()
            self._r = None
        if self._sub is not None:
            await self._sub.aclose()
            await self._sub.connection_pool.disconnect()
            self._sub = None

    async def ping(self) -> bool:
        try:
            return bool(await self._cmd("PING"))
        except (RedisError, OSError, RuntimeError):
            return False

    # --- keys (store/redis/keys.py) ----------------------------------------------------------------
    async def create_key(self, key: ApiKey) -> None:
        await self._run(
            "create_key",
            [self._k("key", key.id), self._k("keyhash", key.secret_hash), self._k("keys")],
            [key.id, repr(float(key.created_at)), *redis_keys.fields_of(key)],
        )

    async def _get_key(self, key_id: str) -> ApiKey | None:
        flat = await self._cmd("HGETALL", self._k("key", key_id))
        if not flat:
            return None
        return redis_keys.key_from({k.decode(): orjson.loads(v) for k, v in flat.items()})

    async def find_key_by_hash(self, secret_hash: str) -> ApiKey | None:
        flat = await self._run("find_key", [self._k("keyhash", secret_hash)], [self.prefix])
        if not flat:
            return None
        return redis_keys.key_from({k.decode(): orjson.loads(v) for k, v in zip(flat[::2], flat[1::2], strict=True)})

    async def get_key(self, key_id: str) -> ApiKey | None:
        key = await self._get_key(key_id)
        if key is not None:
            held = await self._redis.hgetall(self._k("resv", key_id))
            owners = sorted({orjson.loads(v)["owner"] for v in held.values()})
            alive = {o for o in owners if await self._cmd("EXISTS", self._k("lease", o))}
            key.reserved = redis_keys.live_reserved(held, alive)
        return key

    async def list_keys(self) -> list[ApiKey]:
        ids = await self._cmd("ZRANGE", self._k("keys"), 0, -1)
        out = [await self._get_key(i.decode()) for i in ids]
        return [k for k in out if k is not None]

    async def save_key(self, key: ApiKey) -> bool:
        return bool(await self._run("save_key", [self._k("key", key.id)], redis_keys.admin_fields(key)))

    async def top_up(self, key_id: str, amount: float) -> ApiKey | None:
        if not await self._run("top_up", [self._k("key", key_id)], [repr(float(amount))]):
            return None
        return await self.get_key(key_id)

    async def admit(self, ask: Ask, now: float) -> Decision:
        raw = await self._run(
            "admit",
            [self._k("key", ask.key_id), self._k("resv", ask.key_id)],
            [self.prefix, ask.generation_id, ask.owner, repr(float(ask.amount)), ask.tokens, repr(ask.period_floor)],
        )
        return redis_keys.decision_from(raw)

    async def settle(self, key_id: str, generation_id: str, cost: float, tokens: int, period_floor: float) -> None:
        await self._run(
            "settle",
            [self._k("key", key_id), self._k("resv", key_id)],
            [generation_id, repr(float(cost)), tokens, repr(period_floor)],
        )

    async def usage(self, start: float, end: float, group_by: str) -> list[dict[str, Any]]:
        """A scan of every record (Redis keeps no index by time): an operator's report, not a hot path."""
        names = ("key_id", "model", "provider", "created_at", "status", "usage", "cost", "usage_estimated")
        records: list[dict[str, Any]] = []
        async for gen_key in self._redis.scan_iter(match=self._k("gen", "*"), count=1000):
            values = await self._redis.hmget(gen_key, names)
            records.append({n: orjson.loads(v) for n, v in zip(names, values, strict=True) if v is not None})
        return redis_keys.usage_groups(records, start, end, group_by)

    async def revoke_key(self, key_id_or_name: str) -> bool:
        n = await self._run("scan_keys", [self._k("keys")], [self.prefix, _enc(key_id_or_name), "revoke"])
        return int(n) > 0

    async def count_keys(self) -> int:
        return int(await self._run("scan_keys", [self._k("keys")], [self.prefix, b"", "count"]))

    # --- generations ------------------------------------------------------------------------------
    async def _put(self, mode: str, record: GenerationRecord) -> bool:
        in_progress = "1" if record.status == "in_progress" else "0"
        written = await self._run(
            "put_gen",
            [
                self._k("gen", record.id),
                self._k("owner", record.owner),
                self._k("tail", record.id),
                self._k("console", "gens"),
                *self._session_indexes(record),
            ],
            [
                mode,
                self._k("owner", ""),
                in_progress,
                record.id,
                repr(record.created_at),
                "1" if record.agent_session else "0",
                *_gen_fields(record),
            ],
        )
        return bool(written)

    def _session_indexes(self, record: GenerationRecord) -> tuple[str, str]:
        """The zsets of agent-session records by created_at: the record's key's, and every key's."""
        return self._k("sessions", "key", record.key_id), self._k("sessions", "all")

    async def create_generation(self, record: GenerationRecord) -> None:
        await self._put("create", record)

    async def update_generation(self, record: GenerationRecord, log: list[LogRun] | None = None) -> bool:
        if log:
            await self.append_log(record.id, log)  # first: the outcome is never seen before its log
        written = await self._put("update", record)
        if written and record.status != "in_progress":  # indexed by the script; rollups: store/redis/rollups.py
            self.rollups.add(record)
        return written

    async def get_generation(self, generation_id: str) -> GenerationRecord | None:
        flat = await self._cmd("HGETALL", self._k("gen", generation_id))
        if not flat:
            return None
        return _gen_from({k.decode(): orjson.loads(v) for k, v in flat.items()})

    async def recent_generations(self, limit: int, key_id: str | None = None) -> list[GenerationRecord]:
        """A scan of every record, like `usage` (Redis keeps no index by time): an operator's view."""
        found: list[GenerationRecord] = []
        async for gen_key in self._redis.scan_iter(match=self._k("gen", "*"), count=1000):
            flat = await self._cmd("HGETALL", gen_key)
            if flat:
                record = _gen_from({k.decode(): orjson.loads(v) for k, v in flat.items()})
                if key_id is None or record.key_id == key_id:
                    found.append(record)
        found.sort(key=lambda r: r.created_at, reverse=True)
        return found[:limit]

    # --- leases (docs/api-operations.md §10) ----------------------------------------------------------------------
    async def renew_lease(self, owner: str, ttl_s: float) -> bool:
        held = await self._run(
            "renew_lease", [self._k("lease", owner), self._k("leases")], [owner, max(1, int(ttl_s * 1000))]
        )
        return bool(held)

    async def release_lease(self, owner: str) -> None:
        await self._cmd("DEL", self._k("lease", owner))
        await self._sweep_owner(owner, "swept")

    async def _sweep_owner(self, owner: str, mode: str) -> int:
        args = [self.prefix, owner, _enc(owner), _enc(INTERRUPTED_ERROR), mode]
        return int(await self._run("sweep_owner", [self._k("leases")], args))

    async def sweep_leases(self, *, orphans: bool = False) -> int:
        marked = 0
        for member in await self._cmd("SMEMBERS", self._k("leases")):
            owner = member.decode()
            if not await self._cmd("EXISTS", self._k("lease", owner)):
                marked += await self._sweep_owner(owner, "swept")
        if orphans:  # owners of versions before leases: an `owner:` set and never a lease
            prefix = self._k("owner", "")
            pattern = "".join("\\" + c if c in "*?[]\\" else c for c in prefix) + "*"
            async for key in self._redis.scan_iter(match=pattern, count=500):
                marked += await self._sweep_owner(key.decode()[len(prefix) :], "orphan")
        return marked

    # --- idempotency and logs ---------------------------------------------------------------------
    @staticmethod
    def _idem_member(key_id: str, idempotency_key: str) -> str:
        return f"{len(key_id)}:{key_id}:{idempotency_key}"

    async def begin_generation(self, record: GenerationRecord) -> BeginResult:
        if record.idempotency_key is None:
            await self.create_generation(record)
            return BeginResult("created", record)
        member = self._idem_member(record.key_id, record.idempotency_key)
        outcome, flat = await self._run(
            "begin",
            [
                self._k("idem", member),
                self._k("gen", record.id),
                self._k("idem"),
                self._k("owner", record.owner),
                *self._session_indexes(record),
            ],
            [
                self.prefix,
                member,
                record.id,
                _enc(record.request_hash),
                repr(float(record.created_at)),
                self._ttl_ms,
                "1" if record.status == "in_progress" else "0",
                "1" if record.agent_session else "0",
                *_gen_fields(record),
            ],
        )
        if outcome == b"created":
            return BeginResult("created", record)
        existing = _gen_from(_pairs(flat))
        return BeginResult("mismatch" if outcome == b"mismatch" else existing.status, existing)

    async def find_idempotent(self, key_id: str, idempotency_key: str) -> GenerationRecord | None:
        gen = await self._cmd("HGET", self._k("idem", self._idem_member(key_id, idempotency_key)), "gen")
        return await self.get_generation(gen.decode()) if gen is not None else None

    async def append_log(self, generation_id: str, runs: list[LogRun]) -> None:
        members: list[Any] = []  # kind, first seq, last seq, member: per run
        for run in runs:
            if run.items:
                # deflated from 8 KiB on: Redis holds logs in RAM until they expire
                blob = await logpack.deflated(logpack.pack(run.first_seq, run.items))
                members += [run.kind, run.first_seq, run.last_seq, blob]
        if not members:
            return
        await self._run(
            "append_log",
            [
                self._k("logkinds", generation_id),
                self._k("logidx"),
                self._k("gen", generation_id),
                self._k("tail", generation_id),
            ],
            [self._k("log", generation_id, ""), self._ttl_ms, generation_id, *members],
        )

    @contextlib.asynccontextmanager
    async def follow(self, generation_id: str) -> AsyncIterator[LogTail]:
        """Pushed: every append and outcome publishes on `tail:{id}` (in the same script), and a
        follower subscribed before its first read wakes on it."""
        if self._sub is None:
            raise RuntimeError("the Redis store is not open")
        pubsub = self._sub.pubsub()
        await pubsub.subscribe(self._k("tail", generation_id))
        try:
            yield _PubSubTail(pubsub)
        finally:
            await pubsub.aclose()

    async def read_log(self, generation_id: str, kind: str, after_seq: int = -1) -> list[tuple[int, bytes]]:
        out: list[tuple[int, bytes]] = []
        for member in await self._cmd("ZRANGEBYSCORE", self._k("log", generation_id, kind), f"({after_seq}", "+inf"):
            if logpack.packed(member):
                out += [entry for entry in logpack.unpack(member) if entry[0] > after_seq]
            else:  # one entry, as versions before wrote it
                out.append((_SEQ.unpack_from(member)[0], bytes(member[_SEQ.size :])))
        return out

    def route_health(self) -> SharedRouteHealth:
        from .routes import RedisRouteHealth

        return RedisRouteHealth(lambda: self._redis, self._k)

    async def prune(self, older_than: float) -> int:
        cutoff = repr(float(older_than))
        forgotten = 0
        old = await self._cmd("ZRANGEBYSCORE", self._k("idem"), "-inf", f"({cutoff}")
        for i in range(0, len(old), _PRUNE_BATCH):
            batch = old[i : i + _PRUNE_BATCH]
            forgotten += int(await self._run("prune_idem", [self._k("idem")], [self._k("idem", ""), cutoff, *batch]))
        old = await self._cmd("ZRANGEBYSCORE", self._k("logidx"), "-inf", f"({cutoff}")
        for i in range(0, len(old), _PRUNE_BATCH):
            await self._run("prune_logs", [self._k("logidx")], [self.prefix, *old[i : i + _PRUNE_BATCH]])
        return forgotten
