"""The `GenerationStore` protocol: the roles a store plays (the records it keeps are in `tidegate.records`)."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator
from typing import Any, Protocol

from ..records import ApiKey, BeginResult, GenerationRecord, LogRun
from ..store_url import StoreBackend
from .admit import Ask, Decision


class LogTail(Protocol):
    """A follower's wait for a generation's next log entries or outcome (`GenerationStore.follow`)."""

    async def wait(self) -> None:
        """Until something may have changed: an append or an outcome was announced (a store that
        pushes), or a short poll interval passed (one that does not). Never raises on a timeout."""
        ...


POLL_INTERVAL_S = 0.1


class PollingTail:
    """For a store without push: a follower looks again every `POLL_INTERVAL_S`."""

    async def wait(self) -> None:
        await asyncio.sleep(POLL_INTERVAL_S)


@contextlib.asynccontextmanager
async def polling_follow(_generation_id: str) -> AsyncIterator[LogTail]:
    yield PollingTail()


class SharedRouteHealth(Protocol):
    """Route health shared by the instances of one store (gateway/health.py)."""

    async def route_failed(self, route: str, threshold: int, open_s: float) -> float | None: ...

    async def route_recovered(self, route: str) -> None: ...

    async def open_routes(self, routes: list[str]) -> dict[str, float]: ...

    async def claim_probe(self, route: str, ttl_s: float) -> bool:
        """The one half-open probe of an open route, for this instance (True) or another (False)."""
        ...

    async def recovered_routes(self, routes: list[str]) -> set[str]:
        """The routes no failure is counted against (a probe succeeded, or none failed lately)."""
        ...


class Lifecycle(Protocol):
    """A store's life: connect, answer a health check, forget what is past keeping."""

    @property
    def backend_name(self) -> StoreBackend:
        """Which backend package holds this store's side of each concern (store/backends.py)."""
        ...

    async def open(self) -> None: ...

    async def close(self) -> None: ...

    async def ping(self) -> bool: ...

    async def prune(self, older_than: float) -> int:
        """Forget idempotency keys and event logs older than `older_than` (unix time); records stay (the
        ledger). Returns the number of keys forgotten."""
        ...


class KeyStore(Protocol):
    """API keys and admission (docs/keys.md): the keys, their credits and limits, the usage report."""

    async def create_key(self, key: ApiKey) -> None: ...

    async def find_key_by_hash(self, secret_hash: str) -> ApiKey | None: ...

    async def list_keys(self) -> list[ApiKey]: ...

    async def revoke_key(self, key_id_or_name: str) -> bool: ...

    async def count_keys(self) -> int: ...

    async def get_key(self, key_id: str) -> ApiKey | None:
        """The key with `reserved` summed over its live reservations."""
        ...

    async def save_key(self, key: ApiKey) -> bool:
        """Write what an admin may change (name, credits, revoked, settings); never the counters.
        False when there is no such key."""
        ...

    async def top_up(self, key_id: str, amount: float) -> ApiKey | None:
        """Atomically add `amount` USD to a key's credits (not an unlimited key's: None)."""
        ...

    async def admit(self, ask: Ask, now: float) -> Decision:
        """docs/api-operations.md §11's admission in one transaction (store/admit.py): roll the budget period,
        check concurrency, rate limits and credits against every instance's live reservations, and
        when admitted record the reservation and the limits' new state."""
        ...

    async def settle(self, key_id: str, generation_id: str, cost: float, tokens: int, period_floor: float) -> None:
        """A generation ended: its reservation (if any) goes, `cost` is spent (in the period of
        `period_floor`), and the tokens limit counts `tokens` instead of the reserved ones."""
        ...

    async def usage(self, start: float, end: float, group_by: str) -> list[dict[str, Any]]:
        """docs/api-operations.md §11's usage report over the records created in [start, end)."""
        ...


class RecordStore(Protocol):
    """Generation records (the ledger) and their idempotency keys."""

    async def create_generation(self, record: GenerationRecord) -> None: ...

    async def begin_generation(self, record: GenerationRecord) -> BeginResult:
        """Atomically: honour `record.idempotency_key` (scoped to `record.key_id`) and create the record
        durable with status in_progress, unless a same-key generation must be answered instead."""
        ...

    async def find_idempotent(self, key_id: str, idempotency_key: str) -> GenerationRecord | None: ...

    async def update_generation(self, record: GenerationRecord, log: list[LogRun] | None = None) -> bool:
        """Write the record's outcome: status, provider, served model, attempts, finish reason, usage,
        cost, output, error and timings. Its identity (key, model, door, creation time, idempotency key,
        request hash, owner) is written once, when it is created, and never changes.

        Only a record still `in_progress` takes an outcome: one a lease sweep marked `interrupted`
        (its owner was paused or cut off past its lease) keeps that outcome. Returns whether the
        outcome was written.

        `log`: the generation's last log runs (as `append_log` takes them), written with the
        outcome and never after it: a reader that sees the outcome finds the whole log. One write
        for both where the store can (the end of every generation that keeps logs)."""
        ...

    async def get_generation(self, generation_id: str) -> GenerationRecord | None: ...

    async def recent_generations(self, limit: int, key_id: str | None = None) -> list[GenerationRecord]:
        """The newest `limit` records (of one key when `key_id` is given), newest first."""
        ...


class LogStore(Protocol):
    """A generation's logs (frames, events, the JSON answer) and their live followers."""

    async def append_log(self, generation_id: str, runs: list[LogRun]) -> None:
        """Append runs of entries to a generation's logs. Runs of one kind never overlap, but for one
        entry written again at the same seq (the JSON answer at 0), which replaces the first."""
        ...

    async def read_log(self, generation_id: str, kind: str, after_seq: int = -1) -> list[tuple[int, bytes]]: ...

    def follow(self, generation_id: str) -> contextlib.AbstractAsyncContextManager[LogTail]:
        """A live follower's wait (another process runs the generation). Entered before the
        follower's first read, so nothing appended after that read goes unannounced."""
        ...


class LeaseStore(Protocol):
    """Leases (docs/api-operations.md §10): every gateway process start is an owner with a lease it renews."""

    async def renew_lease(self, owner: str, ttl_s: float) -> bool:
        """Create or extend `owner`'s lease to expire `ttl_s` from now (the store's clock where it has
        one). Returns False when `owner` held no lease: its first renewal, or a lease that expired and
        was swept meanwhile (its generations are `interrupted` by then)."""
        ...

    async def release_lease(self, owner: str) -> None:
        """`owner` stops: what it still has running becomes `interrupted` and its lease goes."""
        ...

    async def sweep_leases(self, *, orphans: bool = False) -> int:
        """Generations `in_progress` whose owner's lease expired become `interrupted` (the error
        `{"code": "interrupted"}`; the partial output is what their logs hold), and the expired
        leases go. `orphans`: also those whose owner never held a lease (records of versions before
        leases; a starting gateway asks once). Returns how many records were marked."""
        ...


class RouteHealthSource(Protocol):
    """Where route health is shared between instances."""

    def route_health(self) -> SharedRouteHealth | None:
        """Where instances sharing this store share route health (breakers), or None: each process
        keeps its own."""
        ...


class RecordsAndLogs(RecordStore, LogStore, Protocol):
    """What a running generation writes (gateway/recorder.py) and a follower reads."""


class GenerationStore(Lifecycle, KeyStore, RecordStore, LogStore, LeaseStore, RouteHealthSource, Protocol):
    """Everything tidegate persists: every role above. Every implementation passes the same test
    suite; a consumer is typed with the role it uses."""
