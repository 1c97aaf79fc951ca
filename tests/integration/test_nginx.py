"""Three gateways behind a real nginx, with the config from docs/deployment.md (docs/api-operations.md §10): a killed
gateway's generation replays as `interrupted` through nginx, and a rolling restart of all three under
50 streams in flight loses nothing.

nginx is Debian's (`.ci/run` installs it when missing); the store is Redis, the deployment the guide
recommends.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import threading
import time
import uuid
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import httpx
import orjson
import pytest

from tests.emulators.openai_upstream import OpenAIUpstream, tidegate_toml
from tests.support.process import MASTER_KEY, ServerProcess, free_port, start_server, stop_and_time
from tests.support.store_backends import drop_redis_prefix, redis_url, unique_name, with_query
from tests.support.streams import RawStream, stream_sse

DOCS = Path(__file__).resolve().parents[2] / "docs" / "deployment.md"
NATIVE = "/api/v1/llm/responses"
HEADERS = {"Authorization": f"Bearer {MASTER_KEY}"}


def _nginx_binary() -> str:
    found = shutil.which("nginx") or ("/usr/sbin/nginx" if os.path.exists("/usr/sbin/nginx") else None)
    if found is None:
        if os.environ.get("CI"):
            pytest.fail("nginx is not installed (.ci/run installs Debian's nginx-light)")
        pytest.skip("nginx is not installed (apt-get install nginx-light)")
    return found


def documented_nginx_config() -> str:
    """The ```nginx block of docs/deployment.md, exactly as the guide shows it."""
    blocks = re.findall(r"```nginx\n(.*?)```", DOCS.read_text(), re.S)
    assert len(blocks) == 1, "docs/deployment.md shows one nginx config"
    return str(blocks[0])


class Nginx:
    def __init__(self, workdir: Path, gateway_ports: list[int]) -> None:
        self.port = free_port()
        self.error_log = workdir / "error.log"
        snippet = documented_nginx_config()
        documented = re.findall(r"server 127\.0\.0\.1:(\d+)", snippet)
        assert len(documented) == len(gateway_ports)
        for doc_port, port in zip(documented, gateway_ports, strict=True):
            snippet = snippet.replace(f"127.0.0.1:{doc_port} ", f"127.0.0.1:{port} ")
        snippet = snippet.replace("listen 127.0.0.1:8080;", f"listen 127.0.0.1:{self.port};")
        workdir.mkdir(parents=True, exist_ok=True)
        temp = {name: workdir / name for name in ("body", "proxy", "fastcgi", "uwsgi", "scgi")}
        for path in temp.values():
            path.mkdir(exist_ok=True)
        conf = workdir / "nginx.conf"
        conf.write_text(
            "daemon off;\nworker_processes 1;\n"
            f"pid {workdir / 'nginx.pid'};\nerror_log {workdir / 'error.log'} warn;\n"
            "events { worker_connections 1024; }\n"
            "http {\n"
            f"  access_log off;\n  client_body_temp_path {temp['body']};\n  proxy_temp_path {temp['proxy']};\n"
            f"  fastcgi_temp_path {temp['fastcgi']};\n  uwsgi_temp_path {temp['uwsgi']};\n"
            f"  scgi_temp_path {temp['scgi']};\n"
            f"{snippet}\n}}\n"
        )
        self.proc = subprocess.Popen(
            [_nginx_binary(), "-c", str(conf), "-p", str(workdir)], stderr=subprocess.PIPE, stdout=subprocess.DEVNULL
        )
        deadline = time.monotonic() + 10
        while True:
            try:
                httpx.get(self.base_url + "/healthz", timeout=1)
                break
            except httpx.HTTPError:
                if self.proc.poll() is not None or time.monotonic() > deadline:
                    err = self.proc.stderr.read().decode() if self.proc.stderr else ""
                    raise RuntimeError(f"nginx did not start: {err}") from None
                time.sleep(0.05)

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def errors(self) -> str:
        """nginx's own account of a failure (which gateway, what it saw), for an assertion's message;
        refused connects are left out (nginx resends those, and a restart makes many)."""
        if not self.error_log.exists():
            return ""
        lines = self.error_log.read_text().splitlines()
        return "\n".join(line for line in lines if "(111: Connection refused)" not in line)[-4000:]

    def stop(self) -> None:
        self.proc.terminate()
        self.proc.wait(timeout=10)


@pytest.fixture
def redis_store() -> Iterator[str]:
    base, why = redis_url()
    if base is None:
        pytest.skip(why)
    prefix = unique_name("nginx") + ":"
    yield with_query(base, prefix=prefix)
    drop_redis_prefix(base, prefix)


def _config(store_url: str, emu: OpenAIUpstream) -> str:
    return tidegate_toml(
        store_url,
        {"emu": {"kind": "openai", "base_url": emu.base_url}},
        {"slow": [("emu", "slow:0.05")], "brief": [("emu", "silence:0.5")]},
        server={"lease_ttl_s": 1.5, "drain_s": DRAIN_S, "keepalive_s": 10},
    )


def _gateways(tmp_path: Path, config: str, ports: list[int]) -> list[ServerProcess]:
    return [start_server(tmp_path / f"g{i}", config, port=port) for i, port in enumerate(ports)]


def test_a_killed_gateways_generation_replays_interrupted_through_nginx(redis_store: str, tmp_path: Path) -> None:
    ports = [free_port() for _ in range(3)]
    with OpenAIUpstream() as emu:
        gateways = _gateways(tmp_path, _config(redis_store, emu), ports)
        nginx = Nginx(tmp_path / "nginx", ports)
        try:
            idem = "nginx-kill-" + uuid.uuid4().hex
            victim = gateways[0]
            stream = RawStream(
                victim.base_url, NATIVE, {"model": "slow", "input": "x"}, {**HEADERS, "Idempotency-Key": idem}
            )
            stream.read_events(8)
            time.sleep(0.6)
            victim.kill()
            stream.close()
            deadline = time.monotonic() + 8
            while True:  # nginx routes around the dead one (its connect is refused)
                replay = httpx.post(nginx.base_url + NATIVE + "/replay", headers={**HEADERS, "Idempotency-Key": idem})
                if replay.status_code != 409 or time.monotonic() > deadline:
                    break
                time.sleep(0.2)
            assert replay.status_code == 502, replay.text
            body = replay.json()
            assert body["error"]["code"] == "interrupted" and body["partial_output"].startswith("tick0 tick1 ")
        finally:
            nginx.stop()
            for g in gateways:
                g.kill()


DRAIN_S = 4.0
EXIT_BOUND_S = DRAIN_S + 2  # a gateway sent SIGTERM exits within drain_s + 2 s (docs/api-operations.md §10)


def test_a_rolling_restart_under_50_streams_loses_nothing(redis_store: str, tmp_path: Path) -> None:
    """Half the clients stream for two minutes (`slow`): each stop's drain runs out with streams
    running, which end `interrupted`; the other half send short ones that finish within it."""
    ports = [free_port() for _ in range(3)]
    with OpenAIUpstream() as emu:
        config = _config(redis_store, emu)
        gateways = _gateways(tmp_path, config, ports)
        nginx = Nginx(tmp_path / "nginx", ports)
        stop = threading.Event()
        outcomes: list[tuple[int, str, str]] = []  # status, generation id, how the stream ended
        lock = threading.Lock()

        def client(model: str) -> None:
            with httpx.Client() as http:  # one per thread: a new one per request loads the certificates
                while not stop.is_set():
                    try:
                        result = stream_sse(nginx.base_url + NATIVE, {"model": model, "input": "x"}, HEADERS, 30, http)
                        ending = str(result.events[-1].event) if result.events else "nothing"
                        outcome = (result.status, result.headers.get("x-generation-id", ""), ending)
                    except httpx.HTTPError as exc:
                        outcome = (0, "", repr(exc))
                    if stop.is_set() and outcome[2] not in ("done", "error"):
                        return  # cut by nginx's own stop at the end: not the gateways' doing
                    with lock:
                        outcomes.append(outcome)

        exits: list[float] = []
        with ThreadPoolExecutor(50) as pool:
            try:
                clients = [pool.submit(client, "slow" if n % 2 else "brief") for n in range(50)]
                time.sleep(1.5)
                for i, port in enumerate(ports):  # one at a time: drain, exit, start again, ready
                    exits.append(stop_and_time(gateways[i], EXIT_BOUND_S))
                    gateways[i] = start_server(tmp_path / f"g{i}-again", config, port=port)
                time.sleep(1.0)
            finally:  # the clients stop before the pool waits for them, whatever failed
                stop.set()
                nginx.stop()  # what still streams through it (the slow half) ends now
        for future in clients:
            future.result()
        try:
            assert all(seconds <= EXIT_BOUND_S for seconds in exits), (exits, [g.log()[-3000:] for g in gateways])
            assert len(outcomes) >= 100, len(outcomes)
            bad = [o for o in outcomes if o[0] != 200 or o[2] not in ("done", "error")]
            assert not bad, (bad[:5], nginx.errors())
            gids = [gid for _, gid, _ in outcomes]
            assert all(gids) and len(set(gids)) == len(gids)
            _every_record_final(gateways[0], gids, endings={o[2] for o in outcomes})
        finally:
            for g in gateways:
                g.kill()


def _every_record_final(gateway: ServerProcess, gids: list[str], endings: set[str]) -> None:
    """Every generation the stops ended is final in the store (read from a gateway that runs now)."""
    statuses: dict[str, int] = {}
    with httpx.Client(base_url=gateway.base_url, headers=HEADERS, timeout=10) as http:
        for gid in gids:
            record: dict[str, Any] = orjson.loads(http.get(f"/api/v1/generations/{gid}").content)
            statuses[record["status"]] = statuses.get(record["status"], 0) + 1
    assert set(statuses) <= {"completed", "interrupted"}, statuses
    assert "interrupted" in statuses and "error" in endings, statuses
