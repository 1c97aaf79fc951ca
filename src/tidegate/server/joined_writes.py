"""A response's head and its first body bytes leave in one write.

An ASGI server writes the head the moment the app sends `http.response.start`, and each body
message as its own write: two `write` calls to the client's socket where one would do, each a trip
through the kernel's TCP stack (on loopback, the receiver's side of it too) and, for a client
waiting on the socket, a wake-up for bytes it cannot use yet (a head without the first event).
uvicorn's request cycle (the bound `send`'s object, in both its HTTP implementations) writes
through its `transport` attribute, looked up at each write: for the span of the two sends, that
attribute is a `JoinedWrites` that gathers the writes, and releasing it puts the transport back and
writes what it gathered in one call. Anything else asked of it (a `close` for `connection: close`,
`is_closing`, ...) first writes what it holds, so the bytes keep their order. A server without such
an object gets the two sends as they are.
"""

from __future__ import annotations

from typing import Any


class JoinedWrites:
    __slots__ = ("_cycle", "_parts", "_transport")

    def __init__(self, cycle: Any, transport: Any) -> None:
        self._cycle = cycle
        self._transport = transport
        self._parts: list[bytes] = []

    @classmethod
    def install(cls, send: Any) -> JoinedWrites | None:
        """Gather the writes `send` makes until `release`; None when its server is not known to
        write through a `transport` attribute (then nothing changed)."""
        cycle: Any = getattr(send, "__self__", None)
        transport = getattr(cycle, "transport", None)
        if transport is None or not callable(getattr(transport, "write", None)):
            return None
        joined = cls(cycle, transport)
        cycle.transport = joined
        return joined

    def write(self, data: bytes) -> None:
        self._parts.append(data)

    def _flush(self) -> None:
        parts = self._parts
        if parts:
            self._parts = []
            self._transport.write(parts[0] if len(parts) == 1 else b"".join(parts))

    def release(self) -> None:
        """The transport back in its place, and everything gathered written in one call."""
        if self._cycle.transport is self:
            self._cycle.transport = self._transport
        self._flush()

    def __getattr__(self, name: str) -> Any:
        self._flush()
        return getattr(self._transport, name)
