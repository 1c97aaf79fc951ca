"""An upstream emulator speaking the three Anthropic-family dialects byte for byte (UPSTREAMS §1–3).

One real aiohttp.web server (background thread, free port):
- `POST /v1/messages`: Anthropic Messages SSE; checks `x-api-key` and `anthropic-version`.
- `POST /model/{id}/invoke-with-response-stream`: Bedrock; verifies the SigV4 signature (signing name
  `bedrock`, recomputed over the bytes received), rejects bodies with `model`/`stream`, answers AWS
  eventstream frames built here with real CRC32s.
- `POST {base}/projects/{p}/locations/{r}/publishers/anthropic/models/{m}:streamRawPredict`: Vertex;
  checks the bearer token and `anthropic_version`, rejects a body with `model`, answers Messages SSE.

Scenario per request: `[[name]]` in the last user turn's text, else `--name` at the end of the model
id, else `text`. Every request is recorded (`emulator.requests`) so tests can assert on the body.

Scenarios: text, thinking, redacted, tools, stall, error, truncated, drop, exception and badcrc (Bedrock),
maxtokens, 401/429/500/529/google429 (HTTP errors before the body), badjson (Anthropic and Vertex: a
`data:` line that is not JSON mid-answer, then the normal ending), slow (a text delta every 50 ms until
the client goes away; `Recorded.closed_at` is when the emulator saw the connection close), slowthink
(thinking then text, each delta SLOW_PAUSE_S apart, ending normally: for progressive rendering),
calltools and shell (a model that calls the tools it is given, then answers with their result:
`agent_events`), readfile (calls Claude Code's `Read`, or Gemini CLI's `read_file` when only that is
declared, on the `.txt` path the prompt names, then answers `Tool said: <the file's line with
READ_MARKER>`; a result that is a JSON object's `output`, as Gemini CLI's is, is read from there).
"""

from __future__ import annotations

import asyncio
import base64
import re
import struct
import threading
import time
import zlib
from dataclasses import dataclass
from typing import Any
from urllib.parse import unquote

import orjson
from aiohttp import web
from botocore.auth import SigV4Auth
from botocore.awsrequest import AWSRequest
from botocore.credentials import Credentials

Events = list[tuple[str, dict[str, Any]]]
PAUSE = "__pause__"
BADJSON = "__badjson__"  # the SSE handler writes BADJSON_FRAME there (Bedrock: a chunk of the same bytes)
BADJSON_DATA = b'{"type": "content_block_delta", "index": 0, "delta": {"ty'
BADJSON_FRAME = b"event: content_block_delta\ndata: " + BADJSON_DATA + b"\n\n"
JOINED = "__joined__"  # data["events"] written with one socket write (tidegate reads them at once)

# ---------------------------------------------------------------------------------------------------
# Scenario scripts: (event name, JSON) pairs, exactly as the Messages API streams them.


def _start(mid: str, model: str, usage: dict[str, int]) -> tuple[str, dict[str, Any]]:
    return (
        "message_start",
        {
            "type": "message_start",
            "message": {
                "id": mid,
                "type": "message",
                "role": "assistant",
                "content": [],
                "model": model,
                "stop_reason": None,
                "stop_sequence": None,
                "usage": usage,
            },
        },
    )


def _block_start(index: int, block: dict[str, Any]) -> tuple[str, dict[str, Any]]:
    return "content_block_start", {"type": "content_block_start", "index": index, "content_block": block}


def _delta(index: int, delta: dict[str, Any]) -> tuple[str, dict[str, Any]]:
    return "content_block_delta", {"type": "content_block_delta", "index": index, "delta": delta}


def _text(index: int, text: str) -> tuple[str, dict[str, Any]]:
    return _delta(index, {"type": "text_delta", "text": text})


def _block_stop(index: int) -> tuple[str, dict[str, Any]]:
    return "content_block_stop", {"type": "content_block_stop", "index": index}


def _message_delta(stop_reason: str, output_tokens: int) -> tuple[str, dict[str, Any]]:
    return (
        "message_delta",
        {
            "type": "message_delta",
            "delta": {"stop_reason": stop_reason, "stop_sequence": None},
            "usage": {"output_tokens": output_tokens},
        },
    )


STOP: tuple[str, dict[str, Any]] = ("message_stop", {"type": "message_stop"})
PING: tuple[str, dict[str, Any]] = ("ping", {"type": "ping"})

TEXT_USAGE = {"input_tokens": 42, "output_tokens": 1, "cache_read_input_tokens": 10, "cache_creation_input_tokens": 5}
THINKING_TEXT = ["Let me think", " about 2+2."]
SIGNATURE = "EqQBCkYIBxgCKkDsig-emu-1=="
REDACTED_DATA = "EmwKAhgBEgy3va3pzix/LafPsn4aDFIT2Xlxh0L5L8rLVyIwxtE3rAFBa8cr3qpP"


