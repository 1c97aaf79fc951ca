"""`POST /v1/images/generations` (OpenAI shapes) and `POST /api/v1/images/generations` (native events).

Both validate the body before any upstream call, then run the relay over the model's image routes:
the relay owns the commit point, keep-alives, the upstream idle timeout, fallback and cancel.

Whether the upstream is asked to stream: when the client streams and the model can (its
`capabilities` list is empty or contains `"streaming"`). Otherwise tidegate waits for the whole
answer and, on the native door, writes its own `progress` events on every keep-alive tick.
"""

from __future__ import annotations

import orjson

from ..errors import TidegateError, UpstreamError, UpstreamTimeout
from ..events import Failed, Image, PartialImage, Progress, Started
from ..gateway.generation import ExistingGeneration, Generation
from ..gateway.relay import KEEPALIVE, Committed
from ..render.images import NativeImageRenderer, OpenAIImageStreamRenderer, images_json
from ..request import GenerationRequest
from ..store.base import ApiKey
from .chat import provider_headers
from .disconnect import watch_disconnect
from .http import Request
from .idempotency import answer_existing, idempotency_key, request_hash, resume_ended
from .images_request import ImageRequest, parse_image_request
from .state import AppState

SSE = "text/event-stream; charset=utf-8"


def image_generation_request(state: AppState, image: ImageRequest) -> GenerationRequest:
    """The relay's request: the validated image body rides in `raw_body` for the image adapter."""
    model = state.gateway.router.model(image.model, "image")
    upstream_stream = image.stream and (not model.capabilities or "streaming" in model.capabilities)
    return GenerationRequest(
        model=image.model,
        messages=[{"role": "user", "content": image.prompt}],
        stream=image.stream,
        user=image.user,
        raw_body=image.upstream_body(upstream_stream),
    )


async def _run(req: Request, state: AppState, key: ApiKey, door: str, default_stream: bool) -> None:
    body = await req.json(state.config.server.max_body_bytes)
    image = parse_image_request(body, default_stream=default_stream)
    request = image_generation_request(state, image)
    idem = idempotency_key(req)
    rhash = request_hash(door, body) if idem else None
    if image.stream and await resume_ended(req, state, key.id, idem, rhash):
        return
    assert req.generation_id is not None
    try:
        gen = await state.gateway.start(
            generation_id=req.generation_id,
            door=door,
            key=key,
            request=request,
            model_type="image",
            idempotency_key=idem,
            request_hash=rhash,
        )
    except ExistingGeneration as existing:
        await answer_existing(req, state, existing.result, image.stream)
        return
    cancel_on_disconnect = gen.cancel if gen.recorder.record.idempotency_key is None else None
    try:
        async with watch_disconnect(req, cancel_on_disconnect):
            if door == "images":
                await (_openai_stream(req, state, gen, image) if image.stream else _openai_json(req, gen, image))
            else:
                await (_native_stream(req, state, gen, image) if image.stream else _native_json(req, gen, image))
    finally:
        state.gateway.release(gen.id)


async def _write(req: Request, gen: Generation, frames: bytes, more: bool = True) -> None:
    """Write frames to the client and the generation's event log (replay, resume)."""
    if frames:
        gen.recorder.log_frames(frames)
    await req.write(frames, more)


async def openai_images(req: Request, state: AppState, key: ApiKey) -> None:
    await _run(req, state, key, "images", default_stream=False)


async def native_images(req: Request, state: AppState, key: ApiKey) -> None:
    await _run(req, state, key, "native_images", default_stream=True)


def _as_error(failure: Failed) -> TidegateError:
    return UpstreamTimeout(failure.message) if failure.code == "upstream_timeout" else UpstreamError(failure.message)


async def _collect(req: Request, gen: Generation) -> tuple[Committed, list[Image]] | None:
    """Non-streaming: the images of the route that served, or None after answering the error."""
    committed: Committed | None = None
    images: list[Image] = []
    try:
        async for item in gen.items():
            if isinstance(item, Committed):
                committed, images = item, []
                continue
            if item is KEEPALIVE:
                continue
            gen.recorder.observe(item)  # type: ignore[arg-type]
            if isinstance(item, Failed):
                await gen.fail(item)
                await req.respond_error(_as_error(item), provider_headers(committed) if committed else {})
                return None
            if isinstance(item, Image):
                images.append(item)
    except TidegateError as exc:
        await gen.fail({"code": exc.error_code, "message": exc.message})
        await req.respond_error(exc, {"x-provider-attempts": str(gen.relay.attempts)})
        return None
    if committed is None or not images:
        failure = Failed("upstream_error", "the upstream finished without an image", gen.relay.provider or "")
        await gen.fail(failure)
        await req.respond_error(_as_error(failure), provider_headers(committed) if committed else {})
        return None
    return committed, images


