"""`kind = "bedrock"` embeddings: Titan and Cohere models through InvokeModel, signed with SigV4."""

from __future__ import annotations

import asyncio
from typing import Any
from urllib.parse import quote

import orjson

from ...config.model import ProviderConfig
from ...errors import ProviderFailure
from ...request import EmbeddingInputs
from ..embeddings import EmbeddingHttp, EmbeddingResult, json_body, unsupported, vector_of
from .auth import AwsCredentials, sigv4_headers

TITAN_V2_DIMENSIONS = (256, 512, 1024)
COHERE_BATCH = 96
TITAN_CONCURRENCY = 8


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
    body = json_body(provider, data)
    if not isinstance(body, dict):
        raise ProviderFailure("upstream_error", f"{provider}: unexpected Titan answer")
    count = body.get("inputTextTokenCount")
    return vector_of(provider, body.get("embedding")), count if isinstance(count, int) else None


def parse_cohere(provider: str, data: bytes, expected: int) -> list[list[float]]:
    body = json_body(provider, data)
    emb = body.get("embeddings") if isinstance(body, dict) else None
    if isinstance(emb, dict):  # response_type "embeddings_by_type"
        emb = emb.get("float")
    if not isinstance(emb, list) or len(emb) != expected:
        raise ProviderFailure("upstream_error", f"{provider}: the Cohere answer does not carry one vector per text")
    return [vector_of(provider, v) for v in emb]


class BedrockEmbeddingProvider:
    """`kind = "bedrock"`: `POST {endpoint}/model/{id}/invoke`, SigV4-signed with signing name `bedrock`."""

    kind = "bedrock"

    def __init__(self, config: ProviderConfig, connect_timeout_s: float) -> None:
        self.name = config.name
        self._config = config
        self._region = config.region or "us-east-1"
        self._endpoint = config.endpoint_url or f"https://bedrock-runtime.{self._region}.amazonaws.com"
        self._http = EmbeddingHttp(config, connect_timeout_s)
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
