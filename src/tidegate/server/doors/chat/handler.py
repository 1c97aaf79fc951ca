"""`POST /v1/chat/completions`: validate, then chunks (docs/api.md §3, §4) or one `chat.completion`; a
model with `server_tools` runs the gateway's MCP tool loop and answers buffered (server/buffered.py)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from ....commit import Committed
from ....doors import Door
from ....events import Event, Failed, ToolCallDelta
from ....gateway.generation import Generation
from ....mcp.loop import LoopResult
from ....mcp.tools import server_tool_specs
from ....records import ApiKey
from ....render.chat import ChatCompletionBuilder, ChatStreamRenderer
from ...buffered import serve_mcp
from ...door import BuiltJson, DoorSpec, serve_generation
from ...http import Request
from ...state import AppState
from .request import parse_chat_request


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


def _chat_mcp_answer(gen: Generation, result: LoopResult) -> dict[str, Any]:
    """The buffered `chat.completion` of a `server_tools` loop: the final turn's message, with the calls
    the gateway ran in `mcp_calls` (tidegate's extension) and never as `tool_calls` the client would run."""
    builder = ChatCompletionBuilder(generation_id=gen.id, public_model=gen.request.model, created=gen.created)
    served = {t["name"] for item in result.items if item["type"] == "mcp_list_tools" for t in item["tools"]}
    hidden: set[int] = set()
    for event in result.final_events:
        if isinstance(event, ToolCallDelta) and (event.index in hidden or event.name in served):
            hidden.add(event.index)  # the last turn's calls to MCP tools, left unrun by the turn limit
            continue
        builder.add(event)
    answer = builder.build(gen.recorder.final_usage())
    if hidden and not builder.tool_calls:  # the turn limit cut the loop: the answer is not complete
        answer["choices"][0]["finish_reason"] = "length"
    answer["mcp_calls"] = [item for item in result.items if item["type"] == "mcp_call"]
    return answer


async def chat_completions(req: Request, state: AppState, key: ApiKey) -> None:
    body = await req.json(state.config.server.max_body_bytes)
    request = parse_chat_request(body)
    model = state.config.models.get(request.model)
    if model is not None and model.server_tools:
        specs = server_tool_specs(model)
        await serve_mcp(
            req,
            state,
            key,
            door=Door.CHAT,
            body=body,
            request=request,
            specs=specs,
            render=_chat_mcp_answer,
            reason="server_tools",
        )
        return
    spec = DoorSpec(
        door=Door.CHAT,
        model_type="chat",
        body=body,
        request=request,
        make_stream=_ChatStream,
        make_json=_chat_json,
    )
    await serve_generation(req, state, key, spec)