SLOW_THINKING = ["Considering ", "the question ", "step by step."]
SLOW_ANSWER = ["One ", "two ", "three ", "four ", "five ", "six ", "seven ", "eight."]
SLOW_PAUSE_S = 0.15


def _slowthink(model: str) -> Events:
    events: Events = [
        _start("msg_emu_slowthink", model, {"input_tokens": 30, "output_tokens": 1}),
        _block_start(0, {"type": "thinking", "thinking": "", "signature": ""}),
    ]
    for piece in SLOW_THINKING:
        events += [(PAUSE, {"s": SLOW_PAUSE_S}), _delta(0, {"type": "thinking_delta", "thinking": piece})]
    events += [_delta(0, {"type": "signature_delta", "signature": SIGNATURE}), _block_stop(0)]
    events.append(_block_start(1, {"type": "text", "text": ""}))
    for piece in SLOW_ANSWER:
        events += [(PAUSE, {"s": SLOW_PAUSE_S}), _text(1, piece)]
    return [*events, _block_stop(1), _message_delta("end_turn", 20), STOP]


def scenario_events(name: str, model: str) -> Events:
    """The scripted stream for a scenario (`PAUSE` entries make the emulator sleep there)."""
    if name == "slowthink":
        return _slowthink(model)
    if name == "thinking":
        return [
            _start("msg_emu_think", model, {"input_tokens": 30, "output_tokens": 1}),
            _block_start(0, {"type": "thinking", "thinking": "", "signature": ""}),
            _delta(0, {"type": "thinking_delta", "thinking": THINKING_TEXT[0]}),
            PING,
            _delta(0, {"type": "thinking_delta", "thinking": THINKING_TEXT[1]}),
            _delta(0, {"type": "signature_delta", "signature": SIGNATURE}),
            _block_stop(0),
            _block_start(1, {"type": "text", "text": ""}),
            _text(1, "The answer"),
            _text(1, " is 4."),
            _block_stop(1),
            _message_delta("end_turn", 40),
            STOP,
        ]
    if name == "redacted":
        return [
            _start("msg_emu_redacted", model, {"input_tokens": 20, "output_tokens": 1}),
            _block_start(0, {"type": "redacted_thinking", "data": REDACTED_DATA}),
            _block_stop(0),
            _block_start(1, {"type": "text", "text": ""}),
            _text(1, "Done."),
            _block_stop(1),
            _message_delta("end_turn", 9),
            STOP,
        ]
    if name == "tools":
        return [
            _start("msg_emu_tools", model, {"input_tokens": 50, "output_tokens": 1}),
            _block_start(0, {"type": "text", "text": ""}),
            _text(0, "Let me check."),
            _block_stop(0),
            _block_start(1, {"type": "tool_use", "id": "toolu_emu_A", "name": "lookup", "input": {}}),
            _delta(1, {"type": "input_json_delta", "partial_json": ""}),
            _delta(1, {"type": "input_json_delta", "partial_json": '{"q": "pa'}),
            _delta(1, {"type": "input_json_delta", "partial_json": 'ris"}'}),
            _block_stop(1),
            _block_start(2, {"type": "tool_use", "id": "toolu_emu_B", "name": "weather", "input": {}}),
            _delta(2, {"type": "input_json_delta", "partial_json": '{"city": "Paris", "days": 2}'}),
            _block_stop(2),
            _message_delta("tool_use", 27),
            STOP,
        ]
    if name == "stall":  # goes silent mid-answer for longer than a short idle timeout
        return [
            _start("msg_emu_stall", model, {"input_tokens": 12, "output_tokens": 1}),
            _block_start(0, {"type": "text", "text": ""}),
            _text(0, "Partial answer"),
            (PAUSE, {"s": 4.0}),
            _block_stop(0),
            _message_delta("end_turn", 3),
            STOP,
        ]
    if name == "slow":  # the handler then streams text deltas until the client goes away
        return [
            _start("msg_emu_slow", model, {"input_tokens": 12, "output_tokens": 1}),
            _block_start(0, {"type": "text", "text": ""}),
        ]
    if name == "badjson":  # the handler writes an undecodable frame here, then this normal ending
        return [
            _start("msg_emu_badjson", model, {"input_tokens": 12, "output_tokens": 1}),
            _block_start(0, {"type": "text", "text": ""}),
            _text(0, "Partial"),
            (PAUSE, {"s": 0.3}),
            _text(0, " answer"),
            (BADJSON, {}),
            _block_stop(0),
            _message_delta("end_turn", 3),
            STOP,
        ]
    if name == "joinedbad":  # badjson, with the frame before the bad one in the same write
        return [
            _start("msg_emu_joinedbad", model, {"input_tokens": 12, "output_tokens": 1}),
            _block_start(0, {"type": "text", "text": ""}),
            _text(0, "Partial"),
            (PAUSE, {"s": 0.3}),
            (JOINED, {"events": [_text(0, " answer"), (BADJSON, {})]}),
            _block_stop(0),
            _message_delta("end_turn", 3),
            STOP,
        ]
    if name in ("error", "truncated", "drop", "exception", "badcrc"):
        head: Events = [
            _start(f"msg_emu_{name}", model, {"input_tokens": 12, "output_tokens": 1}),
            _block_start(0, {"type": "text", "text": ""}),
            _text(0, "Partial"),
            (PAUSE, {"s": 0.3}),
            _text(0, " answer"),
        ]
        if name == "error":
            head.append(("error", {"type": "error", "error": {"type": "overloaded_error", "message": "Overloaded"}}))
        return head
    if name == "maxtokens":
        return [
            _start("msg_emu_len", model, {"input_tokens": 8, "output_tokens": 1}),
            _block_start(0, {"type": "text", "text": ""}),
            _text(0, "Cut"),
            _block_stop(0),
            _message_delta("max_tokens", 3),
            STOP,
        ]
    # text (default): a ping, cache usage, the cumulative output count in message_delta
    return [
        _start("msg_emu_text", model, dict(TEXT_USAGE)),
        _block_start(0, {"type": "text", "text": ""}),
        PING,
        _text(0, "Hello"),
        _text(0, " from"),
        _text(0, " the emulator."),
        _block_stop(0),
        _message_delta("end_turn", 12),
        STOP,
    ]


