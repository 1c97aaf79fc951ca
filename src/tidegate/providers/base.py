"""The provider interface the router and relay use.

A provider opens an `UpstreamStream` (raising `ProviderFailure` for anything that fails before the
upstream answers) and the relay reads canonical event batches from it. Providers never sleep, time out
or spawn tasks that they do not own and close in `aclose`.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Protocol

from ..events import Event
from ..request import GenerationRequest, WireFormat


class UpstreamStream(Protocol):
    async def read(self) -> list[Event] | None:
        """The next batch of canonical events; None at end of stream. Never raises for upstream
        failures after the open: those come back as a `Failed` event."""
        ...

    async def aclose(self) -> None:
        """Close the upstream connection / stop the generation. Idempotent."""
        ...


class DirectStream(UpstreamStream, Protocol):
    """An upstream stream that can also deliver its batches as they arrive, inside the protocol
    callback that read them, instead of waking the reader's task per read (`HttpStream`)."""

    def attach(self, deliver: Callable[[list[Event]], bool]) -> bool:
        """From now on each batch goes to `deliver`; one it returns False for is kept for the next
        `read()` (woken at once, and before anything that arrived after it) and delivery stops.
        `deliver` may not await. False when the stream cannot attach now (a batch or bytes wait to
        be read): read on and try again."""
        ...

    def detach(self) -> None: ...


class ChatProvider(Protocol):
    name: str
    kind: str
    speaks: frozenset[WireFormat]  # the door APIs whose body it takes as sent (set by providers/kinds.py)

    async def open_chat(self, request: GenerationRequest, served_model: str) -> UpstreamStream: ...

    async def aclose(self) -> None: ...
