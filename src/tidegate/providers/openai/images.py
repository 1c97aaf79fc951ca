"""Image generation upstreams: OpenAI-compatible `POST {base_url}/images/generations`.

A pure `HttpAdapter` for the shared transport (`transport.HttpProvider`), so the relay drives image
generations exactly like chat ones (commit point, keep-alives, idle timeout, fallback, cancel).

The door puts the validated image body in `GenerationRequest.raw_body`; its `stream` field says
whether the upstream is asked to stream. A streaming upstream answers SSE (`image_generation.
partial_image`, `image_generation.completed`, or an `error` event), decoded into `Progress` /
`PartialImage` / `Image` / `UsageReport` / `Finished`. A non-streaming upstream answers one JSON body
(`data[].b64_json`, `usage`), decoded at EOF. `Started` travels with the first decoded batch, so an
in-band error before any image still falls back to the next route.
"""

from __future__ import annotations

import os
from typing import Any

import orjson

from ...config.model import ProviderConfig
from ...config.server import ServerConfig
from ...errors import ProviderFailure
from ...events import Event, Failed, Finished, Image, PartialImage, Progress, Started, UsageReport
from ...request import GenerationRequest
from ...sse import SSEDecoder, SSEEvent
from ..embeddings import upstream_message
from ..http.transport import HttpProvider, StreamDecoder, UpstreamHttpRequest, default_failure, undecodable

_IMAGE_FIELDS = ("size", "quality", "background", "output_format", "created_at")


def b64_len(decoded: int) -> int:
    return (decoded + 2) // 3 * 4


def decoded_len(b64: str) -> int:
    """Decoded bytes of base64 text (its `=` padding counted out), without decoding it."""
    return len(b64) * 3 // 4 - b64[-2:].count("=")


def usage_report(usage: Any) -> UsageReport | None:
    """OpenAI image usage (`input_tokens`, `output_tokens`) → canonical usage, when present."""
    if not isinstance(usage, dict):
        return None
    prompt, completion = usage.get("input_tokens"), usage.get("output_tokens")
    if not isinstance(prompt, int) or not isinstance(completion, int):
        return None
    return UsageReport(prompt=prompt, completion=completion)


def _image_extra(data: dict[str, Any]) -> dict[str, object]:
    return {k: data[k] for k in _IMAGE_FIELDS if k in data and data[k] is not None}


class ImageStreamDecoder:
    """SSE from a streaming image upstream → canonical events (stateful, pure)."""

    def __init__(self, provider: str, served_model: str, partial_images: int, max_partial: int, max_image: int) -> None:
        cap = b64_len(max(max_partial, max_image)) + 64 * 1024
        self._sse = SSEDecoder(max_line_bytes=cap, max_event_bytes=cap)
        self._provider = provider
        self._served_model = served_model
        self._partials = max(1, partial_images)
        self._max_partial = max_partial
        self._max_image = max_image
        self._started = False
        self._completed = False
        self._next_partial = 0

    def feed(self, chunk: bytes) -> list[Event]:
        out: list[Event] = []
        batch, overflow = self._sse.feed_to_error(chunk)  # the whole events before an over-cap line go first
        for ev in batch:
            try:
                decoded = self._event(ev)
            except ValueError as exc:  # after the events before it, however the bytes were split
                decoded = [Failed("upstream_protocol_error", undecodable(exc), self._provider)]
            out.extend(decoded)
            if any(isinstance(e, Failed) for e in decoded):
                overflow = None
                break
        if overflow is not None:
            out.append(Failed("upstream_protocol_error", undecodable(overflow), self._provider))
        if out and not self._started:
            self._started = True
            out.insert(0, Started(self._provider, self._served_model))
        return out

    def _event(self, ev: SSEEvent) -> list[Event]:
        if ev.data.strip() == "[DONE]" or self._completed:
            return []
        data = orjson.loads(ev.data)
        if not isinstance(data, dict):
            raise ValueError("an image stream event is not a JSON object")
        kind = str(data.get("type") or ev.event)
        if kind == "error" or "error" in data:
            return [Failed("upstream_error", f"{self._provider}: {upstream_message(ev.data.encode())}", self._provider)]
        if kind.endswith(".partial_image"):
            b64 = data.get("b64_json")
            if not isinstance(b64, str):
                raise ValueError("a partial image event has no b64_json")
            index = data.get("partial_image_index")
            index = index if isinstance(index, int) else self._next_partial
            self._next_partial = index + 1
            if decoded_len(b64) > self._max_partial:
                return [
                    Failed(
                        "upstream_protocol_error",
                        f"partial image {index} is {decoded_len(b64)} bytes, over the cap of {self._max_partial}",
                        self._provider,
                    )
                ]
            percent = min(95, round(90 * (index + 1) / (self._partials + 1)))
            return [Progress(percent, "partial_image"), PartialImage(index, b64)]
        if kind.endswith(".completed"):
            b64 = data.get("b64_json")
            if not isinstance(b64, str):
                raise ValueError("the completed event has no b64_json")
            if decoded_len(b64) > self._max_image:
                size = decoded_len(b64)
                message = f"the final image is {size} bytes, over the cap of {self._max_image}"
                return [Failed("upstream_protocol_error", message, self._provider)]
            self._completed = True
            out: list[Event] = [Progress(100, "completed"), Image(b64, None, _image_extra(data))]
            usage = usage_report(data.get("usage"))
            if usage is not None:
                out.append(usage)
            out.append(Finished("stop"))
            return out
        return []  # unknown event types are skipped

    def end(self) -> list[Event]:
        if self._completed:
            return []
        return [
            Failed("upstream_error", "the upstream ended the image stream before the completed image", self._provider)
        ]