async def _openai_json(req: Request, gen: Generation, image: ImageRequest) -> None:
    got = await _collect(req, gen)
    if got is None:
        return
    committed, images = got
    usage = gen.recorder.final_usage()
    payload = orjson.dumps(
        images_json(created=gen.created, images=images, usage=usage, output_format=image.output_format)
    )
    gen.recorder.log_json(payload)
    await gen.complete()
    await req.respond_bytes(200, payload, "application/json", provider_headers(committed))


async def _native_json(req: Request, gen: Generation, image: ImageRequest) -> None:
    got = await _collect(req, gen)
    if got is None:
        return
    committed, images = got
    usage = gen.recorder.final_usage()
    renderer = NativeImageRenderer(
        generation_id=gen.id, model=image.model, created_at=gen.created, partial_images=image.partial_images
    )
    payload = orjson.dumps(renderer.done_payload(images, usage, committed.provider))
    gen.recorder.log_json(payload)
    await gen.complete()
    await req.respond_bytes(200, payload, "application/json", provider_headers(committed))


async def _openai_stream(req: Request, state: AppState, gen: Generation, image: ImageRequest) -> None:
    renderer = OpenAIImageStreamRenderer(
        created_at=gen.created,
        size=image.size,
        quality=image.quality,
        background=image.background,
        output_format=image.output_format,
    )
    keepalive_text = state.config.server.keepalive_text
    final: Image | None = None
    failure: Failed | None = None
    try:
        async for item in gen.items():
            if isinstance(item, Committed):
                await req.start(200, SSE, provider_headers(item))
                continue
            if item is KEEPALIVE:
                await req.write(renderer.keepalive(keepalive_text))
                continue
            gen.recorder.observe(item)  # type: ignore[arg-type]
            if isinstance(item, Failed):
                failure = item
                break
            if isinstance(item, PartialImage):
                await _write(req, gen, renderer.partial(item))
            elif isinstance(item, Image):
                final = item
    except TidegateError as exc:
        await gen.fail({"code": exc.error_code, "message": exc.message})
        if not req.started:
            await req.respond_error(exc, {"x-provider-attempts": str(gen.relay.attempts)})
            return
        failure = Failed("upstream_error", exc.message, gen.relay.provider or "")
    if failure is None and final is None:
        failure = Failed("upstream_error", "the upstream finished without an image", gen.relay.provider or "")
    if failure is not None:
        await gen.fail(failure)
        await _write(req, gen, renderer.error(failure.code, failure.message), more=False)
        return
    assert final is not None
    usage = gen.recorder.final_usage()
    frame = renderer.completed(final, usage)
    gen.recorder.log_frames(frame)
    await gen.complete()  # durable before the terminal event (CONTRACT §7)
    await req.write(frame, more=False)


async def _native_stream(req: Request, state: AppState, gen: Generation, image: ImageRequest) -> None:
    renderer = NativeImageRenderer(
        generation_id=gen.id, model=image.model, created_at=gen.created, partial_images=image.partial_images
    )
    images: list[Image] = []
    failure: Failed | None = None
    try:
        async for item in gen.items():
            if isinstance(item, Committed):
                await req.start(200, SSE, provider_headers(item))
                await _write(req, gen, renderer.start() + renderer.progress(0, "queued"))
                continue
            if item is KEEPALIVE:
                # tidegate's own progress while the upstream works (it is the keep-alive here)
                await _write(req, gen, renderer.progress(renderer.percent, "generating"))
                continue
            gen.recorder.observe(item)  # type: ignore[arg-type]
            if isinstance(item, Failed):
                failure = item
                break
            if isinstance(item, Started):
                await _write(req, gen, renderer.progress(5, "generating"))
            elif isinstance(item, Progress):
                if item.percent < 100:
                    await _write(req, gen, renderer.progress(item.percent, item.stage))
            elif isinstance(item, PartialImage):
                frame = renderer.partial(item)
                await _write(req, gen, frame)
            elif isinstance(item, Image):
                images.append(item)
    except TidegateError as exc:
        await gen.fail({"code": exc.error_code, "message": exc.message})
        if not req.started:
            await req.respond_error(exc, {"x-provider-attempts": str(gen.relay.attempts)})
            return
        failure = Failed("upstream_error", exc.message, gen.relay.provider or "")
    if failure is None and not images:
        failure = Failed("upstream_error", "the upstream finished without an image", gen.relay.provider or "")
    if failure is not None:
        await gen.fail(failure)
        await _write(req, gen, renderer.error(failure.code, failure.message), more=False)
        return
    usage = gen.recorder.final_usage()
    frames = renderer.progress(100, "completed") + renderer.done(images, usage, gen.relay.provider)
    gen.recorder.log_frames(frames)
    await gen.complete()  # durable before `done` (CONTRACT §7)
    await req.write(frames, more=False)
