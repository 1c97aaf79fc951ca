"""`tidegate serve --workers N`: N worker processes, each listening on a socket of its own.

uvicorn's own `--workers` binds one socket in the parent and hands it to every worker; whichever
worker's event loop wakes first accepts, so a burst of new connections lands mostly on one worker
and keep-alive clients stay there (measured: one worker of two took 57–100 % of the CPU under the
bench's loads, docs/performance.md item 48). Here every worker binds the same address with
`SO_REUSEPORT`, and the kernel spreads new connections over the listening sockets by a hash of
their addresses (Linux). The parent binds the address too (without listening, so it is never handed
a connection): it claims the port while a worker restarts, and resolves port 0 once for all.

The parent only supervises: a worker that dies is started again (after a pause that grows while
workers keep dying young), one that fails at startup stops the whole server (exit code 3, as
uvicorn), SIGHUP replaces the workers one at a time (each new one serving before its old one is
stopped: a config file edited meanwhile takes effect), SIGINT/SIGTERM stop the workers gracefully
and then the parent.
"""

from __future__ import annotations

import errno
import multiprocessing
import os
import signal
import socket
import sys
import threading
import time
from multiprocessing.connection import wait
from multiprocessing.process import BaseProcess
from multiprocessing.synchronize import Event
from typing import Any, NamedTuple

import click

STARTUP_FAILURE = 3  # uvicorn's exit code for a worker that could not start (bad bind, failed lifespan)
_YOUNG_S = 5.0  # a worker that dies younger than this is restarted after a growing pause
_MAX_PAUSE_S = 10.0
_STOP_GRACE_S = 15.0  # after SIGTERM a worker gets this long (its own graceful timeout is shorter)
_READY_TIMEOUT_S = 120.0  # a reload gives up on a new worker that is not serving by then


def reuse_port_supported() -> bool:
    """Only Linux spreads connections over `SO_REUSEPORT` listeners (elsewhere the last one takes all)."""
    return sys.platform.startswith("linux") and hasattr(socket, "SO_REUSEPORT")


def _family(host: str) -> socket.AddressFamily:
    return socket.AF_INET6 if ":" in host else socket.AF_INET


def _reuse_port_socket(host: str, port: int) -> socket.socket:
    sock = socket.socket(_family(host), socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT, 1)
    try:
        sock.bind((host, port))
    except BaseException:
        sock.close()
        raise
    return sock


def claim_port(host: str, port: int) -> socket.socket:
    """The parent's hold on the address. First a plain bind, which fails while anything else is bound
    there (another tidegate's workers included, which a `SO_REUSEPORT` bind would silently join);
    then the `SO_REUSEPORT` bind the workers' sockets share the port with."""
    probe = socket.socket(_family(host), socket.SOCK_STREAM)
    probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        probe.bind((host, port))
        port = probe.getsockname()[1]
    except OSError as exc:
        reason = "the address is in use" if exc.errno == errno.EADDRINUSE else exc.strerror
        raise click.ClickException(f"cannot listen on {host}:{port}: {reason}") from None
    finally:
        probe.close()
    return _reuse_port_socket(host, port)


def _worker_main(uvicorn_options: dict[str, Any], host: str, port: int, serving: Event) -> None:
    """A worker process: its own listening socket, then uvicorn's server on it; `serving` is set
    once the server has started (the app's startup done, the socket listening)."""
    import uvicorn

    try:
        sock = _reuse_port_socket(host, port)
    except OSError as exc:
        print(f"tidegate worker {os.getpid()}: cannot listen on {host}:{port}: {exc.strerror}", file=sys.stderr)
        sys.exit(STARTUP_FAILURE)
    server = uvicorn.Server(uvicorn.Config(host=host, port=port, **uvicorn_options))

    def tell_when_serving() -> None:
        while not server.started and not server.should_exit:
            time.sleep(0.05)
        if server.started:
            serving.set()

    threading.Thread(target=tell_when_serving, daemon=True).start()
    server.run(sockets=[sock])
    if not server.started:  # the app's startup failed: it would on every restart too
        sys.exit(STARTUP_FAILURE)


