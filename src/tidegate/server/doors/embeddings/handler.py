"""`POST /v1/embeddings`: validate, embed through the model's routes (fallback), answer OpenAI JSON.

`stream: true` is a 400 `stream_not_supported`: embeddings have no incremental form. Like every
generation door it honours `Idempotency-Key` (docs/api-operations.md §7: the stored JSON with `Idempotent-Replayed:
true`, 409 while running, 422 for another body) and is registered for `/api/v1/generations/{id}/cancel`:
its start and lifetime are the door's (`door.open_generation`, `door.running`).
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable

import orjson

from ....doors import Door
from ....errors import PayloadTooLarge, TidegateError
from ....events import Started, UsageReport
from ....gateway.embedding_relay import EmbeddingOutcome, estimate_tokens
from ....gateway.generation import EmbeddingGeneration
from ....records import ApiKey
from ....render.embeddings import embeddings_json
from ....request import EmbeddingInputs
from ...door import open_generation, running
from ...http import Request
from ...state import AppState
from .request import MAX_TOTAL_TOKENS, EmbeddingRequest, parse_embedding_request


async def check_total_tokens(inputs: EmbeddingInputs) -> None:
    """413 when the texts exceed the per-request token budget (a token is at least one UTF-8 byte,
    so small requests skip the count)."""
    if inputs.texts is None:
        return
    if sum(len(t.encode("utf-8")) for t in inputs.texts) <= MAX_TOTAL_TOKENS:
        return
    total = await asyncio.to_thread(estimate_tokens, inputs)
    if total > MAX_TOTAL_TOKENS:
        raise PayloadTooLarge(
            f"'input' has about {total} tokens; at most {MAX_TOTAL_TOKENS} tokens per request (split it)"
        )


def outcome_headers(outcome: EmbeddingOutcome, region: str | None = None) -> dict[str, str]:
    headers = {
        "x-provider": outcome.provider,
        "x-served-model": outcome.served_model,
        "x-provider-attempts": str(outcome.attempts),
    }
    if region is not None:
        headers["x-served-region"] = region
    return headers


async def embeddings(req: Request, state: AppState, key: ApiKey) -> None:
    body = await req.json(state.config.server.max_body_bytes)
    request = parse_embedding_request(body)
    state.gateway.router.model(request.model, "embedding")  # 404 / wrong type before anything is stored
    await check_total_tokens(request.inputs)
    assert req.generation_id is not None
    generation_id = req.generation_id

    def start(idem: str | None, rhash: str | None) -> Awaitable[EmbeddingGeneration]:
        return state.gateway.start_embedding(
            generation_id=generation_id, key=key, model_id=request.model, idempotency_key=idem, request_hash=rhash
        )

    gen = await open_generation(req, state, key, Door.EMBEDDINGS, body, False, start)
    if gen is None:
        return
    async with running(req, state, gen):  # the lifetime every generation door shares (door.py)
        await _embed(req, gen, request, state.gateway.router.regions)


async def _embed(req: Request, gen: EmbeddingGeneration, request: EmbeddingRequest, regions: dict[str, str]) -> None:
    recorder, relay = gen.recorder, gen.relay
    try:
        outcome = await relay.run(request.inputs, request.dimensions)
    except TidegateError as exc:
        await gen.fail({"code": exc.error_code, "message": exc.message})
        await req.respond_error(exc, {"x-provider-attempts": str(relay.attempts)})
        return
    recorder.observe(Started(outcome.provider, outcome.served_model))
    recorder.observe(UsageReport(prompt=outcome.prompt_tokens, completion=0, estimated=outcome.estimated))
    result = outcome.result
    if result.passthrough is not None:
        payload = result.passthrough
    else:
        vectors = embeddings_json(request.model, result.vectors, request.inputs.encoding_format, outcome.prompt_tokens)
        payload = orjson.dumps(vectors)
    if gen.record.idempotency_key is not None:  # only a repeated key can read it back (docs/api-operations.md §7)
        recorder.log_json(payload)
    await recorder.finish(
        "completed", provider=outcome.provider, served_model=outcome.served_model, attempts=outcome.attempts
    )
    await req.respond_bytes(200, payload, "application/json", outcome_headers(outcome, regions.get(outcome.provider)))
