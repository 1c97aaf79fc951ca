"""`GET /api/v1/generations` (the newest records), `GET /api/v1/generations/{id}` and
`POST /api/v1/generations/{id}/cancel`."""

from __future__ import annotations

from ...errors import GenerationNotFound, InvalidRequest, quote
from ...gateway.recovery import recovered
from ...store.base import ApiKey
from ..http import Request
from ..state import AppState
from .live import as_it_stands


async def get_generation(req: Request, state: AppState, key: ApiKey) -> None:
    gid = req.path_params["id"]
    record = await state.store.get_generation(gid)
    if record is None or (record.key_id != key.id and not key.is_master):
        raise GenerationNotFound(f"no generation {quote(gid)} for this API key")
    record = await as_it_stands(state, await recovered(state.store, record))
    await req.respond_json(200, {**record.public(), "key_id": record.key_id})


async def cancel_generation(req: Request, state: AppState, key: ApiKey) -> None:
    gid = req.path_params["id"]
    record = await state.store.get_generation(gid)
    if record is None or (record.key_id != key.id and not key.is_master):
        raise GenerationNotFound(f"no generation {quote(gid)} for this API key")
    state.gateway.cancel(gid)
    await req.respond_json(202, record.public())


async def list_generations(req: Request, state: AppState, key: ApiKey) -> None:
    """The newest records, newest first (`?limit=`, 1-200, default 50): every key's for the master key
    and admin keys, the caller's own otherwise."""
    raw = req.query("limit") or "50"
    if not raw.isdigit() or not 1 <= int(raw) <= 200:
        raise InvalidRequest("'limit' must be an integer from 1 to 200")
    everyone = key.is_master or key.admin
    records = await state.store.recent_generations(int(raw), None if everyone else key.id)
    data = [{**(await as_it_stands(state, r)).public(), "key_id": r.key_id} for r in records]
    await req.respond_json(200, {"object": "list", "data": data})
