"""Liveness, readiness and metrics."""

from __future__ import annotations

from .http import Request
from .state import AppState


async def healthz(req: Request) -> None:
    await req.respond_json(200, {"status": "ok"})


async def readyz(req: Request, state: AppState) -> None:
    if not state.ready:
        await req.respond_json(503, {"status": "starting"})
        return
    if not await state.store.ping():
        await req.respond_json(503, {"status": "store unreachable"})
        return
    await req.respond_json(200, {"status": "ready"})
