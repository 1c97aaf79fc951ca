"""`POST /v1/chat/completions`: validate, then chunks (CONTRACT §3, §4) or one `chat.completion`."""

from __future__ import annotations

from collections.abc import Callable

from ..commit import Committed
from ..events import Event, Failed
from ..gateway.generation import Generation
from ..render.chat import ChatCompletionBuilder, ChatStreamRenderer
from ..store.base import ApiKey
from .chat_request import parse_chat_request
from .door import BuiltJson, DoorSpec, serve_generation
from .http import Request
from .state import AppState


class _ChatStream:
    event: Callable[[Event], bytes]  # the renderer's own method: no wrapper call per event
    one_frame_per_event = True  # every chunk is one frame (ChatStreamRenderer.render)

    def __init__(self, gen: Generation) -> None:
        self.gen = gen
        self.renderer = ChatStreamRenderer(
            generation_id=gen.id,
            public_model=gen.request.model,
            created=gen.created,
            include_usage=gen.request.include_usage,
        )
        self.event = self.renderer.render

    def begin(self, committed: Committed) -> bytes:
        return b""

    def keepalive_tick(self) -> bytes:
        return b""

    def finish(self) -> bytes:
        return self.renderer.finish(self.gen.recorder.final_usage())

    def fail(self, failure: Failed) -> bytes:
        return self.renderer.fail(failure)


def _chat_json(gen: Generation) -> BuiltJson:
    builder = ChatCompletionBuilder(generation_id=gen.id, public_model=gen.request.model, created=gen.created)
    return BuiltJson(gen, builder)


async def chat_completions(req: Request, state: AppState, key: ApiKey) -> None:
    body = await req.json(state.config.server.max_body_bytes)
    spec = DoorSpec(
        door="chat",
        model_type="chat",
        body=body,
        request=parse_chat_request(body),
        make_stream=_ChatStream,
        make_json=_chat_json,
    )
    await serve_generation(req, state, key, spec)
