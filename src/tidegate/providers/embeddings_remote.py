"""HTTP embedding providers: `openai` (passthrough), `bedrock` (Titan / Cohere via InvokeModel, SigV4)
and `vertex` (`:predict` for Google text-embedding models).

Request building and response parsing are pure functions; `_EmbeddingHttp` does the I/O (one
`HttpClient` per provider; the whole body is read, up to `MAX_RESPONSE_BODY`). Upstream error bodies
are reduced to their message text, capped; headers and keys are never echoed.
"""

from __future__ import annotations

import asyncio
import os
from typing import Any
from urllib.parse import quote

import orjson

from ..config.model import ProviderConfig
from ..errors import ProviderFailure
from ..request import EmbeddingInputs
from .aws_auth import AwsCredentials, sigv4_headers
from .embeddings import EmbeddingResult, unsupported
from .google_auth import adc_unless_static, bearer_token
from .http_client import UpstreamHttpError
from .transport import (
    MAX_ERROR_BODY,
    UpstreamHttpRequest,
    default_failure,
    http_client_for,
    sanitize,
    send_request,
    with_hint,
)
from .vertex import vertex_base_url

MAX_RESPONSE_BODY = 256 * 1024 * 1024
TITAN_V2_DIMENSIONS = (256, 512, 1024)
COHERE_BATCH = 96
VERTEX_BATCH = 250
TITAN_CONCURRENCY = 8


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


class _EmbeddingHttp:
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


def _json(provider: str, data: bytes) -> Any:
    try:
        return orjson.loads(data)
    except orjson.JSONDecodeError:
        raise ProviderFailure("upstream_error", f"{provider}: the upstream answered with invalid JSON") from None


def _vector(provider: str, value: Any) -> list[float]:
    if not isinstance(value, list) or not all(isinstance(x, (int, float)) for x in value):
        raise ProviderFailure("upstream_error", f"{provider}: the upstream answer has no embedding vector")
    return [float(x) for x in value]


def _env_secret(name: str | None) -> str | None:
    return os.environ.get(name) if name else None


# --- openai ---------------------------------------------------------------------------------------


def parse_openai_embeddings(provider: str, data: bytes, inputs: EmbeddingInputs) -> EmbeddingResult:
    body = _json(provider, data)
    items = body.get("data") if isinstance(body, dict) else None
    if not isinstance(items, list) or len(items) != inputs.count:
        raise ProviderFailure("upstream_error", f"{provider}: the upstream answer does not carry one vector per input")
    usage = body.get("usage")
    prompt = usage.get("prompt_tokens") if isinstance(usage, dict) else None
    if isinstance(prompt, int) and not isinstance(prompt, bool):
        return EmbeddingResult(vectors=[], prompt_tokens=prompt, passthrough=data)
    return EmbeddingResult(vectors=[], prompt_tokens=None, passthrough=data)


class OpenAIEmbeddingProvider:
    """`kind = "openai"`: POST `{base_url}/embeddings` with the client's body (model replaced); the
    upstream's JSON answer goes back to the client untouched."""

    kind = "openai"

    def __init__(self, config: ProviderConfig, connect_timeout_s: float) -> None:
        self.name = config.name
        self._config = config
        self._http = _EmbeddingHttp(config, connect_timeout_s)

    async def embed(self, inputs: EmbeddingInputs, served_model: str, dimensions: int | None) -> EmbeddingResult:
        body = dict(inputs.raw_body)
        body["model"] = served_model
        headers = {"content-type": "application/json", "accept": "application/json", **self._config.headers}
        key = _env_secret(self._config.api_key_env)
        if key:
            headers["authorization"] = f"Bearer {key}"
        url = f"{self._config.base_url}/embeddings"
        _, data = await self._http.post(url, headers, orjson.dumps(body))
        return parse_openai_embeddings(self.name, data, inputs)

    async def aclose(self) -> None:
        await self._http.aclose()


# --- bedrock --------------------------------------------------------------------------------------


def bedrock_family(model: str) -> str:
    if "amazon.titan-embed" in model:
        return "titan"
    if "cohere.embed" in model:
        return "cohere"
    raise unsupported(
        f"'model': {model!r} is not a Bedrock embedding model tidegate speaks (amazon.titan-embed-*, cohere.embed-*)"
    )


def titan_body(model: str, text: str, dimensions: int | None) -> dict[str, Any]:
    body: dict[str, Any] = {"inputText": text}
    if dimensions is not None:
        if "titan-embed-text-v2" not in model:
            raise unsupported(f"'dimensions' is not supported by {model} (only Titan Text Embeddings V2 takes it)")
        if dimensions not in TITAN_V2_DIMENSIONS:
            raise unsupported(f"'dimensions' must be one of 256, 512, 1024 for {model}, got {dimensions}")
        body["dimensions"] = dimensions
    return body


