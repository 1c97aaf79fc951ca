"""What every generation door shares: idempotency, the generation's lifetime, and the two drivers.

A door parses its body into a `GenerationRequest`, then hands `serve_generation` two small adapters:
a `StreamWriter` (frames of its SSE format) and a `JsonBuilder` (its one-shot JSON answer). The
drivers here own the order the contract demands: commit on `Committed`, keep-alives as comment lines
(never logged: they have no id), every frame logged before it is written, the record completed before
the terminal frame goes out, failures before the commit as JSON errors, after it as the door's ending.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any, Protocol, TypeVar

import orjson

from .. import metrics
from ..commit import Committed
from ..doors import Door
from ..errors import TidegateError, UpstreamError, UpstreamTimeout
from ..events import Event, Failed, FailureCode, RawFrame, UsageReport
from ..gateway.cache import CachePlan, CapturingBuilder, CapturingWriter, ResponseCache
from ..gateway.generation import EmbeddingGeneration, ExistingGeneration, Generation
from ..gateway.relay import KEEPALIVE
from ..records import ApiKey, GenerationRecord
from ..request import GenerationRequest
from ..sse import encode_comment
from ..store.facets import cache_store
from . import access_log, body_log
from .disconnect import DisconnectWatch
from .hints import session_hints
from .http import Request
from .idempotency import (
    SSE_CONTENT_TYPE,
    Answer,
    ended_resume,
    idempotency_key,
    last_event_id,
    repeated,
    request_hash,
    wants_sse,
    write_answer,
)
from .state import AppState

log = logging.getLogger("tidegate.door")


class StreamWriter(Protocol):
    # True when `event` never returns more than one frame: the frame log then takes its output as it
    # is, without searching it for frame boundaries on every chunk
    one_frame_per_event: bool

    def begin(self, committed: Committed) -> bytes:
        """Frames written right after the headers (may be empty)."""
        ...

    def event(self, event: Event) -> bytes: ...

    def keepalive_tick(self) -> bytes:
        """Frames (with ids) to write on a keep-alive tick besides the comment; usually empty."""
        ...

    def finish(self) -> bytes | Failed:
        """The terminal frames of a complete answer, or the failure when it cannot be complete."""
        ...

    def fail(self, failure: Failed) -> bytes: ...

    # optional, on a writer or a JSON builder: `settle()`, None or an awaitable that must be done
    # before the answer's end goes out, run alongside the record's completion (`_complete`)


class JsonBuilder(Protocol):
    def reset(self) -> None:
        """A new route serves: forget what an earlier one produced."""
        ...

    def add(self, event: Event) -> None: ...

    def build(self) -> bytes | Failed: ...


class Builder(Protocol):
    """A renderer's one-shot answer builder (render/chat.py, render/responses.py)."""

    def reset(self) -> None: ...

    def add(self, event: Event) -> None: ...

    def build(self, usage: UsageReport | None) -> dict[str, Any]: ...


class BuiltJson:
    """The `JsonBuilder` of a door whose renderer builds its answer: the events go to the builder,
    which builds the JSON with the generation's final usage."""

    __slots__ = ("builder", "gen")

    def __init__(self, gen: Generation, builder: Builder) -> None:
        self.gen = gen
        self.builder = builder

    def reset(self) -> None:
        self.builder.reset()

    def add(self, event: Event) -> None:
        self.builder.add(event)

    def build(self) -> bytes:
        return orjson.dumps(self.builder.build(self.gen.recorder.final_usage()))


@dataclass(slots=True)
class DoorSpec:
    door: Door
    model_type: str
    body: Any
    request: GenerationRequest
    make_stream: Callable[[Generation], StreamWriter]
    make_json: Callable[[Generation], JsonBuilder]
    stream_headers: dict[str, str] = field(default_factory=dict)
    content_type: str = SSE_CONTENT_TYPE  # of a stream (the Gemini door's JSON-array stream is JSON)


def provider_headers(c: Committed) -> dict[str, str]:
    headers = {
        "x-provider": c.provider,
        "x-served-model": c.served_model,
        "x-provider-attempts": str(c.attempts),
    }
    if c.region is not None:
        headers["x-served-region"] = c.region
    if c.dropped:
        headers["x-tidegate-dropped"] = ", ".join(c.dropped)
    return headers


def as_error(failure: Failed) -> TidegateError:
    return UpstreamTimeout(failure.message) if failure.code == "upstream_timeout" else UpstreamError(failure.message)


G = TypeVar("G", Generation, EmbeddingGeneration)


