"""The `bedrock` kind: Claude on AWS Bedrock, InvokeModelWithResponseStream (UPSTREAMS §2).

Request: the Messages body without `model`/`stream` plus `anthropic_version`, POSTed to
`/model/{id}/invoke-with-response-stream`, SigV4-signed by botocore (signing name `bedrock`,
credentials from botocore's standard chain, resolved off the event loop), or a Bedrock API key as a
bearer token when `api_key_env` is set. Response: AWS eventstream frames decoded by botocore's
`EventStreamBuffer` (CRC checked); `chunk` payloads carry base64 Messages events that the shared
`MessagesEventDecoder` translates; `exception` / `error` frames become `Failed`.
"""

from __future__ import annotations

import base64
import binascii
import os
from typing import Any
from urllib.parse import quote

import orjson
from botocore.eventstream import ChecksumMismatch, EventStreamBuffer, ParserError

from ...config.model import ProviderConfig
from ...errors import ProviderFailure, retriable_status
from ...events import Event, RawFrame
from ...request import GenerationRequest, WireFormat
from ..anthropic.messages import MessagesEventDecoder, error_text, sent_body
from ..anthropic.request import messages_body, wants_json
from ..http.transport import HttpProvider, StreamDecoder, UpstreamHttpRequest, retry_after_seconds, undecodable
from .auth import AwsCredentials, sigv4_headers

BEDROCK_VERSION = "bedrock-2023-05-31"
RETRIABLE_EXCEPTIONS = frozenset(
    {
        "throttlingException",
        "serviceUnavailableException",
        "internalServerException",
        "modelStreamErrorException",
        "modelTimeoutException",
    }
)


def _header(headers: dict[str, Any], name: str) -> str:
    value = headers.get(name)
    if isinstance(value, bytes):
        return value.decode("utf-8", "replace")
    return value if isinstance(value, str) else ""


class BedrockStreamDecoder:
    """Eventstream bytes → canonical events. Frames are CRC-checked by botocore."""

    def __init__(self, provider: str, served_model: str, json_answer: bool = False, passthrough: bool = False) -> None:
        self._buffer = EventStreamBuffer()
        self.events = MessagesEventDecoder(provider, served_model, json_answer)
        self._passthrough = passthrough  # the Messages door: each chunk's event goes back as sent

    def feed(self, chunk: bytes) -> list[Event]:
        if self.events.done:
            return []
        self._buffer.add_data(chunk)
        out: list[Event] = []
        try:
            for message in self._buffer:
                out.extend(self._message(message.headers, message.payload))
                if self.events.done:
                    break
        except ChecksumMismatch:
            out.extend(self.events.fail("bedrock eventstream checksum mismatch", code="upstream_protocol_error"))
        except ParserError as exc:
            out.extend(
                self.events.fail(
                    f"undecodable bedrock eventstream ({type(exc).__name__})", code="upstream_protocol_error"
                )
            )
        return out

    def _message(self, headers: dict[str, Any], payload: bytes) -> list[Event]:
        mtype = _header(headers, ":message-type")
        if mtype == "event":
            if _header(headers, ":event-type") != "chunk":
                self.events.skipped += 1
                return []
            try:
                wrapper = orjson.loads(payload)
                raw = base64.b64decode(wrapper["bytes"], validate=True)
            except (orjson.JSONDecodeError, KeyError, TypeError, binascii.Error):
                return self.events.fail("undecodable bedrock chunk payload", code="upstream_protocol_error")
            try:
                data = orjson.loads(raw)
                name = data.get("type") if isinstance(data, dict) else None
                events = self.events.handle(name if isinstance(name, str) else "", data)
                if self._passthrough and isinstance(data, dict):
                    # an SSE data line cannot hold a newline: a pretty-printed event is re-encoded
                    return [RawFrame(orjson.dumps(data) if b"\n" in raw else raw), *events]
                return events
            except ValueError as exc:  # after the frames before it in this read, which are kept
                return self.events.fail(undecodable(exc), code="upstream_protocol_error")
        if mtype == "exception":
            etype = _header(headers, ":exception-type")
            message: Any = None
            try:
                body = orjson.loads(payload)
                if isinstance(body, dict):
                    message = body.get("message") or body.get("Message") or body.get("originalMessage")
            except orjson.JSONDecodeError:
                pass
            return self.events.fail(error_text(etype or "exception", message), retriable=etype in RETRIABLE_EXCEPTIONS)
        if mtype == "error":
            code = _header(headers, ":error-code")
            return self.events.fail(error_text(code or "error", _header(headers, ":error-message")))
        self.events.skipped += 1
        return []

    def end(self) -> list[Event]:
        return self.events.end()


