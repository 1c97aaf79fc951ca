"""Image renderers (docs/api-operations.md §8): canonical image events → the OpenAI image stream, the OpenAI image
JSON, and the native `/api/v1/images/generations` events. Every SSE event carries `id: <n>`.

Replay (docs/api-operations.md §7: "image generations replay their native image `done`") rebuilds the native
answer of a stored image generation from its record and canonical event log, whichever door it
was started on: `image_done_for_record` (JSON) and `native_image_frames_for_record` (SSE).
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

import orjson

from ..doors import Door
from ..events import Event, Image, PartialImage, UsageReport
from ..records import GenerationRecord

IMAGE_DOORS = (Door.IMAGES, Door.NATIVE_IMAGES)

# Stream event fields the SDK requires, with the request's values as the fallback.
_STREAM_FIELDS = ("size", "quality", "background", "output_format")


def image_usage_json(usage: UsageReport) -> dict[str, Any]:
    """OpenAI image usage. A generation's input is its text prompt, so input image tokens are 0."""
    return {
        "input_tokens": usage.prompt,
        "input_tokens_details": {"image_tokens": 0, "text_tokens": usage.prompt},
        "output_tokens": usage.completion,
        "total_tokens": usage.total,
    }


def _frame(seq: int, event: str, payload: dict[str, Any]) -> bytes:
    return b"id: %d\nevent: %s\ndata: %s\n\n" % (seq, event.encode(), orjson.dumps(payload))


class _Sequence:
    def __init__(self, first_event_id: int) -> None:
        self.next_id = first_event_id

    def emit(self, event: str, payload: dict[str, Any]) -> bytes:
        seq = self.next_id
        self.next_id += 1
        return _frame(seq, event, payload)


class OpenAIImageStreamRenderer(_Sequence):
    """`/v1/images/generations` with `stream: true`: `image_generation.partial_image` events, then one
    `image_generation.completed` (or one `error`, never both)."""

    def __init__(
        self,
        *,
        created_at: int,
        size: str,
        quality: str,
        background: str,
        output_format: str,
        first_event_id: int = 0,
    ) -> None:
        super().__init__(first_event_id)
        self.created_at = created_at
        self.settings: dict[str, Any] = {
            "size": size,
            "quality": quality,
            "background": background,
            "output_format": output_format,
        }

    def partial(self, event: PartialImage) -> bytes:
        payload: dict[str, Any] = {
            "type": "image_generation.partial_image",
            "b64_json": event.b64_json,
            "partial_image_index": event.index,
            "created_at": self.created_at,
            **self.settings,
        }
        return self.emit("image_generation.partial_image", payload)

    def completed(self, image: Image, usage: UsageReport) -> bytes:
        fields = dict(self.settings)
        for name in _STREAM_FIELDS:
            value = image.extra.get(name)
            if isinstance(value, str):
                fields[name] = value
        created = image.extra.get("created_at")
        payload: dict[str, Any] = {
            "type": "image_generation.completed",
            "b64_json": image.b64_json,
            "created_at": created if isinstance(created, int) else self.created_at,
            **fields,
            "usage": image_usage_json(usage),
        }
        return self.emit("image_generation.completed", payload)

    def error(self, code: str, message: str) -> bytes:
        return self.emit("error", {"type": "error", "error": {"code": code, "message": message}})


def images_json(*, created: int, images: list[Image], usage: UsageReport | None, output_format: str) -> dict[str, Any]:
    """The OpenAI `ImagesResponse` of a non-streaming `/v1/images/generations`."""
    data: list[dict[str, Any]] = []
    for image in images:
        item: dict[str, Any] = {"b64_json": image.b64_json}
        if image.revised_prompt is not None:
            item["revised_prompt"] = image.revised_prompt
        data.append(item)
    body: dict[str, Any] = {"created": created, "data": data, "output_format": output_format}
    if images:
        for name in ("size", "quality", "background", "output_format"):
            value = images[0].extra.get(name)
            if isinstance(value, str):
                body[name] = value
    if usage is not None:
        body["usage"] = image_usage_json(usage)
    return body


class NativeImageRenderer(_Sequence):
    """`/api/v1/images/generations`: `start`, `progress` (percent never decreasing), `partial` (only
    when partial images were asked for), then `done` or `error`."""

    def __init__(
        self,
        *,
        generation_id: str,
        model: str,
        created_at: int,
        partial_images: int,
        first_event_id: int = 0,
    ) -> None:
        super().__init__(first_event_id)
        self.generation_id = generation_id
        self.model = model
        self.created_at = created_at
        self.partial_images = partial_images
        self.percent = 0
        self.progress_sent = 0

    def start(self) -> bytes:
        return self.emit("start", {"id": self.generation_id, "model": self.model, "created_at": self.created_at})

    def progress(self, percent: int, stage: str) -> bytes:
        self.percent = max(self.percent, min(100, max(0, percent)))
        self.progress_sent += 1
        return self.emit("progress", {"percent": self.percent, "stage": stage})

    def partial(self, event: PartialImage) -> bytes:
        if self.partial_images <= 0:
            return b""
        return self.emit("partial", {"index": event.index, "b64_json": event.b64_json})

    def done_payload(self, images: list[Image], usage: UsageReport, provider: str | None) -> dict[str, Any]:
        return {
            "id": self.generation_id,
            "data": [{"b64_json": image.b64_json} for image in images],
            "usage": image_usage_json(usage),
            "model": self.model,
            "provider": provider,
        }

    def done(self, images: list[Image], usage: UsageReport, provider: str | None) -> bytes:
        return self.emit("done", self.done_payload(images, usage, provider))

    def error(self, code: str, message: str) -> bytes:
        return self.emit("error", {"error": {"code": code, "message": message}})


def _renderer_for_record(record: GenerationRecord, partials: int) -> NativeImageRenderer:
    return NativeImageRenderer(
        generation_id=record.id, model=record.model, created_at=int(record.created_at), partial_images=partials
    )


def _record_usage(record: GenerationRecord) -> UsageReport:
    return UsageReport(prompt=record.usage.prompt_tokens, completion=record.usage.completion_tokens)


def image_done_for_record(record: GenerationRecord, events: Iterable[Event]) -> dict[str, Any]:
    """The native `done` payload of a stored, completed image generation (the same JSON its native
    stream ended with)."""
    images = [e for e in events if isinstance(e, Image)]
    return _renderer_for_record(record, 0).done_payload(images, _record_usage(record), record.provider)


def native_image_frames_for_record(record: GenerationRecord, events: Iterable[Event]) -> bytes:
    """The native image events of a stored, ended image generation: `start`, `progress`, its `partial`
    images, then `done` (completed) or `error` (anything else)."""
    logged = list(events)
    partials = [e for e in logged if isinstance(e, PartialImage)]
    renderer = _renderer_for_record(record, len(partials))
    out = [renderer.start(), renderer.progress(0, "queued")]
    out += [renderer.partial(p) for p in partials]
    if record.status == "completed":
        images = [e for e in logged if isinstance(e, Image)]
        out.append(renderer.progress(100, "completed"))
        out.append(renderer.done(images, _record_usage(record), record.provider))
    else:
        error = record.error or {}
        code = str(error.get("code") or "upstream_error")
        out.append(renderer.error(code, str(error.get("message") or "the image generation did not complete")))
    return b"".join(out)
