"""What every embedding provider shares: the `EmbeddingProvider` protocol, its `EmbeddingResult`, and
the HTTP providers' client (`EmbeddingHttp`: one `HttpClient` per provider; the whole body is read,
up to `MAX_RESPONSE_BODY`; upstream error bodies reduced to their message text, capped; headers and
keys never echoed). Each kind's provider lives in its family's package (`openai/`, `aws/`,
`google/`, `local/`).

An embedding call is one request and one answer, so there is no canonical event stream here: a
provider returns an `EmbeddingResult` (vectors + prompt tokens), or raises `ProviderFailure` before
anything reached the client, which lets the gateway try the next route. A provider never sleeps or
times out; `gateway/embedding_relay.py` owns the deadline.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Any, Protocol

import orjson

from ..config.model import ProviderConfig
from ..errors import ProviderFailure
from ..request import EmbeddingInputs
from .http.client import UpstreamHttpError
from .http.transport import (
    MAX_ERROR_BODY,
    UpstreamHttpRequest,
    default_failure,
    http_client_for,
    sanitize,
    send_request,
    with_hint,
)

MAX_RESPONSE_BODY = 256 * 1024 * 1024


@dataclass(slots=True)
class EmbeddingResult:
    """Vectors in input order and the prompt tokens (None: the upstream did not say; the gateway
    estimates). `passthrough` is an OpenAI-compatible upstream's JSON body, forwarded to the client
    untouched (then `vectors` is empty)."""

    vectors: list[list[float]]
    prompt_tokens: int | None
    passthrough: bytes | None = None


class EmbeddingProvider(Protocol):
    name: str
    kind: str

    async def embed(self, inputs: EmbeddingInputs, served_model: str, dimensions: int | None) -> EmbeddingResult: ...

    async def aclose(self) -> None: ...


def unsupported(message: str) -> ProviderFailure:
    """This route cannot serve the request as asked (400 unless another route can)."""
    return ProviderFailure("unsupported_parameter", message, status=400, retriable=False)


def upstream_message(body: bytes) -> str:
    """The upstream's own error text (OpenAI, AWS, Google envelopes), capped; never raw bytes."""
    try:
        data: Any = orjson.loads(body)
    except orjson.JSONDecodeError:
        return "no readable error message"
    if isinstance(data, list) and data:
        data = data[0]
    if isinstance(data, dict):
        err = data.get("error", data)
        if isinstance(err, dict):
            msg = err.get("message") or err.get("Message")
            if isinstance(msg, str):
                return sanitize(msg)
        if isinstance(err, str):
            return sanitize(err)
        msg = data.get("message") or data.get("Message")
        if isinstance(msg, str):
            return sanitize(msg)
    return "no readable error message"


def map_embedding_error(provider: str, status: int, headers: dict[str, str], body: bytes) -> ProviderFailure:
    message = f"{provider}: upstream answered {status}: {upstream_message(body)}"
    if status in (400, 413, 422):
        return ProviderFailure("invalid_request", message, status=400, retriable=False)
    return default_failure(status, headers, message)


class EmbeddingHttp:
    """One HTTP embedding provider's client: a POST and its whole answer, or a `ProviderFailure`."""

    def __init__(self, config: ProviderConfig, connect_timeout_s: float) -> None:
        self.name = config.name
        self.config = config
        self.client = http_client_for(config.name, connect_timeout_s, config)

    async def post(self, url: str, headers: dict[str, str], body: bytes) -> tuple[dict[str, str], bytes]:
        """POST; returns (lower-cased headers, body) of a 2xx answer, else raises `ProviderFailure`."""
        response = await send_request(self.client, UpstreamHttpRequest("POST", url, headers, body))
        limit = MAX_ERROR_BODY if response.status >= 300 else MAX_RESPONSE_BODY
        try:
            data = await response.read(limit + 1)
        except (OSError, UpstreamHttpError) as exc:
            raise ProviderFailure("upstream_error", f"{self.name}: the upstream connection broke: {exc}") from None
        finally:
            response.close()
        resp_headers = response.headers
        if response.status >= 300:
            failure = map_embedding_error(self.name, response.status, resp_headers, data[:MAX_ERROR_BODY])
            raise with_hint(failure, self.config)
        if len(data) > MAX_RESPONSE_BODY:
            raise ProviderFailure(
                "upstream_error", f"{self.name}: the upstream answer exceeds {MAX_RESPONSE_BODY} bytes"
            )
        return resp_headers, data

    async def aclose(self) -> None:
        await self.client.aclose()


def json_body(provider: str, data: bytes) -> Any:
    try:
        return orjson.loads(data)
    except orjson.JSONDecodeError:
        raise ProviderFailure("upstream_error", f"{provider}: the upstream answered with invalid JSON") from None


def vector_of(provider: str, value: Any) -> list[float]:
    if not isinstance(value, list) or not all(isinstance(x, (int, float)) for x in value):
        raise ProviderFailure("upstream_error", f"{provider}: the upstream answer has no embedding vector")
    return [float(x) for x in value]


def env_secret(name: str | None) -> str | None:
    return os.environ.get(name) if name else None
