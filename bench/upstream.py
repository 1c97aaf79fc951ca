"""A fast upstream emulator for the benchmarks: OpenAI chat chunks and Anthropic Messages events.

A raw asyncio protocol on uvloop with httptools (no web framework), so that it is never the
bottleneck. Every response streams a fixed answer; its shape comes from the request:

- the model id contains `bench-<chunks>x<delay_ms>` (e.g. `bench-50x20`, `anth/bench-2000x0`), or
- headers `x-bench-chunks` / `x-bench-delay-ms` override it (direct use).

Content chunk i is written at t0 + i * delay_ms (an absolute schedule: no drift), the first at once.
`POST /v1/chat/completions` answers OpenAI `chat.completion.chunk` SSE (role chunk, content chunks,
finish chunk, a usage chunk when `stream_options.include_usage`, `data: [DONE]`) or one JSON
completion when `stream` is false. `POST /v1/messages` answers Anthropic Messages events (or one
JSON message). `POST /v1beta/models/{model}:streamGenerateContent` answers Gemini chunks
(upstream_gemini.py), `POST /v1/responses` Responses API events (upstream_responses.py; streams
only). `GET /stats` reports the emulator's own counters and CPU time.

Run: `python bench/upstream.py --port 9100` (prints `READY <port>` when listening).
"""

from __future__ import annotations

import argparse
import asyncio
import itertools
import os
import re
import resource
import signal
import sys
import time
from collections.abc import Callable
from typing import Any
from urllib.parse import unquote

import httptools
import orjson
import uvloop
from upstream_gemini import GeminiShape
from upstream_responses import ResponsesShape

WORDS = [b" tide", b" gate", b" flows", b" fast", b" over", b" the", b" quiet", b" sand"]
MODEL_SHAPE = re.compile(r"bench-(\d+)x(\d+(?:\.\d+)?)")
DEFAULT_SHAPE = (50, 20.0)
GEMINI_PATH = re.compile(rb"^/v1beta/models/([^/:]+):streamGenerateContent$")
_ids = itertools.count(1)


class Stats:
    requests = 0
    streams_open = 0
    streams_max_open = 0
    chunks_written = 0
    streams_aborted = 0
    bad_requests = 0


def shape_of(model: str, headers: dict[bytes, bytes]) -> tuple[int, float]:
    chunks, delay = DEFAULT_SHAPE
    m = MODEL_SHAPE.search(model)
    if m:
        chunks, delay = int(m.group(1)), float(m.group(2))
    if b"x-bench-chunks" in headers:
        chunks = int(headers[b"x-bench-chunks"])
    if b"x-bench-delay-ms" in headers:
        delay = float(headers[b"x-bench-delay-ms"])
    return max(1, chunks), max(0.0, delay)


def http_chunk(payload: bytes) -> bytes:
    return b"%x\r\n%b\r\n" % (len(payload), payload)


def _head(status: str, ctype: bytes, extra: bytes = b"") -> bytes:
    return b"HTTP/1.1 " + status.encode() + b"\r\ncontent-type: " + ctype + b"\r\nx-request-id: bench\r\n" + extra


def _json_response(status: str, body: bytes, keep_alive: bool) -> bytes:
    conn = b"keep-alive" if keep_alive else b"close"
    return (
        _head(status, b"application/json", b"content-length: %d\r\nconnection: %b\r\n\r\n" % (len(body), conn)) + body
    )


