"""Buffered answers (CONTRACT §6, §13): a request with MCP tools runs the gateway's tool loop and
answers one JSON body, `X-Kendr-Stream-Mode: buffered` + `X-Kendr-Buffered-Reason: custom_mcp`,
even for `stream: true`. Idempotency, the record and cancellation are the ones of every generation.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable
from typing import Any

import orjson

from ..errors import TidegateError, UpstreamError, UpstreamTimeout
from ..events import Failed
from ..gateway.generation import Generation
from ..mcp.client import McpFailure, McpServers
from ..mcp.guard import check_server_url
from ..mcp.loop import LoopResult, run_loop
from ..mcp.tools import McpServerSpec
from ..store.base import ApiKey
from .door import as_error, open_generation, provider_headers, running
from .http import Request
from .responses_request import ResponsesRequest
from .state import AppState

log = logging.getLogger("tidegate.mcp")
BUFFERED_MCP = {"x-kendr-stream-mode": "buffered", "x-kendr-buffered-reason": "custom_mcp"}
# (the generation, the parsed request, the loop's result) → the door's JSON answer
Render = Callable[[Generation, ResponsesRequest, LoopResult], dict[str, Any]]


async def serve_mcp(
    req: Request,
    state: AppState,
    key: ApiKey,
    *,
    door: str,
    body: Any,
    parsed: ResponsesRequest,
    specs: list[McpServerSpec],
    render: Render,
) -> None:
    config = state.config.mcp
    for i, spec in enumerate(specs):  # before anything starts: a refused server stores nothing
        await check_server_url(spec.url, config.allowed_hosts, f"tools[{i}].server_url")
    parsed.request.stream = False  # every model turn is read whole
    parsed.tools = [*parsed.tools, *(s.echo() for s in specs)]
    assert req.generation_id is not None
    generation_id = req.generation_id

    def start(idem: str | None, rhash: str | None) -> Awaitable[Generation]:
        return state.gateway.start(
            generation_id=generation_id,
            door=door,
            key=key,
            request=parsed.request,
            model_type="chat",
            idempotency_key=idem,
            request_hash=rhash,
        )

    gen = await open_generation(req, state, key, door, body, False, start)
    if gen is None:
        return
    async with running(req, state, gen):  # the lifetime every generation door shares (door.py)
        try:
            await _run(req, state, gen, parsed, specs, render)
        except Exception:
            log.exception("generation %s: the MCP loop failed", gen.id)
            if not req.started:
                await req.respond_error(UpstreamError("the gateway failed to finish this answer"))


async def _fail(req: Request, gen: Generation, error: TidegateError, extra: dict[str, str]) -> None:
    await gen.fail({"code": error.error_code, "message": error.message})
    await req.respond_error(error, {**extra, **BUFFERED_MCP})


async def _run(
    req: Request, state: AppState, gen: Generation, parsed: ResponsesRequest, specs: list[McpServerSpec], render: Render
) -> None:
    config = state.config.mcp
    result = LoopResult()
    try:
        async with asyncio.timeout(config.deadline_s):
            async with McpServers(specs, config.call_timeout_s) as servers:
                gen.request.tools = [*(gen.request.tools or []), *(t.chat_tool() for t in servers.tools.values())]
                result = await run_loop(gen, servers, config.max_turns)
    except McpFailure as exc:
        await _fail(req, gen, UpstreamError(str(exc), code="mcp_server_error"), {})
        return
    except TimeoutError:
        message = f"the MCP tool loop did not finish within [mcp] deadline_s = {config.deadline_s:g} s"
        await _fail(req, gen, UpstreamTimeout(message), {})
        return
    except TidegateError as exc:  # no route could serve a model turn (503, 502, 504 ...)
        await _fail(req, gen, exc, {"x-provider-attempts": str(gen.relay.attempts)})
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
        await req.respond_error(as_error(failure), {**headers, **BUFFERED_MCP})
        return
    if result.usage is not None:
        gen.recorder.observe(result.usage)
    await gen.recorder.estimate_off_loop()
    answer = orjson.dumps(render(gen, parsed, result))
    gen.recorder.log_json(answer)
    await gen.complete()
    await req.respond_bytes(200, answer, "application/json", {**headers, **BUFFERED_MCP})