class ImageJSONDecoder:
    """A non-streaming image answer: buffered (capped) and decoded at EOF."""

    def __init__(self, provider: str, served_model: str, n: int, max_image: int) -> None:
        self._provider = provider
        self._served_model = served_model
        self._max_image = max_image
        self._cap = b64_len(max_image) * max(1, n) + 1024 * 1024
        self._buf = bytearray()

    def feed(self, chunk: bytes) -> list[Event]:
        self._buf += chunk
        if len(self._buf) > self._cap:
            raise ValueError(f"the image answer exceeds {self._cap} bytes")
        return []

    def end(self) -> list[Event]:
        data = orjson.loads(self._buf)
        items = data.get("data") if isinstance(data, dict) else None
        if not isinstance(items, list) or not items:
            return [Failed("upstream_error", "the upstream answered without images", self._provider)]
        out: list[Event] = [Started(self._provider, self._served_model), Progress(100, "completed")]
        extra = _image_extra(data)
        for index, item in enumerate(items):
            b64 = item.get("b64_json") if isinstance(item, dict) else None
            if not isinstance(b64, str):
                return [Failed("upstream_error", "the upstream answered without b64_json images", self._provider)]
            if decoded_len(b64) > self._max_image:
                size = decoded_len(b64)
                message = f"image {index} is {size} bytes, over the cap of {self._max_image}"
                return [Failed("upstream_protocol_error", message, self._provider)]
            revised = item.get("revised_prompt")
            out.append(Image(b64, revised if isinstance(revised, str) else None, extra))
        usage = usage_report(data.get("usage"))
        if usage is not None:
            out.append(usage)
        out.append(Finished("stop"))
        return out


class OpenAIImageAdapter:
    """`kind = "openai"` image upstreams (gpt-image style). The size caps are decoded bytes of one
    partial / final image (`[server] max_partial_image_bytes`, `max_image_bytes`)."""

    def __init__(self, config: ProviderConfig, max_partial_image_bytes: int, max_image_bytes: int) -> None:
        self.name = config.name
        self._config = config
        self.max_partial = max_partial_image_bytes
        self.max_image = max_image_bytes

    async def build_request(self, request: GenerationRequest, served_model: str) -> UpstreamHttpRequest:
        body = {k: v for k, v in request.raw_body.items() if v is not None}
        body["model"] = served_model
        streaming = bool(body.get("stream"))
        if not streaming:
            body.pop("stream", None)
            body.pop("partial_images", None)
        headers = {
            "content-type": "application/json",
            "accept": "text/event-stream" if streaming else "application/json",
            **self._config.headers,
        }
        key = os.environ.get(self._config.api_key_env) if self._config.api_key_env else None
        if key:
            headers["authorization"] = f"Bearer {key}"
        return UpstreamHttpRequest("POST", f"{self._config.base_url}/images/generations", headers, orjson.dumps(body))

    def new_decoder(self, request: GenerationRequest, served_model: str) -> StreamDecoder:
        body = request.raw_body
        if body.get("stream"):
            partials = body.get("partial_images")
            return ImageStreamDecoder(
                self.name, served_model, partials if isinstance(partials, int) else 0, self.max_partial, self.max_image
            )
        n = body.get("n")
        return ImageJSONDecoder(self.name, served_model, n if isinstance(n, int) else 1, self.max_image)

    def map_error(self, status: int, headers: dict[str, str], body: bytes) -> ProviderFailure:
        message = f"{self.name}: upstream answered {status}: {upstream_message(body)}"
        if status in (400, 413, 422):
            return ProviderFailure("invalid_request", message, status=400, retriable=False)
        return default_failure(status, headers, message)


def openai_image_provider(config: ProviderConfig, server: ServerConfig) -> HttpProvider:
    """An `openai` provider's images (the image kinds are in providers/kinds.py)."""
    adapter = OpenAIImageAdapter(config, server.max_partial_image_bytes, server.max_image_bytes)
    return HttpProvider(config.name, "openai", adapter, server.connect_timeout_s, config)
