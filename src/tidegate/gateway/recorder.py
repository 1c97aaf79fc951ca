"""The recorder: watches a generation's canonical events and keeps its record in the store.

It keeps two logs per generation: the door's wire frames (index = SSE `id`, for resume and same-door
replay) and the canonical events (for replay in the native format). Both are flushed off the hot path
by one owned task at least every 250 ms; `finish` writes the rest with the terminal state (one store
write), after any batch the flusher has in flight.

The event log keeps what was said, not how the upstream chunked it: a run of text deltas (or of one
reasoning block's readable deltas) is logged as one event when it is flushed. Encoding an event cost
more than the rest of a keyed chunk's log together, and nothing reads the event log per chunk (the
frame log serves resume, byte for byte). Frames stay in memory only until a flush stored them (a live
follower reads older ones from the store): a long keyed stream does not hold its whole answer.
"""

from __future__ import annotations

import asyncio
import logging
import time
from array import array
from dataclasses import dataclass, field, replace
from itertools import accumulate
from typing import Any

import orjson

from .. import metrics, tracing
from ..config.model import Pricing
from ..events import (
    Event,
    Failed,
    Finished,
    RawFrame,
    ReasoningDelta,
    Started,
    TextDelta,
    ToolCallDelta,
    UsageReport,
)
from ..records import (
    INTERRUPTED_ERROR,
    LOG_COMMIT,
    LOG_EVENT,
    LOG_FRAME,
    LOG_JSON,
    GenerationRecord,
    LogRun,
    Usage,
    usage_of,
)
from ..store.base import RecordsAndLogs
from .admission import Ticket
from .eventlog import encode_event
from .flusher import LogFlusher
from .usage import cost_of, estimate_usage, rough_usage, tokenizer_loaded, tokenizer_ready

_log = logging.getLogger("tidegate.recorder")
# the pace's samples kept (a flusher round each: 48 s of stream at 0.2 s); past that every other one goes
PACE_SAMPLES = 240


