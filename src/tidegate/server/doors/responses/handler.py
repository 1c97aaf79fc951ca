"""`POST /v1/responses`: validate, then Responses events (docs/api.md §5) or one `response` object."""

from __future__ import annotations

from collections.abc import Awaitable
from typing import Any

from ....commit import Committed
from ....doors import Door
from ....events import Event, Failed
from ....gateway.generation import Generation
from ....mcp.loop import LoopResult
from ....records import ApiKey
from ....render.responses import ResponseBuilder, ResponsesStreamRenderer
from ...door import BuiltJson
from ...http import Request
from ...state import AppState
from .native import STREAMED
from .request import ResponsesRequest, parse_responses_request
from .serve import serve_responses_door


class _ResponsesStream:
    one_frame_per_event = False

    def __init__(self, gen: Generation, parsed: ResponsesRequest) -> None:
        self.gen = gen
        self.passthrough = parsed.passthrough
        self.bind = parsed.bind
        self.renderer = ResponsesStreamRenderer(
            generation_id=gen.id,
            public_model=gen.request.model,
            created=gen.created,
            echo=parsed.echo(),
            tools=parsed.tool_refs,
            summarize=parsed.summarize,
        )

    def begin(self, committed: Committed) -> bytes:
        if committed.provider in self.passthrough and self.gen.request.as_sent is not None:
            self.renderer.passthrough = True  # the upstream's own `response.created` comes next
            return b""
        return self.renderer.begin()

    def event(self, event: Event) -> bytes:
        return self.renderer.render(event)

    def keepalive_tick(self) -> bytes:
        return b""

    def finish(self) -> bytes:
        return self.renderer.finish(self.gen.recorder.final_usage())

    def fail(self, failure: Failed) -> bytes:
        return self.renderer.fail(failure, self.gen.recorder.final_usage() if self.gen.recorder.produced else None)

    def settle(self) -> Awaitable[None] | None:
        """A passed-through answer's ids bound to the key before its terminal event goes out."""
        final = self.renderer.upstream_final
        return self.bind(final) if final is not None and self.bind is not None else None


class _ResponsesJson(BuiltJson):
    __slots__ = ("bind",)

    def __init__(self, gen: Generation, builder: ResponseBuilder, parsed: ResponsesRequest) -> None:
        super().__init__(gen, builder)
        self.bind = parsed.bind

    def settle(self) -> Awaitable[None] | None:
        """As the stream's: the upstream's final `response`, when a Responses API route served."""
        upstream = self.builder.upstream  # type: ignore[attr-defined]
        return self.bind(upstream) if upstream is not None and self.bind is not None else None


def _responses_json(gen: Generation, parsed: ResponsesRequest) -> BuiltJson:
    builder = ResponseBuilder(
        generation_id=gen.id,
        public_model=gen.request.model,
        created=gen.created,
        echo=parsed.echo(),
        tools=parsed.tool_refs,
        summarize=parsed.summarize,
    )
    return _ResponsesJson(gen, builder, parsed)


def _mcp_answer(gen: Generation, parsed: ResponsesRequest, result: LoopResult) -> dict[str, Any]:
    """The buffered `response` object of an MCP tool loop (server/buffered.py)."""
    shell = ResponseBuilder(
        generation_id=gen.id,
        public_model=gen.request.model,
        created=gen.created,
        echo=parsed.echo(),
        tools=parsed.tool_refs,
        summarize=parsed.summarize,
    )
    return shell.response("completed", output=result.items, usage=gen.recorder.final_usage())


async def responses(req: Request, state: AppState, key: ApiKey) -> None:
    await serve_responses_door(
        req,
        state,
        key,
        door=Door.RESPONSES,
        parse=parse_responses_request,
        make_stream=_ResponsesStream,
        make_json=_responses_json,
        mcp_render=_mcp_answer,
        stream_headers=STREAMED,
    )
