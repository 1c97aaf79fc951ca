"""A generation that is still running, as it stands now, for the generations API (the console's live
log and generation page: docs/console.md).

The stored record of a running generation holds little beyond its identity: who serves, the time to
first token, the tokens and the output are written with its outcome (the recorder keeps them in
memory meanwhile, and writing them while it runs would cost the store a write per flush). A reader
asking about one this process runs gets them from the recorder and the relay: nothing is computed
per chunk, only when the record is read. One running in another process (another instance, another
`--workers` worker) shows who serves from its commit log when it keeps logs (an Idempotency-Key).
"""

from __future__ import annotations

from dataclasses import replace

from ...gateway.generation import Generation
from ...gateway.recovery import who_served
from ...gateway.usage import rough_usage
from ...records import GenerationRecord, usage_of
from ..state import AppState


async def as_it_stands(state: AppState, record: GenerationRecord) -> GenerationRecord:
    """`record` with what its generation has produced so far when it is still running; any other as
    it is. The tokens are the provider's usage once reported, else ~4 characters a token (flagged
    estimated), and the output so far is the text the client has been sent."""
    if record.status != "in_progress":
        return record
    gen = state.gateway.running.get(record.id)
    if not isinstance(gen, Generation):  # running elsewhere (or an embedding call: one answer, no progress)
        return await who_served(state.store, record)
    recorder, relay = gen.recorder, gen.relay
    reasoning = "".join(recorder.reasoning)
    usage = recorder.usage or rough_usage(recorder.messages, recorder.output_text, reasoning)
    return replace(
        record,
        provider=relay.provider or recorder.record.provider,
        served_model=relay.served_model or recorder.record.served_model,
        attempts=max(record.attempts, relay.attempts),
        ttft_ms=recorder.record.ttft_ms,
        usage=usage_of(usage),
        usage_estimated=usage.estimated,
        output_text=recorder.output_text,
        reasoning_text=reasoning,
    )
