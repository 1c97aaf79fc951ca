"""The shortcut into uvicorn's request cycle: the one place tidegate touches a dependency's
non-public attributes, because the per-chunk budget needs it (bench/results/2026-12-05_keys-and-limits.md:
off, a paced stream's chunk cost 16 % more CPU). A second shortcut, a response's head and first body
bytes gathered into one write, bought 2.4 % per chunk and nothing measurable in time to first token:
it went.

It is on when uvicorn's version is in the range it is tested on (`TESTED_UVICORN`, the range
`pyproject.toml` pins) and `TIDEGATE_SERVER_SHORTCUTS` is not `off`; a gateway logs at start whether
it is on and, when not, why. Off, every body message goes through uvicorn's own `send`: the same
bytes (`make test` runs the stream-fault and passthrough suites a second time with it off).

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
