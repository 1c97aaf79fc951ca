"""What the two Responses-shaped doors (`/v1/responses`, docs/api.md §5; the native one, §6) share:
MCP tools make a buffered tool loop (buffered.py), any other request is an ordinary generation (door.py)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from ....doors import Door
from ....gateway.generation import Generation
from ....mcp.loop import LoopResult
from ....mcp.tools import split_tools
from ....providers.kinds import speaking
from ....records import ApiKey
from ....request import WireFormat
from ...buffered import serve_mcp
from ...door import DoorSpec, serve_generation
from ...http import Request
from ...state import AppState
from .owners import bind, check_owner
from .request import ResponsesRequest


async def serve_responses_door(
    req: Request,
    state: AppState,
    key: ApiKey,
    *,
    door: Door,
    parse: Callable[[Any], ResponsesRequest],
    make_stream: Callable[[Generation, ResponsesRequest], Any],
    make_json: Callable[[Generation, ResponsesRequest], Any],
    mcp_render: Callable[[Generation, ResponsesRequest, LoopResult], dict[str, Any]],
    stream_headers: dict[str, str],
) -> None:
    """The two Responses-shaped doors (`/v1/responses`, the native one): a request with MCP tools runs
    the tool loop buffered (`custom_mcp`; the answer repeats the tools, their headers left out), any
    other is an ordinary generation (door.py)."""
    body = await req.json(state.config.server.max_body_bytes)
    rest, specs = split_tools(body)
    parsed = parse(rest)
    await check_owner(state, key, rest)  # another key's conversation: a 404 before any upstream
    tools = parsed.request.responses_tools
    model = state.config.models.get(parsed.request.model)
    if tools is not None and model is not None:  # the model's word on hosted tools (docs/agents.md)
        tools.drop_hosted = model.drop_hosted_tools
    parsed.passthrough = speaking(state.config.providers, WireFormat.RESPONSES)
    if parsed.passthrough:
        parsed.bind = lambda response: bind(state, key, response)
    if specs:
        parsed.tools = [*parsed.tools, *(s.echo() for s in specs)]
        await serve_mcp(
            req,
            state,
            key,
            door=door,
            body=body,
            request=parsed.request,
            specs=specs,
            render=lambda gen, result: mcp_render(gen, parsed, result),
        )
        return
    spec = DoorSpec(
        door=door,
        model_type="chat",
        body=body,
        request=parsed.request,
        make_stream=lambda gen: make_stream(gen, parsed),
        make_json=lambda gen: make_json(gen, parsed),
        stream_headers=stream_headers,
    )
    await serve_generation(req, state, key, spec)
