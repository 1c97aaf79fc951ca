"""`GET /api/v1/sessions?since=&limit=`: the agent sessions seen since a time (docs/sessions.md):
every key's for the master key and admin keys, the caller's own otherwise."""

from __future__ import annotations

import math
import time

from ...errors import InvalidRequest
from ...records import ApiKey
from ...store.facets import sessions_of
from ..http import Request
from ..state import AppState

DEFAULT_WINDOW_S = 86_400.0  # without `since`: the last day


def _since(raw: str | None) -> float:
    if raw is None or raw == "":
        return time.time() - DEFAULT_WINDOW_S
    try:
        since = float(raw)
    except ValueError:
        raise InvalidRequest("'since' must be a unix time in seconds") from None
    if not math.isfinite(since) or since < 0:
        raise InvalidRequest("'since' must be a unix time in seconds")
    return since


async def list_sessions(req: Request, state: AppState, key: ApiKey) -> None:
    raw = req.query("limit") or "50"
    if not raw.isdigit() or not 1 <= int(raw) <= 200:
        raise InvalidRequest("'limit' must be an integer from 1 to 200")
    everyone = key.is_master or key.admin
    found = await sessions_of(state.store).sessions(_since(req.query("since")), None if everyone else key.id, int(raw))
    await req.respond_json(200, {"object": "list", "data": [s.public() for s in found]})
