"""uvicorn's server as tidegate runs it, in one process or as a Supervisor's worker: uvicorn's
public steps (`serve`, `startup`, `shutdown`) with what tidegate adds around them.

- `startup`: the banner once the server has started (the app's startup done, the socket listening):
  a port it cannot bind prints no line that says it serves.
- `serve`: a worker's event loop stamps its heartbeat from its first step, before the app's startup
  and the socket's listening: no moment when it listens and has no heartbeat to miss.
- `shutdown`: the graceful wait for the connections gets what is left of the stop's bound
  (drain.py's `remaining()`) but the app's shutdown, instead of a fixed timeout: a stop that drained
  for `drain_s` still exits within `drain_s` + 2 s (docs/api-operations.md §10).
"""

from __future__ import annotations

import asyncio
import socket
import time
from typing import Protocol

import click
import uvicorn

from .drain import Drain

APP_SHUTDOWN_S = 0.3  # kept for the app's shutdown (the lease, the store): 0.05-0.2 s measured under load
_BEAT_S = 1.0  # a worker's loop stamps its heartbeat this often


class Heartbeat(Protocol):
    """A `multiprocessing` shared double: the monotonic time a worker's loop last ran (0: not yet)."""

    value: float


def _beat(loop: asyncio.AbstractEventLoop, heartbeat: Heartbeat) -> None:
    heartbeat.value = time.monotonic()  # CLOCK_MONOTONIC: one clock for every process (Linux)
    loop.call_later(_BEAT_S, _beat, loop, heartbeat)


class GatewayServer(uvicorn.Server):
    """`drain`: the app's (its deadline bounds the graceful wait); `banner`: printed to stderr once
    serving; `heartbeat`: stamped by the event loop (a Supervisor's worker)."""

    def __init__(
        self,
        config: uvicorn.Config,
        drain: Drain | None,
        banner: str | None = None,
        heartbeat: Heartbeat | None = None,
    ) -> None:
        super().__init__(config)
        self._drain = drain
        self._banner = banner
        self._heartbeat = heartbeat

    async def serve(self, sockets: list[socket.socket] | None = None) -> None:
        if self._heartbeat is not None:
            _beat(asyncio.get_running_loop(), self._heartbeat)
        await super().serve(sockets=sockets)

    async def startup(self, sockets: list[socket.socket] | None = None) -> None:
        await super().startup(sockets=sockets)
        if self.started and self._banner is not None:
            click.echo(self._banner, err=True)

    async def shutdown(self, sockets: list[socket.socket] | None = None) -> None:
        left = self._drain.remaining() if self._drain is not None else None
        if left is not None:  # whole seconds (uvicorn's setting is an int), rounded down: within the bound
            self.config.timeout_graceful_shutdown = int(max(0.0, left - APP_SHUTDOWN_S))
        await super().shutdown(sockets=sockets)
