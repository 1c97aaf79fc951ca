"""Liveness, readiness and metrics."""

from __future__ import annotations

import ipaddress
import os

from .. import metrics
from .http import Request
from .state import AppState


def on_loopback(req: Request) -> bool:
    """Whether the gateway listens on loopback only (`tidegate serve` tells its bind address in
    `TIDEGATE_BIND_HOST`; under another server, the address the request came in on)."""
    host = os.environ.get("TIDEGATE_BIND_HOST")
    if host is None:
        server = req.scope.get("server")
        if not server:
            return False  # a Unix socket or an unknown server: a key is asked for
        host = str(server[0])
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


async def healthz(req: Request) -> None:
    await req.respond_json(200, {"status": "ok"})


async def metrics_endpoint(req: Request, state: AppState) -> None:
    await req.respond_bytes(200, metrics.render(), metrics.CONTENT_TYPE)


async def readyz(req: Request, state: AppState, draining: bool = False) -> None:
    if draining:  # SIGTERM: balancers send new requests elsewhere while running streams finish
        await req.respond_json(503, {"status": "draining"})
        return
    if not state.ready:
        await req.respond_json(503, {"status": "starting"})
        return
    if not await state.store.ping():
        await req.respond_json(503, {"status": "store unreachable"})
        return
    await req.respond_json(200, {"status": "ready"})