def cohere_body(texts: list[str]) -> dict[str, Any]:
    return {"texts": texts, "input_type": "search_document", "truncate": "NONE"}


def parse_titan(provider: str, data: bytes) -> tuple[list[float], int | None]:
    body = _json(provider, data)
    if not isinstance(body, dict):
        raise ProviderFailure("upstream_error", f"{provider}: unexpected Titan answer")
    count = body.get("inputTextTokenCount")
    return _vector(provider, body.get("embedding")), count if isinstance(count, int) else None


def parse_cohere(provider: str, data: bytes, expected: int) -> list[list[float]]:
    body = _json(provider, data)
    emb = body.get("embeddings") if isinstance(body, dict) else None
    if isinstance(emb, dict):  # response_type "embeddings_by_type"
        emb = emb.get("float")
    if not isinstance(emb, list) or len(emb) != expected:
        raise ProviderFailure("upstream_error", f"{provider}: the Cohere answer does not carry one vector per text")
    return [_vector(provider, v) for v in emb]


class BedrockEmbeddingProvider:
    """`kind = "bedrock"`: `POST {endpoint}/model/{id}/invoke`, SigV4-signed with signing name `bedrock`."""

    kind = "bedrock"

    def __init__(self, config: ProviderConfig, connect_timeout_s: float) -> None:
        self.name = config.name
        self._config = config
        self._region = config.region or "us-east-1"
        self._endpoint = config.endpoint_url or f"https://bedrock-runtime.{self._region}.amazonaws.com"
        self._http = _EmbeddingHttp(config, connect_timeout_s)
        self._credentials = AwsCredentials(config.name)

    async def _invoke(self, model: str, payload: dict[str, Any]) -> tuple[dict[str, str], bytes]:
        url = f"{self._endpoint}/model/{quote(model, safe=':')}/invoke"
        body = orjson.dumps(payload)
        credentials = await self._credentials.frozen()
        headers = {"content-type": "application/json", "accept": "application/json"}
        return await self._http.post(url, sigv4_headers(credentials, self._region, "POST", url, body, headers), body)

    async def embed(self, inputs: EmbeddingInputs, served_model: str, dimensions: int | None) -> EmbeddingResult:
        family = bedrock_family(served_model)
        if inputs.texts is None:
            raise unsupported(f"'input': token arrays are not supported by {served_model}; send strings")
        texts = inputs.texts
        if family == "titan":
            bodies = [titan_body(served_model, t, dimensions) for t in texts]
            sem = asyncio.Semaphore(TITAN_CONCURRENCY)

            async def one(payload: dict[str, Any]) -> tuple[list[float], int | None]:
                async with sem:
                    _, data = await self._invoke(served_model, payload)
                return parse_titan(self.name, data)

            results = await asyncio.gather(*(one(b) for b in bodies))
            vectors = [v for v, _ in results]
            counted = [c for _, c in results]
            if all(c is not None for c in counted):
                return EmbeddingResult(vectors, sum(c or 0 for c in counted))
            return EmbeddingResult(vectors, None)
        if dimensions is not None:
            raise unsupported(f"'dimensions' is not supported by {served_model}")
        vectors = []
        tokens: int | None = 0
        for start in range(0, len(texts), COHERE_BATCH):
            batch = texts[start : start + COHERE_BATCH]
            headers, data = await self._invoke(served_model, cohere_body(batch))
            vectors.extend(parse_cohere(self.name, data, len(batch)))
            header_count = headers.get("x-amzn-bedrock-input-token-count", "")
            tokens = tokens + int(header_count) if tokens is not None and header_count.isdigit() else None
        return EmbeddingResult(vectors, tokens)

    async def aclose(self) -> None:
        await self._http.aclose()


# --- vertex ---------------------------------------------------------------------------------------


def vertex_predict_body(texts: list[str], dimensions: int | None) -> dict[str, Any]:
    body: dict[str, Any] = {"instances": [{"content": t} for t in texts]}
    if dimensions is not None:
        body["parameters"] = {"outputDimensionality": dimensions}
    return body


def parse_vertex(provider: str, data: bytes, expected: int) -> tuple[list[list[float]], int | None]:
    body = _json(provider, data)
    preds = body.get("predictions") if isinstance(body, dict) else None
    if not isinstance(preds, list) or len(preds) != expected:
        raise ProviderFailure(
            "upstream_error", f"{provider}: the Vertex answer does not carry one prediction per input"
        )
    vectors: list[list[float]] = []
    tokens: int | None = 0
    for p in preds:
        emb = p.get("embeddings") if isinstance(p, dict) else None
        if not isinstance(emb, dict):
            raise ProviderFailure("upstream_error", f"{provider}: a Vertex prediction has no 'embeddings'")
        vectors.append(_vector(provider, emb.get("values")))
        stats = emb.get("statistics")
        count = stats.get("token_count") if isinstance(stats, dict) else None
        tokens = tokens + int(count) if tokens is not None and isinstance(count, (int, float)) else None
    return vectors, tokens


