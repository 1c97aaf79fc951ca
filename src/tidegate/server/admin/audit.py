"""The audit log (who, what, when) of every change through the admin APIs, and `GET /api/v1/audit`
(docs/console-api.md). `record` is the one entry point: the keys admin API calls it, and so may any
other admin change (the cache's purge). A detail never holds a secret: callers pass the changed
fields by name, and the keys API never passes the key's secret or its hash."""

from __future__ import annotations

import logging
import time
from typing import Any

from ...errors import Forbidden, InvalidRequest
from ...ids import new_ulid
from ...records import ApiKey
from ...store.console import AuditEntry
from ..http import Request
from ..state import AppState

log = logging.getLogger("tidegate.audit")


async def record(state: AppState, actor: ApiKey, action: str, target: str, detail: dict[str, Any]) -> None:
    """Store one entry (`action` such as `key.update`, `target` a key id or a model). A change that
    was made is not undone because its entry could not be stored: that is logged instead."""
    entry = AuditEntry(new_ulid(), time.time(), actor.id, actor.name, action, target, detail)
    try:
        await state.console.add_audit(entry)
    except Exception:
        log.exception("audit entry %s %s by %s could not be stored", action, target, actor.id)


async def list_audit(req: Request, state: AppState, key: ApiKey) -> None:
    """Newest first, `?limit=` 1-200 (default 50), `?cursor=` the `next` of the page before."""
    if not (key.is_master or key.admin):
        raise Forbidden('/api/v1/audit is an admin endpoint: use the master key or a key with "admin": true')
    raw = req.query("limit") or "50"
    if not raw.isdigit() or not 1 <= int(raw) <= 200:
        raise InvalidRequest("'limit' must be an integer from 1 to 200")
    limit = int(raw)
    cursor = req.query("cursor") or None
    if cursor is not None and (len(cursor) != 26 or not cursor.isalnum()):
        raise InvalidRequest("cursor: not a cursor this endpoint gave")
    entries = await state.console.audit(limit + 1, cursor)
    page = entries[:limit]
    following = page[-1].id if len(entries) > limit else None
    await req.respond_json(200, {"object": "list", "data": [e.public() for e in page], "next": following})
