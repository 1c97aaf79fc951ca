"""The `vertex` kind: Claude on Google Vertex AI, `:streamRawPredict` (UPSTREAMS §3).

The body is the Messages body without `model` (it is in the URL) plus `anthropic_version`; unlike
Bedrock, `stream: true` stays. Auth is `Authorization: Bearer`: a static token from the environment
variable named by `access_token_env`, or google-auth Application Default Credentials, refreshed off
the event loop (and again when expired). The response is the same Messages SSE as the `anthropic`
kind. Errors raised by Vertex before streaming use Google's envelope, possibly wrapped in a list.
"""

from __future__ import annotations

from typing import Any

import orjson

from ...config.model import ProviderConfig
from ...errors import ProviderFailure, retriable_status
from ...request import GenerationRequest, WireFormat
from ..anthropic.messages import AnthropicSSEDecoder, error_text, parse_error_body, sent_body
from ..anthropic.request import messages_body, wants_json
from ..http.transport import HttpProvider, StreamDecoder, UpstreamHttpRequest, retry_after_seconds
from .auth import adc_unless_static, bearer_token

VERTEX_VERSION = "vertex-2023-10-16"


def vertex_base_url(region: str) -> str:
    if region == "global":
        return "https://aiplatform.googleapis.com/v1"
    if region in ("us", "eu"):
        return f"https://aiplatform.{region}.rep.googleapis.com/v1"
    return f"https://{region}-aiplatform.googleapis.com/v1"


def parse_google_error(body: bytes) -> tuple[int | None, str | None, str | None]:
    """(code, status, message) from `{"error": {...}}` or `[{"error": {...}}]`."""
    try:
        data = orjson.loads(body)
    except orjson.JSONDecodeError:
        return None, None, None
    if isinstance(data, list) and data:
        data = data[0]
    err = data.get("error") if isinstance(data, dict) else None
    if not isinstance(err, dict):
        return None, None, None
    code, status, message = err.get("code"), err.get("status"), err.get("message")
    return (
        code if isinstance(code, int) and not isinstance(code, bool) else None,
        status if isinstance(status, str) else None,
        message if isinstance(message, str) else None,
    )


def vertex_failure(status: int, headers: dict[str, str], body: bytes, who: str) -> ProviderFailure:
    code, gstatus, message = parse_google_error(body)
    if code is None and gstatus is None:
        # not Google's envelope: Anthropic's own error body, passed through (e.g. overloaded_error)
        etype, emsg = parse_error_body(body)
        gstatus, message = etype, emsg
    effective = code if code is not None and code >= 400 else status
    text = f"{who} answered HTTP {status}"
    if gstatus or message:
        text += f" ({error_text(gstatus, message)})"
    retriable = retriable_status(effective) or gstatus in ("RESOURCE_EXHAUSTED", "UNAVAILABLE", "INTERNAL")
    return ProviderFailure(
        "invalid_request" if effective == 400 and not retriable else "upstream_error",
        text,
        status=effective,
        retriable=retriable,
        retry_after=retry_after_seconds(headers),
    )


def vertex_body(request: GenerationRequest) -> dict[str, Any]:
    """rawPredict's body: the model is in the URL; the Messages door's body goes as sent."""
    extras = request.sent_as(WireFormat.MESSAGES)
    if extras is None:
        body = messages_body(request, model=None, stream=True)
    else:
        body = {k: v for k, v in sent_body(extras).items() if k != "model"}
        body["stream"] = True
    body["anthropic_version"] = VERTEX_VERSION
    return body


class VertexAdapter:
    def __init__(self, config: ProviderConfig) -> None:
        self.name = config.name
        self.config = config
        self.region = config.region or "global"
        self.base_url = (config.base_url or vertex_base_url(self.region)).rstrip("/")
        self._adc = adc_unless_static(config.access_token_env)

    def url_for(self, project: str, served_model: str) -> str:
        return (
            f"{self.base_url}/projects/{project}/locations/{self.region}"
            f"/publishers/anthropic/models/{served_model}:streamRawPredict"
        )

    async def build_request(self, request: GenerationRequest, served_model: str) -> UpstreamHttpRequest:
        body_obj = vertex_body(request)
        token = await bearer_token(self.name, self.config.access_token_env, self._adc)
        project = self.config.project or (self._adc.project if self._adc else None)
        if not project:
            raise ProviderFailure(
                "upstream_error",
                f"provider {self.name!r}: no Google Cloud project (set 'project' in the config)",
                retriable=True,
            )
        headers = {
            "content-type": "application/json",
            "accept": "text/event-stream",
            **self.config.headers,
            "authorization": f"Bearer {token}",
        }
        sent = request.sent_as(WireFormat.MESSAGES)
        beta = sent.headers.get("anthropic-beta") if sent is not None else None
        if beta:  # Vertex takes the beta flags as Anthropic's header (the version is in the body)
            headers["anthropic-beta"] = beta
        return UpstreamHttpRequest("POST", self.url_for(project, served_model), headers, orjson.dumps(body_obj))

    def new_decoder(self, request: GenerationRequest, served_model: str) -> StreamDecoder:
        if request.sent_as(WireFormat.MESSAGES) is not None:
            return AnthropicSSEDecoder(self.name, served_model, passthrough=True)
        return AnthropicSSEDecoder(self.name, served_model, wants_json(request))

    def map_error(self, status: int, headers: dict[str, str], body: bytes) -> ProviderFailure:
        return vertex_failure(status, headers, body, self.name)


def vertex_provider(config: ProviderConfig, connect_timeout_s: float = 10.0) -> HttpProvider:
    return HttpProvider(config.name, config.kind, VertexAdapter(config), connect_timeout_s, config)