class OpenAIShape:
    """Frames of one OpenAI chat stream, precomputed per request."""

    def __init__(self, model: str, include_usage: bool, chunks: int) -> None:
        cid = f"chatcmpl-bench{next(_ids)}".encode()
        created = str(int(time.time())).encode()
        usage_null = b',"usage":null' if include_usage else b""
        pre = (
            b'data: {"id":"'
            + cid
            + b'","object":"chat.completion.chunk","created":'
            + created
            + b',"model":'
            + orjson.dumps(model)
            + b',"system_fingerprint":"fp_bench","choices":[{"index":0,"delta":'
        )
        post = b',"logprobs":null,"finish_reason":null}]' + usage_null + b"}\n\n"
        self.first = [http_chunk(pre + b'{"role":"assistant","content":"","refusal":null}' + post)]
        self.content = [http_chunk(pre + b'{"content":"' + w + b'"}' + post) for w in WORDS]
        last = [http_chunk(pre + b'{},"logprobs":null,"finish_reason":"stop"}]' + usage_null + b"}\n\n")]
        if include_usage:
            usage = orjson.dumps(
                {
                    "prompt_tokens": 12,
                    "completion_tokens": chunks,
                    "total_tokens": 12 + chunks,
                    "prompt_tokens_details": {"cached_tokens": 0, "audio_tokens": 0},
                    "completion_tokens_details": {"reasoning_tokens": 0, "audio_tokens": 0},
                }
            )
            last.append(
                http_chunk(
                    b'data: {"id":"'
                    + cid
                    + b'","object":"chat.completion.chunk","created":'
                    + created
                    + b',"model":'
                    + orjson.dumps(model)
                    + b',"system_fingerprint":"fp_bench","choices":[],"usage":'
                    + usage
                    + b"}\n\n"
                )
            )
        last.append(http_chunk(b"data: [DONE]\n\n"))
        last.append(b"0\r\n\r\n")
        self.last = last

    @staticmethod
    def completion(model: str, chunks: int) -> bytes:
        text = b"".join(WORDS[i % len(WORDS)] for i in range(chunks)).decode()
        return orjson.dumps(
            {
                "id": f"chatcmpl-bench{next(_ids)}",
                "object": "chat.completion",
                "created": int(time.time()),
                "model": model,
                "system_fingerprint": "fp_bench",
                "choices": [
                    {
                        "index": 0,
                        "message": {"role": "assistant", "content": text, "refusal": None},
                        "logprobs": None,
                        "finish_reason": "stop",
                    }
                ],
                "usage": {"prompt_tokens": 12, "completion_tokens": chunks, "total_tokens": 12 + chunks},
            }
        )


class AnthropicShape:
    """Frames of one Anthropic Messages stream, precomputed per request."""

    def __init__(self, model: str, chunks: int) -> None:
        mid = f"msg_bench{next(_ids)}"

        def ev(name: str, data: dict[str, Any]) -> bytes:
            return http_chunk(b"event: " + name.encode() + b"\ndata: " + orjson.dumps(data) + b"\n\n")

        start = {
            "type": "message_start",
            "message": {
                "id": mid,
                "type": "message",
                "role": "assistant",
                "content": [],
                "model": model,
                "stop_reason": None,
                "stop_sequence": None,
                "usage": {"input_tokens": 12, "output_tokens": 1},
            },
        }
        self.first = [
            ev("message_start", start),
            ev(
                "content_block_start",
                {"type": "content_block_start", "index": 0, "content_block": {"type": "text", "text": ""}},
            ),
            ev("ping", {"type": "ping"}),
        ]
        self.content = [
            ev(
                "content_block_delta",
                {"type": "content_block_delta", "index": 0, "delta": {"type": "text_delta", "text": w.decode()}},
            )
            for w in WORDS
        ]
        self.last = [
            ev("content_block_stop", {"type": "content_block_stop", "index": 0}),
            ev(
                "message_delta",
                {
                    "type": "message_delta",
                    "delta": {"stop_reason": "end_turn", "stop_sequence": None},
                    "usage": {"output_tokens": chunks},
                },
            ),
            ev("message_stop", {"type": "message_stop"}),
            b"0\r\n\r\n",
        ]

    @staticmethod
    def message(model: str, chunks: int) -> bytes:
        text = b"".join(WORDS[i % len(WORDS)] for i in range(chunks)).decode()
        return orjson.dumps(
            {
                "id": f"msg_bench{next(_ids)}",
                "type": "message",
                "role": "assistant",
                "model": model,
                "content": [{"type": "text", "text": text}],
                "stop_reason": "end_turn",
                "stop_sequence": None,
                "usage": {"input_tokens": 12, "output_tokens": chunks},
            }
        )


