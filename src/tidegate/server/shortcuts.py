"""The shortcuts into uvicorn's request cycle: the one place tidegate touches a dependency's
non-public attributes, because the per-chunk budget needs them (bench/results/2026-12-05_keys-and-limits.md:
with both off a paced stream's chunk cost 16 % more CPU).

They are on when uvicorn's version is in the range they are tested on (`TESTED_UVICORN`, the range
`pyproject.toml` pins) and `TIDEGATE_SERVER_SHORTCUTS` is not `off`; a gateway logs at start whether
they are on and, when not, why. Off, every body message goes through uvicorn's own `send`: the same
bytes (the integration suite's `shortcuts_off` runs check it).

1. A response's head and its first body bytes leave in one write (`JoinedWrites`).
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

2. A started stream's body bytes go to uvicorn's transport in uvicorn's own chunked framing
(`chunked_cycle`, `write_chunk`).
Every event of a stream is one `http.response.body` message, and uvicorn's `send` for it is a
coroutine: the message dict, the coroutine made and run to its end, and inside it a dozen checks
that give the same answers for every event after the first (the method, the framing, the message's
type, the response started and not complete). Once the head is out, `chunked_cycle` hands back
uvicorn's request cycle (the bound `send`'s object) when it is httptools' cycle writing a chunked
body, the way `tidegate serve` runs it; `write_chunk` then does what its `send` does for a body
message with more to come, `transport.write(b"%x\\r\\n" + body + b"\\r\\n")`, as long as that is
all its `send` would do: nothing held up by the client's flow control, no disconnect, the response
not complete. Otherwise (and for the last message, and on any other server) the caller sends the
message as before, so a paused write still waits for the client, in order.
"""

from __future__ import annotations

import os
from importlib.metadata import PackageNotFoundError, version
from typing import Any

TESTED_UVICORN = ((0, 54), (0, 56))  # [from, to): what pyproject.toml pins and CI runs


def _decide() -> tuple[bool, str]:
    if os.environ.get("TIDEGATE_SERVER_SHORTCUTS", "").lower() in ("off", "0", "false", "no"):
        return False, "off: TIDEGATE_SERVER_SHORTCUTS=off"
    try:
        found = version("uvicorn")
    except PackageNotFoundError:
        return False, "off: uvicorn is not installed"
    parts = tuple(int(p) for p in found.split(".")[:2] if p.isdigit())
    low, high = TESTED_UVICORN
    if not low <= parts < high:
        return False, f"off: uvicorn {found} is outside the tested range {low} to {high} (exclusive)"
    return True, f"on (uvicorn {found})"


ENABLED, STATUS = _decide()


class JoinedWrites:
    __slots__ = ("_cycle", "_parts", "_transport")

    def __init__(self, cycle: Any, transport: Any) -> None:
        self._cycle = cycle
        self._transport = transport
        self._parts: list[bytes] = []

    @classmethod
    def install(cls, send: Any) -> JoinedWrites | None:
        """Gather the writes `send` makes until `release`; None when its server is not known to
        write through a `transport` attribute, or with the shortcuts off (then nothing changed)."""
        if not ENABLED:
            return None
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


# uvicorn's request cycle for the httptools parser and what `write_chunk` reads of it (checked on
# the first cycle of its class: a uvicorn that renamed them is simply not used)
HTTPTOOLS_CYCLE = ("uvicorn.protocols.http.httptools_impl", "RequestResponseCycle")
CYCLE_FIELDS = ("chunked_encoding", "disconnected", "flow", "response_complete", "transport")

_known: list[type] = []  # the cycle's class, once one of its objects was seen to have the fields


def chunked_cycle(send: Any) -> Any | None:
    """uvicorn's httptools request cycle behind `send` once it has started a chunked body, else None
    (always None with the shortcuts off)."""
    if not ENABLED:
        return None
    cycle: Any = getattr(send, "__self__", None)
    kind = type(cycle)
    if kind not in _known:
        if (kind.__module__, kind.__qualname__) != HTTPTOOLS_CYCLE:
            return None
        if not all(hasattr(cycle, name) for name in CYCLE_FIELDS) or not hasattr(cycle.flow, "write_paused"):
            return None
        _known.append(kind)
    return cycle if cycle.chunked_encoding is True else None


def write_chunk(cycle: Any, body: bytes) -> bool:
    """`body` (not empty) written as the next chunk of the cycle's response, as its `send` writes a
    body message with more to come; False when the send would do more than that (the caller sends)."""
    if cycle.flow.write_paused or cycle.disconnected or cycle.response_complete:
        return False
    cycle.transport.write(b"%x\r\n%s\r\n" % (len(body), body))
    return True
