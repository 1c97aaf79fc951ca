"""`kind = "openai"` embeddings: the client's body passed through to `{base_url}/embeddings`."""

from __future__ import annotations

import orjson

from ...config.model import ProviderConfig
from ...errors import ProviderFailure
from ...request import EmbeddingInputs
from ..embeddings import EmbeddingHttp, EmbeddingResult, env_secret, json_body


def parse_openai_embeddings(provider: str, data: bytes, inputs: EmbeddingInputs) -> EmbeddingResult:
    body = json_body(provider, data)
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
        self._http = EmbeddingHttp(config, connect_timeout_s)

    async def embed(self, inputs: EmbeddingInputs, served_model: str, dimensions: int | None) -> EmbeddingResult:
        body = dict(inputs.raw_body)
        body["model"] = served_model
        headers = {"content-type": "application/json", "accept": "application/json", **self._config.headers}
        key = env_secret(self._config.api_key_env)
        if key:
            headers["authorization"] = f"Bearer {key}"
        url = f"{self._config.base_url}/embeddings"
        _, data = await self._http.post(url, headers, orjson.dumps(body))
        return parse_openai_embeddings(self.name, data, inputs)

    async def aclose(self) -> None:
        await self._http.aclose()