# ---------------------------------------------------------------------------------------------------
# Wire encoders


def sse_frame(name: str, data: dict[str, Any]) -> bytes:
    return b"event: " + name.encode() + b"\ndata: " + orjson.dumps(data) + b"\n\n"


def sse_bytes(name: str, data: dict[str, Any]) -> bytes:
    """What the SSE handler writes for one script entry (not `PAUSE`)."""
    if name == JOINED:
        return b"".join(sse_bytes(n, d) for n, d in data["events"])
    return BADJSON_FRAME if name == BADJSON else sse_frame(name, data)


def sse_stream(events: Events) -> bytes:
    return b"".join(sse_bytes(n, d) for n, d in events if n != PAUSE)


def _eventstream_header(name: str, value: str) -> bytes:
    raw_name, raw_value = name.encode(), value.encode()
    return struct.pack("!B", len(raw_name)) + raw_name + b"\x07" + struct.pack("!H", len(raw_value)) + raw_value


def eventstream_frame(headers: list[tuple[str, str]], payload: bytes, *, corrupt_crc: bool = False) -> bytes:
    """One AWS eventstream message (UPSTREAMS §2): prelude + prelude CRC, string headers, payload, CRC."""
    header_bytes = b"".join(_eventstream_header(k, v) for k, v in headers)
    total = 16 + len(header_bytes) + len(payload)
    prelude = struct.pack("!II", total, len(header_bytes))
    prelude += struct.pack("!I", zlib.crc32(prelude))
    message = prelude + header_bytes + payload
    crc = zlib.crc32(message)
    if corrupt_crc:
        crc ^= 0xFFFFFFFF
    return message + struct.pack("!I", crc)


def bedrock_chunk(data: dict[str, Any], *, corrupt_crc: bool = False) -> bytes:
    return bedrock_raw_chunk(orjson.dumps(data), corrupt_crc=corrupt_crc)


def bedrock_raw_chunk(raw: bytes, *, corrupt_crc: bool = False) -> bytes:
    """A `chunk` event frame carrying `raw` (base64 in its JSON payload, as Bedrock sends it)."""
    payload = orjson.dumps({"bytes": base64.b64encode(raw).decode()})
    headers = [(":event-type", "chunk"), (":content-type", "application/json"), (":message-type", "event")]
    return eventstream_frame(headers, payload, corrupt_crc=corrupt_crc)


def bedrock_exception(exception_type: str, message: str) -> bytes:
    headers = [
        (":exception-type", exception_type),
        (":content-type", "application/json"),
        (":message-type", "exception"),
    ]
    return eventstream_frame(headers, orjson.dumps({"message": message}))


def bedrock_bytes(name: str, data: dict[str, Any]) -> bytes:
    """What the Bedrock handler writes for one script entry (not `PAUSE`): `BADJSON` is a chunk with a
    valid checksum whose bytes are not JSON."""
    if name == JOINED:
        return b"".join(bedrock_bytes(n, d) for n, d in data["events"])
    return bedrock_raw_chunk(BADJSON_DATA) if name == BADJSON else bedrock_chunk(data)


