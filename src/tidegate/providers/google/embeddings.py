"""Google's embeddings: `vertex` (`:predict` for Google text-embedding models) and `gemini` (Google AI's
`:batchEmbedContents`, or Vertex AI's when the provider sets `project`)."""

from __future__ import annotations

from typing import Any
from urllib.parse import quote

import orjson

from ...config.model import ProviderConfig
from ...errors import ProviderFailure
from ...request import EmbeddingInputs
from ..embeddings import EmbeddingHttp, EmbeddingResult, env_secret, json_body, unsupported, vector_of
from .auth import adc_unless_static, bearer_token
from .vertex import vertex_base_url

VERTEX_BATCH = 250


def vertex_predict_body(texts: list[str], dimensions: int | None) -> dict[str, Any]:
    body: dict[str, Any] = {"instances": [{"content": t} for t in texts]}
    if dimensions is not None:
        body["parameters"] = {"outputDimensionality": dimensions}
    return body


def parse_vertex(provider: str, data: bytes, expected: int) -> tuple[list[list[float]], int | None]:
    body = json_body(provider, data)
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
        vectors.append(vector_of(provider, emb.get("values")))
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
        self._http = EmbeddingHttp(config, connect_timeout_s)
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


def gemini_batch_body(model: str, texts: list[str], dimensions: int | None) -> dict[str, Any]:
    """`models.batchEmbedContents` (ai.google.dev/api/embeddings): one EmbedContentRequest per text."""
    one: dict[str, Any] = {"model": f"models/{model}"}
    if dimensions is not None:
        one["outputDimensionality"] = dimensions
    return {"requests": [{**one, "content": {"parts": [{"text": t}]}} for t in texts]}


def parse_gemini_batch(provider: str, data: bytes, expected: int) -> list[list[float]]:
    body = json_body(provider, data)
    items = body.get("embeddings") if isinstance(body, dict) else None
    if not isinstance(items, list) or len(items) != expected:
        raise ProviderFailure("upstream_error", f"{provider}: the Gemini answer does not carry one embedding per input")
    return [vector_of(provider, e.get("values") if isinstance(e, dict) else None) for e in items]


class GeminiEmbeddingProvider:
    """`kind = "gemini"` without `project`: `POST {base_url}/models/{m}:batchEmbedContents`, the key in
    `x-goog-api-key`. The answer has no token count: the gateway counts the input itself. (With
    `project`, a gemini provider is on Vertex AI and embeds through `:predict`, as the vertex kind.)"""

    kind = "gemini"

    def __init__(self, config: ProviderConfig, connect_timeout_s: float) -> None:
        self.name = config.name
        self._config = config
        self._base = (config.base_url or "https://generativelanguage.googleapis.com/v1beta").rstrip("/")
        self._http = EmbeddingHttp(config, connect_timeout_s)

    async def embed(self, inputs: EmbeddingInputs, served_model: str, dimensions: int | None) -> EmbeddingResult:
        if inputs.texts is None:
            raise unsupported(f"'input': token arrays are not supported by {served_model}; send strings")
        var = self._config.api_key_env or "GEMINI_API_KEY"
        key = env_secret(var)
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
