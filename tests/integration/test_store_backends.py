"""A real tidegate server on the Redis and PostgreSQL stores: idempotent replay, generation records,
readiness, a restart on the same store, and `--workers 2` sharing one store.

Redis / PostgreSQL are the loopback test servers (see `tests/support/store_backends.py`); each test
uses its own key prefix or schema and removes it. A backend that does not answer is skipped.
"""

from __future__ import annotations

import asyncio
import threading
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import asyncpg
import httpx
import pytest
import redis

from tests.support.process import ServerProcess, local_config, sqlite_url, start_server
from tests.support.records import wait_record
from tests.support.store_backends import (
    drop_postgres_schema,
    drop_redis_prefix,
    postgres_url,
    redis_url,
    unique_name,
    with_query,
)
from tests.support.streams import stream_sse

CHAT = "/v1/chat/completions"


@dataclass
class Backend:
    name: str
    base: str  # the server's url without isolation parameters
    isolation: str  # the key prefix (redis) or schema (postgres)

    @property
    def store_url(self) -> str:
        param = {"prefix": self.isolation} if self.name == "redis" else {"schema": self.isolation}
        return with_query(self.base, **param)

    def generation_count(self) -> int:
        """How many generation records the store holds, read straight from the backend."""
        if self.name == "redis":
            client = redis.Redis.from_url(self.base)
            try:
                return sum(1 for _ in client.scan_iter(match=self.isolation + "gen:*", count=1000))
            finally:
                client.close()

        async def _count() -> int:
            conn = await asyncpg.connect(self.base, timeout=5)
            try:
                return int(await conn.fetchval(f'SELECT COUNT(*) FROM "{self.isolation}".generations'))
            finally:
                await conn.close()

        return asyncio.run(_count())


@pytest.fixture(params=["redis", "postgres"])
def backend(request: pytest.FixtureRequest) -> Iterator[Backend]:
    if request.param == "redis":
        base, why = redis_url()
        if base is None:
            pytest.skip(why)
        b = Backend("redis", base, unique_name("int") + ":")
        yield b
        drop_redis_prefix(base, b.isolation)
    else:
        base, why = postgres_url()
        if base is None:
            pytest.skip(why)
        b = Backend("postgres", base, unique_name("int"))
        yield b
        drop_postgres_schema(base, b.isolation)


def config_for(workdir: Path, backend: Backend) -> str:
    toml = local_config(workdir)
    assert sqlite_url(workdir) in toml
    return toml.replace(sqlite_url(workdir), backend.store_url)


def chat_body(max_tokens: int = 16, stream: bool = False) -> dict[str, object]:
    return {
        "model": "local/smollm2",
        "stream": stream,
        "max_tokens": max_tokens,
        "seed": 7,
        "messages": [{"role": "user", "content": "Name three colours."}],
    }


def test_replay_record_and_readiness_on_backend(backend: Backend, tmp_path: Path) -> None:
    server: ServerProcess = start_server(tmp_path, config_for(tmp_path, backend))
    try:
        assert httpx.get(server.base_url + "/readyz").status_code == 200
        h = {**server.headers, "Idempotency-Key": "int-" + uuid.uuid4().hex}
        first = httpx.post(server.base_url + CHAT, json=chat_body(), headers=h, timeout=60)
        assert first.status_code == 200, first.text
        assert "idempotent-replayed" not in first.headers
        gid = first.headers["x-generation-id"]
        second = httpx.post(server.base_url + CHAT, json=chat_body(), headers=h, timeout=60)
        assert second.status_code == 200
        assert second.headers["idempotent-replayed"] == "true"
        assert second.headers["x-generation-id"] == gid
        assert second.content == first.content

        rec = httpx.get(f"{server.base_url}/api/v1/generations/{gid}", headers=server.headers)
        assert rec.status_code == 200, rec.text
        data = rec.json()
        assert data["id"] == gid and data["status"] == "completed"
        assert data["provider"] == "local" and data["served_model"] == "smollm2-135m-instruct"
        assert data["attempts"] == 1 and data["finish_reason"] in ("stop", "length")
        assert data["usage"]["completion_tokens"] > 0
        assert data["output_text"] == first.json()["choices"][0]["message"]["content"]

        reused = httpx.post(server.base_url + CHAT, json=chat_body(max_tokens=5), headers=h, timeout=60)
        assert reused.status_code == 422  # same key, different body

        sh = {**server.headers, "Idempotency-Key": "int-stream-" + uuid.uuid4().hex}
        live = stream_sse(server.base_url + CHAT, chat_body(stream=True), sh)
        assert live.status == 200 and live.done
        replay = stream_sse(server.base_url + CHAT, chat_body(stream=True), sh)
        assert replay.headers["idempotent-replayed"] == "true"
        assert replay.raw == live.raw  # frames read back from the backend's log, byte for byte
        assert backend.generation_count() == 2
    finally:
        server.stop()

    # a new process on the same store answers from it: nothing lived only in the old process
    restarted = start_server(tmp_path / "again", config_for(tmp_path, backend))
    try:
        third = httpx.post(restarted.base_url + CHAT, json=chat_body(), headers=h, timeout=60)
        assert third.status_code == 200 and third.headers["idempotent-replayed"] == "true"
        assert third.content == first.content
        assert backend.generation_count() == 2
    finally:
        restarted.stop()


def test_two_workers_one_generation_per_key(backend: Backend, tmp_path: Path) -> None:
    server = start_server(tmp_path, config_for(tmp_path, backend), args=["--workers", "2"])
    try:
        h = {**server.headers, "Idempotency-Key": "race-" + uuid.uuid4().hex}
        body = chat_body(max_tokens=48)
        barrier = threading.Barrier(6)
        answers: list[httpx.Response] = []
        lock = threading.Lock()

        def send() -> None:
            with httpx.Client(timeout=120) as client:  # one connection per client
                barrier.wait()
                resp = client.post(server.base_url + CHAT, json=body, headers=h)
            with lock:
                answers.append(resp)

        threads = [threading.Thread(target=send) for _ in range(6)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(timeout=180)
        assert len(answers) == 6
        statuses = sorted(r.status_code for r in answers)
        assert set(statuses) <= {200, 409}, [r.text for r in answers]
        originals = [r for r in answers if r.status_code == 200 and "idempotent-replayed" not in r.headers]
        assert len(originals) == 1  # exactly one request ran a generation
        gids = {r.headers["x-generation-id"] for r in answers}
        assert gids == {originals[0].headers["x-generation-id"]}
        for r in answers:
            if r.status_code == 409:
                assert r.json()["error"]["code"] == "generation_in_progress"
            elif r is not originals[0]:
                assert r.content == originals[0].content
        assert backend.generation_count() == 1
        # once done, every worker answers the stored bytes
        gid = originals[0].headers["x-generation-id"]
        rec = wait_record(server, gid, within_s=30)
        assert rec["status"] == "completed"
        for _ in range(4):
            again = httpx.post(server.base_url + CHAT, json=body, headers=h, timeout=60)
            assert again.status_code == 200 and again.headers["idempotent-replayed"] == "true"
            assert again.content == originals[0].content
        assert backend.generation_count() == 1
    finally:
        server.stop()