class Worker(NamedTuple):
    process: BaseProcess
    started_at: float
    serving: Event


class Supervisor:
    """Starts `count` workers on `claimed` (the parent's socket from `claim_port`) and keeps them up."""

    def __init__(self, uvicorn_options: dict[str, Any], claimed: socket.socket, count: int) -> None:
        self._options = uvicorn_options
        self._claimed = claimed
        self._host, self._port = claimed.getsockname()[:2]
        self._count = count
        self._context = multiprocessing.get_context("spawn")
        self._workers: list[Worker] = []
        self._pause = 0.0
        self._stop_signal: int | None = None
        self._reload = False

    def _start_one(self) -> Worker:
        serving = self._context.Event()
        process = self._context.Process(target=_worker_main, args=(self._options, self._host, self._port, serving))
        process.start()
        return Worker(process, time.monotonic(), serving)

    def _on_signal(self, signum: int, _frame: object) -> None:
        self._stop_signal = signum

    def _on_hangup(self, _signum: int, _frame: object) -> None:
        self._reload = True

    def run(self) -> int:
        """Serve until SIGINT/SIGTERM (exit code 0) or a worker's startup failure (3)."""
        for signum in (signal.SIGINT, signal.SIGTERM):
            signal.signal(signum, self._on_signal)
        signal.signal(signal.SIGHUP, self._on_hangup)
        self._workers = [self._start_one() for _ in range(self._count)]
        code = 0
        try:
            while self._stop_signal is None:
                wait([w.process.sentinel for w in self._workers], timeout=0.5)
                if self._reload:
                    self._reload = False
                    self._replace_all()
                failed = self._replace_dead()
                if failed:
                    code = STARTUP_FAILURE
                    break
        finally:
            _stop(self._workers)
            self._claimed.close()
        return code

    def _replace_dead(self) -> bool:
        """Start a new worker for each dead one; True when one failed at startup (stop everything)."""
        for i, (process, started, _) in enumerate(self._workers):
            if process.is_alive() or self._stop_signal is not None:
                continue
            process.join()
            if process.exitcode == STARTUP_FAILURE:
                click.echo(f"tidegate: worker {process.pid} failed to start; stopping", err=True)
                return True
            lived = time.monotonic() - started
            self._pause = min(_MAX_PAUSE_S, max(0.1, self._pause * 2)) if lived < _YOUNG_S else 0.0
            click.echo(
                f"tidegate: worker {process.pid} exited (code {process.exitcode}) after {lived:.1f} s;"
                f" starting another{f' in {self._pause:.1f} s' if self._pause else ''}",
                err=True,
            )
            resume_at = time.monotonic() + self._pause
            while time.monotonic() < resume_at and self._stop_signal is None:
                time.sleep(0.05)
            if self._stop_signal is not None:
                return False
            self._workers[i] = self._start_one()
        return False

    def _replace_all(self) -> None:
        """SIGHUP: each worker in turn gets a successor, which must be serving before the old one is
        stopped (gracefully); one that does not start ends the reload and the old workers stay."""
        for i, old in enumerate(self._workers):
            new = self._start_one()
            deadline = time.monotonic() + _READY_TIMEOUT_S
            while not new.serving.wait(0.1):
                if not new.process.is_alive() or self._stop_signal is not None or time.monotonic() > deadline:
                    _stop([new])
                    if self._stop_signal is None:
                        click.echo(
                            f"tidegate: reload stopped: a new worker did not start (code {new.process.exitcode})",
                            err=True,
                        )
                    return
            _stop([old])
            self._workers[i] = new
        click.echo(f"tidegate: reloaded: workers {', '.join(str(w.process.pid) for w in self._workers)}", err=True)


def _stop(workers: list[Worker]) -> None:
    """SIGTERM (uvicorn's graceful shutdown), then SIGKILL for any still running after the grace."""
    for w in workers:
        if w.process.is_alive() and w.process.pid is not None:
            os.kill(w.process.pid, signal.SIGTERM)
    deadline = time.monotonic() + _STOP_GRACE_S
    for w in workers:
        w.process.join(max(0.0, deadline - time.monotonic()))
        if w.process.is_alive():
            w.process.kill()
            w.process.join()
