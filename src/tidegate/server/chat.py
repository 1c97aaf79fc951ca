"""`POST /v1/chat/completions`: validate, run the gateway, render chunks or one completion."""

from __future__ import annotations

import orjson

from ..errors import TidegateError, UpstreamError, UpstreamTimeout
from ..events import Failed
from ..gateway.generation import ExistingGeneration, Generation
from ..gateway.relay import KEEPALIVE, Committed
from ..render.chat import ChatCompletionBuilder, ChatStreamRenderer
from ..store.base import ApiKey
from .chat_request import parse_chat_request
from .disconnect import watch_disconnect
from .http import Request
from .idempotency import answer_existing, idempotency_key, request_hash, resume_ended
from .state import AppState


def provider_headers(c: Committed) -> dict[str, str]:
    return {
        "x-provider": c.provider,
        "x-served-model": c.served_model,
        "x-provider-attempts": str(c.attempts),
    }


async def chat_completions(req: Request, state: AppState, key: ApiKey) -> None:
    body = await req.json(state.config.server.max_body_bytes)
    request = parse_chat_request(body)
    idem = idempotency_key(req)
    rhash = request_hash("chat", body) if idem else None
    if request.stream and await resume_ended(req, state, key.id, idem, rhash):
        return
    assert req.generation_id is not None
    try:
        gen = await state.gateway.start(
            generation_id=req.generation_id,
            door="chat",
            key=key,
            request=request,
            model_type="chat",
            idempotency_key=idem,
            request_hash=rhash,
        )
    except ExistingGeneration as existing:
        await answer_existing(req, state, existing.result, request.stream)
        return
    # A request without Idempotency-Key is cancelled when its client goes away (CONTRACT §7).
    cancel_on_disconnect = gen.cancel if gen.recorder.record.idempotency_key is None else None
    try:
        async with watch_disconnect(req, cancel_on_disconnect):
            if request.stream:
                await _stream(req, state, gen)
            else:
                await _complete(req, gen)
    finally:
        state.gateway.release(gen.id)


async def _stream(req: Request, state: AppState, gen: Generation) -> None:
    renderer = ChatStreamRenderer(
        generation_id=gen.id,
        public_model=gen.request.model,
        created=gen.created,
        include_usage=gen.request.include_usage,
    )
    keepalive_text = state.config.server.keepalive_text
    failure: Failed | None = None
    try:
        async for item in gen.items():
            if isinstance(item, Committed):
                await req.start(200, "text/event-stream; charset=utf-8", provider_headers(item))
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
                gen.recorder.log_frames(frame)
                await req.write(frame)
    except TidegateError as exc:
        await gen.fail({"code": exc.error_code, "message": exc.message})
        if not req.started:
            await req.respond_error(exc, {"x-provider-attempts": str(gen.relay.attempts)})
            return
        failure = Failed("upstream_error", exc.message, gen.relay.provider or "")
        frame = renderer.fail(failure)
        gen.recorder.log_frames(frame)
        await req.write(frame, more=False)
        return
    if failure is not None:
        frame = renderer.fail(failure)
        gen.recorder.log_frames(frame)
        await gen.fail(failure)
        await req.write(frame, more=False)
        return
    usage = gen.recorder.final_usage()
    final = renderer.finish(usage)
    gen.recorder.log_frames(final)
    await gen.complete()  # durable before [DONE] (CONTRACT §7)
    await req.write(final, more=False)


async def _complete(req: Request, gen: Generation) -> None:
    builder = ChatCompletionBuilder(generation_id=gen.id, public_model=gen.request.model, created=gen.created)
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
                headers = provider_headers(committed) if committed else {}
                await req.respond_error(err, headers)
                return
            builder.add(item)  # type: ignore[arg-type]
    except TidegateError as exc:
        await gen.fail({"code": exc.error_code, "message": exc.message})
        await req.respond_error(exc, {"x-provider-attempts": str(gen.relay.attempts)})
        return
    usage = gen.recorder.final_usage()
    body = orjson.dumps(builder.build(usage))
    gen.recorder.log_json(body)
    await gen.complete()
    assert committed is not None
    await req.respond_bytes(200, body, "application/json", provider_headers(committed))
