"""`GET /api/v1/generations/{id}` and `POST /api/v1/generations/{id}/cancel`."""

from __future__ import annotations

from ..errors import GenerationNotFound, quote
from ..store.base import ApiKey
from .http import Request
from .state import AppState


async def get_generation(req: Request, state: AppState, key: ApiKey) -> None:
    gid = req.path_params["id"]
    record = await state.store.get_generation(gid)
    if record is None or (record.key_id != key.id and not key.is_master):
        raise GenerationNotFound(f"no generation {quote(gid)} for this API key")
    await req.respond_json(200, record.public())


async def cancel_generation(req: Request, state: AppState, key: ApiKey) -> None:
    gid = req.path_params["id"]
    record = await state.store.get_generation(gid)
    if record is None or (record.key_id != key.id and not key.is_master):
        raise GenerationNotFound(f"no generation {quote(gid)} for this API key")
    state.gateway.cancel(gid)
    await req.respond_json(202, record.public())