@dataclass(slots=True)
class Recorder:
    store: RecordsAndLogs
    record: GenerationRecord
    messages: list[dict[str, Any]]
    pricing: Pricing | None
    ticket: Ticket | None = None  # the key's claim, settled with the record's cost (gateway/admission.py)
    span: Any = None  # the generation's trace span when tracing is on (tracing.py)
    started_at: float = field(default_factory=time.monotonic)
    text: list[str] = field(default_factory=list)
    reasoning: list[str] = field(default_factory=list)
    tool_args: list[str] = field(default_factory=list)
    usage: UsageReport | None = None
    finish_reason: str | None = None
    # the gateway's stop ended it (`interrupt_all`): the stop is bounded (docs/api-operations.md §10),
    # so its estimate never waits for the tokenizer's first load, seconds on a loaded machine
    stopping: bool = False
    # a cache hit's (text deltas, their text joined): the entry's own text, shared by its hits
    whole_text: tuple[int, str] | None = None
    _first_token_at: float | None = None
    frames: list[bytes] = field(default_factory=list)  # the frames not yet known stored (followers read them)
    frames_base: int = 0  # the index (SSE id) of `frames[0]`: the ones before it are only in the store
    closed: bool = False
    _frames_flushed: int = 0  # frames before this index are in the store (or in a write on its way)
    _events: list[bytes] = field(default_factory=list)  # encoded events not yet handed to the store
    _events_flushed: int = 0  # the seq of `_events[0]`
    _run_head: TextDelta | ReasoningDelta | None = None  # the first delta of a run not yet encoded
    _run_from: int = 0  # where the run's texts start in `text` (or in `reasoning`)
    _json: bytes | None = None
    _commit: bytes | None = None  # who serves, not yet handed to the store
    _commits: int = 0  # commits logged (an MCP loop commits once per turn)
    _flusher: LogFlusher | None = None
    _flushing: asyncio.Future[None] | None = None  # the flusher's batch being written
    _changed: asyncio.Event | None = None
    # (ms since the request, text deltas, reasoning deltas) per flusher round; characters at the end
    _pace: array[int] = field(default_factory=lambda: array("i"))

    def start_flushing(self, flusher: LogFlusher) -> None:
        """From now on the shared flusher visits this generation each round (its record is durable):
        it samples the pace, and writes the logs of one that keeps them (the others never have any)."""
        self._flusher = flusher
        flusher.register(self.record.id, self)

    def sample_pace(self, now: float) -> None:
        """How many deltas had come by `now` (`time.monotonic()`): the flusher's round calls it, never
        a chunk. A run of unchanged samples keeps only its two ends (a pause); a long stream's samples
        thin to every other one, so the pace stays at most PACE_SAMPLES long."""
        pace = self._pace
        if not pace:
            return  # nothing came yet: the pace starts at the first token (`_mark_first_token`)
        text, reasoning = len(self.text), len(self.reasoning)
        ms = int((now - self.started_at) * 1000)
        if len(pace) >= 6 and pace[-2] == pace[-5] == text and pace[-1] == pace[-4] == reasoning:
            pace[-3] = ms
            return
        if len(pace) >= 3 * PACE_SAMPLES:
            self._pace = pace = array("i", [v for i in range(0, len(pace), 6) for v in pace[i : i + 3]])
        pace.extend((ms, text, reasoning))

    def _pace_in_characters(self) -> list[list[int]]:
        """The record's `pace`: each sample's delta counts as characters of the answer and reasoning."""
        text_ends, reasoning_ends = [0, *accumulate(map(len, self.text))], [0, *accumulate(map(len, self.reasoning))]
        pace = self._pace
        return [[pace[i], text_ends[pace[i + 1]], reasoning_ends[pace[i + 2]]] for i in range(0, len(pace), 3)]

    @property
    def frames_logged(self) -> int:
        """How many frames were logged: the next frame's index."""
        return self.frames_base + len(self.frames)

    @property
    def has_pending(self) -> bool:
        return (
            self.frames_logged > self._frames_flushed
            or bool(self._events)
            or self._run_head is not None
            or self._json is not None
            or self._commit is not None
        )

    def _end_text_run(self) -> None:
        """The pending run of deltas becomes one logged event: its head with all the run's text."""
        head = self._run_head
        if head is not None:
            texts = self.text if isinstance(head, TextDelta) else self.reasoning
            start = self._run_from
            merged = head if len(texts) == start + 1 else replace(head, text="".join(texts[start:]))
            self._events.append(encode_event(merged))
            self._run_head = None

    def _start_run(self, head: TextDelta | ReasoningDelta, start: int) -> None:
        self._end_text_run()
        self._run_head = head
        self._run_from = start

    def _take_log(self) -> list[LogRun]:
        """What the store does not have yet, one run per kind (`_restore_log` puts it back)."""
        self._end_text_run()
        runs: list[LogRun] = []
        start, logged = self._frames_flushed, self.frames_logged
        if logged > start:
            runs.append(LogRun(LOG_FRAME, start, self.frames[start - self.frames_base :]))
            self._frames_flushed = logged
        if self._events:
            runs.append(LogRun(LOG_EVENT, self._events_flushed, self._events))
            self._events_flushed += len(self._events)
            self._events = []
        if self._json is not None:
            runs.append(LogRun(LOG_JSON, 0, [self._json]))
            self._json = None
        if self._commit is not None:
            runs.append(LogRun(LOG_COMMIT, self._commits, [self._commit]))
            self._commits += 1
            self._commit = None
        return runs

    def _restore_log(self, runs: list[LogRun]) -> None:
        """A write of `runs` failed: they are pending again, ahead of what was logged meanwhile."""
        for run in runs:
            if run.kind == LOG_FRAME:
                self._frames_flushed = run.first_seq
            elif run.kind == LOG_EVENT:
                self._events[:0] = run.items
                self._events_flushed = run.first_seq
            elif run.kind == LOG_COMMIT:
                self._commits = run.first_seq
                self._commit = self._commit or run.items[0]
            elif self._json is None:
                self._json = run.items[0]

    async def flush(self) -> None:
        if self.has_pending:
            runs = self._take_log()
            self._flushing = written = asyncio.get_running_loop().create_future()
            try:
                await self.store.append_log(self.record.id, runs)
            except BaseException:
                self._restore_log(runs)  # kept for the next round (or the final write)
                raise
            finally:
                self._flushing = None
                written.set_result(None)
            self._let_go_of_stored_frames()

    def _let_go_of_stored_frames(self) -> None:
        """Frames the store holds leave memory: a long keyed stream keeps at most a flush interval's
        frames, not its whole answer (a follower reads the older ones from the store)."""
        stored = self._frames_flushed - self.frames_base
        if stored > 0:
            del self.frames[:stored]
            self.frames_base = self._frames_flushed

    @property
    def keeps_logs(self) -> bool:
        """Logs serve resume and replay, and both are reached only through the Idempotency-Key: a
        generation without one keeps its record but writes no per-chunk logs (the hot path's cost)."""
        return self.record.idempotency_key is not None

    def log_frames(self, data: bytes) -> None:
        """Record wire frames (one or more complete SSE events) as they are written."""
        if not self.keeps_logs:
            return
        if data.find(b"\n\n") == len(data) - 2:  # one frame (one event's render, the usual call): as it is
            self.frames.append(data)
        else:
            self.frames += [part + b"\n\n" for part in data.split(b"\n\n") if part]
        self._notify()

    def log_frame(self, frame: bytes) -> None:
        """Record one complete wire frame (a writer that renders one frame per event)."""
        self.frames.append(frame)
        self._notify()

    def committed(self, provider: str, served_model: str, attempts: int) -> None:
        """The answer committed (the relay's call, once per turn): who serves is logged with the next
        flush, so a record whose gateway dies keeps provider, served model and attempts."""
        if self.keeps_logs:
            entry = {"provider": provider, "served_model": served_model, "attempts": attempts}
            self._commit = orjson.dumps(entry)

    def log_json(self, body: bytes) -> None:
        if self.keeps_logs:
            self._json = body

    def _notify(self) -> None:
        if self._changed is not None:  # only when someone follows this generation live
            self._changed.set()
            self._changed = None

    async def wait_changed(self) -> None:
        if not self.closed:
            if self._changed is None:
                self._changed = asyncio.Event()
            await self._changed.wait()

    def observe(self, event: Event) -> None:
        if isinstance(event, TextDelta):  # first: most events are
            if self.record.idempotency_key is not None and type(self._run_head) is not TextDelta:
                self._start_run(event, len(self.text))  # (keeps_logs, without a property call per event)
            if self._first_token_at is None:
                self._mark_first_token()
            self.text.append(event.text)
            return
        if isinstance(event, RawFrame):  # the upstream's own bytes: what it carries comes as events too
            return  # (nothing: the door's direct writer does not hand these here at all)
        if self.record.idempotency_key is not None:
            self._log_event(event)
        if isinstance(event, ReasoningDelta):
            self._mark_first_token()
            if event.kind != "encrypted":
                self.reasoning.append(event.text)
        elif isinstance(event, ToolCallDelta):
            self._mark_first_token()
            self.tool_args.append(event.arguments)
        elif isinstance(event, UsageReport):
            self.usage = event
        elif isinstance(event, Finished):
            self.finish_reason = event.reason
        elif isinstance(event, Started):
            self.record.provider = event.provider
            self.record.served_model = event.served_model

    def _log_event(self, event: Event) -> None:
        """Into the event log (text deltas join their run in `observe`): a readable reasoning delta
        of the same block and kind joins the run it continues; any other event ends the run and is
        encoded as it comes."""
        if (
            isinstance(event, ReasoningDelta)
            and event.kind != "encrypted"  # (`reasoning` holds the texts of the other kinds)
            and event.signature is None
            and event.data is None
        ):
            head = self._run_head
            if not (isinstance(head, ReasoningDelta) and head.kind == event.kind and head.index == event.index):
                self._start_run(event, len(self.reasoning))
            return
        self._end_text_run()
        self._events.append(encode_event(event))

    def _mark_first_token(self) -> None:
        if self._first_token_at is None:
            self._first_token_at = time.monotonic()
            self.record.ttft_ms = round((self._first_token_at - self.started_at) * 1000, 3)
            self._pace.extend((int(self.record.ttft_ms), 0, 0))

    @property
    def produced(self) -> bool:
        """Whether anything (text, reasoning, tool arguments, usage) came from the upstream."""
        return bool(self.text or self.reasoning or self.tool_args or self.usage)

    @property
    def output_text(self) -> str:
        whole = self.whole_text
        if whole is not None and len(self.text) == whole[0]:
            return whole[1]  # a whole cache hit: one string for every hit, not a join (a copy) each
        return "".join(self.text)

    def final_usage(self) -> UsageReport:
        """The provider's usage, or an estimate from what was generated so far (`estimate_off_loop`
        computes it first where it is awaited; this is the fallback in place)."""
        if self.usage is None:
            self.usage = self._estimate()
        return self.usage

    def _generated(self) -> tuple[str, str]:
        """What the estimate counts: the answer with its tool arguments, and the reasoning."""
        return self.output_text + "".join(self.tool_args), "".join(self.reasoning)

    def _estimate(self) -> UsageReport:
        output, reasoning = self._generated()
        try:
            return estimate_usage(self.messages, output, reasoning)
        except Exception:  # never a reason for a generation not to end and be billed
            _log.exception("usage estimation failed for %s; billing ~4 characters a token", self.record.id)
            return rough_usage(self.messages, output, reasoning)

    async def estimate_off_loop(self) -> None:
        """When the provider sent no usage: the tokenizer loaded and the estimate counted on a thread
        (a large prompt takes a good part of a second, which the event loop must not wait for)."""
        if self.usage is not None:
            return
        if self.stopping and not tokenizer_loaded():
            self.usage = rough_usage(self.messages, *self._generated())
            return
        await tokenizer_ready()
        if self.usage is None:
            estimate = await asyncio.to_thread(self._estimate)
            if self.usage is None:  # the provider's usage may have arrived meanwhile: it wins
                self.usage = estimate

    async def save_progress(self) -> None:
        """The record as it stands, stored while it runs (still `in_progress`): what a crash leaves
        for the lease sweep to mark `interrupted` (a buffered MCP loop's calls so far, docs/api-operations.md §13).
        A failed write is logged and left for the final one."""
        try:
            await self.store.update_generation(self.record)
        except Exception:
            _log.warning("storing generation %s's progress failed", self.record.id, exc_info=True)

    async def finish(
        self,
        status: str,
        *,
        provider: str | None = None,
        served_model: str | None = None,
        attempts: int = 0,
        error: Failed | dict[str, Any] | None = None,
        prompt_taken: bool = False,
    ) -> GenerationRecord:
        """`prompt_taken`: an upstream accepted the request (answered 2xx), so its prompt is billed."""
        rec = self.record
        self.sample_pace(time.monotonic())  # the stream's end: the pace's last sample
        try:
            await self._outcome(status, provider, served_model, attempts, error, prompt_taken)
        except Exception:  # whatever failed, the generation still ends and its record is final
            _log.exception("finishing generation %s failed; it is recorded as failed", rec.id)
            rec.status, rec.finish_reason = "failed", "error"
            rec.error = {"code": "upstream_error", "message": "the gateway failed to finish this generation"}
            if self.produced and not rec.cost:
                usage = rough_usage(self.messages, self.output_text, "".join(self.reasoning))
                rec.usage = Usage(usage.prompt, usage.completion, usage.total, usage.reasoning, None)
                rec.usage_estimated, rec.cost = True, round(cost_of(usage, self.pricing), 10)
        rec.duration_ms = round((time.monotonic() - self.started_at) * 1000, 3)
        if self._flusher is not None:
            self._flusher.unregister(self.record.id)
            self._flusher = None
        if self._flushing is not None:  # the flusher's batch lands first: the log stays in order
            await asyncio.shield(self._flushing)
        log = self._take_log()
        try:
            applied = await self.store.update_generation(rec, log)  # the rest of the log with the outcome
        except BaseException:
            self._restore_log(log)
            raise
        if not applied:  # a lease sweep got there first (this gateway was paused past its lease)
            _log.warning(
                "generation %s was marked interrupted while it ran here; its outcome %s is not stored", rec.id, status
            )
            rec.status, rec.finish_reason, rec.error = "interrupted", "error", dict(INTERRUPTED_ERROR)
        metrics.REQUESTS.labels(rec.door, rec.model, rec.provider or "", rec.status).inc()
        if rec.status != "completed":
            error = rec.error or {}
            provider = rec.provider or str(error.get("provider") or "")
            metrics.STREAM_FAILURES.labels(str(error.get("code") or rec.status), provider).inc()
        metrics.CHUNKS.labels(rec.model).inc(len(self.text) + len(self.reasoning) + len(self.tool_args))
        metrics.TOKENS.labels(rec.model, "prompt").inc(rec.usage.prompt_tokens)
        metrics.TOKENS.labels(rec.model, "completion").inc(rec.usage.completion_tokens)
        if rec.cost:
            metrics.COST.labels(rec.model).inc(rec.cost)
        if rec.ttft_ms is not None:
            metrics.TTFT.labels(rec.model).observe(rec.ttft_ms / 1000)
        metrics.DURATION.labels(rec.model, rec.status).observe(rec.duration_ms / 1000)
        if rec.attempts > 1 and rec.status == "completed":
            metrics.FALLBACKS.labels(rec.model).inc()
        self.closed = True
        self._notify()
        if self.span is not None:
            tracing.end_generation(self.span, rec)
        if self.ticket is not None:
            try:
                await self.ticket.settle(rec.cost, rec.usage.total_tokens)
            except Exception:  # the record is final; a key's counters must not turn that into a failure
                _log.exception("settling generation %s on key %s failed", rec.id, rec.key_id)
        return rec

    async def _outcome(
        self,
        status: str,
        provider: str | None,
        served_model: str | None,
        attempts: int,
        error: Failed | dict[str, Any] | None,
        prompt_taken: bool = False,
    ) -> None:
        """The record's outcome fields: status, who served, the output, usage and cost, the error."""
        rec = self.record
        rec.status = status
        if provider:
            rec.provider = provider
        if served_model:
            rec.served_model = served_model
        rec.attempts = attempts
        rec.output_text = self.output_text
        rec.reasoning_text = "".join(self.reasoning)
        rec.pace = self._pace_in_characters() if self._pace else None
        rec.finish_reason = self.finish_reason if status == "completed" else (self.finish_reason or "error")
        if status != "completed" and rec.finish_reason != "error":
            rec.finish_reason = "error"
        # An upstream that accepted the request (answered 2xx) has processed the prompt and bills
        # it, whatever happens next (a silence, a broken stream, a cancel); one that answered an
        # error status did not, and errors are not billed.
        if self.produced or status == "completed" or provider or prompt_taken:
            await self.estimate_off_loop()
            usage = self.final_usage()
            rec.usage = usage_of(usage)
            rec.usage_estimated = usage.estimated
            rec.cost = round(cost_of(usage, self.pricing), 10)
        if isinstance(error, Failed):
            rec.error = {"code": error.code, "message": error.message, "provider": error.provider}
        elif error is not None:
            rec.error = error
