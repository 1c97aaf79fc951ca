"""An upstream speaking the OpenAI Responses API (`POST /v1/responses`, streaming): a real aiohttp.web
server on its own thread.

Events are the API's streaming reference exactly (`event: <type>` + `data: <json>` with
`sequence_number` from 0; openai-python's `ResponseStreamEvent` types), written with Python's
`json.dumps` defaults (spaces after separators, non-ASCII escaped) so a test can tell forwarded bytes
from re-serialised ones. The scenario is the model id the route sends:
- `text`: a message `Hello from the Responses API é✓`, then `response.completed` with usage;
- `tool`: one `function_call` (`lookup`, arguments in two deltas), `response.completed`;
- `fail-mid`: two text deltas, then (0.1 s later) `response.failed` (`server_error`);
- `http-500`: a 500 before any byte;
- `shell`: Codex CLI's shell tool call (`exec_command`), or, after its output, `Tool said: <last line>`;
- `recall`: `You said: ` and every user text of the conversation so far, joined by ` | `.
Every request's body and headers are recorded (`requests`).

Stateful as the API is (`store` defaults to true): a completed response is kept with its context
(the input items it resolved, then its own output), so `previous_response_id` continues it; an
`item_reference` input item stands for a kept output item; `POST /v1/conversations` makes a
conversation, and a response made with `conversation` adds its input and output to it. An unknown
id is the API's error: `previous_response_not_found` (400), a conversation or item not found (404).
"""

from __future__ import annotations

import asyncio
import json
import socket
import threading
from dataclasses import dataclass, field
from typing import Any

from aiohttp import web

from tests.emulators.anthropic_upstream import SHELL_COMMAND

TEXT = ["Hello", " from the Responses API", " \u00e9\u2713"]
USAGE = {
    "input_tokens": 17,
    "input_tokens_details": {"cached_tokens": 4, "cache_write_tokens": 2},
    "output_tokens": 9,
    "output_tokens_details": {"reasoning_tokens": 0},
    "total_tokens": 26,
}


@dataclass
class Recorded:
    body: dict[str, Any]
    headers: dict[str, str]
    sent: list[bytes] = field(default_factory=list)  # data payloads, exactly as written


def _last_output(body: dict[str, Any]) -> str | None:
    items = body.get("input")
    last = items[-1] if isinstance(items, list) and items else {}
    if isinstance(last, dict) and last.get("type") == "function_call_output":
        return str(last.get("output"))
    return None


class _Script:
    """One response's events, numbered as they are made."""

    def __init__(self, n: int, body: dict[str, Any]) -> None:
        self.n = n
        self.id = f"resp_emu{n}"
        self.body = body
        self.events: list[dict[str, Any]] = []
        self.output: list[dict[str, Any]] = []

    def response(self, status: str, **extra: Any) -> dict[str, Any]:
        out: dict[str, Any] = {
            "id": self.id,
            "object": "response",
            "created_at": 1700000000,
            "status": status,
            "model": self.body.get("model"),
            "output": list(self.output) if status != "in_progress" else [],
            "parallel_tool_calls": True,
            "tool_choice": "auto",
            "tools": [],
            "error": None,
            "incomplete_details": None,
            "usage": None,
        }
        out.update(extra)
        return out

    def add(self, etype: str, **data: Any) -> None:
        self.events.append({"type": etype, "sequence_number": len(self.events), **data})

    def start(self) -> None:
        self.add("response.created", response=self.response("in_progress"))
        self.add("response.in_progress", response=self.response("in_progress"))

    def message(self, pieces: list[str]) -> None:
        index, mid = len(self.output), f"msg_emu{self.n}_{len(self.output)}"
        text = "".join(pieces)
        ref = {"item_id": mid, "output_index": index}
        empty = {"id": mid, "type": "message", "status": "in_progress", "role": "assistant", "content": []}
        self.add("response.output_item.added", output_index=index, item=empty)
        part = {"type": "output_text", "text": "", "annotations": [], "logprobs": []}
        self.add("response.content_part.added", **ref, content_index=0, part=part)
        for piece in pieces:
            self.add("response.output_text.delta", **ref, content_index=0, delta=piece, logprobs=[])
        self.add("response.output_text.done", **ref, content_index=0, text=text, logprobs=[])
        done_part = {**part, "text": text}
        self.add("response.content_part.done", **ref, content_index=0, part=done_part)
        item = {**empty, "status": "completed", "content": [done_part]}
        self.output.append(item)
        self.add("response.output_item.done", output_index=index, item=item)

    def call(self, name: str, arguments: str) -> None:
        index, fid = len(self.output), f"fc_emu{self.n}_{len(self.output)}"
        item = {"id": fid, "type": "function_call", "status": "in_progress", "call_id": "call_emu_1", "name": name}
        self.add("response.output_item.added", output_index=index, item={**item, "arguments": ""})
        ref = {"item_id": fid, "output_index": index}
        cut = len(arguments) // 2
        for piece in (arguments[:cut], arguments[cut:]):
            self.add("response.function_call_arguments.delta", **ref, delta=piece)
        self.add("response.function_call_arguments.done", **ref, name=name, arguments=arguments)
        done = {**item, "status": "completed", "arguments": arguments}
        self.output.append(done)
        self.add("response.output_item.done", output_index=index, item=done)

    def completed(self) -> None:
        self.add("response.completed", response=self.response("completed", usage=USAGE))