def bedrock_stream(events: Events) -> bytes:
    return b"".join(bedrock_bytes(n, d) for n, d in events if n not in (PAUSE, BADJSON))


# ---------------------------------------------------------------------------------------------------
# Request checks


# the `anthropic-version` values the API documents (its versioning page); the SDK sends the latest
API_VERSIONS = ("2023-06-01", "2026-10-21")


def check_messages_body(body: Any) -> str | None:
    """The Messages API rules a translated body must follow; a message naming the problem, or None."""
    if not isinstance(body, dict):
        return "body must be a JSON object"
    if not isinstance(body.get("max_tokens"), int):
        return "max_tokens: Field required"
    messages = body.get("messages")
    if not isinstance(messages, list) or not messages:
        return "messages: at least one message is required"
    tool_ids: set[str] = set()
    for i, m in enumerate(messages):
        role = m.get("role")
        if role not in ("user", "assistant", "system"):  # (system: the SDK's SystemMessageParam)
            return f"messages.{i}.role: must be user, assistant or system"
        if i == 0 and role != "user":
            return "messages: first message must use the user role"
        if i > 0 and messages[i - 1].get("role") == role:
            return f"messages.{i}: roles must alternate between user and assistant"
        content = m.get("content")
        blocks = [{"type": "text", "text": content}] if isinstance(content, str) else content
        if not isinstance(blocks, list) or not blocks:
            return f"messages.{i}.content: must be a non-empty string or list"
        for j, b in enumerate(blocks):
            btype = b.get("type")
            if btype == "text" and not b.get("text"):
                return f"messages.{i}.content.{j}.text: text content blocks must be non-empty"
            if btype == "thinking" and (not b.get("signature") or "thinking" not in b):
                return f"messages.{i}.content.{j}.signature: Field required"
            if btype == "redacted_thinking" and not b.get("data"):
                return f"messages.{i}.content.{j}.data: Field required"
            if btype == "tool_use":
                if not isinstance(b.get("input"), dict):
                    return f"messages.{i}.content.{j}.input: must be an object"
                tool_ids.add(str(b.get("id")))
            if btype == "tool_result" and b.get("tool_use_id") not in tool_ids:
                return f"messages.{i}.content.{j}: tool_result for an unknown tool_use id"
            if btype not in ("text", "image", "thinking", "redacted_thinking", "tool_use", "tool_result"):
                return f"messages.{i}.content.{j}.type: unknown block type {btype!r}"
    return None


FORCED_INPUT = ('{"city": "Par', 'is", "population": 2102650}')  # a forced tool's input, in two pieces


def forced_tool_events(tool: str, model: str) -> Events:
    """A `tool_choice: {type: tool, name}` answer as the Messages API streams it: no text block, one
    tool_use block for that tool whose input arrives as input_json_delta pieces, stop_reason tool_use."""
    return [
        _start("msg_emu_forced", model, {"input_tokens": 40, "output_tokens": 1}),
        _block_start(0, {"type": "tool_use", "id": "toolu_emu_F", "name": tool, "input": {}}),
        _delta(0, {"type": "input_json_delta", "partial_json": ""}),
        _delta(0, {"type": "input_json_delta", "partial_json": FORCED_INPUT[0]}),
        _delta(0, {"type": "input_json_delta", "partial_json": FORCED_INPUT[1]}),
        _block_stop(0),
        _message_delta("tool_use", 18),
        STOP,
    ]


SHELL_COMMAND = "echo tidegate-$((6*7))"  # `shell`: what the agent is asked to run (its output: tidegate-42)


def _tool_result_text(body: dict[str, Any]) -> str | None:
    """The text of the last turn's tool_result, if the last turn is one."""
    messages = body.get("messages") or []
    last = messages[-1] if messages else {}
    for block in last.get("content") if isinstance(last.get("content"), list) else []:
        if block.get("type") == "tool_result":
            content = block.get("content")
            if isinstance(content, list):
                return "".join(str(b.get("text", "")) for b in content)
            return str(content)
    return None


def _call_events(model: str, calls: list[tuple[str, dict[str, Any]]]) -> Events:
    events: Events = [_start("msg_emu_calls", model, {"input_tokens": 60, "output_tokens": 1})]
    for i, (name, args) in enumerate(calls):
        events.append(_block_start(i, {"type": "tool_use", "id": f"toolu_emu_{i}", "name": name, "input": {}}))
        events.append(_delta(i, {"type": "input_json_delta", "partial_json": orjson.dumps(args).decode()}))
        events.append(_block_stop(i))
    return [*events, _message_delta("tool_use", 21), STOP]