class VertexEmbeddingProvider:
    """`kind = "vertex"`: `POST {base}/projects/{p}/locations/{r}/publishers/google/models/{m}:predict`.

    Auth: `google_auth`'s, as for the chat kinds on Vertex AI."""

    kind = "vertex"

    def __init__(self, config: ProviderConfig, connect_timeout_s: float) -> None:
        self.name = config.name
        self._config = config
        self._region = config.region or "us-central1"
        self._base = config.base_url or vertex_base_url(self._region)
        self._http = _EmbeddingHttp(config, connect_timeout_s)
        self._adc = adc_unless_static(config.access_token_env)

    async def embed(self, inputs: EmbeddingInputs, served_model: str, dimensions: int | None) -> EmbeddingResult:
        if inputs.texts is None:
            raise unsupported(f"'input': token arrays are not supported by {served_model}; send strings")
        token = await bearer_token(self.name, self._config.access_token_env, self._adc)
        project = self._config.project or (self._adc.project if self._adc else None)
        if not project:
            raise ProviderFailure("upstream_error", f"providers.{self.name}.project is not set")
        url = (
            f"{self._base}/projects/{project}/locations/{self._region}/publishers/google/models/"
            f"{quote(served_model, safe='@.-_')}:predict"
        )
        headers = {
            "content-type": "application/json",
            "accept": "application/json",
            **self._config.headers,
            "authorization": f"Bearer {token}",
        }
        batch_size = 1 if served_model.startswith("gemini-embedding") else VERTEX_BATCH
        vectors: list[list[float]] = []
        tokens: int | None = 0
        for start in range(0, len(inputs.texts), batch_size):
            batch = inputs.texts[start : start + batch_size]
            _, data = await self._http.post(url, headers, orjson.dumps(vertex_predict_body(batch, dimensions)))
            vecs, count = parse_vertex(self.name, data, len(batch))
            vectors.extend(vecs)
            tokens = tokens + count if tokens is not None and count is not None else None
        return EmbeddingResult(vectors, tokens)

    async def aclose(self) -> None:
        await self._http.aclose()


# --- gemini (Google AI) ----------------------------------------------------------------------------


def gemini_batch_body(model: str, texts: list[str], dimensions: int | None) -> dict[str, Any]:
    """`models.batchEmbedContents` (ai.google.dev/api/embeddings): one EmbedContentRequest per text."""
    one: dict[str, Any] = {"model": f"models/{model}"}
    if dimensions is not None:
        one["outputDimensionality"] = dimensions
    return {"requests": [{**one, "content": {"parts": [{"text": t}]}} for t in texts]}


def parse_gemini_batch(provider: str, data: bytes, expected: int) -> list[list[float]]:
    body = _json(provider, data)
    items = body.get("embeddings") if isinstance(body, dict) else None
    if not isinstance(items, list) or len(items) != expected:
        raise ProviderFailure("upstream_error", f"{provider}: the Gemini answer does not carry one embedding per input")
    return [_vector(provider, e.get("values") if isinstance(e, dict) else None) for e in items]


class GeminiEmbeddingProvider:
    """`kind = "gemini"` without `project`: `POST {base_url}/models/{m}:batchEmbedContents`, the key in
    `x-goog-api-key`. The answer has no token count: the gateway counts the input itself. (With
    `project`, a gemini provider is on Vertex AI and embeds through `:predict`, as the vertex kind.)"""

    kind = "gemini"

    def __init__(self, config: ProviderConfig, connect_timeout_s: float) -> None:
        self.name = config.name
        self._config = config
        self._base = (config.base_url or "https://generativelanguage.googleapis.com/v1beta").rstrip("/")
        self._http = _EmbeddingHttp(config, connect_timeout_s)

    async def embed(self, inputs: EmbeddingInputs, served_model: str, dimensions: int | None) -> EmbeddingResult:
        if inputs.texts is None:
            raise unsupported(f"'input': token arrays are not supported by {served_model}; send strings")
        var = self._config.api_key_env or "GEMINI_API_KEY"
        key = _env_secret(var)
        if not key:
            raise ProviderFailure("upstream_error", f"provider {self.name!r}: environment variable {var} is not set")
        headers = {"content-type": "application/json", "accept": "application/json", **self._config.headers}
        headers["x-goog-api-key"] = key
        url = f"{self._base}/models/{quote(served_model, safe='@.-_')}:batchEmbedContents"
        body = orjson.dumps(gemini_batch_body(served_model, inputs.texts, dimensions))
        _, data = await self._http.post(url, headers, body)
        return EmbeddingResult(parse_gemini_batch(self.name, data, inputs.count), None)

    async def aclose(self) -> None:
        await self._http.aclose()
