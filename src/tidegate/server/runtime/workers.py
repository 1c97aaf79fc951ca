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
stopped with the drain's hand-off signal, which closes the old one's socket at once: a config file
edited meanwhile takes effect), SIGINT/SIGTERM stop the workers gracefully (each drains, listening
on: server/runtime/drain.py; a second SIGINT is passed on, and ends their streams at once) and then the
parent.

A worker whose event loop stops running is replaced too: each worker's loop stamps a heartbeat in
shared memory every second from its first step (before the app's startup), and one silent for
`server.worker_timeout_s` gets SIGUSR1 (its threads' stacks go to the log: where the loop is
stuck), then SIGKILL, and a successor. uvicorn's supervisor
answered its pings from a thread of the worker, which sees a dead or stopped process but not a loop
that a blocking call holds.
"""

from __future__ import annotations

import errno
import faulthandler
import multiprocessing
import os
import shutil
import signal
import socket
import sys
import tempfile
import threading
import time
from multiprocessing.connection import wait
from multiprocessing.process import BaseProcess
from multiprocessing.synchronize import Event
from typing import Any, NamedTuple

import click
from prometheus_client import multiprocess

from .drain import EXIT_MARGIN_S, HANDOFF
from .server import Heartbeat

STARTUP_FAILURE = 3  # uvicorn's exit code for a worker that could not start (bad bind, failed lifespan)
_YOUNG_S = 5.0  # a worker that dies younger than this is restarted after a growing pause
_MAX_PAUSE_S = 10.0
_STOP_GRACE_S = 10.0  # after SIGTERM a worker gets its own graceful timeout (the drain) plus this long
_READY_TIMEOUT_S = 120.0  # a reload gives up on a new worker that is not serving by then
_STACKS_S = 0.5  # after SIGUSR1 a hung worker gets this long to write its stacks before SIGKILL


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


class WorkerSettings(NamedTuple):
    """What the Supervisor hands each worker it starts (pickled to the spawned process, never written
    to a file): the config file `tidegate serve` loaded, absolute (None: the embedded default), which
    the worker loads once for its app and its guard (read at the worker's start, so a reload's
    workers see the file as edited), and uvicorn's settings but the app and the protocol."""

    config_file: str | None
    uvicorn_options: dict[str, Any]


def _worker_main(settings: WorkerSettings, host: str, port: int, serving: Event, heartbeat: Heartbeat) -> None:
    """A worker process: its config loaded, its own listening socket, then uvicorn's server on it;
    `serving` is set once the server has started (the app's startup done, the socket listening). The
    server's event loop stamps `heartbeat` from its start. SIGUSR1 writes every thread's stack to stderr."""
    import uvicorn

    from ...config.load import load_config
    from ...errors import ConfigError
    from .factory import build_app
    from .guard import GuardedHttpProtocol
    from .server import GatewayServer

    faulthandler.register(signal.SIGUSR1, all_threads=True)
    try:
        config = load_config(settings.config_file)
    except ConfigError as exc:  # a file edited into an error since the start: this worker cannot serve
        print(f"tidegate worker {os.getpid()}: config error: {exc}", file=sys.stderr)
        sys.exit(1)

    try:
        sock = _reuse_port_socket(host, port)
    except OSError as exc:
        print(f"tidegate worker {os.getpid()}: cannot listen on {host}:{port}: {exc.strerror}", file=sys.stderr)
        sys.exit(STARTUP_FAILURE)

    app = build_app(config)
    uvicorn_config = uvicorn.Config(app, host=host, port=port, http=GuardedHttpProtocol, **settings.uvicorn_options)
    server = GatewayServer(uvicorn_config, app.drain, heartbeat=heartbeat)

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
    heartbeat: Heartbeat


class Supervisor:
    """Starts `count` workers on `claimed` (the parent's socket from `claim_port`) and keeps them up;
    a worker whose event loop has not run for `hang_timeout_s` is killed and replaced (0: never)."""

    def __init__(
        self,
        settings: WorkerSettings,
        claimed: socket.socket,
        count: int,
        hang_timeout_s: float = 0.0,
        drain_s: float = 0.0,
    ) -> None:
        self._settings = settings
        # a stopping worker exits within drain_s + EXIT_MARGIN_S of the signal (server/runtime/drain.py)
        self._grace_s = drain_s + EXIT_MARGIN_S + _STOP_GRACE_S
        self._hang_timeout_s = hang_timeout_s
        self._claimed = claimed
        self._host, self._port = claimed.getsockname()[:2]
        self._count = count
        self._context = multiprocessing.get_context("spawn")
        self._workers: list[Worker] = []
        self._pause = 0.0
        self._stop_signal: int | None = None
        self._reload = False
        self._announced: set[int] = set()  # workers whose `serving` line the log has
        self._banner: str | None = None  # the startup line, printed when the first worker serves

    def _start_one(self) -> Worker:
        serving = self._context.Event()
        heartbeat: Heartbeat = self._context.RawValue("d", 0.0)
        process = self._context.Process(
            target=_worker_main, args=(self._settings, self._host, self._port, serving, heartbeat)
        )
        process.start()
        return Worker(process, time.monotonic(), serving, heartbeat)

    def _on_signal(self, signum: int, _frame: object) -> None:
        if self._stop_signal is not None and signum == signal.SIGINT:
            # Ctrl-C again while the workers drain: they end what runs now (a terminal signals them
            # too; a second one changes nothing there)
            for w in self._workers:
                if w.process.is_alive() and w.process.pid is not None:
                    os.kill(w.process.pid, signal.SIGINT)
            return
        self._stop_signal = signum

    def _on_hangup(self, _signum: int, _frame: object) -> None:
        self._reload = True

    def run(self, banner: str | None = None) -> int:
        """Serve until SIGINT/SIGTERM (exit code 0) or a worker's startup failure (3); `banner` goes to
        stderr once the first worker serves."""
        self._banner = banner
        for signum in (signal.SIGINT, signal.SIGTERM):
            signal.signal(signum, self._on_signal)
        signal.signal(signal.SIGHUP, self._on_hangup)
        # the workers' metrics in one directory: `/metrics` in any worker answers for all (metrics.py)
        metrics_dir = tempfile.mkdtemp(prefix="tidegate-metrics-")
        os.environ["PROMETHEUS_MULTIPROC_DIR"] = metrics_dir
        self._workers = [self._start_one() for _ in range(self._count)]
        code = 0
        try:
            while self._stop_signal is None:
                wait([w.process.sentinel for w in self._workers], timeout=0.5)
                if self._reload:
                    self._reload = False
                    self._replace_all()
                self._announce_serving()
                self._kill_hung()
                failed = self._replace_dead()
                if failed:
                    code = STARTUP_FAILURE
                    break
        finally:
            _stop(self._workers, self._grace_s)
            self._claimed.close()
            shutil.rmtree(metrics_dir, ignore_errors=True)
        return code

    def _replace_dead(self) -> bool:
        """Start a new worker for each dead one; True when one failed at startup (stop everything)."""
        for i, (process, started, _, _) in enumerate(self._workers):
            if process.is_alive() or self._stop_signal is not None:
                continue
            process.join()
            _forget_metrics(process)
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

    def _announce_serving(self) -> None:
        """`worker PID serving` once per worker, when it has started (the app's startup done, its
        socket listening)."""
        self._announced &= {w.process.pid for w in self._workers}  # a pid used again is a new worker
        for w in self._workers:
            pid = w.process.pid
            if pid is not None and pid not in self._announced and w.serving.is_set():
                self._announced.add(pid)
                lived = time.monotonic() - w.started_at
                click.echo(f"tidegate: worker {pid} serving ({lived:.1f} s after its start)", err=True)
                if self._banner is not None:
                    click.echo(self._banner, err=True)
                    self._banner = None

    def _kill_hung(self) -> None:
        """SIGUSR1 (the stacks, to the log) and then SIGKILL for each worker whose loop has been silent
        too long; `_replace_dead` starts its successor."""
        if self._hang_timeout_s <= 0:
            return
        now = time.monotonic()
        for w in self._workers:
            beat, pid = w.heartbeat.value, w.process.pid
            if not beat or now - beat <= self._hang_timeout_s or pid is None or not w.process.is_alive():
                continue
            click.echo(
                f"tidegate: worker {pid}'s event loop has not run for {now - beat:.1f} s"
                f" (server.worker_timeout_s = {self._hang_timeout_s:g}); its threads' stacks follow,"
                " then it is killed and replaced",
                err=True,
            )
            os.kill(pid, signal.SIGUSR1)
            w.process.join(_STACKS_S)
            w.process.kill()
            w.process.join()

    def _replace_all(self) -> None:
        """SIGHUP: each worker in turn gets a successor, which must be serving before the old one is
        stopped (gracefully); one that does not start ends the reload and the old workers stay."""
        for i, old in enumerate(self._workers):
            new = self._start_one()
            deadline = time.monotonic() + _READY_TIMEOUT_S
            while not new.serving.wait(0.1):
                if not new.process.is_alive() or self._stop_signal is not None or time.monotonic() > deadline:
                    _stop([new], self._grace_s)
                    if self._stop_signal is None:
                        click.echo(
                            f"tidegate: reload stopped: a new worker did not start (code {new.process.exitcode})",
                            err=True,
                        )
                    return
            _stop([old], self._grace_s, HANDOFF)  # stops listening at once: the new worker takes every connection
            self._workers[i] = new
            self._announce_serving()
        click.echo(f"tidegate: reloaded: workers {', '.join(str(w.process.pid) for w in self._workers)}", err=True)


def _stop(workers: list[Worker], grace_s: float, signum: int = signal.SIGTERM) -> None:
    """SIGTERM (the drain, then uvicorn's graceful shutdown) or the drain's hand-off signal, then
    SIGKILL for any still running after `grace_s`."""
    for w in workers:
        if w.process.is_alive() and w.process.pid is not None:
            os.kill(w.process.pid, signum)
    deadline = time.monotonic() + grace_s
    for w in workers:
        w.process.join(max(0.0, deadline - time.monotonic()))
        if w.process.is_alive():
            w.process.kill()
            w.process.join()
        _forget_metrics(w.process)


def _forget_metrics(process: BaseProcess) -> None:
    """A stopped worker's live gauges leave the sum `/metrics` reports (its counters stay counted)."""
    if process.pid is not None and os.environ.get("PROMETHEUS_MULTIPROC_DIR"):
        multiprocess.mark_process_dead(process.pid)  # type: ignore[no-untyped-call]
