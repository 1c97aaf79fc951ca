"""Validation of `POST /v1/embeddings` bodies (docs/api-operations.md §8): every error names the field."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from ....errors import InvalidRequest, PayloadTooLarge, StreamNotSupported, quote
from ....request import EmbeddingInputs
from ...validate import opt_int, opt_str, require_object, require_str

MAX_INPUTS = 2048  # per request, as OpenAI
MAX_TOTAL_TOKENS = 300_000  # per request, as OpenAI
MAX_TOKEN_ID = 2**31 - 1


@dataclass(frozen=True, slots=True)
class EmbeddingRequest:
    model: str
    inputs: EmbeddingInputs
    dimensions: int | None


def _is_token(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and 0 <= value <= MAX_TOKEN_ID


def _parse_input(value: Any) -> tuple[list[str] | None, list[list[int]] | None]:
    if value is None:
        raise InvalidRequest("'input' is required: a string, an array of strings, or token arrays")
    if isinstance(value, str):
        if not value:
            raise InvalidRequest("'input' must not be an empty string")
        return [value], None
    if not isinstance(value, list):
        raise InvalidRequest("'input' must be a string, an array of strings, or token arrays")
    if not value:
        raise InvalidRequest("'input' must not be an empty array")
    if len(value) > MAX_INPUTS:
        raise PayloadTooLarge(f"'input' has {len(value)} items; at most {MAX_INPUTS} inputs per request (split it)")
    if all(isinstance(v, str) for v in value):
        for i, v in enumerate(value):
            if not v:
                raise InvalidRequest(f"'input[{i}]' must not be an empty string")
        return list(value), None
    if all(_is_token(v) for v in value):
        return None, [list(value)]
    if all(isinstance(v, list) for v in value):
        for i, arr in enumerate(value):
            if not arr or not all(_is_token(t) for t in arr):
                raise InvalidRequest(f"'input[{i}]' must be a non-empty array of token ids (integers >= 0)")
        return None, [list(arr) for arr in value]
    raise InvalidRequest("'input' must be a string, an array of strings, or token arrays; do not mix them")


def parse_embedding_request(body: Any) -> EmbeddingRequest:
    body = require_object(body)
    if body.get("stream") not in (None, False):
        raise StreamNotSupported(
            "'stream' is not supported on /v1/embeddings: embeddings have no incremental form; "
            "omit 'stream' and read the JSON answer"
        )
    model = require_str(body, "model")
    texts, tokens = _parse_input(body.get("input"))
    fmt = body.get("encoding_format", "float")
    if fmt is None:
        fmt = "float"
    if fmt not in ("float", "base64"):
        raise InvalidRequest(f"'encoding_format' must be 'float' or 'base64', got {quote(fmt)}")
    dimensions = opt_int(body, "dimensions", lo=1, hi=65536)
    user = opt_str(body, "user")
    if tokens is not None:
        total = sum(len(t) for t in tokens)
        if total > MAX_TOTAL_TOKENS:
            raise PayloadTooLarge(f"'input' has {total} tokens; at most {MAX_TOTAL_TOKENS} tokens per request")
    return EmbeddingRequest(
        model=model,
        inputs=EmbeddingInputs(texts=texts, tokens=tokens, encoding_format=fmt, user=user, raw_body=dict(body)),
        dimensions=dimensions,
    )
