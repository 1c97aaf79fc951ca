"""The OpenAI embeddings answer (`object: list`), float or base64 (little-endian float32, as OpenAI)."""

from __future__ import annotations

import base64
from typing import Any

import numpy as np


def encode_base64(vector: list[float]) -> str:
    return base64.b64encode(np.asarray(vector, dtype="<f4").tobytes()).decode("ascii")


def embeddings_json(model: str, vectors: list[list[float]], encoding_format: str, prompt_tokens: int) -> dict[str, Any]:
    data: list[dict[str, Any]] = []
    for i, vec in enumerate(vectors):
        value: Any = encode_base64(vec) if encoding_format == "base64" else vec
        data.append({"object": "embedding", "index": i, "embedding": value})
    return {
        "object": "list",
        "data": data,
        "model": model,
        "usage": {"prompt_tokens": prompt_tokens, "total_tokens": prompt_tokens},
    }
