"""Image renderers: frames parse with tidegate's SSE decoder and validate against the SDK's types."""

from __future__ import annotations

import orjson
import pytest
from openai.types import ImageGenCompletedEvent, ImageGenPartialImageEvent, ImagesResponse

from tidegate.events import Image, PartialImage, UsageReport
from tidegate.render.images import NativeImageRenderer, OpenAIImageStreamRenderer, image_usage_json, images_json
from tidegate.sse import SSEDecoder, SSEEvent, encode_comment

USAGE = UsageReport(prompt=12, completion=300)


def _decode(data: bytes) -> list[SSEEvent]:
    decoder = SSEDecoder()
    events = decoder.feed(data)
    assert decoder.pending_bytes == 0
    return events


def _stream_renderer(first_event_id: int = 0) -> OpenAIImageStreamRenderer:
    return OpenAIImageStreamRenderer(
        created_at=1700000000,
        size="1024x1024",
        quality="auto",
        background="auto",
        output_format="webp",
        first_event_id=first_event_id,
    )


def test_openai_stream_events_validate_against_sdk_types() -> None:
    r = _stream_renderer()
    raw = r.partial(PartialImage(0, "AAAA")) + r.partial(PartialImage(1, "BBBB"))
    raw += r.completed(Image("CCCC", None, {"size": "1536x1024", "quality": "high", "created_at": 1700000009}), USAGE)
    events = _decode(raw)
    assert [e.id for e in events] == ["0", "1", "2"]
    assert [e.event for e in events] == [
        "image_generation.partial_image",
        "image_generation.partial_image",
        "image_generation.completed",
    ]
    p0 = ImageGenPartialImageEvent.model_validate(orjson.loads(events[0].data))
    assert p0.partial_image_index == 0 and p0.b64_json == "AAAA" and p0.output_format == "webp"
    assert p0.created_at == 1700000000 and p0.size == "1024x1024" and p0.background == "auto"
    done = ImageGenCompletedEvent.model_validate(orjson.loads(events[2].data))
    assert (
        done.size == "1536x1024" and done.quality == "high" and done.created_at == 1700000009
    )  # upstream's values win
    assert done.usage.input_tokens == 12 and done.usage.output_tokens == 300 and done.usage.total_tokens == 312
    assert done.usage.input_tokens_details.text_tokens == 12 and done.usage.input_tokens_details.image_tokens == 0


def test_openai_stream_error_event_shape_and_ids_continue() -> None:
    r = _stream_renderer(first_event_id=5)
    raw = r.partial(PartialImage(0, "AAAA")) + r.error("upstream_timeout", "no data for 90 s")
    events = _decode(raw)
    assert [e.id for e in events] == ["5", "6"]
    assert events[1].event == "error"
    assert orjson.loads(events[1].data) == {
        "type": "error",
        "error": {"code": "upstream_timeout", "message": "no data for 90 s"},
    }


def test_keepalive_is_a_comment() -> None:
    frame = encode_comment("TIDEGATE PROCESSING")
    assert frame == b": TIDEGATE PROCESSING\n"
    assert _decode(frame) == []


def test_images_json_validates_as_images_response() -> None:
    body = images_json(
        created=1700000000,
        images=[Image("AAAA", "a revised prompt", {"size": "1024x1024", "quality": "low"}), Image("BBBB")],
        usage=USAGE,
        output_format="png",
    )
    parsed = ImagesResponse.model_validate(body)
    assert parsed.data is not None and [d.b64_json for d in parsed.data] == ["AAAA", "BBBB"]
    assert parsed.data[0].revised_prompt == "a revised prompt" and parsed.data[1].revised_prompt is None
    assert parsed.size == "1024x1024" and parsed.quality == "low" and parsed.output_format == "png"
    assert parsed.usage is not None and parsed.usage.total_tokens == 312
    assert "usage" not in images_json(created=1, images=[Image("A")], usage=None, output_format="png")


def _native(partial_images: int = 2) -> NativeImageRenderer:
    return NativeImageRenderer(
        generation_id="01J0000000000000000000000A", model="m/x", created_at=7, partial_images=partial_images
    )


def test_native_event_sequence() -> None:
    r = _native()
    raw = r.start() + r.progress(0, "queued") + r.progress(30, "partial_image") + r.partial(PartialImage(0, "AAAA"))
    raw += r.progress(100, "completed") + r.done([Image("ZZZZ")], USAGE, "emu")
    events = _decode(raw)
    assert [e.event for e in events] == ["start", "progress", "progress", "partial", "progress", "done"]
    assert [e.id for e in events] == [str(i) for i in range(6)]
    assert orjson.loads(events[0].data) == {"id": "01J0000000000000000000000A", "model": "m/x", "created_at": 7}
    assert orjson.loads(events[3].data) == {"index": 0, "b64_json": "AAAA"}
    done = orjson.loads(events[5].data)
    assert done == {
        "id": "01J0000000000000000000000A",
        "data": [{"b64_json": "ZZZZ"}],
        "usage": image_usage_json(USAGE),
        "model": "m/x",
        "provider": "emu",
    }


@pytest.mark.parametrize(
    ("asked", "sent"),
    [([0, 40, 20, 60, 150, 90], [0, 40, 40, 60, 100, 100]), ([-5, 3], [0, 3])],
)
def test_native_progress_never_decreases_and_stays_in_range(asked: list[int], sent: list[int]) -> None:
    r = _native()
    raw = b"".join(r.progress(p, "generating") for p in asked)
    assert [orjson.loads(e.data)["percent"] for e in _decode(raw)] == sent


def test_native_partial_only_when_asked_and_error_shape() -> None:
    r = _native(partial_images=0)
    assert r.partial(PartialImage(0, "AAAA")) == b""
    events = _decode(r.start() + r.error("cancelled", "the generation was cancelled"))
    assert [e.event for e in events] == ["start", "error"] and events[1].id == "1"
    assert orjson.loads(events[1].data) == {"error": {"code": "cancelled", "message": "the generation was cancelled"}}