def _answer_after_tools(model: str, result: str) -> Events:
    return [
        _start("msg_emu_after", model, {"input_tokens": 70, "output_tokens": 1}),
        _block_start(0, {"type": "text", "text": ""}),
        _text(0, "Tool said: "),
        _text(0, (result.strip().splitlines() or [""])[-1]),  # (a shell tool's output ends with its output)
        _block_stop(0),
        _message_delta("end_turn", 9),
        STOP,
    ]


def agent_events(scenario: str, body: dict[str, Any], model: str) -> Events | None:
    """Scenarios of a model that uses the tools it is given (None: not one of them).
    `calltools`: calls every tool of the request once, in order (`{"input": "x"}` when its schema has an
    `input` property, else `{}`), then answers `Tool said: <the last line of the last result>`. `shell`: calls
    `exec_command` (Codex CLI's shell tool) with `SHELL_COMMAND`, then answers the same way."""
    if scenario not in ("calltools", "shell"):
        return None
    result = _tool_result_text(body)
    if result is not None:
        return _answer_after_tools(model, result)
    if scenario == "shell":
        return _call_events(model, [("exec_command", {"cmd": SHELL_COMMAND})])
    calls = []
    for tool in body.get("tools") or []:
        props = (tool.get("input_schema") or {}).get("properties") or {}
        calls.append((str(tool.get("name")), {"input": "x"} if "input" in props else {}))
    return _call_events(model, calls)


READ_MARKER = "tidegate-read-42"  # `readfile`: the line of the file the agent is asked to read
_PATH_RE = re.compile(r"(/[^\s'\"`]+\.txt)")


def read_path(texts: list[str]) -> str:
    """`readfile`: the absolute path of a `.txt` file the prompt names."""
    for text in texts:
        match = _PATH_RE.search(text)
        if match:
            return match.group(1)
    return "/nonexistent.txt"


def read_answer(result: str) -> str:
    """`readfile`'s answer once the agent sent the file back: its line with the marker, as read."""
    line = next((x for x in result.splitlines() if READ_MARKER in x), result.strip()[:80])
    return line.strip()


def _results_after_last_call(messages: list[dict[str, Any]]) -> str | None:
    """The tool_result text of the user turn after the last assistant turn (Claude Code may put a
    `system` message after it), or None when the last assistant turn is not answered yet."""
    last = max((i for i, m in enumerate(messages) if m.get("role") == "assistant"), default=-1)
    if last < 0:
        return None
    texts = []
    for m in messages[last + 1 :]:
        content = m.get("content")
        for block in content if isinstance(content, list) else []:
            if block.get("type") == "tool_result":
                inner = block.get("content")
                texts.append("".join(str(b.get("text", "")) for b in inner) if isinstance(inner, list) else str(inner))
    return "\n".join(texts) if texts else None


def _readfile_events(body: dict[str, Any], model: str) -> Events:
    messages = body.get("messages") or []
    result = _results_after_last_call(messages)
    if result is not None:
        try:  # a Gemini CLI functionResponse, translated: its `response` object as JSON
            value = orjson.loads(result)
        except orjson.JSONDecodeError:
            value = None
        if isinstance(value, dict) and isinstance(value.get("output"), str):
            result = value["output"]
        return _answer_after_tools(model, read_answer(result))
    texts = []
    for m in messages:
        content = m.get("content")
        if m.get("role") == "user":
            texts += [content] if isinstance(content, str) else [str(b.get("text", "")) for b in content or []]
    declared = {str(t.get("name")) for t in body.get("tools") or []}  # Claude Code's Read, or Gemini CLI's
    name = "read_file" if "read_file" in declared and "Read" not in declared else "Read"
    return _call_events(model, [(name, {"file_path": read_path(texts)})])


def answer_events(scenario: str, body: dict[str, Any], model: str) -> Events:
    """The stream for a request: a forced tool is called whatever the text asks (as the API does),
    unless a scenario was named; else the scenario's script."""
    choice = body.get("tool_choice")
    if scenario == "text" and isinstance(choice, dict) and choice.get("type") == "tool":
        return forced_tool_events(str(choice.get("name")), model)
    if scenario == "readfile":
        return _readfile_events(body, model)
    return agent_events(scenario, body, model) or scenario_events(scenario, model)


def pick_scenario(body: dict[str, Any], model: str) -> str:
    messages = body.get("messages") or []
    last_user = next((m for m in reversed(messages) if m.get("role") == "user"), None)
    if last_user is not None:
        content = last_user.get("content")
        texts = [content] if isinstance(content, str) else [b.get("text", "") for b in content or []]
        for text in texts:
            match = re.search(r"\[\[([a-z0-9]+)\]\]", text or "")
            if match:
                return match.group(1)
    if "--" in model:
        return model.rsplit("--", 1)[1]
    return "text"


