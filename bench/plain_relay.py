"""The issue's pilot relay, as a benchmark target: the floor for a Python ASGI gateway on this machine.

A plain ASGI app on uvicorn (uvloop + httptools) that forwards `POST /v1/chat/completions` to one
upstream through one aiohttp session and copies the answer back chunk by chunk as it arrives: no
auth, no validation, no routing, no parsing of the stream, no store, no translation. The budgets quote
it ("about 25 µs of CPU per passthrough chunk and about 0.8 ms added to time to first token"); the
harness runs it beside tidegate (`--targets direct,relay,tidegate`) so a budget tidegate misses can
be read against what the same machine allows a gateway that does none of tidegate's work.

    python bench/plain_relay.py --port 8101 --upstream http://127.0.0.1:8100
"""

from __future__ import annotations

import argparse
from typing import Any

import aiohttp
import uvicorn

_HOP = {b"content-length", b"transfer-encoding", b"connection", b"keep-alive", b"host"}


class PlainRelay:
    def __init__(self, upstream: str, upstream_key: str) -> None:
        self.upstream = upstream.rstrip("/")
        self.upstream_key = upstream_key
        self.session: aiohttp.ClientSession | None = None

    async def __call__(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        if scope["type"] == "lifespan":
            while True:
                message = await receive()
                if message["type"] == "lifespan.startup":
                    connector = aiohttp.TCPConnector(limit=0, keepalive_timeout=60)
                    self.session = aiohttp.ClientSession(connector=connector, auto_decompress=False)
                    await send({"type": "lifespan.startup.complete"})
                elif message["type"] == "lifespan.shutdown":
                    if self.session is not None:
                        await self.session.close()
                    await send({"type": "lifespan.shutdown.complete"})
                    return
        if scope["type"] != "http":
            return
        if scope["path"] in ("/health", "/readyz"):
            await send({"type": "http.response.start", "status": 200, "headers": [(b"content-type", b"text/plain")]})
            await send({"type": "http.response.body", "body": b"ok"})
            return
        body = b""
        while True:
            message = await receive()
            body += message.get("body", b"")
            if not message.get("more_body"):
                break
        assert self.session is not None
        headers = {"Content-Type": "application/json", "Authorization": f"Bearer {self.upstream_key}"}
        async with self.session.post(self.upstream + scope["path"], data=body, headers=headers) as resp:
            out = [(k.lower(), v) for k, v in resp.raw_headers if k.lower() not in _HOP]
            await send({"type": "http.response.start", "status": resp.status, "headers": out})
            async for chunk in resp.content.iter_any():
                await send({"type": "http.response.body", "body": chunk, "more_body": True})
        await send({"type": "http.response.body", "body": b"", "more_body": False})


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--port", type=int, required=True)
    ap.add_argument("--upstream", required=True, help="the emulator's base URL")
    ap.add_argument("--upstream-key", default="sk-bench-upstream-key")
    args = ap.parse_args()
    app = PlainRelay(args.upstream, args.upstream_key)
    uvicorn.run(
        app,
        host="127.0.0.1",
        port=args.port,
        loop="uvloop",
        http="httptools",
        log_level="warning",
        access_log=False,
        lifespan="on",
        timeout_keep_alive=60,
    )


if __name__ == "__main__":
    main()
