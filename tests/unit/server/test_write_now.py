"""`Request.write_now` on a real uvicorn server (httptools, as `tidegate serve` runs it): a body write
from a protocol callback (no task), held up by the client's flow control and finished, in order, by
the request's next `write`.

The client reads nothing until the server's writes are held up (uvicorn pauses at its transport's
high-water mark once the kernel's buffers are full), then reads everything: every block arrives
whole and in order, the held one included, and the response ends.
"""

from __future__ import annotations

import asyncio
import socket
from typing import Any

from tests.support.loop import serving_asgi
from tidegate.server.http import Request

BLOCK = 64 * 1024


def block(i: int) -> bytes:
    tag = b"<%08d>" % i
    return tag + b"." * (BLOCK - 2 * len(tag)) + tag


async def test_a_held_write_is_finished_first_by_the_next_write() -> None:
    loop = asyncio.get_running_loop()
    outcome: dict[str, Any] = {}
    held = asyncio.Event()

    async def app(scope: dict[str, Any], receive: Any, send: Any) -> None:
        req = Request.from_scope(scope, receive, send)
        await req.start(200, "text/plain")
        written = 0
        in_task: list[bool] = []

        def from_a_callback(done: asyncio.Future[bool]) -> None:
            in_task.append(asyncio.current_task() is not None)
            done.set_result(req.write_now(block(written)))

        while written < 2000:  # 128 MB at most: far past any loopback buffer
            done: asyncio.Future[bool] = loop.create_future()
            loop.call_soon(from_a_callback, done)
            ok = await done
            written += 1
            if not ok:
                break
        outcome["blocks"] = written
        outcome["held"] = req.write_held
        outcome["in_task"] = any(in_task)
        held.set()
        await req.write(b"<end>", more=False)  # finishes the held block first

    async with serving_asgi(app) as port:
        sock = socket.socket()
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
        sock.setblocking(False)
        await loop.sock_connect(sock, ("127.0.0.1", port))
        reader, writer = await asyncio.open_connection(sock=sock, limit=BLOCK)
        writer.write(b"GET / HTTP/1.1\r\nHost: t\r\n\r\n")
        await asyncio.wait_for(held.wait(), 30)  # the client has read nothing yet
        assert outcome["held"] and not outcome["in_task"]
        assert 1 < outcome["blocks"] < 2000
        head = await reader.readuntil(b"\r\n\r\n")
        assert head.startswith(b"HTTP/1.1 200")
        body = bytearray()
        while size := int((await reader.readuntil(b"\r\n")).strip(), 16):  # the chunked body, to its end
            body += await reader.readexactly(size)
            await reader.readexactly(2)
        await reader.readuntil(b"\r\n")
        assert bytes(body) == b"".join(block(i) for i in range(outcome["blocks"])) + b"<end>"
        writer.close()
