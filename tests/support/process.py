"""A real tidegate server as a subprocess: free ports, starting and stopping it, its config and store."""

from __future__ import annotations

import os
import select
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from tests.support.waits import wait_ready as wait_for_ready

MASTER_KEY = "tg-test-master-key-0123456789"
REPO = Path(__file__).resolve().parents[2]  # the checkout: a helper script run as `python -m tests...` starts here


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
        stop_process(self.proc)

    def kill(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()


def stop_process(proc: subprocess.Popen[Any], grace_s: float = 10.0) -> None:
    """SIGTERM, then SIGKILL if the process is still there after `grace_s`; waited for either way."""
    if proc.poll() is None:
        proc.terminate()
        try:
            proc.wait(timeout=grace_s)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


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
        try:
            wait_for_ready(server.base_url, proc=proc, log=server.log)
        except RuntimeError:
            server.stop()
            raise
    return server


@contextmanager
def running_server(workdir: Path, config_toml: str | None, **start: Any) -> Iterator[ServerProcess]:
    """`start_server(workdir, config_toml, **start)` for a fixture to yield, stopped when the
    fixture ends, however it ends: no gateway outlives its fixture."""
    server = start_server(workdir, config_toml, **start)
    try:
        yield server
    finally:
        server.stop()


@contextmanager
def started_server(
    tmp_path_factory: pytest.TempPathFactory,
    name: str,
    config: str | Callable[[Path], str] | None,
    **start: Any,
) -> Iterator[ServerProcess]:
    """`running_server` in a fresh temporary directory called `name`: the shape of a module's or a
    session's `server` fixture. `config` may be a function of that directory, where the store's
    file goes."""
    workdir = tmp_path_factory.mktemp(name)
    with running_server(workdir, config(workdir) if callable(config) else config, **start) as server:
        yield server


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