async def open_generation(
    req: Request,
    state: AppState,
    key: ApiKey,
    door: Door,
    body: Any,
    streaming: bool,
    start: Callable[[str | None, str | None], Awaitable[G]],
) -> G | None:
    """Every generation door's start (docs/api-operations.md §7): the Idempotency-Key and the body's hash, a resumed
    stream that already ended, a repeated key answered from its record; else `start(key, hash)`'s new
    generation. None when the request was answered here."""
    idem = idempotency_key(req)
    rhash = request_hash(door, body) if idem else None
    after = last_event_id(req) if streaming else None  # (a JSON request has no frames to resume)
    answer: Answer | None = None
    if idem is not None and after is not None:
        answer = ended_resume(await state.store.find_idempotent(key.id, idem), rhash, after)
    if answer is None:
        try:
            return await start(idem, rhash)
        except ExistingGeneration as existing:
            req.generation_id = existing.result.record.id
            answer = repeated(existing.result, streaming, after, wants_sse(req))
    req.generation_id = answer.record.id
    await write_answer(req, state, answer)
    return None


@contextlib.asynccontextmanager
async def running(req: Request, state: AppState, gen: Generation | EmbeddingGeneration) -> AsyncIterator[None]:
    """Every generation door's lifetime around its driver: the key's X-RateLimit-* on the answer, a
    keyless request cancelled when its client goes away (docs/api-operations.md §7), and, however the driver ends,
    the generation released and never left running."""
    req.scope[access_log.RECORD] = gen.record  # final when the request ends: its access-log line
    ticket = gen.recorder.ticket
    if ticket is not None and ticket.headers:
        req.extra_headers = ticket.headers
    if isinstance(gen, Generation) and gen.affinity is not None:  # docs/routing.md, prompt-cache affinity
        req.extra_headers = {**(req.extra_headers or {}), "x-route-affinity": gen.affinity.result}
    cancel_on_disconnect = gen.cancel if gen.record.idempotency_key is None else None
    try:
        async with DisconnectWatch(req, cancel_on_disconnect):
            yield
    finally:
        state.gateway.release(gen.id)
        if not gen.recorder.closed:  # a bug or a cancelled task ended the door early
            await asyncio.shield(gen.fail({"code": "upstream_error", "message": "the gateway ended the request"}))


async def serve_generation(req: Request, state: AppState, key: ApiKey, spec: DoorSpec) -> None:
    """A streaming-capable door's generation: `open_generation`, then the stream or JSON driver."""
    assert req.generation_id is not None
    generation_id = req.generation_id
    spec.request.session = session_hints(spec.door, spec.body, req.header("user-agent"))

    plan = await _cache_plan(req, state, key, spec)

    def start(idem: str | None, rhash: str | None) -> Awaitable[Generation]:
        if plan is not None and plan.entry is not None:
            args = (spec.door, key, spec.request, spec.model_type, idem, rhash)
            return response_cache(state).start_hit(state.gateway, plan, generation_id, *args)
        return state.gateway.start(
            generation_id=generation_id,
            door=spec.door,
            key=key,
            request=spec.request,
            model_type=spec.model_type,
            idempotency_key=idem,
            request_hash=rhash,
        )

    streaming = spec.request.stream
    gen = await open_generation(req, state, key, spec.door, spec.body, streaming, start)
    if gen is None:
        return
    async with running(req, state, gen):
        if plan is not None:
            req.extra_headers = {**(req.extra_headers or {}), "x-cache": plan.result}
        if streaming:
            writer = spec.make_stream(gen)
            if plan is not None and plan.entry is None:
                writer = CapturingWriter(writer, plan, response_cache(state))
            metrics.OPEN_STREAMS.inc()
            try:
                await drive_stream(req, state, gen, writer, spec.stream_headers, spec.content_type)
            except Exception:  # a bug anywhere in finishing: the door's failure ending all the same
                log.exception("generation %s: the stream driver failed", gen.id)
                await _end_broken(req, gen, writer)
            finally:
                metrics.OPEN_STREAMS.dec()
        else:
            builder = spec.make_json(gen)
            if plan is not None and plan.entry is None:
                builder = CapturingBuilder(builder, plan, response_cache(state))
            try:
                await drive_json(req, gen, builder)
            except Exception:
                log.exception("generation %s: the JSON driver failed", gen.id)
                await _end_broken(req, gen, None)
    if plan is not None:
        await response_cache(state).finish(plan, gen.record)
    await body_log.keep(state, key, gen.record, spec.body)  # off unless the key or model asks (body_log.py)


