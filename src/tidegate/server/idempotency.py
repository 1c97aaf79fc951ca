"""Idempotency-Key handling shared by the generation doors (docs/api-operations.md §7).

`idempotency_key` validates the header and `request_hash` hashes the body; `ended_resume` and
`repeated` decide, without writing, what a known key gets (`Answer`): 422 for a different body, 409
(or a live resume with `Last-Event-ID`) while running, the stored answer with `Idempotent-Replayed:
true` once completed; `write_answer` writes it (the door's `open_generation` is the one walk).
`follow_frames` streams a generation's logged frames, live, from this process's memory (the frames
not yet stored; the store for the older ones) or from the store (another process:
`GenerationStore.follow` wakes it, pushed by Redis, polled by the SQL stores).
"""

from __future__ import annotations

import hashlib
from collections.abc import AsyncIterator
from dataclasses import dataclass
from typing import Any

import orjson

from ..errors import GenerationInProgress, IdempotencyKeyReused, InvalidRequest
from ..gateway.eventlog import decode_event
from ..gateway.recovery import recovered, who_served
from ..records import LOG_EVENT, LOG_FRAME, LOG_JSON, BeginResult, GenerationRecord
from .endings import crash_ending, has_ending
from .http import Request
from .state import AppState

SSE_CONTENT_TYPE = "text/event-stream; charset=utf-8"
MAX_EVENT_ID = 2**63 - 1


def idempotency_key(req: Request) -> str | None:
    value = req.header("idempotency-key")
    if value is None:
        return None
    if not 1 <= len(value) <= 255 or not all(0x21 <= ord(c) <= 0x7E for c in value):
        raise InvalidRequest("'Idempotency-Key' must be 1-255 visible ASCII characters (no spaces)")
    return value


def request_hash(door: str, body: Any) -> str:
    canonical = orjson.dumps({"door": door, "body": body}, option=orjson.OPT_SORT_KEYS)
    return hashlib.sha256(canonical).hexdigest()


def last_event_id(req: Request) -> int | None:
    value = req.header("last-event-id")
    if value is None or value == "":
        return None
    try:
        parsed = int(value)
    except ValueError:
        raise InvalidRequest("'Last-Event-ID' must be an event id (an integer) from this stream") from None
    if parsed < -1:
        raise InvalidRequest("'Last-Event-ID' must be >= 0")
    if parsed > MAX_EVENT_ID:  # an id no stream has (and more than the stores' 64-bit integers hold)
        raise InvalidRequest(f"'Last-Event-ID' must be at most {MAX_EVENT_ID}, an event id of this stream")
    return parsed


def wants_sse(req: Request) -> bool:
    return "text/event-stream" in (req.header("accept") or "")


def record_headers(
    record: GenerationRecord, replayed: bool = True, regions: dict[str, str] | None = None
) -> dict[str, str]:
    """`regions`: provider name → configured region, for `X-Served-Region` (docs/api-operations.md §12)."""
    headers: dict[str, str] = {}
    if record.provider:
        headers["x-provider"] = record.provider
        region = regions.get(record.provider) if regions else None
        if region is not None:
            headers["x-served-region"] = region
    if record.served_model:
        headers["x-served-model"] = record.served_model
    headers["x-provider-attempts"] = str(record.attempts)
    if replayed:
        headers["idempotent-replayed"] = "true"
    return headers


async def follow_frames(state: AppState, generation_id: str, after: int) -> AsyncIterator[bytes]:
    """Every logged frame with id > `after`, following a running generation live to its end."""
    running = state.gateway.running.get(generation_id)
    if running is not None:
        recorder = running.recorder
        index = after + 1
        while True:
            base = recorder.frames_base
            if index < base:  # frames leave memory once stored: read those back (a slow follower)
                stored = await state.store.read_log(generation_id, LOG_FRAME, index - 1)
                if not stored:
                    raise RuntimeError(f"generation {generation_id}: frame {index} is missing from the store")
                for seq, data in stored:
                    if seq != index:
                        raise RuntimeError(f"generation {generation_id}: frame {index} is missing from the store")
                    yield data
                    index += 1
                continue
            if index - base < len(recorder.frames):
                yield recorder.frames[index - base]
                index += 1
                continue
            if recorder.closed:
                return
            await recorder.wait_changed()
    next_seq = after
    async with state.store.follow(generation_id) as tail:  # another process runs it: pushed or polled
        while True:
            record = await state.store.get_generation(generation_id)
            for seq, data in await state.store.read_log(generation_id, LOG_FRAME, next_seq):
                yield data
                next_seq = seq
            if record is None or record.status != "in_progress":
                for seq, data in await state.store.read_log(generation_id, LOG_FRAME, next_seq):
                    yield data
                    next_seq = seq
                return
            if generation_id in state.gateway.running:  # it moved into this process's memory view
                break
            await tail.wait()
    async for data in follow_frames(state, generation_id, next_seq):
        yield data


