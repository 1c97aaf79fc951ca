"""Per-route health: circuit breakers and live stats (docs/api-operations.md §12), in this process.

A route is `provider/upstream model`. The relay reports each attempt once: `begin` when it starts,
then `succeeded` at the commit point (with the time to the first event) or `failed` before it, and
`end` when the attempt is over; nothing here runs per chunk. The breaker is closed until
`failures` consecutive failures before the first byte (a 429 counts; a breaker it opened stays
open at least its Retry-After), then open: the route is skipped. After `cooldown_s` the next
request claims the one half-open probe; its success closes the breaker, its failure opens it again.

The state lives in this process. With a store that shares route health (Redis:
`store.route_health()`), failures are also counted there and a breaker that opens there opens in
every instance: a failure and the first success after shared failures write (in a task, off the
request), and `sync_forever` reads the open routes once a second. The half-open probe is one for
the service: after the cooldown the first instance to claim it in the store sends the next request
as the probe, the others skip the route for another cooldown; a probe that succeeds clears the
shared failures, and the others close their breakers at their next read.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections import deque
from dataclasses import dataclass, field
from typing import Any

from .. import metrics
from ..config.model import Breaker
from ..store.base import SharedRouteHealth

log = logging.getLogger("tidegate.health")

CLOSED, OPEN, HALF_OPEN = "closed", "open", "half_open"
WINDOW = 50  # the last attempts the p50 and the error rate are taken over
# A route's last failures (`GET /api/v1/routes`' last_failures) are kept here, per instance, like
# its breaker: a failure is noted once per failed attempt and the view reads memory. The store's
# records hold the failures too, but the last few of one route would need an index over
# (provider, status), which every record's final write would rewrite; and this is live state an
# operator reads about the instance that answers.
LAST_FAILURES = 5


@dataclass(slots=True)
class RouteHealth:
    state: str = CLOSED
    consecutive: int = 0
    open_until: float = 0.0
    probing: bool = False
    in_flight: int = 0
    shared_dirty: bool = False  # the shared store may hold failures or an open breaker for it
    claim: str | None = None  # the shared half-open probe: None, "pending" (asked), "won"
    ttfts: deque[float] = field(default_factory=lambda: deque(maxlen=WINDOW))
    outcomes: deque[bool] = field(default_factory=lambda: deque(maxlen=WINDOW))
    failures: deque[dict[str, Any]] = field(default_factory=lambda: deque(maxlen=LAST_FAILURES))

    def ttft_p50(self) -> float | None:
        if not self.ttfts:
            return None
        ordered = sorted(self.ttfts)
        return ordered[len(ordered) // 2]

    def error_rate(self) -> float:
        if not self.outcomes:
            return 0.0
        return sum(1 for ok in self.outcomes if not ok) / len(self.outcomes)


def route_key(provider: str, model: str) -> str:
    return f"{provider}/{model}"


class Health:
    def __init__(self, clock: Any = time.monotonic) -> None:
        self.routes: dict[str, RouteHealth] = {}
        self._clock = clock
        self.shared: SharedRouteHealth | None = None
        self._writes: set[asyncio.Task[None]] = set()

    def _share(self, write: Any) -> None:
        task = asyncio.ensure_future(write)
        self._writes.add(task)
        task.add_done_callback(self._written)

    def _written(self, task: asyncio.Task[None]) -> None:
        self._writes.discard(task)
        if not task.cancelled() and task.exception() is not None:
            log.warning("shared route health write failed: %s", type(task.exception()).__name__)

    async def _shared_failed(self, key: str, breaker: Breaker, wait: float) -> None:
        assert self.shared is not None
        until = await self.shared.route_failed(key, breaker.failures, wait)
        if until is not None:
            self._apply_open(key, until)

    def _apply_open(self, key: str, until_wall: float) -> None:
        """A breaker opened elsewhere (or here, counted with other instances' failures)."""
        remaining = until_wall - time.time()
        if remaining <= 0:
            return
        h = self.get(key)
        h.shared_dirty = True
        local_until = self._clock() + remaining
        if h.state == CLOSED or (h.state == OPEN and h.open_until < local_until):
            h.state, h.probing, h.open_until = OPEN, False, local_until
            metrics.BREAKER_OPEN.labels(key).set(1)

    async def _claim_probe(self, key: str, breaker: Breaker) -> None:
        assert self.shared is not None
        won = False
        try:
            won = await self.shared.claim_probe(key, breaker.cooldown_s)
        finally:
            h = self.get(key)
            if won:
                h.claim = "won"  # the next request to this route is the probe
            else:  # another instance probes (or the store is down): skip the route another cooldown
                h.claim, h.open_until = None, self._clock() + breaker.cooldown_s

    async def sync(self, keys: list[str]) -> None:
        if self.shared is None:
            return
        for key, until in (await self.shared.open_routes(keys)).items():
            self._apply_open(key, until)
        held = [k for k in keys if (h := self.routes.get(k)) is not None and h.shared_dirty and h.state != CLOSED]
        for key in await self.shared.recovered_routes(held):  # another instance's probe succeeded
            h = self.routes[key]
            if h.state == OPEN and not h.probing:
                h.state, h.consecutive, h.claim, h.shared_dirty = CLOSED, 0, None, False
                metrics.BREAKER_OPEN.labels(key).set(0)

    async def sync_forever(self, keys: list[str], interval_s: float = 1.0) -> None:
        while True:
            try:
                await self.sync(keys)
            except Exception as exc:  # the store is down: each process keeps its own state meanwhile
                log.warning("shared route health read failed: %s", type(exc).__name__)
            await asyncio.sleep(interval_s)

    def get(self, key: str) -> RouteHealth:
        h = self.routes.get(key)
        if h is None:
            h = self.routes[key] = RouteHealth()
        return h

    def state(self, key: str) -> str:
        """The state as `GET /api/v1/routes` shows it: an open breaker past its cooldown is half-open."""
        h = self.routes.get(key)
        if h is None:
            return CLOSED
        if h.state == OPEN and self._clock() >= h.open_until:
            return HALF_OPEN
        return h.state

    def allow(self, key: str, breaker: Breaker) -> bool:
        """Whether this request may try the route now; claims the half-open probe when it is due."""
        if breaker.failures == 0:
            return True
        h = self.routes.get(key)
        if h is None or h.state == CLOSED:
            return True
        if h.state == OPEN:
            if self._clock() < h.open_until:
                return False
            if self.shared is not None and h.shared_dirty and h.claim != "won":
                if h.claim is None:  # one probe for the service: claim it (this request skips the route)
                    h.claim = "pending"
                    self._share(self._claim_probe(key, breaker))
                return False
            h.claim = None
            h.state, h.probing = HALF_OPEN, True
            return True
        if h.probing:  # half-open: one probe at a time
            return False
        h.probing = True
        return True

    def enter(self, key: str, breaker: Breaker) -> bool:
        """`allow`, then `begin` when allowed: the relay's one call before an attempt."""
        h = self.routes.get(key)
        if h is None:
            h = self.routes[key] = RouteHealth()
        elif h.state != CLOSED and breaker.failures and not self.allow(key, breaker):
            return False
        h.in_flight += 1
        return True

    def begin(self, key: str) -> None:
        self.get(key).in_flight += 1

    def end(self, key: str) -> None:
        h = self.get(key)
        h.probing = False  # a probe that ended with no verdict (cancelled) lets the next one through
        h.in_flight -= 1

    def succeeded(self, key: str, ttft_s: float) -> None:
        h = self.get(key)
        h.ttfts.append(ttft_s)
        h.outcomes.append(True)
        if self.shared is not None and (h.shared_dirty or h.consecutive):
            h.shared_dirty = False
            self._share(self.shared.route_recovered(key))
        h.consecutive = 0
        if h.state != CLOSED:
            metrics.BREAKER_OPEN.labels(key).set(0)
        h.state, h.probing = CLOSED, False

    def failed(self, key: str, breaker: Breaker, retry_after: float | None) -> None:
        h = self.get(key)
        h.outcomes.append(False)
        h.consecutive += 1
        if breaker.failures == 0:
            return
        wait = breaker.cooldown_s
        if retry_after is not None and retry_after > wait:
            wait = retry_after
        if h.state == HALF_OPEN or h.consecutive >= breaker.failures:
            h.state, h.probing, h.open_until = OPEN, False, self._clock() + wait
            metrics.BREAKER_OPEN.labels(key).set(1)
        if self.shared is not None:
            h.shared_dirty = True
            # a failed probe reopens everywhere: counted as the threshold's worth
            threshold = 1 if h.state == OPEN else breaker.failures
            self._share(self._shared_failed(key, Breaker(threshold, breaker.cooldown_s), wait))

    def note_failure(self, key: str, generation_id: str | None, committed: bool, code: str, message: str) -> None:
        """A failed attempt on the route (`committed`: after its answer started, which ends the
        stream); `message` is the upstream's error as the provider read it, credentials already
        masked (providers/http/redact.py)."""
        self.get(key).failures.append(
            {
                "at": time.time(),
                "generation_id": generation_id,
                "status": "error" if committed else "failed",
                "code": code,
                "upstream_error": message,
            }
        )

    def snapshot(self, key: str) -> dict[str, Any]:
        h = self.routes.get(key) or RouteHealth()
        p50 = h.ttft_p50()
        return {
            "state": self.state(key),
            "ttft_ms_p50": None if p50 is None else round(p50 * 1000, 1),
            "error_rate": round(h.error_rate(), 4),
            "in_flight": h.in_flight,
            "consecutive_failures": h.consecutive,
            "last_failures": list(reversed(h.failures)),
        }