class StreamJob:
    """Writes one paced (or unpaced, flow-controlled) SSE response on a connection."""

    __slots__ = ("chunks", "delay", "done_cb", "finished", "handle", "i", "proto", "shape", "t0")

    def __init__(
        self,
        proto: EmulatorProtocol,
        shape: OpenAIShape | AnthropicShape | GeminiShape | ResponsesShape,
        chunks: int,
        delay_ms: float,
        done_cb: Callable[[], None],
    ) -> None:
        self.proto = proto
        self.shape = shape
        self.chunks = chunks
        self.delay = delay_ms / 1000.0
        self.i = 0
        self.handle: asyncio.TimerHandle | None = None
        self.done_cb = done_cb
        self.finished = False
        loop = asyncio.get_running_loop()
        self.t0 = loop.time()

    def start(self) -> None:
        Stats.streams_open += 1
        Stats.streams_max_open = max(Stats.streams_max_open, Stats.streams_open)
        self.proto.write(b"".join(self.shape.first))
        self.step()

    def step(self) -> None:
        self.handle = None
        proto = self.proto
        if proto.closed:
            self.finish(aborted=True)
            return
        content = self.shape.content
        n = len(content)
        if self.delay == 0.0:
            while self.i < self.chunks and not proto.paused:
                proto.write(content[self.i % n])
                self.i += 1
            if self.i < self.chunks:
                proto.on_resume = self.step
                return
        else:
            proto.write(content[self.i % n])
            self.i += 1
            if self.i < self.chunks:
                loop = asyncio.get_running_loop()
                self.handle = loop.call_at(self.t0 + self.i * self.delay, self.step)
                return
        proto.write(b"".join(self.shape.last))
        self.finish(aborted=False)

    def finish(self, aborted: bool) -> None:
        if self.finished:
            return
        self.finished = True
        Stats.streams_open -= 1
        Stats.streams_aborted += aborted
        Stats.chunks_written += self.i
        if self.handle is not None:
            self.handle.cancel()
            self.handle = None
        self.done_cb()


