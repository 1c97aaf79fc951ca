"""`GET /api/v1/stats/series` (admin): the console's charts from the rollups the store keeps as
records end (docs/console-api.md), never a scan of the records."""

from __future__ import annotations

import time
from typing import Any

from ...errors import InvalidRequest
from ...records import ApiKey
from ...store.console import GROUP_COLUMNS, Bucket, SeriesQuery
from ..http import Request
from ..state import AppState
from .keys import require_admin

# window -> (bucket width, buckets): every bucket is in the answer, zeros where nothing ran
WINDOWS = {"hour": (60, 60), "day": (3_600, 24), "month": (86_400, 30)}
MAX_GROUPS = 8  # by cost; the rest are summed as "other"


def window_bounds(window: str, now: float) -> tuple[int, int, int]:
    """(bucket width, first bucket's start, the end): the current bucket is the last one."""
    width, count = WINDOWS[window]
    end = (int(now) // width + 1) * width
    return width, end - width * count, end


def _merge(buckets: list[Bucket], start: int, end: int, width: int) -> dict[str, Any]:
    """The answer's series (top groups by cost, then "other") with every bucket, and the totals."""
    by_group: dict[str, dict[float, Bucket]] = {}
    for b in buckets:
        slot = by_group.setdefault(b.group, {})
        if b.t in slot:
            slot[b.t].add(b)
        else:
            slot[b.t] = b
    cost = {g: sum(b.cost for b in slots.values()) for g, slots in by_group.items()}
    ranked = sorted(by_group, key=lambda g: (-cost[g], g))
    if len(ranked) > MAX_GROUPS:
        other: dict[float, Bucket] = {}
        for g in ranked[MAX_GROUPS - 1 :]:
            for t, b in by_group.pop(g).items():
                other.setdefault(t, Bucket(t, "other")).add(b)
        ranked = [*ranked[: MAX_GROUPS - 1], "other"]
        by_group["other"] = other
    total = Bucket(float(start), "all")
    series = []
    for g in ranked or ["all"]:
        slots = by_group.get(g, {})
        points = []
        for t in range(start, end, width):
            b = slots.get(float(t)) or Bucket(float(t), g)
            total.add(b)
            points.append(b.point())
        series.append({"group": g, "points": points})
    totals = total.point()
    del totals["t"]
    return {"series": series, "totals": totals}


def _query(req: Request, name: str) -> str | None:
    value = req.query(name)
    return value if value else None


async def stats_series(req: Request, state: AppState, key: ApiKey) -> None:
    require_admin(key, "/api/v1/stats/series")
    window = req.query("window") or "day"
    by = req.query("by") or "none"
    if window not in WINDOWS:
        raise InvalidRequest(f"window: one of {', '.join(WINDOWS)}")
    if by not in GROUP_COLUMNS:
        raise InvalidRequest(f"by: one of {', '.join(GROUP_COLUMNS)}")
    width, start, end = window_bounds(window, time.time())
    query = SeriesQuery(width, start, end, by, _query(req, "model"), _query(req, "provider"), _query(req, "key_id"))
    merged = _merge(await state.console.series(query), start, end, width)
    await req.respond_json(200, {"window": window, "bucket_s": width, "from": start, "to": end, **merged})
