"""The exact response cache (docs/api-edges.md §18): what an entry is keyed by, when an answer is
stored, and a hit served as a generation of its own whose one route replays the stored events.

An entry is keyed by the tenant (the key id), the door, the model and the request body without the
fields that do not change the answer, as canonical JSON (sorted keys), hashed with sha256. It holds
the answer's canonical events, so a hit is rendered by the door's own renderer (built frames, never
an upstream's raw bytes), with the events back to back, a piece of text at a time; the hits served
at once on one entry share one decoded copy (`SharedAnswer`). Only a complete answer is stored: the
record completed, no failure, not cut by a length limit, within `max_bytes` and `[cache]
max_total_bytes`; the store evicts the least recently used past the latter.
"""

from __future__ import annotations

import functools
import hashlib
import logging
import time
import weakref
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

import orjson

from .. import metrics
from ..config.model import CacheSettings, ModelConfig, Route
from ..doors import Door
from ..events import Event, Failed, Finished, RawFrame, Started, TextDelta
from ..records import CACHE_HIT_REASON, ApiKey, GenerationRecord, usage_dict
from ..request import GenerationRequest, WireFormat
from ..store.cache import CacheEntry, CacheStore, counts_of
from .cancel import CancelSignal
from .eventlog import decode_event, encode_event
from .generation import Gateway, Generation
from .relay import Relay, RelaySettings

log = logging.getLogger("tidegate.cache")

PROVIDER = "cache"
DOORS = frozenset((Door.CHAT, Door.RESPONSES, Door.NATIVE, Door.MESSAGES, Door.GEMINI))
# request fields that never change the answer: streaming, and hints about who asks
EXCLUDED = frozenset(
    ("stream", "stream_options", "user", "metadata", "prompt_cache_key", "client_metadata", "safety_identifier")
)
CUT = frozenset(("length", "max_tokens", "incomplete"))
PIECE = 16_384  # characters of text a hit's replay hands the door at a time


def entry_key(tenant: str, door: Door, model: str, body: Any) -> str:
    fields = {k: v for k, v in body.items() if k not in EXCLUDED} if isinstance(body, dict) else body
    canonical = orjson.dumps([tenant, door, model, fields], option=orjson.OPT_SORT_KEYS)
    return hashlib.sha256(canonical).hexdigest()


def settings_for(model: ModelConfig | None, key: ApiKey) -> CacheSettings | None:
    """The key's own setting wins over the model's (docs/api-edges.md §18); None: off."""
    own = key.cache
    if own is False:
        return None
    if isinstance(own, dict):
        return CacheSettings(float(own.get("ttl_s", 3600.0)), int(own.get("max_bytes", 1_048_576)))
    return model.cache if model is not None else None


def directives(cache_control: str | None) -> tuple[bool, bool]:
    """(no-cache, no-store) of a request's Cache-Control."""
    if not cache_control:
        return False, False
    parts = {p.strip().split("=")[0].lower() for p in cache_control.split(",")}
    return "no-cache" in parts, "no-store" in parts


@dataclass(slots=True)
class CachePlan:
    """One request's dealings with the cache, decided before its generation starts."""

    settings: CacheSettings
    entry_key: str
    model: str
    key_id: str
    door: Door
    store_answer: bool
    result: str = "miss"  # hit | miss | bypass (X-Cache)
    entry: CacheEntry | None = None  # a hit's entry, without its events (`answer` has them)
    answer: SharedAnswer | None = None
    events: list[Event] = field(default_factory=list)  # the answer's events, captured on a miss

    def capture(self, event: Event) -> None:
        if type(event) is not RawFrame:  # a passthrough's bytes come as canonical events too
            self.events.append(event)


class SharedAnswer:
    """One entry's decoded events, cut into pieces once (`_pieces`), shared by every hit on it served
    meanwhile (immutable: events are frozen, the tuple too): N clients, and their recorders, which
    keep references to the same pieces' text, hold one copy, not N."""

    __slots__ = ("__weakref__", "events", "generation_id", "text")

    def __init__(self, generation_id: str, events: tuple[Event, ...]) -> None:
        self.generation_id = generation_id
        self.events = events
        texts = [e.text for e in events if type(e) is TextDelta]
        self.text = (len(texts), "".join(texts))  # what a whole hit's record says (`Recorder.whole_text`)


def _pieces(events: Sequence[Event]) -> Iterator[Event]:
    """The events with each long text cut into `PIECE` characters (the same text, in more deltas)."""
    for event in events:
        if type(event) is TextDelta and len(event.text) > PIECE:
            text = event.text
            for at in range(0, len(text), PIECE):
                yield TextDelta(text[at : at + PIECE])
        else:
            yield event


