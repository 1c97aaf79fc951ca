"""`POST /api/v1/llm/responses`: the native door (docs/api.md §6).

Streams `start`, `status`, `delta` and then `done` (the final result) or `error`, with
`X-Kendr-Stream-Mode: streamed`; `stream: false` answers the `done` object as JSON. The record is
completed (and the `done` frame logged) before `done` is written, so a replay right after the stream
already answers the same object.
"""

from __future__ import annotations

from typing import Any

import orjson

from ....commit import Committed
from ....doors import Door
from ....events import Event, Failed
from ....gateway.generation import Generation
from ....mcp.loop import LoopResult
from ....records import ApiKey, usage_of
from ....render.native import NativeStreamRenderer, native_result
from ...http import Request
from ...state import AppState
from .request import ResponsesRequest, parse_native_request
from .serve import serve_responses_door

STREAMED = {"x-kendr-stream-mode": "streamed"}


def _result(gen: Generation, events: list[Event]) -> dict[str, Any]:
    """The `done` object from exactly the fields the recorder is about to store."""
    return native_result(
        events,
        generation_id=gen.id,
        model=gen.request.model,
        provider=gen.relay.provider,
        served_model=gen.relay.served_model,
        usage=usage_of(gen.recorder.final_usage()),
        finish_reason=gen.recorder.finish_reason,
    )


class _NativeStream:
    one_frame_per_event = False

    def __init__(self, gen: Generation) -> None:
        self.gen = gen
        self.events: list[Event] = []
        self.renderer = NativeStreamRenderer(generation_id=gen.id, public_model=gen.request.model, created=gen.created)

    def begin(self, committed: Committed) -> bytes:
        return self.renderer.begin(committed)

    def event(self, event: Event) -> bytes:
        self.events.append(event)
        return self.renderer.render(event)

    def keepalive_tick(self) -> bytes:
        return self.renderer.idle_status()

    def finish(self) -> bytes:
        return self.renderer.done(_result(self.gen, self.events))

    def fail(self, failure: Failed) -> bytes:
        return self.renderer.fail(failure)


class _NativeJson:
    def __init__(self, gen: Generation) -> None:
        self.gen = gen
        self.events: list[Event] = []

    def reset(self) -> None:
        self.events = []

    def add(self, event: Event) -> None:
        self.events.append(event)

    def build(self) -> bytes:
        return orjson.dumps(_result(self.gen, self.events))


def _mcp_answer(gen: Generation, parsed: ResponsesRequest, result: LoopResult) -> dict[str, Any]:
    """The buffered `done` object of an MCP tool loop: every turn's items, usage over all turns."""
    answer = _result(gen, result.final_events)
    answer["output"] = result.items
    return answer


async def native_responses(req: Request, state: AppState, key: ApiKey) -> None:
    await serve_responses_door(
        req,
        state,
        key,
        door=Door.NATIVE,
        parse=parse_native_request,
        make_stream=lambda gen, parsed: _NativeStream(gen),
        make_json=lambda gen, parsed: _NativeJson(gen),
        mcp_render=_mcp_answer,
        stream_headers=STREAMED,
    )