def bedrock_failure(status: int, headers: dict[str, str], body: bytes, who: str) -> ProviderFailure:
    """Bedrock error answers: JSON `{"message": ...}`, the type in `x-amzn-errortype` (`Type:ns`)."""
    etype = (headers.get("x-amzn-errortype") or "").split(":", 1)[0]
    message: Any = None
    try:
        data = orjson.loads(body)
        if isinstance(data, dict):
            message = data.get("message") or data.get("Message")
    except orjson.JSONDecodeError:
        pass
    text = f"{who} answered HTTP {status}"
    if etype or message:
        text += f" ({error_text(etype, message)})"
    retriable = retriable_status(status)
    return ProviderFailure(
        "invalid_request" if status == 400 else "upstream_error",
        text,
        status=status,
        retriable=retriable,
        retry_after=retry_after_seconds(headers),
    )


def beta_flags(header: str | None) -> list[str]:
    return [flag.strip() for flag in (header or "").split(",") if flag.strip()]


def bedrock_body(request: GenerationRequest) -> dict[str, Any]:
    """InvokeModel's body: the model is in the URL and the stream in the operation, so neither is in
    the body; the Messages door's body goes as sent with its `anthropic-beta` flags as the
    `anthropic_beta` array (Bedrock reads no anthropic-* header), other doors' requests translated."""
    extras = request.sent_as(WireFormat.MESSAGES)
    if extras is None:
        body = messages_body(request, model=None, stream=False)
    else:
        body = {k: v for k, v in sent_body(extras).items() if k not in ("model", "stream")}
        betas = beta_flags(extras.headers.get("anthropic-beta"))
        if betas:
            body["anthropic_beta"] = betas
    body["anthropic_version"] = BEDROCK_VERSION
    return body


class BedrockAdapter:
    def __init__(self, config: ProviderConfig) -> None:
        self.name = config.name
        self.config = config
        self.region = config.region or "us-east-1"
        self.endpoint = (config.endpoint_url or f"https://bedrock-runtime.{self.region}.amazonaws.com").rstrip("/")
        self._credentials = AwsCredentials(config.name)

    def url_for(self, served_model: str) -> str:
        return f"{self.endpoint}/model/{quote(served_model, safe=':')}/invoke-with-response-stream"

    async def build_request(self, request: GenerationRequest, served_model: str) -> UpstreamHttpRequest:
        body = orjson.dumps(bedrock_body(request))
        headers = {"content-type": "application/json", "accept": "application/vnd.amazon.eventstream"}
        headers.update(self.config.headers)
        url = self.url_for(served_model)
        api_key = os.environ.get(self.config.api_key_env) if self.config.api_key_env else None
        if api_key:
            headers["authorization"] = f"Bearer {api_key}"
            return UpstreamHttpRequest("POST", url, headers, body)
        credentials = await self._credentials.frozen()
        region = self.region

        def sign(req: UpstreamHttpRequest) -> None:
            req.headers = sigv4_headers(credentials, region, req.method, req.url, req.body, req.headers)

        return UpstreamHttpRequest("POST", url, headers, body, sign=sign)

    def new_decoder(self, request: GenerationRequest, served_model: str) -> StreamDecoder:
        if request.sent_as(WireFormat.MESSAGES) is not None:
            return BedrockStreamDecoder(self.name, served_model, passthrough=True)
        return BedrockStreamDecoder(self.name, served_model, wants_json(request))

    def map_error(self, status: int, headers: dict[str, str], body: bytes) -> ProviderFailure:
        return bedrock_failure(status, headers, body, self.name)


def bedrock_provider(config: ProviderConfig, connect_timeout_s: float = 10.0) -> HttpProvider:
    return HttpProvider(config.name, config.kind, BedrockAdapter(config), connect_timeout_s, config)
