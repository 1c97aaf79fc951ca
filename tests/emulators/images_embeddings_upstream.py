"""An upstream emulator for embeddings and images: one real aiohttp.web server on its own thread.

- `POST /v1/embeddings` (OpenAI): bearer `OPENAI_KEY`; `input` str / list[str] / token arrays,
  `encoding_format` float|base64 (little-endian float32), `dimensions` (400 for models named
  `*-fixed`), `usage`.
- `POST /v1/images/generations` (OpenAI): bearer `OPENAI_KEY`; `stream: true` answers
  `image_generation.partial_image` × `partial_images` then `image_generation.completed` (real tiny
  PNGs built with zlib + struct); without stream the `ImagesResponse` JSON.
- `POST /model/{id}/invoke` (Bedrock): Titan (`inputText`) and Cohere (`texts`) embeddings; the SigV4
  signature is recomputed here by hand (hmac/hashlib, not botocore) over the bytes received, with
  signing name `bedrock`; a bad signature is a 403.
- `POST /v1/projects/{p}/locations/{r}/publishers/google/models/{m}:predict` (Vertex): bearer
  `VERTEX_TOKEN`; `instances[].content` → `predictions[].embeddings.values` + statistics.

Scenarios by the served model id: `fail-500` (500 before anything), `img-drop` (one partial, then the
connection drops), `img-error-event` (one partial, then an in-band `error` event), `img-error-first`
(an `error` event before any image), `img-big-partial` (a small partial, then one over tidegate's 8 MiB cap),
`img-slow` (the JSON answer after `SLOW_S` seconds), `img-nousage` (no usage anywhere).
Every request is recorded in `requests` (path, headers, JSON body, sigv4 verdict).
"""

from __future__ import annotations

import asyncio
import base64
import hashlib
import hmac
import re
import socket
import struct
import threading
import zlib
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import quote

import numpy as np
import orjson
from aiohttp import web

OPENAI_KEY = "emu-openai-key"
VERTEX_TOKEN = "emu-vertex-token"
AWS_KEY_ID = "AKIDEMULATOR000001"
AWS_SECRET = "emulator/secret/key/0123456789abcdef"
AWS_REGION = "eu-central-1"
SLOW_S = 1.5
EMBED_DIM = 16
BIG_PARTIAL_BYTES = 8 * 1024 * 1024 + 4096


def png(width: int, height: int, rgb: tuple[int, int, int]) -> bytes:
    """A real PNG (8-bit RGB, one colour)."""

    def chunk(kind: bytes, data: bytes) -> bytes:
        return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data))

    header = struct.pack(">IIBBBBB", width, height, 8, 2, 0, 0, 0)
    raw = b"".join(b"\x00" + bytes(rgb) * width for _ in range(height))
    return b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", header) + chunk(b"IDAT", zlib.compress(raw)) + chunk(b"IEND", b"")


def png_b64(i: int) -> str:
    return base64.b64encode(png(4, 4, (40 * i % 256, 80, 200 - 30 * i % 200))).decode()


def vector(text: str, dim: int = EMBED_DIM) -> list[float]:
    """Deterministic unit vector for a text (tests can recompute it)."""
    seed = int.from_bytes(hashlib.sha256(text.encode()).digest()[:8], "little")
    v = np.random.default_rng(seed).standard_normal(dim)
    return [float(x) for x in (v / np.linalg.norm(v)).astype(np.float32)]


@dataclass
class Recorded:
    path: str
    headers: dict[str, str]
    body: Any
    sigv4: str | None = None
    extra: dict[str, Any] = field(default_factory=dict)


_AUTH_RE = re.compile(
    r"^AWS4-HMAC-SHA256 Credential=(?P<akid>[^/]+)/(?P<date>\d{8})/(?P<region>[^/]+)/(?P<service>[^/]+)/aws4_request, "
    r"SignedHeaders=(?P<signed>[a-z0-9;-]+), Signature=(?P<sig>[0-9a-f]{64})$"
)