def response_cache(state: AppState) -> ResponseCache:
    if state.cache is None:
        state.cache = ResponseCache(cache_store(state.store), state.config.cache.max_total_bytes)
    return state.cache


async def _cache_plan(req: Request, state: AppState, key: ApiKey, spec: DoorSpec) -> CachePlan | None:
    """The response cache's part (gateway/cache.py); None, without a store call, when it is off."""
    model = state.config.models.get(spec.request.model)
    if (model is None or model.cache is None) and not key.cache:
        return None
    cache = response_cache(state)
    return await cache.plan(model, key, spec.door, spec.request.model, spec.body, req.header("cache-control"))


BROKEN = "the gateway failed to finish this answer"


async def _end_broken(req: Request, gen: Generation, writer: StreamWriter | None) -> None:
    """The invariant behind every generation (docs/api-edges.md §16): whatever raised, the record is final
    and the client gets its door's failure ending (a JSON 502 when nothing was written yet)."""
    if not gen.recorder.closed:
        await asyncio.shield(gen.fail({"code": "upstream_error", "message": BROKEN}))
    try:
        if not req.started:
            await req.respond_error(UpstreamError(BROKEN))
            return
        try:
            frame = writer.fail(Failed("upstream_error", BROKEN, gen.relay.provider or "")) if writer else b""
        except Exception:  # the renderer itself is what failed: end the body without a terminal event
            log.exception("generation %s: the failure ending could not be rendered", gen.id)
            frame = b""
        await req.write(frame, more=False)
    except Exception:  # the response had already ended (or the client is gone): nothing more to write
        log.debug("generation %s: no failure ending written", gen.id, exc_info=True)


FrameBatch = Callable[[list[Event]], tuple[bytes, "Failed | None"]]


def _renderer(req: Request, gen: Generation, writer: StreamWriter) -> tuple[FrameBatch, Callable[[list[Event]], bool]]:
    """The two ways a batch reaches the client: `frames_of`, for the driver's loop (observed,
    rendered, logged: one write per batch, one log entry per frame, up to its first `Failed`), and
    `direct`, the same for a plain batch in the upstream's protocol callback (the relay's `attach`;
    False: the write waits for the client, the next `req.write` finishes it, and batches go the
    loop's way again)."""
    # bound once, used per event; a generation that keeps no logs skips the frame log's call
    observe, render = gen.recorder.observe, writer.event
    log_frames = None
    if gen.recorder.keeps_logs:
        log_frames = gen.recorder.log_frame if writer.one_frame_per_event else gen.recorder.log_frames

    def frames_of(batch: list[Event]) -> tuple[bytes, Failed | None]:
        out: list[bytes] = []
        for event in batch:
            kind = type(event)  # events are final classes
            if kind is not RawFrame:  # the recorder takes nothing from the upstream's own bytes
                observe(event)
            if kind is Failed:
                return b"".join(out), event  # type: ignore[return-value]
            frames = render(event)
            if frames:
                if log_frames is not None:
                    log_frames(frames)
                out.append(frames)
        return out[0] if len(out) == 1 else b"".join(out), None

    def direct(batch: list[Event]) -> bool:
        data = frames_of(batch)[0]  # a plain batch: no `Failed` in it
        return req.write_now(data) if data else True

    return frames_of, direct


async def drive_stream(
    req: Request,
    state: AppState,
    gen: Generation,
    writer: StreamWriter,
    headers: dict[str, str],
    content_type: str = SSE_CONTENT_TYPE,
) -> None:
    """A stream's whole walk: the relay's items written as they come, then the ending."""
    try:
        failure = await _write_items(req, state, gen, writer, headers, content_type)
    except TidegateError as exc:
        if not req.started:
            await gen.fail({"code": exc.error_code, "message": exc.message})
            await req.respond_error(exc, {"x-provider-attempts": str(gen.relay.attempts)})
            return
        failure = Failed("upstream_error", exc.message, gen.relay.provider or "")
    await gen.recorder.estimate_off_loop()  # the ending may carry an estimate: never counted on the loop
    await _write_ending(req, gen, writer, failure)


