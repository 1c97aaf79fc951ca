"""The invariant behind every generation (docs/api-edges.md §16): whatever raises while a door
finishes, the record is final (`failed`) and the client gets its door's failure ending — the chat
failure chunk and no `[DONE]` once the stream started, a JSON 502 before that.

The door is the real chat door's stream writer and JSON builder behind `serve_generation`, served by
uvicorn in the test's loop against the real gateway, store and OpenAI emulator; what fails is the
writer's or the builder's last step (their `finish` / `build`, the door's own extension points).
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import httpx
import orjson
import pytest

from tests.emulators.openai_upstream import OpenAIUpstream, tidegate_toml
from tests.support.loop import serving_asgi
from tidegate.config.load import load_text
from tidegate.events import Failed
from tidegate.gateway.generation import Generation
from tidegate.keys import make_key
from tidegate.server.app import TidegateApp
from tidegate.server.door import DoorSpec, serve_generation
from tidegate.server.doors.chat.handler import _chat_json, _ChatStream
from tidegate.server.doors.chat.request import parse_chat_request
from tidegate.server.http import Request
from tidegate.sse import SSEDecoder


class BrokenFinish(_ChatStream):
    def finish(self) -> bytes | Failed:
        raise RuntimeError("a renderer bug at the very end")


class BrokenBuild:
    """The chat door's JSON builder, but for a bug in its last step."""

    def __init__(self, gen: Generation) -> None:
        self.inner = _chat_json(gen)
        self.reset, self.add = self.inner.reset, self.inner.add

    def build(self) -> bytes:
        raise RuntimeError("a builder bug at the very end")


@pytest.fixture(scope="module")
def emu() -> Iterator[OpenAIUpstream]:
    with OpenAIUpstream() as upstream:
        yield upstream


async def _serve(emu: OpenAIUpstream, stream: bool) -> tuple[httpx.Response, dict[str, Any]]:
    config = load_text(
        tidegate_toml(
            "sqlite:///:memory:", {"emu": {"kind": "openai", "base_url": emu.base_url}}, {"m": [("emu", "text")]}
        ),
        "test",
    )
    app = TidegateApp(config)
    state = app.state
    await state.store.open()
    key, _ = make_key("test")
    await state.store.create_key(key)

    async def handler(scope: Any, receive: Any, send: Any) -> None:
        req = Request.from_scope(scope, receive, send)
        req.generation_id = "g" + ("s" if stream else "j") * 25
        body = await req.json(1 << 20)
        spec = DoorSpec("chat", "chat", body, parse_chat_request(body), BrokenFinish, BrokenBuild)
        await serve_generation(req, state, key, spec)

    body = {"model": "m", "stream": stream, "messages": [{"role": "user", "content": "hi"}]}
    try:
        async with serving_asgi(handler) as port, httpx.AsyncClient(timeout=30) as client:
            resp = await client.post(f"http://127.0.0.1:{port}/", json=body)
        record = await state.store.get_generation("g" + ("s" if stream else "j") * 25)
        assert record is not None
        return resp, record.public()
    finally:
        await state.gateway.aclose()
        await state.store.close()


async def test_a_stream_whose_ending_raises_still_ends_with_the_failure_chunk_and_a_final_record(
    emu: OpenAIUpstream,
) -> None:
    resp, record = await _serve(emu, stream=True)
    assert resp.status_code == 200
    events = SSEDecoder().feed(resp.content)
    assert events and all(e.data != "[DONE]" for e in events)
    last = orjson.loads(events[-1].data)
    assert last["error"]["code"] == "upstream_error" and last["choices"][0]["finish_reason"] == "error"
    assert record["status"] == "failed" and record["output_text"] == "Hello, world é✓!"
    assert record["error"]["code"] == "upstream_error"


async def test_a_json_answer_whose_build_raises_is_a_502_and_a_final_record(emu: OpenAIUpstream) -> None:
    resp, record = await _serve(emu, stream=False)
    assert resp.status_code == 502
    assert resp.json()["error"]["code"] == "upstream_error"
    assert record["status"] == "failed"
