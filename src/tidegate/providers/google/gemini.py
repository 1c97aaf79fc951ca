"""The `gemini` kind: Gemini's `streamGenerateContent?alt=sse`, on Google AI or on Vertex AI.

Google AI: `{base_url}/models/{model}:streamGenerateContent?alt=sse` (`base_url` includes the version,
default `https://generativelanguage.googleapis.com/v1beta`), the key in `x-goog-api-key`. Vertex AI
(when the provider sets `project`): `{base}/projects/{p}/locations/{r}/publishers/google/models/{m}
:streamGenerateContent?alt=sse`, `Authorization: Bearer` from `access_token_env` or ADC (as the
`vertex` kind).

Each SSE `data:` is a whole `GenerateContentResponse` (ai.google.dev/api, "Generating content"):
`candidates[0].content.parts` (text; `thought: true` text is reasoning; `thoughtSignature`;
`functionCall {id?, name, args}` whole, never split), `candidates[0].finishReason`, `usageMetadata`
(`promptTokenCount` includes `cachedContentTokenCount`; `candidatesTokenCount` excludes
`thoughtsTokenCount`), `promptFeedback.blockReason` when the prompt itself was blocked, `modelVersion`,
`responseId`. The stream has no terminal event: the chunk with `finishReason` ends the answer, and
a stream that ends without one is a failure. A request from the Gemini door (server/gemini_door.py)
goes as its client sent it, and each chunk's bytes come back first (`RawFrame`, written untouched).
"""

from __future__ import annotations

import json
import os
from typing import Any

import orjson

from ...config.model import ProviderConfig
from ...errors import ProviderFailure
from ...events import (
    Event,
    Failed,
    FailureCode,
    FinishReason,
    RawFrame,
    ReasoningDelta,
    Started,
    TextDelta,
    ToolCallDelta,
    UsageReport,
)
from ...events import Finished as FinishedEvent
from ...request import GenerationRequest, WireFormat
from ...sse import SSEDecoder
from ..http.transport import HttpProvider, StreamDecoder, UpstreamHttpRequest, sanitize, undecodable
from .auth import adc_unless_static, bearer_token
from .gemini_request import gemini_body
from .vertex import vertex_base_url, vertex_failure

GOOGLE_AI_BASE_URL = "https://generativelanguage.googleapis.com/v1beta"
FINISH_REASONS: dict[str, FinishReason] = {
    "STOP": "stop",
    "MAX_TOKENS": "length",
    "SAFETY": "content_filter",
    "RECITATION": "content_filter",
    "BLOCKLIST": "content_filter",
    "PROHIBITED_CONTENT": "content_filter",
    "SPII": "content_filter",
    "IMAGE_SAFETY": "content_filter",
    "LANGUAGE": "content_filter",
}
# finish reasons that say the answer is broken, not finished
FAILED_REASONS = frozenset({"MALFORMED_FUNCTION_CALL", "UNEXPECTED_TOOL_CALL", "FINISH_REASON_UNSPECIFIED"})


def _int(value: Any) -> int:
    return value if isinstance(value, int) and not isinstance(value, bool) else 0