class _Replay:
    """The shared events, read about `PIECE` characters of text at a time: the door writes each read
    before it takes the next, so a client that reads slowly (or never) holds up its own replay, and
    what waits for it is one piece, not the whole answer."""

    __slots__ = ("_events",)

    def __init__(self, events: Sequence[Event]) -> None:
        self._events: Iterator[Event] | None = iter(events)

    async def read(self) -> list[Event] | None:
        if self._events is None:
            return None
        batch: list[Event] = []
        budget = PIECE
        for event in self._events:
            batch.append(event)
            budget -= len(event.text) if type(event) is TextDelta else 64
            if budget <= 0:
                return batch
        self._events = None
        return batch or None

    async def aclose(self) -> None:
        self._events = None


class CacheProvider:
    """The one route of a hit: a provider named `cache` answering with the entry's events."""

    name = PROVIDER
    kind = PROVIDER
    speaks: frozenset[WireFormat] = frozenset()  # a hit's events are canonical: nothing goes as sent

    def __init__(self, events: Sequence[Event]) -> None:
        self.events = events

    async def open_chat(self, request: GenerationRequest, served_model: str) -> _Replay:
        return _Replay(self.events)

    async def aclose(self) -> None:
        return None


def _stored_events(events: list[Event]) -> list[Event]:
    """The events as stored: runs of text deltas of one choice joined (what was said, not how it came)."""
    out: list[Event] = []
    for event in events:
        last = out[-1] if out else None
        if (
            isinstance(event, TextDelta)
            and isinstance(last, TextDelta)
            and replace(last, text="") == replace(event, text="")
        ):
            out[-1] = replace(last, text=last.text + event.text)
        else:
            out.append(event)
    return out


def decode_events(data: bytes) -> tuple[Event, ...]:
    """The stored events as a hit replays them: served by `cache`, without the upstream's own id (a
    door that shows one, the Messages door's `msg_...`, makes a fresh one per hit from the hit's
    generation id)."""
    events = (decode_event(line) for line in data.split(b"\n") if line)
    return tuple(replace(e, provider=PROVIDER, upstream_id=None) if isinstance(e, Started) else e for e in events)


