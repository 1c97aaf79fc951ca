"""`AsyncClient`: the asyncio client (httpx). All decisions are in `StreamSession`; this only moves bytes."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from types import TracebackType
from typing import Any

import httpx

from .base import DEFAULT_TIMEOUT, ClientBase, StreamView, auth_headers, check_json, replay_result
from .errors import IncompleteStream
from .session import REPLAY_PATH, Mode, StreamSession
from .types import Done, StreamEvent


class AsyncStream(StreamView):
    """An async iterable of typed events; `async with` closes the connection."""

    def __init__(self, events: AsyncIterator[StreamEvent], session: StreamSession) -> None:
        super().__init__(session)
        self._events = events

    def __aiter__(self) -> AsyncIterator[StreamEvent]:
        return self

    async def __anext__(self) -> StreamEvent:
        return await self._events.__anext__()

    async def __aenter__(self) -> AsyncStream:
        return self

    async def __aexit__(self, t: type[BaseException] | None, e: BaseException | None, tb: TracebackType | None) -> None:
        await self.aclose()

    async def aclose(self) -> None:
        aclose = getattr(self._events, "aclose", None)
        if aclose is not None:
            await aclose()

    async def until_done(self) -> Done:
        async for _ in self:
            pass
        if self.session.done is None:  # pragma: no cover - the generator raises first
            raise IncompleteStream("the stream ended without its terminal event")
        return self.session.done


class AsyncClient(ClientBase[AsyncStream]):
    """`AsyncClient(base_url=None, api_key=None)`: `$TIDEGATE_URL` and `$TIDEGATE_API_KEY` by default."""

    def __init__(
        self,
        base_url: str | None = None,
        api_key: str | None = None,
        *,
        timeout: httpx.Timeout | float = DEFAULT_TIMEOUT,
        max_resumes: int = 3,
        replay_wait_s: float = 120.0,
        http_client: httpx.AsyncClient | None = None,
    ) -> None:
        super().__init__(base_url, api_key, max_resumes=max_resumes, replay_wait_s=replay_wait_s)
        self._http = http_client or httpx.AsyncClient(base_url=self.base_url, timeout=timeout)

    async def __aenter__(self) -> AsyncClient:
        return self

    async def __aexit__(self, t: type[BaseException] | None, e: BaseException | None, tb: TracebackType | None) -> None:
        await self.aclose()

    async def aclose(self) -> None:
        await self._http.aclose()

    def _stream(self, session: StreamSession) -> AsyncStream:
        return AsyncStream(self._run(session), session)

    async def _run(self, session: StreamSession) -> AsyncIterator[StreamEvent]:
        while not session.finished:
            req = session.request()
            try:
                async with self._http.stream(req.method, req.path, headers=req.headers, content=req.body) as resp:
                    if session.on_head(resp.status_code, resp.headers) is Mode.BODY:
                        for ev in session.on_body(await resp.aread()):
                            yield ev
                    else:
                        async for chunk in resp.aiter_raw():
                            for ev in session.on_bytes(chunk):
                                yield ev
                            session.raise_failure()
                            if session.finished:
                                break
                        else:
                            session.on_end("the stream ended without its terminal event")
            except httpx.TransportError as exc:
                session.on_end(
                    f"connection lost ({type(exc).__name__})", connect_failed=isinstance(exc, httpx.ConnectError)
                )
            delay = session.take_delay()
            if delay and not session.finished:
                await asyncio.sleep(delay)

    async def replay(self, idempotency_key: str) -> Done:
        headers = {**auth_headers(self.api_key), "Idempotency-Key": idempotency_key}
        resp = await self._http.post(REPLAY_PATH, headers=headers)
        return replay_result(resp.status_code, resp.headers, resp.content, idempotency_key)

    async def generation(self, generation_id: str) -> dict[str, Any]:
        resp = await self._http.get(f"/api/v1/generations/{generation_id}", headers=self._headers())
        result: dict[str, Any] = check_json(resp.status_code, resp.headers, resp.content)
        return result

    async def cancel(self, generation_id: str) -> dict[str, Any]:
        resp = await self._http.post(f"/api/v1/generations/{generation_id}/cancel", headers=self._headers())
        result: dict[str, Any] = check_json(resp.status_code, resp.headers, resp.content)
        return result

    async def models(self) -> list[dict[str, Any]]:
        resp = await self._http.get("/v1/models", headers=self._headers())
        data: list[dict[str, Any]] = check_json(resp.status_code, resp.headers, resp.content).get("data") or []
        return data
