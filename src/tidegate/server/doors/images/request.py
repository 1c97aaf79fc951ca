"""Validation of image generation bodies (docs/api-operations.md §8), before any upstream call: 400 naming the field."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from ....errors import InvalidRequest, quote
from ...validate import opt_bool, opt_int, opt_str, require_object, require_str

SIZES = ("auto", "256x256", "512x512", "1024x1024", "1536x1024", "1024x1536", "1792x1024", "1024x1792")
QUALITIES = ("auto", "low", "medium", "high", "standard", "hd")
OUTPUT_FORMATS = ("png", "jpeg", "webp")
BACKGROUNDS = ("auto", "transparent", "opaque")
MODERATIONS = ("auto", "low")
MAX_PROMPT_CHARS = 32_000  # gpt-image's own limit


@dataclass(frozen=True, slots=True)
class ImageRequest:
    model: str
    prompt: str
    n: int
    size: str
    quality: str
    background: str
    output_format: str
    partial_images: int
    stream: bool
    user: str | None = None
    moderation: str | None = None
    output_compression: int | None = None

    def upstream_body(self, upstream_stream: bool) -> dict[str, Any]:
        """The body the upstream gets (the provider sets `model`). Defaults tidegate applied itself
        (`auto`) are not sent, so an upstream keeps its own defaults."""
        body: dict[str, Any] = {"prompt": self.prompt, "n": self.n}
        for name in ("size", "quality", "background"):
            if getattr(self, name) != "auto":
                body[name] = getattr(self, name)
        if self.output_format != "png":
            body["output_format"] = self.output_format
        for name in ("user", "moderation", "output_compression"):
            if getattr(self, name) is not None:
                body[name] = getattr(self, name)
        if upstream_stream:
            body["stream"] = True
            body["partial_images"] = self.partial_images
        return body


def _choice(body: dict[str, Any], name: str, allowed: tuple[str, ...], default: str) -> str:
    value = body.get(name)
    if value is None:
        return default
    if not isinstance(value, str) or value not in allowed:
        raise InvalidRequest(f"'{name}' must be one of {', '.join(allowed)}, got {quote(value)}")
    return value


def parse_image_request(body: Any, *, default_stream: bool) -> ImageRequest:
    body = require_object(body)
    model = require_str(body, "model")
    prompt = require_str(body, "prompt")
    if len(prompt) > MAX_PROMPT_CHARS:
        raise InvalidRequest(f"'prompt' is {len(prompt)} characters; at most {MAX_PROMPT_CHARS}")
    stream = opt_bool(body, "stream", default_stream)
    n = opt_int(body, "n", lo=1, hi=10)
    if n is None:
        n = 1
    if stream and n != 1:
        raise InvalidRequest(f"'n' must be 1 when 'stream' is true, got {n}")
    partial_images = opt_int(body, "partial_images", lo=0, hi=3) or 0
    response_format = opt_str(body, "response_format")
    if response_format not in (None, "b64_json"):
        raise InvalidRequest("'response_format' must be 'b64_json': tidegate returns images as base64")
    moderation = body.get("moderation")
    if moderation is not None:
        moderation = _choice(body, "moderation", MODERATIONS, "auto")
    return ImageRequest(
        model=model,
        prompt=prompt,
        n=n,
        size=_choice(body, "size", SIZES, "auto"),
        quality=_choice(body, "quality", QUALITIES, "auto"),
        background=_choice(body, "background", BACKGROUNDS, "auto"),
        output_format=_choice(body, "output_format", OUTPUT_FORMATS, "png"),
        partial_images=partial_images,
        stream=stream,
        user=opt_str(body, "user"),
        moderation=moderation,
        output_compression=opt_int(body, "output_compression", lo=0, hi=100),
    )