class ResponseCache:
    def __init__(self, store: CacheStore, max_total_bytes: int) -> None:
        self.store = store
        self.max_total_bytes = max_total_bytes
        # the entries being served now, by entry key: a hit on one reads the store without its events
        self._shared: weakref.WeakValueDictionary[str, SharedAnswer] = weakref.WeakValueDictionary()

    async def _lookup(self, plan: CachePlan) -> None:
        """The live entry (its last use moved on) and its shared events, onto `plan`."""
        now = time.time()
        shared = self._shared.get(plan.entry_key)
        entry = await self.store.get(plan.entry_key, now, events=shared is None)
        if entry is not None and shared is not None and shared.generation_id != entry.generation_id:
            shared, entry = None, await self.store.get(plan.entry_key, now)  # replaced meanwhile
        if entry is None:
            return
        if shared is None:
            shared = SharedAnswer(entry.generation_id, tuple(_pieces(decode_events(entry.events))))
            self._shared[plan.entry_key] = shared
        plan.entry = replace(entry, events=b"", size=entry.size or len(entry.events))  # not kept per request
        plan.answer = shared

    async def plan(
        self,
        model: ModelConfig | None,
        key: ApiKey,
        door: Door,
        public_model: str,
        body: Any,
        cache_control: str | None,
    ) -> CachePlan | None:
        """None when the cache is off for this model and key (nothing else is done, nothing counted)."""
        settings = settings_for(model, key) if door in DOORS else None
        if settings is None:
            return None
        no_cache, no_store = directives(cache_control)
        ekey = entry_key(key.id, door, public_model, body)
        plan = CachePlan(settings, ekey, public_model, key.id, door, store_answer=not no_store)
        if no_cache:
            plan.result = "bypass"
            return plan
        try:
            await self._lookup(plan)
        except Exception:  # the cache is an optimisation: a store failure is a miss
            log.warning("cache lookup failed", exc_info=True)
            plan.entry = plan.answer = None
        if plan.entry is not None:
            plan.result = "hit"
        return plan

    async def start_hit(
        self,
        gateway: Gateway,
        plan: CachePlan,
        generation_id: str,
        door: Door,
        key: ApiKey,
        request: GenerationRequest,
        model_type: str,
        idempotency_key: str | None,
        request_hash: str | None,
    ) -> Generation:
        """A hit's generation: admitted like any (limits, a 429), recorded, its one route the entry."""
        entry, answer = plan.entry, plan.answer
        assert entry is not None and answer is not None
        model = gateway.router.model(request.model, model_type)
        ticket = await gateway.admission.admit(key, model, request.model, generation_id, request)
        reason = CACHE_HIT_REASON + entry.generation_id
        recorder = await gateway._begin(
            generation_id,
            door,
            key,
            model,
            request.model,
            request.messages,
            idempotency_key,
            request_hash,
            ticket,
            reason,
            request.session,
        )
        recorder.pricing = None  # a hit costs nothing
        recorder.whole_text = answer.text
        server = gateway.config.server
        settings = RelaySettings(streaming=request.stream, keepalive_s=server.keepalive_s)
        served = str(entry.usage.get("served_model") or request.model)
        cancel = CancelSignal()
        relay = Relay(request, [(CacheProvider(answer.events), Route(PROVIDER, served))], settings, cancel)
        gen = Generation(
            id=generation_id,
            key=key,
            request=request,
            model=model,
            recorder=recorder,
            relay=relay,
            cancel=cancel,
            created=int(recorder.record.created_at),
        )
        gateway.running[gen.id] = gen
        metrics.RUNNING.inc()
        return gen

    async def finish(self, plan: CachePlan, record: GenerationRecord) -> None:
        """After the answer: count the request (a miss's answer was kept before its end: `keep`)."""
        entry = plan.entry
        size = entry.size if entry is not None else 0
        saved = entry.cost if entry is not None else 0.0
        metrics.CACHE_REQUESTS.labels(plan.model, plan.result).inc()
        if plan.result == "hit":
            metrics.CACHE_BYTES.inc(size)
            metrics.CACHE_SAVED_COST.labels(plan.model).inc(saved)
        try:
            await self.store.count(plan.model, plan.key_id, counts_of(plan.result, size, saved), time.time())
        except Exception:
            log.warning("cache count for generation %s failed", record.id, exc_info=True)

    async def keep(self, plan: CachePlan, record: GenerationRecord) -> None:
        """A miss's complete answer into the store. The door calls it (`CapturingWriter.keep`,
        `CapturingBuilder.keep`) when the record is complete, before the answer's end goes out: the same
        request sent once the client has its answer is a hit, on every instance sharing the store."""
        if not plan.store_answer:
            return
        try:
            await self._store(plan, record)
        except Exception:
            log.warning("cache write for generation %s failed", record.id, exc_info=True)

    async def _store(self, plan: CachePlan, record: GenerationRecord) -> None:
        events = plan.events
        if record.status != "completed" or record.provider == PROVIDER or not events:
            return
        if any(type(e) is Failed for e in events) or any(type(e) is Finished and e.reason in CUT for e in events):
            return
        if record.finish_reason in CUT:
            return
        data = b"\n".join(encode_event(e) for e in _stored_events(events))
        if len(data) > min(plan.settings.max_bytes, self.max_total_bytes):
            return
        now = time.time()
        usage: dict[str, Any] = {**usage_dict(record.usage), "served_model": record.served_model}
        entry = CacheEntry(
            plan.entry_key,
            plan.key_id,
            plan.model,
            plan.door,
            now,
            now + plan.settings.ttl_s,
            record.id,
            usage,
            record.cost,
            data,
        )
        evicted = await self.store.put(entry, self.max_total_bytes)
        if evicted:
            metrics.CACHE_EVICTIONS.inc(evicted)


class CapturingWriter:
    """A miss's stream writer: each event rendered is also kept for the entry (a list append; only
    generations with the cache on are wrapped)."""

    def __init__(self, writer: Any, plan: CachePlan, cache: ResponseCache) -> None:
        self.writer = writer
        self.keep = functools.partial(cache.keep, plan)
        self.one_frame_per_event: bool = writer.one_frame_per_event
        self.comment_keepalives: bool = getattr(writer, "comment_keepalives", True)
        self._capture = plan.capture
        self._event = writer.event
        self.begin, self.keepalive_tick, self.finish, self.fail = (
            writer.begin,
            writer.keepalive_tick,
            writer.finish,
            writer.fail,
        )
        self.settle = getattr(writer, "settle", None)

    def event(self, event: Event) -> Any:
        self._capture(event)
        return self._event(event)


class CapturingBuilder:
    """A miss's JSON builder: each event added is also kept (a new route forgets them with the builder's)."""

    def __init__(self, builder: Any, plan: CachePlan, cache: ResponseCache) -> None:
        self.builder, self.plan = builder, plan
        self.keep = functools.partial(cache.keep, plan)
        self.build = builder.build
        self.settle = getattr(builder, "settle", None)

    def reset(self) -> None:
        self.plan.events.clear()
        self.builder.reset()

    def add(self, event: Event) -> None:
        self.plan.capture(event)
        self.builder.add(event)