async def _write_items(
    req: Request, state: AppState, gen: Generation, writer: StreamWriter, headers: dict[str, str], content_type: str
) -> Failed | None:
    """The relay's items to the client until its last or a `Failed`, which is returned. The
    response starts with the item after `Committed` (the relay hands both over in one step): the
    head, the writer's first frames and that item's go out together (`Request.start`)."""
    # a door whose keep-alive is an event of its own (Messages: `ping`, from `keepalive_tick`) sends no comment
    comment = encode_comment(state.config.server.keepalive_text) if getattr(writer, "comment_keepalives", True) else b""
    frames_of, direct = _renderer(req, gen, writer)
    relay = gen.relay
    head: dict[str, str] | None = None
    first = b""
    failure: Failed | None = None
    async with contextlib.aclosing(gen.items()) as items:
        async for item in items:
            if isinstance(item, Committed):
                head = {**provider_headers(item), **headers}
                first = writer.begin(item)
                if first:
                    gen.recorder.log_frames(first)
                continue
            if item is KEEPALIVE:
                metrics.KEEPALIVES.inc()
                tick = writer.keepalive_tick()
                if tick:
                    gen.recorder.log_frames(tick)
                data = tick + comment
            else:
                data, failure = frames_of(item)  # type: ignore[arg-type]
            if head is not None:
                await req.start(200, content_type, head, first + data)
                head, first = None, b""
            elif data:
                await req.write(data)
            if failure is not None:
                break
            if item is not KEEPALIVE and not req.write_held:
                relay.attach(direct)  # from now on plain batches skip this loop, until one does not
            del item, data  # not kept alive while the next one is awaited (memory per stream)
    if head is not None:  # never left unsent, though the relay always hands an item after `Committed`
        await req.start(200, content_type, head, first)
    return failure


async def _write_ending(req: Request, gen: Generation, writer: StreamWriter, failure: Failed | None) -> None:
    """The stream's last frame: the door's ending once the record is durable as completed
    (docs/api-operations.md §7), else its failure ending, as the record says."""
    if failure is None:
        final = writer.finish()
        if not isinstance(final, Failed):
            gen.recorder.log_frames(final)
            record = await _complete(gen, writer)  # durable before the terminal event is written
            if record.status == "completed":
                await req.write(final, more=False)
                return
            # not stored as completed (a lease sweep marked it interrupted meanwhile, or finishing
            # failed): the stream ends as the record says
            error = record.error or {}
            code: FailureCode = "interrupted" if error.get("code") == "interrupted" else "upstream_error"
            ended = Failed(code, str(error.get("message") or BROKEN), gen.relay.provider or "")
            await req.write(writer.fail(ended), more=False)
            return
        failure = final
    frame = writer.fail(failure)
    gen.recorder.log_frames(frame)
    await gen.fail(failure)
    await req.write(frame, more=False)


async def _complete(gen: Generation, ender: Any) -> GenerationRecord:
    """`gen.complete()`, alongside what the writer or builder must write before the answer's end
    goes out (its `settle`: the Responses door binds the ids an upstream handed out), then what needs
    the completed record (its `keep`: a cache miss stores its answer)."""
    settle = getattr(ender, "settle", None)
    pending = settle() if settle is not None else None
    if pending is None:
        record = await gen.complete()
    else:
        record, _ = await asyncio.gather(gen.complete(), pending)
    keep = getattr(ender, "keep", None)
    if keep is not None and record.status == "completed":
        await keep(record)
    return record


async def drive_json(req: Request, gen: Generation, builder: JsonBuilder) -> None:
    committed: Committed | None = None
    observe, add = gen.recorder.observe, builder.add

    def direct(batch: list[Event]) -> bool:
        """A plain batch added in the upstream's protocol callback (the relay's `attach`)."""
        for event in batch:
            observe(event)
            add(event)
        return True

    try:
        async with contextlib.aclosing(gen.items()) as items:
            async for item in items:
                if isinstance(item, Committed):
                    committed = item
                    builder.reset()
                    continue
                if item is KEEPALIVE:
                    continue
                batch: list[Event] = item  # type: ignore[assignment]
                for event in batch:
                    observe(event)
                    if isinstance(event, Failed):
                        await gen.fail(event)
                        await req.respond_error(as_error(event), provider_headers(committed) if committed else {})
                        return
                    add(event)
                gen.relay.attach(direct)  # plain batches from now on skip this loop
    except TidegateError as exc:
        await gen.fail({"code": exc.error_code, "message": exc.message})
        await req.respond_error(exc, {"x-provider-attempts": str(gen.relay.attempts)})
        return
    await gen.recorder.estimate_off_loop()
    body = builder.build()
    if isinstance(body, Failed) or committed is None:
        failure = body if isinstance(body, Failed) else Failed("upstream_error", "the upstream sent nothing")
        await gen.fail(failure)
        await req.respond_error(as_error(failure), provider_headers(committed) if committed else {})
        return
    gen.recorder.log_json(body)
    await _complete(gen, builder)
    await req.respond_bytes(200, body, "application/json", provider_headers(committed))
