"""One route's attempt inside the relay: its upstream (being opened, or open) and the clocks its
idle and keep-alive deadlines run from. The relay (`relay.py`) drives it; this holds no policy."""

from __future__ import annotations

from dataclasses import dataclass

from ..providers.base import ChatProvider, UpstreamStream
from ..providers.http.client import OPEN_PROGRESS, OpenProgress
from ..request import GenerationRequest
from .cancel import UpstreamClock
from .opening import UpstreamOpen


@dataclass(slots=True)
class Attempt:
    provider: ChatProvider
    route_model: str
    idle: float  # the route's idle timeout
    keepalive: float  # the keep-alive interval (infinite for a JSON request)
    clock: UpstreamClock
    progress: OpenProgress  # the open's task sees it (its context): waiting for a connection?
    # A stream's open runs as a task that a keep-alive tick leaves running (opening.py); a JSON
    # request's open is awaited in place and has none.
    opening: UpstreamOpen[UpstreamStream] | None
    last_data: float  # upstream bytes only: keep-alives never move it
    last_keepalive: float
    stream: UpstreamStream | None = None
    idle_checked: bool = False  # looked once more past the idle deadline (timers run before I/O)
    finished: bool = False  # the upstream said Finished: its end of stream is the normal one

    def deadlines(self, direct_data_at: float) -> tuple[float, float]:
        """The idle and the keep-alive deadline. `direct_data_at`: when the direct delivery last took
        a batch, which moves both on. (Conditionals, not min/max: this runs once per read.)"""
        if direct_data_at > self.last_data:
            self.last_data = direct_data_at
        last = self.last_data
        return last + self.idle, (last if last > self.last_keepalive else self.last_keepalive) + self.keepalive

    def waited(self, seconds: float) -> None:
        """The open waited `seconds` for a pool slot (`OpenProgress`'s listener): not the upstream's
        silence, so the idle and keep-alive clocks move on by as much."""
        self.last_data += seconds
        self.clock.postpone(seconds)

    @property
    def opens_in_place(self) -> bool:
        """A JSON request's open, awaited in place, is cancelled with its wait: waiting again would
        send the upstream request a second time, so its deadline is final."""
        return self.stream is None and self.opening is None

    async def open_in_place(self, request: GenerationRequest) -> UpstreamStream:
        """A JSON request's open, in the relay's own task, with its `OpenProgress` in context (the
        client reports a pool wait there)."""
        token = OPEN_PROGRESS.set(self.progress)
        try:
            return await self.provider.open_chat(request, self.route_model)
        finally:
            OPEN_PROGRESS.reset(token)