def _user_texts(items: list[dict[str, Any]]) -> list[str]:
    out: list[str] = []
    for item in items:
        if item.get("role") != "user":
            continue
        content = item.get("content")
        if isinstance(content, str):
            out.append(content)
        elif isinstance(content, list):
            out.extend(str(p.get("text")) for p in content if isinstance(p, dict) and "text" in p)
    return out


def script(n: int, scenario: str, body: dict[str, Any], context: list[dict[str, Any]] | None = None) -> _Script:
    s = _Script(n, body)
    s.start()
    if scenario == "recall":
        s.message(["You said: ", " | ".join(_user_texts(context or []))])
    elif scenario == "tool":
        s.call("lookup", json.dumps({"q": "paris"}))
    elif scenario == "shell":
        result = _last_output(body)
        if result is None:
            s.call("exec_command", json.dumps({"cmd": SHELL_COMMAND}))
        else:
            s.message(["Tool said: ", (result.strip().splitlines() or [""])[-1]])
    elif scenario == "fail-mid":
        index, mid = 0, "msg_emu_0"
        empty = {"id": mid, "type": "message", "status": "in_progress", "role": "assistant", "content": []}
        s.add("response.output_item.added", output_index=index, item=empty)
        for piece in TEXT[:2]:
            s.add("response.output_text.delta", item_id=mid, output_index=0, content_index=0, delta=piece, logprobs=[])
        error = {"code": "server_error", "message": "The model crashed mid-answer"}
        s.add("response.failed", response=s.response("failed", error=error))
        return s
    else:
        s.message(TEXT)
    s.completed()
    return s


class _NotFound(Exception):
    def __init__(self, status: int, error: dict[str, Any]) -> None:
        self.status, self.error = status, error


def _input_items(body: dict[str, Any]) -> list[dict[str, Any]]:
    raw = body.get("input")
    if isinstance(raw, str):
        return [{"type": "message", "role": "user", "content": raw}]
    return [i for i in raw if isinstance(i, dict)] if isinstance(raw, list) else []


