"""`POST /api/v1/llm/responses`: the native door (CONTRACT §6).

Streams `start`, `status`, `delta` and then `done` (the final result) or `error`, with
`X-Kendr-Stream-Mode: streamed`; `stream: false` answers the `done` object as JSON. The record is
completed (and the `done` frame logged) before `done` is written, so a replay right after the stream
already answers the same object.
"""

from __future__ import annotations

from typing import Any

import orjson

from ..errors import TidegateError, UpstreamError, UpstreamTimeout
from ..events import Event, Failed
from ..gateway.generation import ExistingGeneration, Generation
from ..gateway.relay import KEEPALIVE, Committed
from ..render.native import NativeStreamRenderer, native_result, usage_of
from ..store.base import ApiKey
from .chat import provider_headers
from .disconnect import watch_disconnect
from .http import Request
from .idempotency import answer_existing, idempotency_key, request_hash
from .responses_request import parse_native_request
from .state import AppState

SSE = "text/event-stream; charset=utf-8"
STREAMED = {"x-kendr-stream-mode": "streamed"}


async def native_responses(req: Request, state: AppState, key: ApiKey) -> None:
    body = await req.json(state.config.server.max_body_bytes)
    parsed = parse_native_request(body)
    idem = idempotency_key(req)
    assert req.generation_id is not None
    try:
        gen = await state.gateway.start(
            generation_id=req.generation_id,
            door="native",
            key=key,
            request=parsed.request,
            model_type="chat",
            idempotency_key=idem,
            request_hash=request_hash("native", body) if idem else None,
        )
    except ExistingGeneration as existing:
        await answer_existing(req, state, existing.result, parsed.request.stream)
        return
    cancel_on_disconnect = gen.cancel if gen.record.idempotency_key is None else None
    try:
        async with watch_disconnect(req, cancel_on_disconnect):
            if parsed.request.stream:
                await _stream(req, state, gen)
            else:
                await _complete(req, gen)
    finally:
        state.gateway.release(gen.id)


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


async def _stream(req: Request, state: AppState, gen: Generation) -> None:
    renderer = NativeStreamRenderer(generation_id=gen.id, public_model=gen.request.model, created=gen.created)
    keepalive_text = state.config.server.keepalive_text
    events: list[Event] = []
    failure: Failed | None = None

    async def write(frame: bytes) -> None:
        gen.recorder.log_frames(frame)
        await req.write(frame)

    try:
        async for item in gen.items():
            if isinstance(item, Committed):
                events = []
                await req.start(200, SSE, {**provider_headers(item), **STREAMED})
                await write(renderer.begin(item))
                continue
            if item is KEEPALIVE:
                status = renderer.idle_status()
                if status:
                    await write(status)
                await req.write(renderer.keepalive(keepalive_text))
                continue
            gen.recorder.observe(item)  # type: ignore[arg-type]
            if isinstance(item, Failed):
                failure = item
                break
            events.append(item)  # type: ignore[arg-type]
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
        frame = renderer.fail(failure)
        gen.recorder.log_frames(frame)
        await gen.fail(failure)
        await req.write(frame, more=False)
        return
    final = renderer.done(_result(gen, events))
    gen.recorder.log_frames(final)
    await gen.complete()  # durable before `done` (CONTRACT §7)
    await req.write(final, more=False)


async def _complete(req: Request, gen: Generation) -> None:
    events: list[Event] = []
    committed: Committed | None = None
    try:
        async for item in gen.items():
            if isinstance(item, Committed):
                committed = item
                events = []
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
            events.append(item)  # type: ignore[arg-type]
    except TidegateError as exc:
        await gen.fail({"code": exc.error_code, "message": exc.message})
        await req.respond_error(exc, {"x-provider-attempts": str(gen.relay.attempts)})
        return
    body = orjson.dumps(_result(gen, events))
    gen.recorder.log_json(body)
    await gen.complete()
    assert committed is not None
    await req.respond_bytes(200, body, "application/json", provider_headers(committed))
