"""A real HTTP forward proxy for tests: `proxy.py` (PyPI) in a subprocess on a loopback port, with
basic auth. Its access log says which requests and tunnels went through it."""

from __future__ import annotations

import asyncio
import subprocess
import sys
import time
from pathlib import Path

from tests.support.process import stop_process

USER = "proxyuser"
PASSWORD = "pr0xy-s3cret-pw"


class ForwardProxy:
    def __init__(self, workdir: Path) -> None:
        workdir.mkdir(parents=True, exist_ok=True)
        self.log_path = workdir / "proxy.log"
        port_file = workdir / "proxy.port"
        self.proc = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "proxy",
                "--hostname",
                "127.0.0.1",
                "--port",
                "0",
                "--port-file",
                str(port_file),
                "--num-workers",
                "1",
                "--num-acceptors",
                "1",
                "--basic-auth",
                f"{USER}:{PASSWORD}",
                "--log-file",
                str(self.log_path),
                "--log-level",
                "INFO",
            ],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.STDOUT,
        )
        deadline = time.monotonic() + 30
        while not (port_file.exists() and port_file.read_text().strip()):
            if self.proc.poll() is not None or time.monotonic() > deadline:
                self.stop()
                raise RuntimeError("proxy.py did not start")
            time.sleep(0.05)
        self.port = int(port_file.read_text().split()[0])

    @property
    def url(self) -> str:
        """With its credentials."""
        return f"http://{USER}:{PASSWORD}@127.0.0.1:{self.port}"

    @property
    def bare_url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def log(self) -> str:
        return self.log_path.read_text(errors="replace") if self.log_path.exists() else ""

    def wait_for_log(self, text: str, timeout: float = 5.0) -> str:
        """The log once it mentions `text` (an access line is written when its connection closes)."""
        deadline = time.monotonic() + timeout
        while text not in (log := self.log()):
            if time.monotonic() > deadline:
                raise AssertionError(f"{text!r} not in the proxy's log:\n{log}")
            time.sleep(0.05)
        return log

    async def await_log(self, text: str) -> str:
        """`wait_for_log` for a test whose servers run on its own event loop."""
        deadline = time.monotonic() + 5.0
        while text not in (log := self.log()):
            if time.monotonic() > deadline:
                raise AssertionError(f"{text!r} not in the proxy's log:\n{log}")
            await asyncio.sleep(0.05)
        return log

    def stop(self) -> None:
        stop_process(self.proc)
