"""Leases (docs/api-operations.md §10): a dead gateway's generations end `interrupted`, wherever it comes back.

Every process start is an owner with a fresh id (`new_owner`); each record it creates names it. The
owner renews a lease in the store every third of `lease_ttl_s`; every third of it, too, it sweeps:
the running records of owners whose lease expired become `interrupted`. A starting gateway renews
and sweeps once (orphans included: records of versions before leases) before it reports ready.
So a gateway killed on one host and started on another port, another host or never again leaves
nothing `in_progress` longer than the TTL plus one sweep. Nothing here runs per request or per
chunk: the owner is a field the record already had.

A paused owner (SIGSTOP, a VM frozen) that wakes after its lease expired finds its generations
marked; the stores refuse to overwrite that outcome (`update_generation` writes only a running
record), and the next renewal takes a new lease under the same owner.
"""

from __future__ import annotations

import asyncio
import logging
import os
import socket

from ..ids import new_ulid
from ..store.base import LeaseStore

log = logging.getLogger("tidegate.leases")


def new_owner() -> str:
    """A fresh owner id for this process start: readable (host, pid) and never reused (a ULID)."""
    return f"{socket.gethostname()}/{os.getpid()}/{new_ulid()}"


class Leases:
    """Renews `owner`'s lease and sweeps the expired ones, every third of `ttl_s`."""

    def __init__(self, store: LeaseStore, owner: str, ttl_s: float) -> None:
        self.store = store
        self.owner = owner
        self.ttl_s = ttl_s
        self.interval_s = ttl_s / 3
        self._task: asyncio.Task[None] | None = None

    async def start(self) -> None:
        """Before the gateway reports ready: the lease, then one sweep (orphans included)."""
        await self.store.renew_lease(self.owner, self.ttl_s)
        marked = await self.store.sweep_leases(orphans=True)
        if marked:
            log.warning("marked %d generation(s) of stopped gateways interrupted", marked)
        self._task = asyncio.ensure_future(self._run())

    async def _run(self) -> None:
        while True:
            await asyncio.sleep(self.interval_s)
            await self.tick()

    async def tick(self) -> None:
        """One renewal and one sweep; a store that fails or hangs is retried at the next tick (each
        call is bounded by the interval, so a slow store cannot hold the renewals back)."""
        try:
            async with asyncio.timeout(self.interval_s):
                if not await self.store.renew_lease(self.owner, self.ttl_s):
                    log.error(
                        "this gateway's lease had expired (paused or cut off from the store for over %gs):"
                        " generations it was running were marked interrupted; a new lease is taken",
                        self.ttl_s,
                    )
        except Exception:
            log.warning("lease renewal failed; retrying in %gs", self.interval_s, exc_info=True)
        try:
            async with asyncio.timeout(self.interval_s):
                marked = await self.store.sweep_leases()
            if marked:
                log.warning("marked %d generation(s) of a gateway whose lease expired interrupted", marked)
        except Exception:
            log.warning("lease sweep failed; retrying in %gs", self.interval_s, exc_info=True)

    async def stop(self) -> None:
        """After the drain: the lease goes, and whatever still runs here is marked interrupted."""
        if self._task is not None:
            self._task.cancel()
            await asyncio.gather(self._task, return_exceptions=True)
            self._task = None
        try:
            await self.store.release_lease(self.owner)
        except Exception:
            log.warning("could not release the lease; it expires in %gs", self.ttl_s, exc_info=True)