@dataclass
class Recorded:
    dialect: str
    path: str
    model: str
    headers: dict[str, str]
    body: dict[str, Any]
    scenario: str
    closed_at: float | None = None  # `slow`: when the client connection was seen closed (time.monotonic)


_AUTH_RE = re.compile(
    r"^AWS4-HMAC-SHA256 Credential=([^/]+)/(\d{8})/([^/]+)/([^/]+)/aws4_request, "
    r"SignedHeaders=([a-z0-9;-]+), Signature=([0-9a-f]{64})$"
)


class AnthropicFamilyEmulator:
    def __init__(
        self,
        *,
        api_key: str = "sk-ant-emu-key",
        aws_access_key: str = "AKIDEMULATOR",
        aws_secret_key: str = "emulator-secret-key",
        aws_session_token: str | None = "emulator-session-token",
        region: str = "us-east-1",
        vertex_token: str = "ya29.emulator-token",
        vertex_project: str = "emu-project",
    ) -> None:
        self.api_key = api_key
        self.aws = Credentials(aws_access_key, aws_secret_key, aws_session_token)
        self.region = region
        self.vertex_token = vertex_token
        self.vertex_project = vertex_project
        self.requests: list[Recorded] = []
        self.token_refreshes = 0
        self._slow_records: dict[int, Recorded] = {}  # id(request) → record, for the `slow` scenario
        self.port = 0
        self._loop: asyncio.AbstractEventLoop | None = None
        self._runner: web.AppRunner | None = None
        self._thread: threading.Thread | None = None

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    # -- lifecycle ----------------------------------------------------------------------------------

    def start(self) -> AnthropicFamilyEmulator:
        ready = threading.Event()
        errors: list[BaseException] = []

        def run() -> None:
            loop = asyncio.new_event_loop()
            self._loop = loop
            asyncio.set_event_loop(loop)
            try:
                loop.run_until_complete(self._serve())
            except BaseException as exc:  # surfaced to the starting thread
                errors.append(exc)
                ready.set()
                return
            ready.set()
            loop.run_forever()
            loop.run_until_complete(self._runner.cleanup() if self._runner else asyncio.sleep(0))
            loop.close()

        self._thread = threading.Thread(target=run, name="anthropic-emulator", daemon=True)
        self._thread.start()
        ready.wait(10)
        if errors:
            raise errors[0]
        return self

    async def _models(self, request: web.Request) -> web.Response:
        """Anthropic's `GET /v1/models` (not recorded: no generation)."""
        mid = "claude-emu"
        model = {"type": "model", "id": mid, "display_name": "Claude Emu", "created_at": "2025-01-01T00:00:00Z"}
        return web.json_response({"data": [model], "has_more": False, "first_id": mid, "last_id": mid})

    async def _not_found(self, request: web.Request) -> web.Response:
        """Anthropic's answer to a path it does not have."""
        error = {"type": "not_found_error", "message": f"Not Found: {request.path}"}
        return web.json_response({"type": "error", "error": error}, status=404)

    async def _serve(self) -> None:
        app = web.Application(client_max_size=16 * 1024 * 1024)
        app.router.add_get("/v1/models", self._models)
        app.router.add_get("/{tail:.*}", self._not_found)
        app.router.add_post("/{tail:.*}", self._dispatch)
        self._runner = web.AppRunner(app, handle_signals=False)
        await self._runner.setup()
        site = web.TCPSite(self._runner, "127.0.0.1", 0)
        await site.start()
        server = site._server
        assert server is not None and server.sockets  # type: ignore[attr-defined]
        self.port = int(server.sockets[0].getsockname()[1])  # type: ignore[attr-defined]

    def stop(self) -> None:
        if self._loop is not None:
            self._loop.call_soon_threadsafe(self._loop.stop)
        if self._thread is not None:
            self._thread.join(10)

    def last(self, dialect: str | None = None) -> Recorded:
        found = [r for r in self.requests if dialect is None or r.dialect == dialect]
        assert found, f"the emulator received no {dialect or ''} request"
        return found[-1]

    # -- dispatch -----------------------------------------------------------------------------------

    async def _dispatch(self, request: web.Request) -> web.StreamResponse:
        raw = await request.read()
        path = request.raw_path
        if path == "/v1/messages":
            return await self._anthropic(request, raw)
        if path == "/token":  # an OAuth2 token endpoint, for google-auth ADC refreshes
            self.token_refreshes += 1
            token = {"access_token": f"ya29.adc-{self.token_refreshes}", "expires_in": 3600, "token_type": "Bearer"}
            return web.json_response(token)
        match = re.fullmatch(r"/model/([^/]+)/invoke-with-response-stream", path)
        if match:
            return await self._bedrock(request, raw, unquote(match.group(1)))
        match = re.fullmatch(
            r"(?:/v1)?/projects/([^/]+)/locations/([^/]+)/publishers/anthropic/models/([^/:]+):streamRawPredict", path
        )
        if match:
            return await self._vertex(request, raw, match.group(1), match.group(2), match.group(3))
        return web.json_response({"message": f"no route for {path}"}, status=404)

    @staticmethod
    def _anthropic_error(status: int, etype: str, message: str, headers: dict[str, str] | None = None) -> web.Response:
        body = {"type": "error", "error": {"type": etype, "message": message}, "request_id": "req_emu"}
        return web.json_response(body, status=status, headers=headers)

    def _record(self, dialect: str, request: web.Request, model: str, body: dict[str, Any], scenario: str) -> None:
        rec = Recorded(dialect, request.raw_path, model, dict(request.headers), body, scenario)
        if scenario == "slow":
            self._slow_records[id(request)] = rec
        self.requests.append(rec)

    async def _slow(self, request: web.Request, resp: web.StreamResponse, encode: Any) -> None:
        """`slow`: a text delta every 50 ms until the client goes away; records when it did."""
        rec = self._slow_records.pop(id(request))
        for i in range(2400):
            transport = request.transport
            if transport is None or transport.is_closing():
                rec.closed_at = time.monotonic()
                return
            if i % 3 == 0:
                try:
                    await resp.write(encode(_text(0, f"tick{i // 3} ")[1]))
                except ConnectionError:
                    rec.closed_at = time.monotonic()
                    return
            await asyncio.sleep(0.0167)

    async def _sse(self, request: web.Request, events: Events, scenario: str) -> web.StreamResponse:
        resp = web.StreamResponse(status=200, headers={"Content-Type": "text/event-stream; charset=utf-8"})
        await resp.prepare(request)
        try:
            for name, data in events:
                if name == PAUSE:
                    await asyncio.sleep(float(data["s"]))
                    continue
                await resp.write(sse_bytes(name, data))
            if scenario == "slow":
                await self._slow(request, resp, lambda d: sse_frame("content_block_delta", d))
                return resp
        except (ConnectionResetError, ConnectionError):
            return resp  # the client (tidegate) went away
        if scenario == "drop":
            assert request.transport is not None
            request.transport.close()
            return resp
        await resp.write_eof()
        return resp

    async def _anthropic(self, request: web.Request, raw: bytes) -> web.StreamResponse:
        if request.headers.get("x-api-key") != self.api_key:
            return self._anthropic_error(401, "authentication_error", "invalid x-api-key")
        if request.headers.get("anthropic-version") not in API_VERSIONS:
            return self._anthropic_error(400, "invalid_request_error", "anthropic-version: header is required")
        body = orjson.loads(raw)
        model = str(body.get("model") or "")
        scenario = pick_scenario(body, model)
        self._record("anthropic", request, model, body, scenario)
        problem = check_messages_body(body) or (None if model else "model: Field required")
        if problem is None and body.get("stream") is not True:
            problem = "stream: this emulator only streams"
        if problem:
            return self._anthropic_error(400, "invalid_request_error", problem)
        if scenario in ("429", "529", "500", "401"):
            return self._http_error_anthropic(int(scenario))
        return await self._sse(request, answer_events(scenario, body, model), scenario)

    def _http_error_anthropic(self, status: int) -> web.Response:
        etype = {429: "rate_limit_error", 529: "overloaded_error", 500: "api_error", 401: "authentication_error"}
        return self._anthropic_error(status, etype[status], f"emulated HTTP {status}", {"retry-after": "2"})

    # -- bedrock --------------------------------------------------------------------------------------

    def _verify_sigv4(self, request: web.Request, raw: bytes) -> str | None:
        auth = request.headers.get("Authorization", "")
        match = _AUTH_RE.match(auth)
        if not match:
            return "Authorization header is not an AWS4-HMAC-SHA256 signature"
        access_key, day, region, service, signed, signature = match.groups()
        if access_key != self.aws.access_key:
            return "The security token included in the request is invalid"
        if service != "bedrock" or region != self.region:
            return f"Credential should be scoped to a valid region/service ({region}/{service})"
        names = signed.split(";")
        if "host" not in names or "x-amz-date" not in names:
            return "SignedHeaders must include host and x-amz-date"
        amz_date = request.headers.get("X-Amz-Date", "")
        if not amz_date.startswith(day):
            return "X-Amz-Date does not match the credential scope date"
        if self.aws.token is not None:
            if request.headers.get("X-Amz-Security-Token") != self.aws.token or "x-amz-security-token" not in names:
                return "The security token included in the request is invalid"
        headers = {n: request.headers.get(n, "") for n in names}
        aws = AWSRequest(
            method=request.method, url=f"http://{request.host}{request.raw_path}", data=raw, headers=headers
        )
        aws.context["timestamp"] = amz_date
        signer = SigV4Auth(self.aws, "bedrock", self.region)
        canonical = signer.canonical_request(aws)
        expected = signer.signature(signer.string_to_sign(aws, canonical), aws)
        if expected != signature:
            return "The request signature we calculated does not match the signature you provided"
        return None

    @staticmethod
    def _aws_error(status: int, etype: str, message: str) -> web.Response:
        return web.json_response(
            {"message": message},
            status=status,
            headers={"x-amzn-ErrorType": f"{etype}:http://internal.amazon.com/coral/com.amazon.bedrock/"},
        )

    async def _bedrock(self, request: web.Request, raw: bytes, model: str) -> web.StreamResponse:
        problem = self._verify_sigv4(request, raw)
        if problem:
            return self._aws_error(403, "UnrecognizedClientException", problem)
        body = orjson.loads(raw)
        scenario = pick_scenario(body, model)
        self._record("bedrock", request, model, body, scenario)
        if "model" in body or "stream" in body:
            return self._aws_error(400, "ValidationException", "extraneous key [model/stream] is not permitted")
        if body.get("anthropic_version") != "bedrock-2023-05-31":
            return self._aws_error(400, "ValidationException", "anthropic_version: invalid or missing")
        problem = check_messages_body(body)
        if problem:
            return self._aws_error(400, "ValidationException", problem)
        if scenario == "429":
            return self._aws_error(429, "ThrottlingException", "Too many requests, please wait before trying again.")
        if scenario in ("500", "529"):
            return self._aws_error(503, "ServiceUnavailableException", "Bedrock is unable to process your request.")
        resp = web.StreamResponse(
            status=200,
            headers={
                "Content-Type": "application/vnd.amazon.eventstream",
                "X-Amzn-Bedrock-Content-Type": "application/json",
            },
        )
        await resp.prepare(request)
        for name, data in answer_events(scenario, body, model):
            if name == PAUSE:
                await asyncio.sleep(float(data["s"]))
                continue
            await resp.write(bedrock_bytes(name, data))
        if scenario == "slow":
            await self._slow(request, resp, bedrock_chunk)
            return resp
        if scenario == "exception":
            await resp.write(bedrock_exception("throttlingException", "Too many tokens, please wait."))
        elif scenario == "badcrc":
            await resp.write(bedrock_chunk(_text(0, " corrupted")[1], corrupt_crc=True))
        elif scenario == "drop":
            assert request.transport is not None
            request.transport.close()
            return resp
        await resp.write_eof()
        return resp

    # -- vertex ---------------------------------------------------------------------------------------

    @staticmethod
    def _google_error(status: int, gstatus: str, message: str, wrap: bool = True) -> web.Response:
        err = {"error": {"code": status, "message": message, "status": gstatus}}
        return web.Response(body=orjson.dumps([err] if wrap else err), status=status, content_type="application/json")

    async def _vertex(
        self, request: web.Request, raw: bytes, project: str, region: str, model: str
    ) -> web.StreamResponse:
        if request.headers.get("Authorization") != f"Bearer {self.vertex_token}":
            return self._google_error(401, "UNAUTHENTICATED", "Request had invalid authentication credentials.")
        if project != self.vertex_project:
            return self._google_error(403, "PERMISSION_DENIED", f"Permission denied on project {project}")
        body = orjson.loads(raw)
        scenario = pick_scenario(body, model)
        self._record("vertex", request, model, body, scenario)
        if "model" in body:
            return self._google_error(400, "INVALID_ARGUMENT", "model: extra inputs are not permitted", wrap=False)
        if body.get("anthropic_version") != "vertex-2023-10-16" or body.get("stream") is not True:
            return self._google_error(400, "INVALID_ARGUMENT", "anthropic_version / stream invalid", wrap=False)
        problem = check_messages_body(body)
        if problem:
            return self._anthropic_error(400, "invalid_request_error", problem)
        if scenario in ("429", "google429"):
            return self._google_error(429, "RESOURCE_EXHAUSTED", "Quota exceeded for aiplatform.googleapis.com")
        if scenario == "529":
            return self._anthropic_error(529, "overloaded_error", "Overloaded")
        return await self._sse(request, answer_events(scenario, body, model), scenario)
