"""The bench emulator's Gemini stream (`POST /v1beta/models/{model}:streamGenerateContent?alt=sse`):
one `data:` chunk per word with its text part, the last with `finishReason` and `usageMetadata`, as
Google AI streams them (no terminal event: the body ends)."""

from __future__ import annotations

from typing import Any

import orjson


class GeminiShape:
    """Frames of one Gemini stream, precomputed per request (`http_chunk`: the emulator's framing)."""

    def __init__(self, model: str, chunks: int, words: list[bytes], http_chunk: Any) -> None:
        def ev(data: dict[str, Any]) -> bytes:
            return http_chunk(b"data: " + orjson.dumps(data) + b"\n\n")

        def candidate(text: str, **extra: Any) -> dict[str, Any]:
            return {"content": {"role": "model", "parts": [{"text": text}]}, "index": 0, **extra}

        self.first: list[bytes] = []
        self.content = [ev({"candidates": [candidate(w.decode())], "modelVersion": model}) for w in words]
        usage = {"promptTokenCount": 12, "candidatesTokenCount": chunks, "totalTokenCount": 12 + chunks}
        end = {"candidates": [candidate("", finishReason="STOP")], "usageMetadata": usage, "modelVersion": model}
        self.last = [ev(end), b"0\r\n\r\n"]
