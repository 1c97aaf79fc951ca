"""`POST /api/v1/llm/responses/replay`: the stored result of an Idempotency-Key (docs/api-operations.md §7).

Never starts a generation. JSON: completed → 200 with the native `done` result; running → 409 +
`Retry-After`; unknown → 404; failed/cancelled/interrupted → 502 with `status`, `error` and
`partial_output`. With `Accept: text/event-stream` it re-streams the generation as native events
(following a running one live) and honours `Last-Event-ID`.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import orjson

from ..commit import Committed
from ..doors import Door
from ..errors import GenerationInProgress, GenerationNotFound, InvalidRequest
from ..events import Event, Failed, Started, TextDelta
from ..gateway.eventlog import decode_event
from ..gateway.recovery import recovered, who_served
from ..records import LOG_EVENT, LOG_FRAME, LOG_JSON, ApiKey, GenerationRecord
from ..render.images import IMAGE_DOORS, image_done_for_record, native_image_frames_for_record
from ..render.native import NativeStreamRenderer, native_result_for_record
from .http import Request
from .idempotency import SSE_CONTENT_TYPE, idempotency_key, last_event_id, record_headers, wants_sse, write_followed
from .state import AppState

FAILED_STATUSES = ("failed", "cancelled", "interrupted")


async def _events(state: AppState, generation_id: str) -> list[Event]:
    return [decode_event(data) for _, data in await state.store.read_log(generation_id, LOG_EVENT)]


def _partial_output(record: GenerationRecord, events: list[Event]) -> str:
    if record.output_text:
        return record.output_text
    return "".join(e.text for e in events if isinstance(e, TextDelta))


async def replay(req: Request, state: AppState, key: ApiKey) -> None:
    body = await req.body(state.config.server.max_body_bytes)
    if body.strip():
        raise InvalidRequest("replay takes no body: send only the 'Idempotency-Key' header of the original request")
    idem = idempotency_key(req)
    if idem is None:
        raise InvalidRequest("replay needs the 'Idempotency-Key' header of the original request")
    record = await state.store.find_idempotent(key.id, idem)
    if record is None:
        raise GenerationNotFound("no generation was started with this Idempotency-Key (or it expired)")
    req.generation_id = record.id
    record = await recovered(state.store, await who_served(state.store, record))
    if wants_sse(req):
        await _stream(req, state, record, last_event_id(req))
        return
    if record.status == "in_progress":
        raise GenerationInProgress(
            f"generation {record.id} is still running; retry later or replay with 'Accept: text/event-stream'",
            retry_after=1.0,
        )
    events = await _events(state, record.id)
    if record.status in FAILED_STATUSES:
        error = record.error or {"code": "upstream_error", "message": "the generation did not complete"}
        payload = {
            "error": {"code": error.get("code", "upstream_error"), "message": error.get("message", "")},
            "status": record.status,
            "partial_output": _partial_output(record, events),
        }
        await req.respond_json(502, payload, record_headers(record, True, state.gateway.router.regions))
        return
    if record.door in IMAGE_DOORS:  # image generations replay their native image `done`
        await req.respond_json(
            200, image_done_for_record(record, events), record_headers(record, True, state.gateway.router.regions)
        )
        return
    stored = await state.store.read_log(record.id, LOG_JSON) if record.door == Door.NATIVE else []
    result = orjson.loads(stored[0][1]) if stored else native_result_for_record(record, events)
    await req.respond_json(200, result, record_headers(record, True, state.gateway.router.regions))


async def _follow_events(state: AppState, generation_id: str) -> AsyncIterator[Event | GenerationRecord]:
    """Canonical events as they are flushed; finally the record once it is no longer running."""
    next_seq = -1
    async with state.store.follow(generation_id) as tail:
        while True:
            record = await state.store.get_generation(generation_id)
            for seq, data in await state.store.read_log(generation_id, LOG_EVENT, next_seq):
                next_seq = seq
                yield decode_event(data)
            if record is None or record.status != "in_progress":
                for seq, data in await state.store.read_log(generation_id, LOG_EVENT, next_seq):
                    next_seq = seq
                    yield decode_event(data)
                if record is not None:
                    yield record
                return
            await tail.wait()


def _frames_after(data: bytes, last: int) -> bytes:
    out: list[bytes] = []
    for part in data.split(b"\n\n"):
        if not part:
            continue
        if part.startswith(b"id: "):
            seq = int(part[4 : part.index(b"\n")])
            if seq <= last:
                continue
        out.append(part + b"\n\n")
    return b"".join(out)


async def _stream(req: Request, state: AppState, record: GenerationRecord, last: int | None) -> None:
    after = -1 if last is None else last
    headers = {**record_headers(record, True, state.gateway.router.regions), "x-kendr-stream-mode": "streamed"}
    native_frames = record.door in (Door.NATIVE, Door.NATIVE_IMAGES)  # its own frames are already native
    has_frames = native_frames and bool(await state.store.read_log(record.id, LOG_FRAME, -1))
    await req.start(200, SSE_CONTENT_TYPE, headers)
    if has_frames or (native_frames and record.id in state.gateway.running):
        await write_followed(req, state, record.id, after)
        return
    if record.door in IMAGE_DOORS:  # started on /v1/images/generations: native image events once it ended
        logged: list[Event] = []
        async for item in _follow_events(state, record.id):
            if isinstance(item, GenerationRecord):
                await req.write(_frames_after(native_image_frames_for_record(item, logged), after))
            else:
                logged.append(item)
        await req.write(b"", more=False)
        return
    renderer = NativeStreamRenderer(generation_id=record.id, public_model=record.model, created=int(record.created_at))
    events: list[Event] = []
    begun = False
    async for item in _follow_events(state, record.id):
        if isinstance(item, GenerationRecord):
            if not begun:
                await req.write(_frames_after(renderer.begin(_committed(item, None)), after))
            await req.write(_frames_after(_ending(renderer, item, events), after), more=False)
            return
        events.append(item)
        if isinstance(item, Started) and not begun:
            begun = True
            await req.write(_frames_after(renderer.begin(_committed(record, item)), after))
        elif begun:
            frame = renderer.render(item)
            if frame:
                await req.write(_frames_after(frame, after))
    await req.write(b"", more=False)


def _committed(record: GenerationRecord, started: Started | None) -> Committed:
    provider = started.provider if started else (record.provider or "")
    served = started.served_model if started else (record.served_model or "")
    return Committed(provider, served, max(1, record.attempts))


def _ending(renderer: NativeStreamRenderer, record: GenerationRecord, events: list[Event]) -> bytes:
    if record.status == "completed":
        return renderer.done(native_result_for_record(record, events))
    error: dict[str, Any] = record.error or {"code": "upstream_error", "message": "the generation did not complete"}
    code = error.get("code", "upstream_error")
    if code not in ("upstream_error", "upstream_timeout", "upstream_protocol_error", "cancelled", "interrupted"):
        code = "upstream_error"
    return renderer.fail(Failed(code, str(error.get("message", "")), record.provider or ""))
