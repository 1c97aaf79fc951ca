"""`POST /v1/responses`: validate, run the gateway, render Responses events or one `response` object."""

from __future__ import annotations

import orjson

from ..errors import TidegateError, UpstreamError, UpstreamTimeout
from ..events import Failed
from ..gateway.generation import ExistingGeneration, Generation
from ..gateway.relay import KEEPALIVE, Committed
from ..render.responses import ResponseBuilder, ResponsesStreamRenderer
from ..store.base import ApiKey
from .chat import provider_headers
from .disconnect import watch_disconnect
from .http import Request
from .idempotency import answer_existing, idempotency_key, request_hash
from .responses_request import ResponsesRequest, parse_responses_request
from .state import AppState

SSE = "text/event-stream; charset=utf-8"


async def responses(req: Request, state: AppState, key: ApiKey) -> None:
    body = await req.json(state.config.server.max_body_bytes)
    parsed = parse_responses_request(body)
    idem = idempotency_key(req)
    assert req.generation_id is not None
    try:
        gen = await state.gateway.start(
            generation_id=req.generation_id,
            door="responses",
            key=key,
            request=parsed.request,
            model_type="chat",
            idempotency_key=idem,
            request_hash=request_hash("responses", body) if idem else None,
        )
    except ExistingGeneration as existing:
        await answer_existing(req, state, existing.result, parsed.request.stream)
        return
    # A request without Idempotency-Key is cancelled when its client goes away (CONTRACT §7).
    cancel_on_disconnect = gen.cancel if gen.record.idempotency_key is None else None
    try:
        async with watch_disconnect(req, cancel_on_disconnect):
            if parsed.request.stream:
                await _stream(req, state, gen, parsed)
            else:
                await _complete(req, gen, parsed)
    finally:
        state.gateway.release(gen.id)


async def _stream(req: Request, state: AppState, gen: Generation, parsed: ResponsesRequest) -> None:
    renderer = ResponsesStreamRenderer(
        generation_id=gen.id, public_model=gen.request.model, created=gen.created, echo=parsed.echo()
    )
    keepalive_text = state.config.server.keepalive_text
    failure: Failed | None = None

    async def write(frame: bytes, more: bool = True) -> None:
        gen.recorder.log_frames(frame)
        await req.write(frame, more)

    try:
        async for item in gen.items():
            if isinstance(item, Committed):
                await req.start(200, SSE, provider_headers(item))
                await write(renderer.begin())
                continue
            if item is KEEPALIVE:
                await req.write(renderer.keepalive(keepalive_text))
                continue
            gen.recorder.observe(item)  # type: ignore[arg-type]
            if isinstance(item, Failed):
                failure = item
                break
            frame = renderer.render(item)  # type: ignore[arg-type]
            if frame:
                await write(frame)
    except TidegateError as exc:
        if not req.started:
            await gen.fail({"code": exc.error_code, "message": exc.message})
            await req.respond_error(exc, {"x-provider-attempts": str(gen.relay.attempts)})
            return
        failure = Failed("upstream_error", exc.message, gen.relay.provider or "")
    if failure is not None:
        frame = renderer.fail(failure, gen.recorder.final_usage() if _produced(gen) else None)
        gen.recorder.log_frames(frame)
        await gen.fail(failure)
        await req.write(frame, more=False)
        return
    final = renderer.finish(gen.recorder.final_usage())
    gen.recorder.log_frames(final)
    await gen.complete()  # durable before the terminal event (CONTRACT §7)
    await req.write(final, more=False)


def _produced(gen: Generation) -> bool:
    r = gen.recorder
    return bool(r.text or r.reasoning or r.tool_args or r.usage)


async def _complete(req: Request, gen: Generation, parsed: ResponsesRequest) -> None:
    builder = ResponseBuilder(
        generation_id=gen.id, public_model=gen.request.model, created=gen.created, echo=parsed.echo()
    )
    committed: Committed | None = None
    try:
        async for item in gen.items():
            if isinstance(item, Committed):
                committed = item
                builder.reset()
                continue
            if item is KEEPALIVE:
                continue
            gen.recorder.observe(item)  # type: ignore[arg-type]
            if isinstance(item, Failed):
                await gen.fail(item)
                err: TidegateError = (
                    UpstreamTimeout(item.message) if item.code == "upstream_timeout" else UpstreamError(item.message)
                )
                await req.respond_error(err, provider_headers(committed) if committed else {})
                return
            builder.add(item)  # type: ignore[arg-type]
    except TidegateError as exc:
        await gen.fail({"code": exc.error_code, "message": exc.message})
        await req.respond_error(exc, {"x-provider-attempts": str(gen.relay.attempts)})
        return
    body = orjson.dumps(builder.build(gen.recorder.final_usage()))
    gen.recorder.log_json(body)
    await gen.complete()
    assert committed is not None
    await req.respond_bytes(200, body, "application/json", provider_headers(committed))