class EmulatorProtocol(asyncio.Protocol):
    def __init__(self) -> None:
        self.transport: asyncio.Transport | None = None
        self.parser = httptools.HttpRequestParser(self)
        self.url = b""
        self.headers: dict[bytes, bytes] = {}
        self.body: list[bytes] = []
        self.paused = False
        self.closed = False
        self.busy = False
        self.keep_alive = True
        self.job: StreamJob | None = None
        self.on_resume: Callable[[], None] | None = None
        self.pending: list[tuple[bytes, bytes, dict[bytes, bytes], bytes, bool]] = []

    # asyncio.Protocol
    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]  # uvloop's TCPTransport

    def data_received(self, data: bytes) -> None:
        try:
            self.parser.feed_data(data)
        except httptools.HttpParserError:
            Stats.bad_requests += 1
            self.write(_json_response("400 Bad Request", b'{"error":"bad request"}', False))
            self.close()

    def connection_lost(self, exc: Exception | None) -> None:
        self.closed = True
        self.on_resume = None
        if self.job is not None:
            self.job.finish(aborted=True)

    def pause_writing(self) -> None:
        self.paused = True

    def resume_writing(self) -> None:
        self.paused = False
        cb, self.on_resume = self.on_resume, None
        if cb is not None:
            cb()

    # httptools callbacks
    def on_message_begin(self) -> None:
        self.url = b""
        self.headers = {}
        self.body = []

    def on_url(self, url: bytes) -> None:
        self.url += url

    def on_header(self, name: bytes, value: bytes) -> None:
        self.headers[name.lower()] = value

    def on_body(self, body: bytes) -> None:
        self.body.append(body)

    def on_message_complete(self) -> None:
        method = self.parser.get_method()
        keep_alive = self.parser.should_keep_alive()
        item = (method, self.url, self.headers, b"".join(self.body), keep_alive)
        if self.busy:
            self.pending.append(item)
        else:
            self.handle(*item)

    # plumbing
    def write(self, data: bytes) -> None:
        if self.transport is not None and not self.closed:
            self.transport.write(data)

    def close(self) -> None:
        if self.transport is not None and not self.closed:
            self.closed = True
            self.transport.close()

    def _done(self) -> None:
        self.job = None
        self.busy = False
        if self.closed:
            return
        if not self.keep_alive:
            self.close()
        elif self.pending:
            self.handle(*self.pending.pop(0))

    def handle(self, method: bytes, url: bytes, headers: dict[bytes, bytes], body: bytes, keep_alive: bool) -> None:
        Stats.requests += 1
        self.busy = True
        self.keep_alive = keep_alive
        path = url.split(b"?", 1)[0]
        if method == b"GET" and path in (b"/stats", b"/health"):
            self.write(_json_response("200 OK", orjson.dumps(stats()), keep_alive))
            self._done()
            return
        gemini = GEMINI_PATH.match(path)
        known = (b"/v1/chat/completions", b"/v1/messages", b"/v1/responses")
        if method != b"POST" or (path not in known and gemini is None):
            self.write(_json_response("404 Not Found", b'{"error":{"message":"no such endpoint"}}', keep_alive))
            self._done()
            return
        try:
            req = orjson.loads(body)
            model = str(req.get("model", ""))
        except (orjson.JSONDecodeError, AttributeError):
            Stats.bad_requests += 1
            self.write(_json_response("400 Bad Request", b'{"error":{"message":"invalid JSON"}}', keep_alive))
            self._done()
            return
        if gemini is not None:  # (the model is in the path; the operation streams)
            model, req["stream"] = unquote(gemini.group(1).decode()), True
        chunks, delay = shape_of(model, headers)
        anthropic = path == b"/v1/messages"
        if not req.get("stream"):
            payload = AnthropicShape.message(model, chunks) if anthropic else OpenAIShape.completion(model, chunks)
            if delay > 0:
                loop = asyncio.get_running_loop()
                loop.call_later(delay / 1000.0, self._reply_later, payload, keep_alive)
            else:
                self._reply_later(payload, keep_alive)
            return
        shape: OpenAIShape | AnthropicShape | GeminiShape | ResponsesShape
        if gemini is not None:
            shape = GeminiShape(model, chunks, WORDS, http_chunk)
        elif path == b"/v1/responses":
            shape = ResponsesShape(model, chunks, WORDS, http_chunk)
        elif anthropic:
            shape = AnthropicShape(model, chunks)
        else:
            opts = req.get("stream_options") or {}
            shape = OpenAIShape(model, bool(opts.get("include_usage")), chunks)
        conn = b"keep-alive" if keep_alive else b"close"
        self.write(
            _head(
                "200 OK",
                b"text/event-stream; charset=utf-8",
                b"cache-control: no-cache\r\ntransfer-encoding: chunked\r\nconnection: " + conn + b"\r\n\r\n",
            )
        )
        self.job = StreamJob(self, shape, chunks, delay, self._done)
        self.job.start()

    def _reply_later(self, payload: bytes, keep_alive: bool) -> None:
        self.write(_json_response("200 OK", payload, keep_alive))
        self._done()


def stats() -> dict[str, Any]:
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return {
        "requests": Stats.requests,
        "streams_open": Stats.streams_open,
        "streams_max_open": Stats.streams_max_open,
        "chunks_written": Stats.chunks_written,
        "streams_aborted": Stats.streams_aborted,
        "bad_requests": Stats.bad_requests,
        "cpu_s": usage.ru_utime + usage.ru_stime,
        "max_rss_kb": usage.ru_maxrss,
    }


def raise_nofile() -> int:
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if hard == resource.RLIM_INFINITY or hard > soft:
        target = hard if hard != resource.RLIM_INFINITY else 65536
        resource.setrlimit(resource.RLIMIT_NOFILE, (target, hard))
        return target
    return soft


async def serve(host: str, port: int) -> None:
    loop = asyncio.get_running_loop()
    server = await loop.create_server(EmulatorProtocol, host, port, backlog=4096, reuse_address=True)
    bound = server.sockets[0].getsockname()[1]
    print(f"READY {bound}", flush=True)
    stop = asyncio.Event()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    await stop.wait()
    server.close()


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--host", default="127.0.0.1")
    ap.add_argument("--port", type=int, default=0)
    args = ap.parse_args(argv)
    if not args.host.startswith("127.") and args.host != "localhost":
        sys.exit("bench/upstream.py binds loopback only")
    raise_nofile()
    os.environ.setdefault("PYTHONHASHSEED", "0")
    uvloop.run(serve(args.host, args.port))


if __name__ == "__main__":
    main()
