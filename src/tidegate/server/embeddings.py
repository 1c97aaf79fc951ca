"""`POST /v1/embeddings`: validate, embed through the model's routes (fallback), answer OpenAI JSON.

`stream: true` is a 400 `stream_not_supported`: embeddings have no incremental form.
"""

from __future__ import annotations

import asyncio
import time

from ..errors import PayloadTooLarge, TidegateError
from ..events import Started, UsageReport
from ..gateway.embedding_relay import EmbeddingOutcome, EmbeddingRelay, estimate_tokens
from ..gateway.recorder import Recorder
from ..providers.embeddings import EmbeddingInputs
from ..render.embeddings import embeddings_json
from ..store.base import ApiKey, GenerationRecord
from .disconnect import watch_disconnect
from .embeddings_request import MAX_TOTAL_TOKENS, parse_embedding_request
from .http import Request
from .state import AppState


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


def outcome_headers(outcome: EmbeddingOutcome) -> dict[str, str]:
    return {
        "x-provider": outcome.provider,
        "x-served-model": outcome.served_model,
        "x-provider-attempts": str(outcome.attempts),
    }


async def embeddings(req: Request, state: AppState, key: ApiKey) -> None:
    body = await req.json(state.config.server.max_body_bytes)
    request = parse_embedding_request(body)
    router = state.gateway.router
    model = router.model(request.model, "embedding")
    await check_total_tokens(request.inputs)
    routes = router.embedding_routes(model)
    assert req.generation_id is not None
    record = GenerationRecord(
        id=req.generation_id,
        key_id=key.id,
        model=request.model,
        door="embeddings",
        created_at=time.time(),
        idempotency_key=req.headers.get("idempotency-key"),
    )
    recorder = Recorder(store=state.store, record=record, messages=[], pricing=model.pricing)
    await recorder.begin()
    cancel = asyncio.Event()
    relay = EmbeddingRelay(routes, state.config.provider_idle_timeout, cancel)
    try:
        async with watch_disconnect(req, cancel if record.idempotency_key is None else None):
            outcome = await relay.run(request.inputs, request.dimensions)
    except TidegateError as exc:
        await recorder.finish(
            "cancelled" if exc.error_code == "cancelled" else "failed",
            attempts=relay.attempts,
            error={"code": exc.error_code, "message": exc.message},
        )
        await req.respond_error(exc, {"x-provider-attempts": str(relay.attempts)})
        return
    recorder.observe(Started(outcome.provider, outcome.served_model))
    recorder.observe(UsageReport(prompt=outcome.prompt_tokens, completion=0, estimated=outcome.estimated))
    await recorder.finish(
        "completed", provider=outcome.provider, served_model=outcome.served_model, attempts=outcome.attempts
    )
    headers = outcome_headers(outcome)
    result = outcome.result
    if result.passthrough is not None:
        await req.respond_bytes(200, result.passthrough, "application/json", headers)
        return
    payload = embeddings_json(request.model, result.vectors, request.inputs.encoding_format, outcome.prompt_tokens)
    await req.respond_json(200, payload, headers)
