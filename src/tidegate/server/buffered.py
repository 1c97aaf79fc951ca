"""Buffered answers (docs/api.md §6, §13): a request with MCP tools (or a chat completion of a model with
`server_tools`) runs the gateway's tool loop and answers one JSON body, `X-Kendr-Stream-Mode: buffered`
+ `X-Kendr-Buffered-Reason: custom_mcp` (or `server_tools`), even for `stream: true`. Idempotency, the record and
cancellation are the ones of every generation.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable
from typing import Any

import orjson

from ..doors import Door
from ..errors import TidegateError, UpstreamError, UpstreamTimeout
from ..events import Failed
from ..gateway.generation import Generation
from ..mcp.client import McpFailure, McpServers
from ..mcp.guard import check_server_url
from ..mcp.loop import LoopResult, run_loop
from ..mcp.tools import McpServerSpec
from ..records import ApiKey
from ..request import GenerationRequest
from .door import as_error, open_generation, provider_headers, running
from .hints import session_hints
from .http import Request
from .state import AppState

log = logging.getLogger("tidegate.mcp")
# (the generation, the loop's result) → the door's JSON answer
Render = Callable[[Generation, LoopResult], dict[str, Any]]


def buffered_headers(reason: str) -> dict[str, str]:
    """`custom_mcp` (the request's MCP tools) or `server_tools` (the model's, docs/api.md §6)."""
    return {"x-kendr-stream-mode": "buffered", "x-kendr-buffered-reason": reason}


async def serve_mcp(
    req: Request,
    state: AppState,
    key: ApiKey,
    *,
    door: Door,
    body: Any,
    request: GenerationRequest,
    specs: list[McpServerSpec],
    render: Render,
    reason: str = "custom_mcp",
) -> None:
    config = state.config.mcp
    for i, spec in enumerate(specs):  # before anything starts: a refused server stores nothing
        await check_server_url(spec.url, config.allowed_hosts, f"tools[{i}].server_url")
    request.stream = False  # every model turn is read whole
    # each turn adds the MCP tools and the calls' results: the client's body as sent (what an OpenAI
    # passthrough forwards) no longer says what a turn asks, so every kind builds it from the request
    request.raw_body = {}
    if request.as_sent is not None:  # nor does the Responses body: no route gets it as sent
        request.as_sent.body = {}
    buffered = buffered_headers(reason)
    assert req.generation_id is not None
    generation_id = req.generation_id
    request.session = session_hints(door, body, req.header("user-agent"))

    def start(idem: str | None, rhash: str | None) -> Awaitable[Generation]:
        return state.gateway.start(
            generation_id=generation_id,
            door=door,
            key=key,
            request=request,
            model_type="chat",
            idempotency_key=idem,
            request_hash=rhash,
        )

    gen = await open_generation(req, state, key, door, body, False, start)
    if gen is None:
        return
    async with running(req, state, gen):  # the lifetime every generation door shares (door.py)
        try:
            await _run(req, state, gen, specs, render, buffered)
        except Exception:
            log.exception("generation %s: the MCP loop failed", gen.id)
            if not req.started:
                await req.respond_error(UpstreamError("the gateway failed to finish this answer"))


async def _fail(req: Request, gen: Generation, error: TidegateError, headers: dict[str, str]) -> None:
    await gen.fail({"code": error.error_code, "message": error.message})
    await req.respond_error(error, headers)


async def _run(
    req: Request,
    state: AppState,
    gen: Generation,
    specs: list[McpServerSpec],
    render: Render,
    buffered: dict[str, str],
) -> None:
    config = state.config.mcp
    result = LoopResult()
    gen.recorder.record.mcp_calls = result.calls  # filled as calls are made: in the record however it ends
    try:
        async with asyncio.timeout(config.deadline_s):
            async with McpServers(specs, config.call_timeout_s, config.allowed_hosts) as servers:
                gen.request.tools = [*(gen.request.tools or []), *(t.chat_tool() for t in servers.tools.values())]
                await run_loop(gen, servers, config.max_turns, result)
    except McpFailure as exc:
        await _fail(req, gen, UpstreamError(str(exc), code="mcp_server_error"), buffered)
        return
    except TimeoutError:
        message = f"the MCP tool loop did not finish within [mcp] deadline_s = {config.deadline_s:g} s"
        await _fail(req, gen, UpstreamTimeout(message), buffered)
        return
    except TidegateError as exc:  # no route could serve a model turn (503, 502, 504 ...)
        await _fail(req, gen, exc, {"x-provider-attempts": str(gen.relay.attempts), **buffered})
        return
    for call in result.calls:  # what was called, how big and how long: never the arguments themselves
        log.info(
            "generation %s: mcp_call %s/%s arguments=%d bytes %.1f ms%s",
            gen.id,
            call["server_label"],
            call["name"],
            call["arguments_bytes"],
            call["duration_ms"],
            f" error={call['error'][:200]}" if call["error"] else "",
        )
    headers = provider_headers(result.committed) if result.committed else {}
    if result.failure is not None or result.committed is None:
        failure = result.failure or Failed("upstream_error", "the upstream sent nothing")
        await gen.fail(failure)
        await req.respond_error(as_error(failure), {**headers, **buffered})
        return
    if result.usage is not None:
        gen.recorder.observe(result.usage)
    await gen.recorder.estimate_off_loop()
    answer = orjson.dumps(render(gen, result))
    gen.recorder.log_json(answer)
    await gen.complete()
    await req.respond_bytes(200, answer, "application/json", {**headers, **buffered})
