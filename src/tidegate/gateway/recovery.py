"""What a generation's logs still tell when its gateway died before writing the outcome (docs/api-operations.md §7,
§10; docs/operations.md, "Leases").

The lease sweep that marks such a record `interrupted` is one statement over every dead owner's
records and reads no logs. What the client had (everything flushed, at most one flush interval before
the kill) is in the event log, and who served is in the commit log (`LOG_COMMIT`): a reader of the
record (the generations API, replay, a resume) sees the record completed from them, so the record and
the replay's `partial_output` hold the same text, and a resumed answer names its provider.
"""

from __future__ import annotations

from dataclasses import replace

import orjson

from ..events import ReasoningDelta, TextDelta
from ..records import LOG_COMMIT, LOG_EVENT, GenerationRecord
from ..store.base import LogStore
from .eventlog import decode_event


async def who_served(store: LogStore, record: GenerationRecord) -> GenerationRecord:
    """`record` with provider, served model and attempts from the commit log when it lacks them (a
    record still running elsewhere, or one whose owner died)."""
    if record.provider or record.idempotency_key is None:
        return record
    commits = await store.read_log(record.id, LOG_COMMIT)
    if not commits:
        return record
    last = orjson.loads(commits[-1][1])
    return replace(
        record,
        provider=str(last.get("provider") or "") or None,
        served_model=str(last.get("served_model") or "") or None,
        attempts=max(record.attempts, int(last.get("attempts") or 0)),
    )


async def recovered(store: LogStore, record: GenerationRecord) -> GenerationRecord:
    """An `interrupted` record the sweep ended, with the output its logs hold; any other as it is."""
    if record.status != "interrupted" or record.idempotency_key is None:
        return record
    record = await who_served(store, record)
    if record.output_text or record.reasoning_text:
        return record
    text: list[str] = []
    reasoning: list[str] = []
    for _, data in await store.read_log(record.id, LOG_EVENT):
        event = decode_event(data)
        if isinstance(event, TextDelta):
            text.append(event.text)
        elif isinstance(event, ReasoningDelta) and event.kind != "encrypted":
            reasoning.append(event.text)
    return replace(record, output_text="".join(text), reasoning_text="".join(reasoning))