async def stream_frames(req: Request, state: AppState, record: GenerationRecord, after: int) -> None:
    """The frames after `after`, then an ending: the stream's own, or, when its gateway died before
    writing one, the door's failure ending (server/endings.py). A client whose `Last-Event-ID` is
    exactly the last frame gets an empty stream that ends normally (it has the ending); one past the
    last frame gets the ending again, so it can tell the stream ended rather than was cut."""
    record = await who_served(state.store, record)
    await req.start(200, SSE_CONTENT_TYPE, record_headers(record, True, state.gateway.router.regions))
    await write_followed(req, state, record.id, after)


async def write_followed(req: Request, state: AppState, generation_id: str, after: int) -> None:
    """`follow_frames` written to the client, the ending it may lack added, and the response ended."""
    last: bytes | None = None
    async for frame in follow_frames(state, generation_id, after):
        await req.write(frame)
        last = frame
    if last is None or not has_ending(last):
        ending = await _missing_ending(state, generation_id, after if last is None else None)
        if ending:
            await req.write(ending)
    await req.write(b"", more=False)


async def _missing_ending(state: AppState, generation_id: str, nothing_after: int | None) -> bytes:
    """What a stream that stopped without its ending still owes the client (b"" if nothing).
    `nothing_after`: nothing was sent, the client asked for the frames after this id."""
    final = await state.store.get_generation(generation_id)
    if final is None or final.status == "in_progress":
        return b""
    logged = await state.store.read_log(generation_id, LOG_FRAME)
    frames = [data for _, data in logged]
    if frames and has_ending(frames[-1]):
        past_the_end = nothing_after is not None and nothing_after > logged[-1][0]
        return frames[-1] if past_the_end else b""
    final = await recovered(state.store, final)
    events = [decode_event(data) for _, data in await state.store.read_log(generation_id, LOG_EVENT)]
    return crash_ending(final, frames, events)


@dataclass(frozen=True, slots=True)
class Answer:
    """What a request with a known Idempotency-Key gets instead of a new generation: the record's
    logged frames after `after` (a replay, or a live follow while it runs), or, when `after` is None,
    its stored JSON answer."""

    record: GenerationRecord
    after: int | None


def ended_resume(record: GenerationRecord | None, rhash: str | None, after: int) -> Answer | None:
    """A resume (`Last-Event-ID`) of a generation that already ended without completing re-sends
    what it stored, ending with its failure event, instead of silently starting a new (paid)
    generation. None: not such a resume (start the generation)."""
    if record is None or record.request_hash != rhash or record.status not in ("failed", "cancelled", "interrupted"):
        return None
    return Answer(record, after)


def repeated(result: BeginResult, streaming: bool, resume_from: int | None, sse: bool) -> Answer:
    """The answer to a repeated request (the store refused to begin a second generation): raises
    the conflict (a different body: 422) or the still running (409, unless it is a live resume)."""
    record = result.record
    if result.outcome == "mismatch":
        raise IdempotencyKeyReused("this Idempotency-Key was already used with a different request body; use a new key")
    if result.outcome == "in_progress":
        if streaming and resume_from is not None and sse:
            return Answer(record, resume_from)
        raise GenerationInProgress(
            f"generation {record.id} with this Idempotency-Key is still running; retry later, or resume "
            "with 'Accept: text/event-stream' and 'Last-Event-ID'",
            retry_after=1.0,
        )
    # completed
    return Answer(record, (-1 if resume_from is None else resume_from) if streaming else None)


async def write_answer(req: Request, state: AppState, answer: Answer) -> None:
    """`Answer` written: the frames (a stream) or the stored JSON body, `Idempotent-Replayed: true`."""
    record = answer.record
    if answer.after is not None:
        await stream_frames(req, state, record, answer.after)
        return
    stored = await state.store.read_log(record.id, LOG_JSON)
    if not stored:
        raise GenerationInProgress("the stored answer is not readable yet; retry", retry_after=1.0)
    await req.respond_bytes(
        200, stored[0][1], "application/json", record_headers(record, True, state.gateway.router.regions)
    )