def verify_sigv4(method: str, raw_path: str, query: str, headers: dict[str, str], body: bytes) -> str:
    """'ok' or why not. SigV4 by the AWS spec: canonical request (non-S3: the path URI-encoded again),
    string to sign, HMAC chain date → region → service → aws4_request."""
    match = _AUTH_RE.match(headers.get("authorization", ""))
    if not match:
        return "malformed Authorization header"
    if match["akid"] != AWS_KEY_ID:
        return "unknown access key"
    if match["service"] != "bedrock":
        return f"signing name {match['service']!r}, expected 'bedrock'"
    if match["region"] != AWS_REGION:
        return f"region {match['region']!r}"
    amz_date = headers.get("x-amz-date", "")
    if not amz_date.startswith(match["date"]):
        return "X-Amz-Date does not match the credential scope"
    signed = match["signed"].split(";")
    if "host" not in signed or "x-amz-date" not in signed:
        return "host and x-amz-date must be signed"
    canonical_headers = "".join(f"{h}:{' '.join(headers.get(h, '').split())}\n" for h in signed)
    canonical = "\n".join(
        [
            method,
            quote(raw_path, safe="/~"),
            query,
            canonical_headers,
            match["signed"],
            hashlib.sha256(body).hexdigest(),
        ]
    )
    scope = f"{match['date']}/{match['region']}/{match['service']}/aws4_request"
    to_sign = "\n".join(["AWS4-HMAC-SHA256", amz_date, scope, hashlib.sha256(canonical.encode()).hexdigest()])
    key = ("AWS4" + AWS_SECRET).encode()
    for part in (match["date"], match["region"], match["service"], "aws4_request"):
        key = hmac.new(key, part.encode(), hashlib.sha256).digest()
    expected = hmac.new(key, to_sign.encode(), hashlib.sha256).hexdigest()
    return "ok" if hmac.compare_digest(expected, match["sig"]) else "signature mismatch"


def _json(status: int, payload: Any, headers: dict[str, str] | None = None) -> web.Response:
    return web.Response(status=status, body=orjson.dumps(payload), content_type="application/json", headers=headers)


def _fail_500() -> web.Response:
    return _json(500, {"error": {"message": "emulated overload", "type": "server_error"}})


