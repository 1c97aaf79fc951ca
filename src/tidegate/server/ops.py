"""Liveness, readiness and metrics."""

from __future__ import annotations

from .. import metrics
from .http import Request
from .state import AppState


async def healthz(req: Request) -> None:
    await req.respond_json(200, {"status": "ok"})


async def metrics_endpoint(req: Request, state: AppState) -> None:
    metrics.register_gauge(
        "tidegate_generations_running", "Generations running in this worker", lambda: len(state.gateway.running)
    )
    await req.respond_bytes(200, metrics.render_all(), "text/plain; version=0.0.4; charset=utf-8")


async def readyz(req: Request, state: AppState) -> None:
    if not state.ready:
        await req.respond_json(503, {"status": "starting"})
        return
    if not await state.store.ping():
        await req.respond_json(503, {"status": "store unreachable"})
        return
    await req.respond_json(200, {"status": "ready"})
