"""Test plumbing: free ports, a real tidegate server subprocess, SSE reading helpers."""

from __future__ import annotations

import os
import select
import signal
import socket
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import orjson

from tidegate.sse import SSEDecoder, SSEEvent

MASTER_KEY = "tg-test-master-key-0123456789"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def port_open(host: str, port: int) -> bool:
    try:
        with socket.create_connection((host, port), timeout=0.5):
            return True
    except OSError:
        return False


@dataclass
class ServerProcess:
    base_url: str
    key: str
    proc: subprocess.Popen[bytes]
    workdir: Path
    config_path: Path
    log_path: Path
    env: dict[str, str] = field(default_factory=dict)

    @property
    def headers(self) -> dict[str, str]:
        return {"Authorization": f"Bearer {self.key}"}

    def log(self) -> str:
        return self.log_path.read_text(errors="replace") if self.log_path.exists() else ""

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()

    def kill(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()


def stop_and_time(server: ServerProcess, bound_s: float, grace_s: float = 10.0) -> float:
    """SIGTERM to `server`, and the seconds until its process exited, waited for on a pidfd (the
    wait blocks outside the interpreter: a test process busy with many client threads still sees the
    exit when it happens). A gateway still running `bound_s + grace_s` after the signal gets SIGUSR1
    (its threads' stacks go to its log), then SIGKILL, and the test fails with its log's tail: what
    it still ran, never a hung test."""
    pidfd = os.pidfd_open(server.proc.pid)
    try:
        started = time.monotonic()
        server.proc.terminate()
        exited, _, _ = select.select([pidfd], [], [], bound_s + grace_s)
        elapsed = time.monotonic() - started
    finally:
        os.close(pidfd)
    if not exited:
        server.proc.send_signal(signal.SIGUSR1)
        time.sleep(0.5)
        server.kill()
        raise AssertionError(
            f"{server.base_url} still ran {elapsed:.1f} s after SIGTERM (bound {bound_s:g} s); its log's end:\n"
            + server.log()[-8000:]
        )
    server.proc.wait()
    return elapsed


STARTED: list[ServerProcess] = []  # every gateway this test session started (the secrets check reads them)
SECRET_NAMES = ("_KEY", "_TOKEN", "_SECRET", "_SECRET_ACCESS_KEY", "_PASSWORD")


def secrets_of(server: ServerProcess) -> set[str]:
    """The secrets a gateway was given: its master key and every credential-named variable."""
    found = {server.key} if server.key else set()
    for name, value in server.env.items():
        if name.startswith(("TIDEGATE_", "CANARY_")) or name.endswith(SECRET_NAMES):
            if len(value) >= 8 and name not in ("TIDEGATE_CONFIG", "TIDEGATE_LOG_LEVEL"):
                found.add(value)
    return found


def start_server(
    workdir: Path,
    config_toml: str | None,
    *,
    master_key: str | None = MASTER_KEY,
    extra_env: dict[str, str] | None = None,
    args: list[str] | None = None,
    wait_ready: bool = True,
    port: int | None = None,
) -> ServerProcess:
    """Start `tidegate serve` as a real subprocess on a free port and wait for /readyz. `config_toml`
    None: no `--config`, the embedded default (what `make serve` runs), its SQLite file in `workdir`."""
    workdir.mkdir(parents=True, exist_ok=True)
    port = port or free_port()
    config_path = workdir / "tidegate.toml"
    if config_toml is not None:
        config_path.write_text(config_toml)
    config_args = ["--config", str(config_path)] if config_toml is not None else []
    env = {k: v for k, v in os.environ.items() if not k.startswith("TIDEGATE_")}
    if master_key is not None:
        env["TIDEGATE_MASTER_KEY"] = master_key
    env["TIDEGATE_LOG_LEVEL"] = "DEBUG"  # the whole suite runs its gateways at DEBUG: no secret may show
    if os.environ.get("TIDEGATE_TEST_SHORTCUTS") == "off":  # `make test`'s second pass (server/runtime/shortcuts.py)
        env["TIDEGATE_SERVER_SHORTCUTS"] = "off"
    env.update(extra_env or {})
    log_path = workdir / "server.log"
    log = open(log_path, "wb")
    proc = subprocess.Popen(
        [sys.executable, "-m", "tidegate", "serve", *config_args, "--port", str(port), *(args or [])],
        cwd=workdir,
        env=env,
        stdout=log,
        stderr=subprocess.STDOUT,
    )
    server = ServerProcess(f"http://127.0.0.1:{port}", master_key or "", proc, workdir, config_path, log_path, env)
    STARTED.append(server)
    if wait_ready:
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            if proc.poll() is not None:
                raise RuntimeError(f"tidegate exited with {proc.returncode}:\n{server.log()}")
            try:
                if httpx.get(server.base_url + "/readyz", timeout=1).status_code == 200:
                    break
            except httpx.HTTPError:
                pass
            time.sleep(0.05)
        else:
            server.stop()
            raise RuntimeError(f"tidegate did not become ready:\n{server.log()}")
    return server


def sqlite_url(workdir: Path) -> str:
    return f"sqlite:///{workdir / 'tidegate.db'}"


def local_config(workdir: Path, server_extra: str = "") -> str:
    return f"""
[server]
host = "127.0.0.1"
{server_extra}
[store]
url = "{sqlite_url(workdir)}"
[providers.local]
kind = "local"
[models."local/smollm2"]
routes = [{{ provider = "local", model = "smollm2-135m-instruct" }}]
pricing = {{ prompt = 1.0, completion = 2.0 }}
[models."local/e5-small"]
type = "embedding"
routes = [{{ provider = "local", model = "e5-small" }}]
"""


@dataclass
class SSEResult:
    status: int
    headers: httpx.Headers
    events: list[SSEEvent]
    comments: int
    raw: bytes

    def json_events(self) -> list[Any]:
        return [orjson.loads(e.data) for e in self.events if e.data != "[DONE]"]

    @property
    def done(self) -> bool:
        return bool(self.events) and self.events[-1].data == "[DONE]"


def stream_sse(
    url: str,
    body: dict[str, Any] | bytes,
    headers: dict[str, str],
    timeout: float = 60.0,
    client: httpx.Client | None = None,
) -> SSEResult:
    """POST and read the whole SSE response with tidegate's own decoder (raw bytes kept). `client`:
    one to reuse (a test that sends many requests from each thread: a new client per request loads
    the system's certificates each time)."""
    content = body if isinstance(body, bytes) else orjson.dumps(body)
    decoder = SSEDecoder()
    events: list[SSEEvent] = []
    raw = bytearray()
    send = client.stream if client is not None else httpx.stream
    with send(
        "POST", url, content=content, headers={"content-type": "application/json", **headers}, timeout=timeout
    ) as resp:
        for chunk in resp.iter_raw():
            raw += chunk
            events.extend(decoder.feed(chunk))
        return SSEResult(resp.status_code, resp.headers, events, decoder.comments_seen, bytes(raw))


class RawStream:
    """A raw HTTP/1.1 streaming request on a socket (tests that must control the connection)."""

    def __init__(self, base_url: str, path: str, body: dict[str, Any], headers: dict[str, str]) -> None:
        raw = orjson.dumps(body)
        host, port = base_url.removeprefix("http://").split(":")
        self.sock = socket.create_connection((host, int(port)))
        head = "".join(f"{k}: {v}\r\n" for k, v in headers.items())
        self.sock.sendall(
            f"POST {path} HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n{head}"
            f"Content-Length: {len(raw)}\r\n\r\n".encode()
            + raw
        )
        self._buf = b""
        self.headers: dict[str, str] = {}
        self.status = 0
        self.decoder = SSEDecoder()
        self.events: list[SSEEvent] = []
        self.body = b""
        self.ended = False
        while b"\r\n\r\n" not in self._buf:
            self._recv()
        head_bytes, self._buf = self._buf.split(b"\r\n\r\n", 1)
        lines = head_bytes.decode("latin-1").split("\r\n")
        self.status = int(lines[0].split()[1])
        for line in lines[1:]:
            k, _, v = line.partition(":")
            self.headers[k.strip().lower()] = v.strip()

    def _recv(self) -> None:
        chunk = self.sock.recv(65536)
        if not chunk:
            raise ConnectionError("closed")
        self._buf += chunk

    def _dechunk(self) -> None:
        while True:
            if b"\r\n" not in self._buf:
                return
            size_line, rest = self._buf.split(b"\r\n", 1)
            size = int(size_line.split(b";")[0], 16)
            if size == 0:
                self.ended = True
                return
            if len(rest) < size + 2:
                return
            data, self._buf = rest[:size], rest[size + 2 :]
            self.body += data
            self.events.extend(self.decoder.feed(data))

    def read_events(self, n: int, timeout: float = 30.0) -> list[SSEEvent]:
        """Read until at least `n` SSE events arrived (or the response ended)."""
        self.sock.settimeout(timeout)
        self._dechunk()
        while len(self.events) < n and not self.ended:
            try:
                self._recv()
            except ConnectionError:
                break
            self._dechunk()
        return self.events

    def read_to_end(self, timeout: float = 30.0) -> bytes:
        self.read_events(10**9, timeout)
        return self.body

    def close(self) -> None:
        self.sock.close()
