"""Per-route health: circuit breakers and live stats (CONTRACT §12), in this process.

A route is `provider/upstream model`. The relay reports each attempt once: `begin` when it starts,
then `succeeded` at the commit point (with the time to the first event) or `failed` before it, and
`end` when the attempt is over; nothing here runs per chunk. The breaker is closed until
`failures` consecutive failures before the first byte (a 429 counts; a breaker it opened stays
open at least its Retry-After), then open: the route is skipped. After `cooldown_s` the next
request claims the one half-open probe; its success closes the breaker, its failure opens it again.

The state lives in this process (each instance learns on its own): sharing it through the store is
not done yet (see docs/routing.md).
"""

from __future__ import annotations

import time
from collections import deque
from dataclasses import dataclass, field
from typing import Any

from ..config import Breaker

CLOSED, OPEN, HALF_OPEN = "closed", "open", "half_open"
WINDOW = 50  # the last attempts the p50 and the error rate are taken over


@dataclass(slots=True)
class RouteHealth:
    state: str = CLOSED
    consecutive: int = 0
    open_until: float = 0.0
    probing: bool = False
    in_flight: int = 0
    ttfts: deque[float] = field(default_factory=lambda: deque(maxlen=WINDOW))
    outcomes: deque[bool] = field(default_factory=lambda: deque(maxlen=WINDOW))

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
            h.state, h.probing = HALF_OPEN, True
            return True
        if h.probing:  # half-open: one probe at a time
            return False
        h.probing = True
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
        h.consecutive = 0
        h.state, h.probing = CLOSED, False

    def failed(self, key: str, breaker: Breaker, retry_after: float | None) -> None:
        h = self.get(key)
        h.outcomes.append(False)
        h.consecutive += 1
        if breaker.failures == 0:
            return
        if h.state == HALF_OPEN or h.consecutive >= breaker.failures:
            wait = breaker.cooldown_s
            if retry_after is not None and retry_after > wait:
                wait = retry_after
            h.state, h.probing, h.open_until = OPEN, False, self._clock() + wait

    def snapshot(self, key: str) -> dict[str, Any]:
        h = self.routes.get(key) or RouteHealth()
        p50 = h.ttft_p50()
        return {
            "state": self.state(key),
            "ttft_ms_p50": None if p50 is None else round(p50 * 1000, 1),
            "error_rate": round(h.error_rate(), 4),
            "in_flight": h.in_flight,
            "consecutive_failures": h.consecutive,
        }
