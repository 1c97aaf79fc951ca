"""The bench emulator's Responses API stream (`POST /v1/responses`, `stream: true`): `response.created`,
the message item and its text part opened, one `response.output_text.delta` per word, then the part,
the item and `response.completed` with usage, as the Responses API streams them."""

from __future__ import annotations

import itertools
from typing import Any

import orjson

_ids = itertools.count(1)


class ResponsesShape:
    """Frames of one Responses stream, precomputed per request (`http_chunk`: the emulator's framing)."""

    def __init__(self, model: str, chunks: int, words: list[bytes], http_chunk: Any) -> None:
        n = next(_ids)
        rid, mid = f"resp_bench{n}", f"msg_bench{n}"
        seq = itertools.count()

        def ev(name: str, **data: Any) -> bytes:
            payload = {"type": name, "sequence_number": next(seq), **data}
            return http_chunk(b"event: " + name.encode() + b"\ndata: " + orjson.dumps(payload) + b"\n\n")

        def response(status: str, **extra: Any) -> dict[str, Any]:
            return {"id": rid, "object": "response", "model": model, "status": status, **extra}

        item = {"type": "message", "id": mid, "role": "assistant", "status": "in_progress", "content": []}
        at = {"item_id": mid, "output_index": 0, "content_index": 0}
        self.first = [
            ev("response.created", response=response("in_progress", output=[])),
            ev("response.output_item.added", output_index=0, item=item),
            ev("response.content_part.added", **at, part={"type": "output_text", "text": "", "annotations": []}),
        ]
        self.content = [ev("response.output_text.delta", **at, delta=w.decode()) for w in words]
        text = b"".join(words[i % len(words)] for i in range(chunks)).decode()
        part = {"type": "output_text", "text": text, "annotations": []}
        done_item = {**item, "status": "completed", "content": [part]}
        usage = {"input_tokens": 12, "output_tokens": chunks, "total_tokens": 12 + chunks}
        self.last = [
            ev("response.output_text.done", **at, text=text),
            ev("response.content_part.done", **at, part=part),
            ev("response.output_item.done", output_index=0, item=done_item),
            ev("response.completed", response=response("completed", output=[done_item], usage=usage)),
            b"0\r\n\r\n",
        ]