class ImagesEmbeddingsUpstream:
    def __init__(self) -> None:
        self.requests: list[Recorded] = []
        self._lock = threading.Lock()
        self._loop: asyncio.AbstractEventLoop | None = None
        self._thread: threading.Thread | None = None
        self.port = 0

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def start(self) -> ImagesEmbeddingsUpstream:
        sock = socket.socket()
        sock.bind(("127.0.0.1", 0))
        self.port = sock.getsockname()[1]
        ready = threading.Event()

        def run() -> None:
            loop = asyncio.new_event_loop()
            self._loop = loop
            asyncio.set_event_loop(loop)
            app = web.Application(client_max_size=64 * 1024 * 1024)
            app.router.add_post("/v1/embeddings", self._openai_embeddings)
            app.router.add_post("/v1/images/generations", self._images)
            app.router.add_post("/model/{model}/invoke", self._bedrock)
            app.router.add_post(
                r"/v1/projects/{project}/locations/{region}/publishers/google/models/{rest}", self._vertex
            )
            runner = web.AppRunner(app)
            loop.run_until_complete(runner.setup())
            loop.run_until_complete(web.SockSite(runner, sock).start())
            ready.set()
            loop.run_forever()
            loop.run_until_complete(runner.cleanup())
            loop.close()

        self._thread = threading.Thread(target=run, name="images-embeddings-upstream", daemon=True)
        self._thread.start()
        ready.wait(10)
        return self

    def stop(self) -> None:
        if self._loop is not None and self._thread is not None:
            self._loop.call_soon_threadsafe(self._loop.stop)
            self._thread.join(10)

    def for_path(self, fragment: str) -> list[Recorded]:
        with self._lock:
            return [r for r in self.requests if fragment in r.path]

    async def _record(self, request: web.Request) -> tuple[Recorded, bytes]:
        raw = await request.read()
        try:
            body = orjson.loads(raw) if raw else None
        except orjson.JSONDecodeError:
            body = None
        rec = Recorded(request.raw_path, {k.lower(): v for k, v in request.headers.items()}, body)
        with self._lock:
            self.requests.append(rec)
        return rec, raw

    @staticmethod
    def _bearer(rec: Recorded, token: str) -> web.Response | None:
        if rec.headers.get("authorization") != f"Bearer {token}":
            return _json(401, {"error": {"message": "bad or missing API key", "type": "invalid_request_error"}})
        return None

    # --- OpenAI embeddings ------------------------------------------------------------------------

    async def _openai_embeddings(self, request: web.Request) -> web.Response:
        rec, _ = await self._record(request)
        denied = self._bearer(rec, OPENAI_KEY)
        if denied is not None:
            return denied
        body = rec.body
        model = body.get("model", "")
        if model == "fail-500":
            return _fail_500()
        inputs = body.get("input")
        items: list[Any] = [inputs] if isinstance(inputs, str) else list(inputs)
        if items and all(isinstance(t, int) for t in items):
            items = [items]
        dims = body.get("dimensions")
        if dims is not None and model.endswith("-fixed"):
            return _json(400, {"error": {"message": "This model does not support specifying dimensions."}})
        data = []
        for i, item in enumerate(items):
            vec = vector(item if isinstance(item, str) else orjson.dumps(item).decode(), dims or EMBED_DIM)
            value: Any = vec
            if body.get("encoding_format") == "base64":
                value = base64.b64encode(np.asarray(vec, dtype="<f4").tobytes()).decode()
            data.append({"object": "embedding", "index": i, "embedding": value})
        tokens = sum(len(t.split()) if isinstance(t, str) else len(t) for t in items)
        return _json(
            200,
            {
                "object": "list",
                "data": data,
                "model": model,
                "usage": {"prompt_tokens": tokens, "total_tokens": tokens},
            },
        )

    # --- OpenAI images ----------------------------------------------------------------------------

    async def _images(self, request: web.Request) -> web.StreamResponse:
        rec, _ = await self._record(request)
        denied = self._bearer(rec, OPENAI_KEY)
        if denied is not None:
            return denied
        body = rec.body
        model = body.get("model", "")
        if model == "fail-500":
            return _fail_500()
        usage = {
            "input_tokens": 11,
            "input_tokens_details": {"image_tokens": 0, "text_tokens": 11},
            "output_tokens": 272,
            "total_tokens": 283,
        }
        settings = {
            "size": body.get("size", "1024x1024"),
            "quality": body.get("quality", "medium"),
            "background": body.get("background", "opaque"),
            "output_format": body.get("output_format", "png"),
        }
        if not body.get("stream"):
            if model == "img-slow":
                await asyncio.sleep(SLOW_S)
            payload: dict[str, Any] = {
                "created": 1700000000,
                "data": [{"b64_json": png_b64(10 + i)} for i in range(body.get("n", 1))],
                **settings,
            }
            if model != "img-nousage":
                payload["usage"] = usage
            return _json(200, payload)
        response = web.StreamResponse(headers={"content-type": "text/event-stream"})
        await response.prepare(request)

        async def send(event: str, payload: dict[str, Any]) -> None:
            await response.write(b"event: %s\ndata: %s\n\n" % (event.encode(), orjson.dumps(payload)))

        def partial(i: int, b64: str) -> dict[str, Any]:
            return {
                "type": "image_generation.partial_image",
                "b64_json": b64,
                "partial_image_index": i,
                "created_at": 1700000000,
                **settings,
            }

        if model == "img-error-first":
            await send("error", {"type": "error", "error": {"code": "server_error", "message": "emulated early error"}})
            return response
        count = int(body.get("partial_images", 0))
        if model in ("img-drop", "img-error-event"):
            count = max(count, 1)
        if model == "img-big-partial":
            count = max(count, 2)
        for i in range(count):
            if model == "img-big-partial" and i > 0:
                big = base64.b64encode(b"\x00" * BIG_PARTIAL_BYTES).decode()
                await send("image_generation.partial_image", partial(i, big))
                return response
            await send("image_generation.partial_image", partial(i, png_b64(i)))
            await asyncio.sleep(0.05)
            if model == "img-drop":
                assert request.transport is not None
                request.transport.close()
                return response
            if model == "img-error-event":
                await send("error", {"type": "error", "error": {"code": "server_error", "message": "emulated failure"}})
                return response
        done = {"type": "image_generation.completed", "b64_json": png_b64(9), "created_at": 1700000001, **settings}
        done["usage"] = usage
        await send("image_generation.completed", done)
        return response

    # --- Bedrock ----------------------------------------------------------------------------------

    async def _bedrock(self, request: web.Request) -> web.Response:
        rec, raw = await self._record(request)
        rec.sigv4 = verify_sigv4(request.method, request.raw_path, request.query_string, rec.headers, raw)
        if rec.sigv4 != "ok":
            return _json(403, {"message": f"The request signature we calculated does not match ({rec.sigv4})"})
        model = request.match_info["model"]
        if model == "fail-500":
            return _json(500, {"message": "emulated internal server error"})
        body = rec.body
        if "titan-embed" in model:
            if "model" in body or "inputText" not in body:
                return _json(400, {"message": "Malformed input request"})
            text = body["inputText"]
            dims = body.get("dimensions", 1024 if "v2" in model else 1536)
            return _json(
                200,
                {"embedding": vector(text, dims), "inputTextTokenCount": len(text.split()), "embeddingsByType": {}},
            )
        if "cohere.embed" in model:
            texts = body.get("texts")
            if not isinstance(texts, list) or body.get("input_type") not in ("search_document", "search_query"):
                return _json(400, {"message": "Malformed input request"})
            tokens = sum(len(t.split()) for t in texts)
            return _json(
                200,
                {
                    "id": "emu-cohere",
                    "texts": texts,
                    "embeddings": [vector(t, 1024) for t in texts],
                    "response_type": "embeddings_floats",
                },
                headers={"X-Amzn-Bedrock-Input-Token-Count": str(tokens)},
            )
        return _json(400, {"message": f"The provided model identifier is invalid: {model}"})

    # --- Vertex -----------------------------------------------------------------------------------

    async def _vertex(self, request: web.Request) -> web.Response:
        rec, _ = await self._record(request)
        rest = request.match_info["rest"]
        if not rest.endswith(":predict"):
            return _json(404, {"error": {"code": 404, "message": "not found", "status": "NOT_FOUND"}})
        if rec.headers.get("authorization") != f"Bearer {VERTEX_TOKEN}":
            return _json(401, [{"error": {"code": 401, "message": "bad token", "status": "UNAUTHENTICATED"}}])
        model = rest[: -len(":predict")]
        if model == "fail-500":
            return _json(500, {"error": {"code": 500, "message": "emulated", "status": "INTERNAL"}})
        instances = rec.body.get("instances")
        if not isinstance(instances, list) or not all(isinstance(i.get("content"), str) for i in instances):
            return _json(400, {"error": {"code": 400, "message": "bad instances", "status": "INVALID_ARGUMENT"}})
        dims = (rec.body.get("parameters") or {}).get("outputDimensionality", 768)
        predictions = [
            {
                "embeddings": {
                    "values": vector(i["content"], dims),
                    "statistics": {"token_count": len(i["content"].split()), "truncated": False},
                }
            }
            for i in instances
        ]
        return _json(200, {"predictions": predictions, "metadata": {"billableCharacterCount": 1}})
