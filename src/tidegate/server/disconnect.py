"""Watch the client connection while a response streams: `http.disconnect` sets an event."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator

from .http import Request


@contextlib.asynccontextmanager
async def watch_disconnect(req: Request, on_disconnect: asyncio.Event | None) -> AsyncIterator[asyncio.Event]:
    """Yields an event set when the client goes away; also sets `on_disconnect` if given."""
    gone = asyncio.Event()

    async def _watch() -> None:
        while True:
            message = await req.receive()
            if message["type"] == "http.disconnect":
                gone.set()
                if on_disconnect is not None:
                    on_disconnect.set()
                return

    task = asyncio.ensure_future(_watch())
    try:
        yield gone
    finally:
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task