class GeminiEventDecoder:
    """Stateful: Gemini SSE bytes → canonical events (`Finished` at the chunk with a finishReason)."""

    def __init__(self, provider: str, served_model: str, raw: bool = False) -> None:
        self.provider = provider
        self.served_model = served_model
        self.raw = raw  # the Gemini door's passthrough: each chunk's bytes go first (`RawFrame`)
        self._sse = SSEDecoder()
        self._calls = 0
        self._usage: dict[str, Any] | None = None
        self.started = False
        self.done = False

    def feed(self, chunk: bytes) -> list[Event]:
        batch, overflow = self._sse.feed_to_error(chunk)
        out: list[Event] = []
        for ev in batch:
            if self.done:
                break
            try:
                data = orjson.loads(ev.data)
                if self.raw and not (isinstance(data, dict) and "error" in data):  # (an error: the door's own ending)
                    out.append(RawFrame(ev.data.encode()))
                out.extend(self._handle(data))
            except ValueError as exc:
                if not out:
                    raise
                out.extend(self._fail(undecodable(exc), "upstream_protocol_error"))
        if overflow is not None and not self.done:
            out.extend(self._fail(str(overflow), "upstream_protocol_error"))
        return out

    def end(self) -> list[Event]:
        if self.done:
            return []
        return self._fail("the upstream stream ended without a finishReason", "upstream_error")

    def _fail(self, message: str, code: FailureCode, retriable: bool = True) -> list[Event]:
        self.done = True
        return [Failed(code, message, self.provider, retriable)]

    def _handle(self, data: Any) -> list[Event]:
        if not isinstance(data, dict):
            raise ValueError("a stream chunk is not a JSON object")
        err = data.get("error")
        if isinstance(err, dict):  # an error sent in the stream
            status, message = sanitize(err.get("status"), limit=60), sanitize(err.get("message"))
            retriable = err.get("status") in ("RESOURCE_EXHAUSTED", "UNAVAILABLE", "INTERNAL", "DEADLINE_EXCEEDED")
            return self._fail(
                ": ".join(p for p in (status, message) if p) or "the upstream reported an error",
                "upstream_error",
                retriable,
            )
        out: list[Event] = []
        if not self.started:
            self.started = True
            model = data.get("modelVersion")
            rid = data.get("responseId")
            served = model if isinstance(model, str) and model else self.served_model
            out.append(Started(self.provider, served, rid if isinstance(rid, str) else None))
        if isinstance(data.get("usageMetadata"), dict):
            self._usage = data["usageMetadata"]  # cumulative: the last one counts
        candidates = data.get("candidates")
        candidate = (
            candidates[0] if isinstance(candidates, list) and candidates and isinstance(candidates[0], dict) else None
        )
        if candidate is None:
            feedback = data.get("promptFeedback")
            if isinstance(feedback, dict) and feedback.get("blockReason"):  # the prompt itself was blocked
                return [*out, *self._finish("content_filter")]
            return out
        content = candidate.get("content")
        parts = content.get("parts") if isinstance(content, dict) else None
        for part in parts if isinstance(parts, list) else []:
            if isinstance(part, dict):
                out.extend(self._part(part))
        reason = candidate.get("finishReason")
        if isinstance(reason, str) and reason:
            if reason in FAILED_REASONS:
                message = sanitize(candidate.get("finishMessage")) or reason
                return [*out, *self._fail(f"the model's answer ended with {reason}: {message}", "upstream_error")]
            finish = FINISH_REASONS.get(reason, "stop")
            if finish == "stop" and self._calls:
                finish = "tool_calls"
            out.extend(self._finish(finish))
        return out

    def _part(self, part: dict[str, Any]) -> list[Event]:
        out: list[Event] = []
        signature = part.get("thoughtSignature")  # it closes the thinking before this part: it goes first
        if isinstance(signature, str) and signature:
            out.append(ReasoningDelta("", signature=signature))
        text = part.get("text")
        if isinstance(text, str) and text:
            out.append(ReasoningDelta(text) if part.get("thought") is True else TextDelta(text))
        call = part.get("functionCall")
        if isinstance(call, dict):
            index = self._calls
            self._calls += 1
            cid = call.get("id")
            args = call.get("args") if isinstance(call.get("args"), dict) else {}
            out.append(
                ToolCallDelta(
                    index,
                    json.dumps(args, ensure_ascii=False),  # Gemini sends an object: written as OpenAI SDKs do
                    id=cid if isinstance(cid, str) and cid else f"call_{index}",
                    name=str(call.get("name") or ""),
                )
            )
        return out

    def _finish(self, reason: FinishReason) -> list[Event]:
        self.done = True
        out: list[Event] = []
        u = self._usage
        if u is not None:
            thoughts = _int(u.get("thoughtsTokenCount"))
            cached = u.get("cachedContentTokenCount")
            out.append(
                UsageReport(
                    prompt=_int(u.get("promptTokenCount")) + _int(u.get("toolUsePromptTokenCount")),
                    completion=_int(u.get("candidatesTokenCount")) + thoughts,
                    reasoning=thoughts or None,
                    cached=_int(cached) if cached is not None else None,
                )
            )
        out.append(FinishedEvent(reason))
        return out


class GeminiAdapter:
    def __init__(self, config: ProviderConfig) -> None:
        self.name = config.name
        self.config = config
        self.vertex = config.project is not None
        if self.vertex:
            self.region = config.region or "global"
            self.base_url = (config.base_url or vertex_base_url(self.region)).rstrip("/")
        else:
            self.base_url = (config.base_url or GOOGLE_AI_BASE_URL).rstrip("/")
        self._adc = adc_unless_static(config.access_token_env) if self.vertex else None

    def url_for(self, served_model: str) -> str:
        if self.vertex:
            prefix = f"{self.base_url}/projects/{self.config.project}/locations/{self.region}/publishers/google"
        else:
            prefix = self.base_url
        return f"{prefix}/models/{served_model}:streamGenerateContent?alt=sse"

    async def _auth(self) -> dict[str, str]:
        if self.vertex:
            return {"authorization": f"Bearer {await bearer_token(self.name, self.config.access_token_env, self._adc)}"}
        var = self.config.api_key_env or "GEMINI_API_KEY"
        value = os.environ.get(var)
        if not value:
            raise ProviderFailure("upstream_error", f"provider {self.name!r}: environment variable {var} is not set")
        return {"x-goog-api-key": value}

    async def build_request(self, request: GenerationRequest, served_model: str) -> UpstreamHttpRequest:
        headers = {
            "content-type": "application/json",
            "accept": "text/event-stream",
            **self.config.headers,
            **await self._auth(),
        }
        sent = request.sent_as(WireFormat.GEMINI)  # the Gemini door's body goes as sent (docs/agents.md)
        body = sent.body if sent is not None else gemini_body(request)
        return UpstreamHttpRequest("POST", self.url_for(served_model), headers, orjson.dumps(body))

    def new_decoder(self, request: GenerationRequest, served_model: str) -> StreamDecoder:
        raw = request.sent_as(WireFormat.GEMINI) is not None
        return GeminiEventDecoder(self.name, served_model, raw=raw)

    def map_error(self, status: int, headers: dict[str, str], body: bytes) -> ProviderFailure:
        return vertex_failure(status, headers, body, self.name)  # Google's error envelope, both hosts


def gemini_provider(config: ProviderConfig, connect_timeout_s: float = 10.0) -> HttpProvider:
    return HttpProvider(config.name, config.kind, GeminiAdapter(config), connect_timeout_s, config)
