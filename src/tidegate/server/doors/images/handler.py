"""`POST /v1/images/generations` (OpenAI shapes) and `POST /api/v1/images/generations` (native events).

Both validate the body before any upstream call, then run the relay over the model's image routes:
the relay owns the commit point, keep-alives, the upstream idle timeout, fallback and cancel.

Whether the upstream is asked to stream: when the client streams and the model can (its
`capabilities` list is empty or contains `"streaming"`). Otherwise tidegate waits for the whole
answer and, on the native door, writes its own `progress` events on every keep-alive tick.
"""

from __future__ import annotations

import orjson

from ....commit import Committed
from ....doors import Door
from ....events import Event, Failed, Image, PartialImage, Progress, Started
from ....gateway.generation import Generation
from ....records import ApiKey
from ....render.images import NativeImageRenderer, OpenAIImageStreamRenderer, images_json
from ....request import GenerationRequest
from ...door import DoorSpec, serve_generation
from ...http import Request
from ...state import AppState
from .request import ImageRequest, parse_image_request


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


def _no_image(gen: Generation) -> Failed:
    return Failed("upstream_error", "the upstream finished without an image", gen.relay.provider or "")


class _OpenAIImageStream:
    """`image_generation.partial_image` events, then `image_generation.completed` (or `error`)."""

    one_frame_per_event = False

    def __init__(self, gen: Generation, image: ImageRequest) -> None:
        self.gen = gen
        self.final: Image | None = None
        self.renderer = OpenAIImageStreamRenderer(
            created_at=gen.created,
            size=image.size,
            quality=image.quality,
            background=image.background,
            output_format=image.output_format,
        )

    def begin(self, committed: Committed) -> bytes:
        return b""

    def event(self, event: Event) -> bytes:
        if isinstance(event, PartialImage):
            return self.renderer.partial(event)
        if isinstance(event, Image):
            self.final = event
        return b""

    def keepalive_tick(self) -> bytes:
        return b""

    def finish(self) -> bytes | Failed:
        if self.final is None:
            return _no_image(self.gen)
        return self.renderer.completed(self.final, self.gen.recorder.final_usage())

    def fail(self, failure: Failed) -> bytes:
        return self.renderer.error(failure.code, failure.message)


class _NativeImageStream:
    """`start`, `progress` (tidegate's own on every keep-alive tick), `partial`, then `done` or `error`."""

    one_frame_per_event = False

    def __init__(self, gen: Generation, image: ImageRequest) -> None:
        self.gen = gen
        self.images: list[Image] = []
        self.renderer = NativeImageRenderer(
            generation_id=gen.id, model=image.model, created_at=gen.created, partial_images=image.partial_images
        )

    def begin(self, committed: Committed) -> bytes:
        return self.renderer.start() + self.renderer.progress(0, "queued")

    def event(self, event: Event) -> bytes:
        if isinstance(event, Started):
            return self.renderer.progress(5, "generating")
        if isinstance(event, Progress) and event.percent < 100:
            return self.renderer.progress(event.percent, event.stage)
        if isinstance(event, PartialImage):
            return self.renderer.partial(event)
        if isinstance(event, Image):
            self.images.append(event)
        return b""

    def keepalive_tick(self) -> bytes:
        return self.renderer.progress(self.renderer.percent, "generating")

    def finish(self) -> bytes | Failed:
        if not self.images:
            return _no_image(self.gen)
        usage = self.gen.recorder.final_usage()
        return self.renderer.progress(100, "completed") + self.renderer.done(
            self.images, usage, self.gen.relay.provider
        )

    def fail(self, failure: Failed) -> bytes:
        return self.renderer.error(failure.code, failure.message)


class _ImagesJson:
    """The images of the route that served, as the OpenAI JSON or the native `done` payload."""

    def __init__(self, gen: Generation, image: ImageRequest, native: bool) -> None:
        self.gen = gen
        self.image = image
        self.native = native
        self.images: list[Image] = []

    def reset(self) -> None:
        self.images = []

    def add(self, event: Event) -> None:
        if isinstance(event, Image):
            self.images.append(event)

    def build(self) -> bytes | Failed:
        if not self.images:
            return _no_image(self.gen)
        usage = self.gen.recorder.final_usage()
        if self.native:
            renderer = NativeImageRenderer(
                generation_id=self.gen.id,
                model=self.image.model,
                created_at=self.gen.created,
                partial_images=self.image.partial_images,
            )
            return orjson.dumps(renderer.done_payload(self.images, usage, self.gen.relay.provider))
        return orjson.dumps(
            images_json(
                created=self.gen.created, images=self.images, usage=usage, output_format=self.image.output_format
            )
        )


async def _run(req: Request, state: AppState, key: ApiKey, door: Door, default_stream: bool) -> None:
    body = await req.json(state.config.server.max_body_bytes)
    image = parse_image_request(body, default_stream=default_stream)
    native = door == Door.NATIVE_IMAGES
    spec = DoorSpec(
        door=door,
        model_type="image",
        body=body,
        request=image_generation_request(state, image),
        make_stream=lambda gen: _NativeImageStream(gen, image) if native else _OpenAIImageStream(gen, image),
        make_json=lambda gen: _ImagesJson(gen, image, native),
    )
    await serve_generation(req, state, key, spec)


async def openai_images(req: Request, state: AppState, key: ApiKey) -> None:
    await _run(req, state, key, Door.IMAGES, default_stream=False)


async def native_images(req: Request, state: AppState, key: ApiKey) -> None:
    await _run(req, state, key, Door.NATIVE_IMAGES, default_stream=True)