class ResponsesUpstream:
    """Start with `start()`; `base_url` ends in `/v1`."""

    def __init__(self) -> None:
        self.requests: list[Recorded] = []
        self.contexts: dict[str, list[dict[str, Any]]] = {}  # response id -> its input and output
        self.items: dict[str, dict[str, Any]] = {}  # output item id -> the item
        self.conversations: dict[str, list[dict[str, Any]]] = {}
        self._loop: asyncio.AbstractEventLoop | None = None
        self._thread: threading.Thread | None = None
        self.port = 0

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.port}/v1"

    def start(self) -> ResponsesUpstream:
        sock = socket.socket()
        sock.bind(("127.0.0.1", 0))
        self.port = int(sock.getsockname()[1])
        ready = threading.Event()

        def run() -> None:
            loop = asyncio.new_event_loop()
            self._loop = loop
            app = web.Application()
            app.router.add_post("/v1/responses", self._responses)
            app.router.add_post("/v1/conversations", self._new_conversation)
            runner = web.AppRunner(app, shutdown_timeout=0.5, access_log=None)
            loop.run_until_complete(runner.setup())
            loop.run_until_complete(web.SockSite(runner, sock).start())
            ready.set()
            loop.run_forever()
            loop.run_until_complete(runner.cleanup())
            loop.close()

        self._thread = threading.Thread(target=run, name="responses-upstream", daemon=True)
        self._thread.start()
        if not ready.wait(10):
            raise RuntimeError("the Responses emulator did not start")
        return self

    def stop(self) -> None:
        if self._loop is not None and self._thread is not None:
            self._loop.call_soon_threadsafe(self._loop.stop)
            self._thread.join(10)

    async def _responses(self, request: web.Request) -> web.StreamResponse:
        body = json.loads(await request.read())
        rec = Recorded(body, {k.lower(): v for k, v in request.headers.items()})
        self.requests.append(rec)
        scenario = str(body.get("model", ""))
        if scenario == "http-500":
            error = {"error": {"message": "The server had an error", "type": "server_error", "code": None}}
            return web.json_response(error, status=500)
        if body.get("stream") is not True:
            return web.json_response({"error": {"message": "this emulator only streams"}}, status=400)
        try:
            context = self._context(body)
        except _NotFound as missing:
            return web.json_response({"error": missing.error}, status=missing.status)
        made = script(len(self.requests), scenario, body, context)
        if made.events[-1]["type"] == "response.completed" and body.get("store", True) is not False:
            self._keep(made, body, context)
        response = web.StreamResponse(status=200, headers={"Content-Type": "text/event-stream"})
        await response.prepare(request)
        for event in made.events:
            if event["type"] == "response.failed":  # after the answer started: a separate read
                await asyncio.sleep(0.1)
            payload = json.dumps(event).encode()
            rec.sent.append(payload)
            await response.write(b"event: " + event["type"].encode() + b"\ndata: " + payload + b"\n\n")
        await response.write_eof()
        return response

    def _context(self, body: dict[str, Any]) -> list[dict[str, Any]]:
        """What the model sees: the previous response's or the conversation's items, then the input
        (item references resolved)."""
        context: list[dict[str, Any]] = []
        previous = body.get("previous_response_id")
        if previous is not None:
            if previous not in self.contexts:
                error = {
                    "message": f"Previous response with id '{previous}' not found.",
                    "type": "invalid_request_error",
                    "param": "previous_response_id",
                    "code": "previous_response_not_found",
                }
                raise _NotFound(400, error)
            context.extend(self.contexts[previous])
        conversation = body.get("conversation")
        cid = conversation.get("id") if isinstance(conversation, dict) else conversation
        if cid is not None:
            if cid not in self.conversations:
                error = {"message": f"Conversation with id '{cid}' not found.", "type": "invalid_request_error"}
                raise _NotFound(404, {**error, "param": "conversation", "code": None})
            context.extend(self.conversations[cid])
        for item in _input_items(body):
            if item.get("type") == "item_reference" or ("type" not in item and "role" not in item):
                if item.get("id") not in self.items:
                    error = {"message": f"Item with id '{item.get('id')}' not found.", "type": "invalid_request_error"}
                    raise _NotFound(404, {**error, "param": "input", "code": None})
                context.append(self.items[str(item["id"])])
            else:
                context.append(item)
        return context

    def _keep(self, made: _Script, body: dict[str, Any], context: list[dict[str, Any]]) -> None:
        self.contexts[made.id] = [*context, *made.output]
        for item in made.output:
            self.items[str(item["id"])] = item
        conversation = body.get("conversation")
        cid = conversation.get("id") if isinstance(conversation, dict) else conversation
        if cid is not None:
            self.conversations[cid].extend([*_input_items(body), *made.output])

    async def _new_conversation(self, request: web.Request) -> web.Response:
        """`POST /v1/conversations` (made by the upstream's own key, never through the gateway)."""
        body = json.loads(await request.read() or b"{}")
        cid = f"conv_emu{len(self.conversations) + 1}"
        self.conversations[cid] = [i for i in body.get("items") or [] if isinstance(i, dict)]
        created = {"id": cid, "object": "conversation", "created_at": 1700000000, "metadata": {}}
        return web.json_response(created)
