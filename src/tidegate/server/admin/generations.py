"""`GET /api/v1/generations` (the newest records), `GET /api/v1/generations/{id}` and
`POST /api/v1/generations/{id}/cancel`."""

from __future__ import annotations

import base64
import binascii

from ...errors import GenerationNotFound, InvalidRequest, quote
from ...gateway.recovery import recovered
from ...records import GENERATION_STATUSES, ApiKey, GenerationRecord
from ...store.console import LogFilter
from .. import body_log
from ..http import Request
from ..state import AppState
from .live import as_it_stands


async def get_generation(req: Request, state: AppState, key: ApiKey) -> None:
    gid = req.path_params["id"]
    record = await state.store.get_generation(gid)
    if record is None or (record.key_id != key.id and not (key.is_master or key.admin)):
        raise GenerationNotFound(f"no generation {quote(gid)} for this API key")
    record = await as_it_stands(state, await recovered(state.store, record))
    await req.respond_json(200, {**record.public(), "key_id": record.key_id, **(await body_log.shown(state, record))})


async def cancel_generation(req: Request, state: AppState, key: ApiKey) -> None:
    gid = req.path_params["id"]
    record = await state.store.get_generation(gid)
    if record is None or (record.key_id != key.id and not (key.is_master or key.admin)):
        raise GenerationNotFound(f"no generation {quote(gid)} for this API key")
    state.gateway.cancel(gid)
    await req.respond_json(202, record.public())


STATUSES = GENERATION_STATUSES


def encode_cursor(record: GenerationRecord) -> str:
    """The keyset position after `record`: opaque to clients (base64 of created_at and id)."""
    return base64.urlsafe_b64encode(f"{record.created_at!r}|{record.id}".encode()).decode().rstrip("=")


def decode_cursor(raw: str) -> tuple[float, str]:
    try:
        created, _, gid = base64.urlsafe_b64decode(raw + "=" * (-len(raw) % 4)).decode().partition("|")
        if not gid:
            raise ValueError(raw)
        return float(created), gid
    except (ValueError, UnicodeDecodeError, binascii.Error):
        raise InvalidRequest("cursor: not a cursor this endpoint gave") from None


def _seconds(req: Request, name: str) -> float | None:
    raw = req.query(name)
    if not raw:
        return None
    try:
        value = float(raw)
    except ValueError:
        raise InvalidRequest(f"{name}: Unix seconds expected") from None
    if not 0 <= value < 1e11:
        raise InvalidRequest(f"{name}: Unix seconds expected")
    return value


def log_filter(req: Request, key: ApiKey) -> LogFilter:
    """The query's filters; a key that is not admin sees its own records whatever `key_id` says."""
    text = {name: req.query(name) or None for name in ("key_id", "model", "provider", "status", "session", "id")}
    if text["status"] is not None and text["status"] not in STATUSES:
        raise InvalidRequest(f"status: one of {', '.join(STATUSES)}")
    if not (key.is_master or key.admin):
        text["key_id"] = key.id
    cursor = req.query("cursor")
    return LogFilter(
        since=_seconds(req, "since"),
        until=_seconds(req, "until"),
        before=decode_cursor(cursor) if cursor else None,
        **text,
    )


async def list_generations(req: Request, state: AppState, key: ApiKey) -> None:
    """Records newest first by (created_at, id), filtered, paged by keyset (`?cursor=`, never an
    offset), `?limit=` 1-200 (default 50): every key's for the master key and admin keys, the
    caller's own otherwise (docs/console-api.md)."""
    raw = req.query("limit") or "50"
    if not raw.isdigit() or not 1 <= int(raw) <= 200:
        raise InvalidRequest("'limit' must be an integer from 1 to 200")
    limit = int(raw)
    records = await state.console.generations(log_filter(req, key), limit + 1)
    page = records[:limit]
    data = [{**(await as_it_stands(state, r)).public(), "key_id": r.key_id} for r in page]
    following = encode_cursor(page[-1]) if len(records) > limit else None
    await req.respond_json(200, {"object": "list", "data": data, "next": following})
