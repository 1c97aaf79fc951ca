"""`tidegate serve --workers N`: a listening socket per worker, connections spread over them, a dead
worker replaced, a taken port refused, SIGTERM stopping them all. Real processes; who owns which
socket is read from /proc (Linux, where the workers listen with SO_REUSEPORT)."""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from tests.support.process import ServerProcess, free_port, sqlite_url, start_server
from tests.support.waits import poll_until, wait_for_log

pytestmark = pytest.mark.skipif(
    not sys.platform.startswith("linux"), reason="reads /proc; SO_REUSEPORT spreading is Linux's"
)

_LISTEN, _ESTABLISHED = "0A", "01"


def store_only_config(workdir: Path) -> str:
    return f'[server]\nhost = "127.0.0.1"\n[store]\nurl = "{sqlite_url(workdir)}"\n'


def children(pid: int) -> list[int]:
    out: list[int] = []
    for task in Path(f"/proc/{pid}/task").iterdir():
        try:
            out += [int(c) for c in (task / "children").read_text().split()]
        except FileNotFoundError:  # a thread that ended since the listing (the supervisor's own come and go)
            continue
    return out


def socket_inodes(pid: int) -> set[int]:
    inodes: set[int] = set()
    for fd in Path(f"/proc/{pid}/fd").iterdir():
        try:
            target = os.readlink(fd)
        except OSError:
            continue
        if target.startswith("socket:["):
            inodes.add(int(target[8:-1]))
    return inodes


def tcp_sockets(port: int) -> list[tuple[str, int, int]]:
    """(state, remote port, inode) of every IPv4 TCP socket whose local port is `port`."""
    out = []
    for line in Path("/proc/net/tcp").read_text().splitlines()[1:]:
        fields = line.split()
        local_port = int(fields[1].split(":")[1], 16)
        if local_port == port:
            out.append((fields[3], int(fields[2].split(":")[1], 16), int(fields[9])))
    return out


def listeners(server: ServerProcess, port: int) -> dict[int, set[int]]:
    """Each process of the server (the parent and its children) -> the listening sockets it holds."""
    listening = {inode for state, _, inode in tcp_sockets(port) if state == _LISTEN}
    out: dict[int, set[int]] = {}
    for pid in [server.proc.pid, *children(server.proc.pid)]:
        try:
            held = socket_inodes(pid) & listening
        except FileNotFoundError:  # gone meanwhile
            continue
        if held:
            out[pid] = held
    return out


def wait_for_workers(server: ServerProcess, port: int, count: int, timeout: float = 60) -> dict[int, set[int]]:
    found: dict[int, set[int]] = {}

    def settled() -> bool:
        nonlocal found
        found = listeners(server, port)
        return len(found) == count

    if poll_until(settled, timeout, poll_s=0.1):
        return found
    raise AssertionError(f"expected {count} listening workers, found {listeners(server, port)}:\n{server.log()}")


def wait_for_successor(server: ServerProcess, port: int, gone: int, timeout: float = 30) -> dict[int, set[int]]:
    """The listening workers once `gone` is no longer among them and a successor listens."""
    found: dict[int, set[int]] = {}

    def replaced() -> bool:
        nonlocal found
        found = listeners(server, port)
        return len(found) == 2 and gone not in found

    if poll_until(replaced, timeout, poll_s=0.1):
        return found
    raise AssertionError(f"no worker replaced {gone}: {listeners(server, port)}\n{server.log()}")


def assert_serving(server: ServerProcess, requests: int = 20) -> None:
    """Fresh connections, whichever worker takes them, all answered; the parent still running."""
    for _ in range(requests):
        assert httpx.get(server.base_url + "/healthz", timeout=10).status_code == 200
    assert server.proc.poll() is None


def port_of(server: ServerProcess) -> int:
    return int(server.base_url.rsplit(":", 1)[1])


@contextlib.contextmanager
def two_workers(tmp_path: Path, config: str | None = None) -> Iterator[tuple[ServerProcess, int]]:
    """`tidegate serve --workers 2` (the store-only config unless given) and its port; stopped after."""
    server = start_server(tmp_path, config or store_only_config(tmp_path), args=["--workers", "2"])
    try:
        yield server, port_of(server)
    finally:
        server.stop()


def test_each_worker_listens_on_its_own_socket_and_connections_spread(tmp_path: Path) -> None:
    server = start_server(tmp_path, store_only_config(tmp_path), args=["--workers", "2"])
    port = port_of(server)
    clients: list[socket.socket] = []
    try:
        workers = wait_for_workers(server, port, 2)
        assert server.proc.pid not in workers  # the parent holds the port without listening
        first, second = workers.values()
        assert first.isdisjoint(second)  # two sockets, not one shared (uvicorn's own --workers)
        for _ in range(40):
            sock = socket.create_connection(("127.0.0.1", port), timeout=10)
            sock.sendall(b"GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n")
            assert sock.recv(65536).startswith(b"HTTP/1.1 200")  # accepted and answered: kept alive
            clients.append(sock)
        ours = {c.getsockname()[1] for c in clients}
        accepted = {inode: remote for state, remote, inode in tcp_sockets(port) if state == _ESTABLISHED}
        per_worker = {pid: sum(1 for i in socket_inodes(pid) if accepted.get(i) in ours) for pid in workers}
        assert sum(per_worker.values()) == 40
        # the kernel hashes each connection to a socket: 8 or fewer of 40 on one side is a 1-in-10^5 event
        assert min(per_worker.values()) > 8, per_worker
    finally:
        for sock in clients:
            sock.close()
        server.stop()


def test_a_dead_worker_is_replaced(tmp_path: Path) -> None:
    with two_workers(tmp_path) as (server, port):
        victim, other = sorted(wait_for_workers(server, port, 2))
        os.kill(victim, signal.SIGKILL)
        (successor,) = set(wait_for_successor(server, port, victim)) - {other}
        assert_serving(server)
        assert f"worker {victim} exited" in server.log()
        wait_for_log(server.log, f"worker {successor} serving")  # the parent's word that it started


def test_a_worker_whose_event_loop_stops_is_replaced(tmp_path: Path) -> None:
    """SIGSTOP freezes a worker as a blocked event loop would: its heartbeat stops, and after
    `server.worker_timeout_s` the parent kills it and starts another; the busy one is left alone."""
    config = store_only_config(tmp_path).replace("[server]\n", "[server]\nworker_timeout_s = 2\n")
    server = start_server(tmp_path, config, args=["--workers", "2"], wait_ready=False)
    port = port_of(server)
    try:
        # stopped the moment it listens: its loop has stamped a heartbeat by then (it was never
        # missed when the first beat came after the listening, once the app had started)
        deadline, found = time.monotonic() + 60, {}
        while not found and time.monotonic() < deadline:
            found = listeners(server, port)
        assert found, server.log()
        victim = min(found)
        os.kill(victim, signal.SIGSTOP)
        stopped_at = time.monotonic()
        (other,) = set(wait_for_workers(server, port, 2)) - {victim}  # the stopped one still listens
        found = wait_for_successor(server, port, victim)
        assert time.monotonic() - stopped_at >= 2  # not before its timeout
        assert other in found  # the worker whose loop kept running stays
        assert f"worker {victim}'s event loop has not run for" in server.log()
        assert f"worker {victim} exited (code -9)" in server.log()
        assert_serving(server)
    finally:
        server.stop()


def test_sigusr1_writes_a_workers_stacks_and_it_keeps_serving(tmp_path: Path) -> None:
    """What the parent sends a hung worker before killing it: every thread's stack to the log."""
    with two_workers(tmp_path) as (server, port):
        worker = min(wait_for_workers(server, port, 2))
        os.kill(worker, signal.SIGUSR1)
        deadline = time.monotonic() + 10
        # the dump is written thread by thread: wait for the main thread's frame, not the first header
        while time.monotonic() < deadline and "in _worker_main" not in server.log():
            time.sleep(0.1)
        log = server.log()
        assert "(most recent call first)" in log and "in _worker_main" in log, log
        time.sleep(0.5)
        assert worker in wait_for_workers(server, port, 2)  # still the same process, still listening
        assert_serving(server)


def test_sigterm_stops_every_worker(tmp_path: Path) -> None:
    server = start_server(tmp_path, store_only_config(tmp_path), args=["--workers", "2"])
    port = port_of(server)
    workers = wait_for_workers(server, port, 2)
    server.proc.send_signal(signal.SIGTERM)
    assert server.proc.wait(timeout=30) == 0
    for pid in workers:
        assert not Path(f"/proc/{pid}").exists() or "Z" in Path(f"/proc/{pid}/stat").read_text().split()[2]
    with pytest.raises(OSError):
        socket.create_connection(("127.0.0.1", port), timeout=2).close()


def test_a_taken_port_is_refused_before_the_store_is_touched(tmp_path: Path) -> None:
    port = free_port()
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", port))
        taken.listen()
        server = start_server(
            tmp_path, store_only_config(tmp_path), args=["--workers", "2"], port=port, wait_ready=False
        )
        try:
            assert server.proc.wait(timeout=30) != 0
        finally:
            server.stop()
    assert f"cannot listen on 127.0.0.1:{port}: the address is in use" in server.log()
    assert not (tmp_path / "tidegate.db").exists()


def config_with_model(workdir: Path, model: str) -> str:
    return store_only_config(workdir) + (
        '[providers.up]\nkind = "openai"\nbase_url = "http://127.0.0.1:9/v1"\n'
        f'[models."{model}"]\nroutes = [{{ provider = "up", model = "m" }}]\n'
    )


def test_sighup_replaces_the_workers_one_by_one_and_reads_the_config_again(tmp_path: Path) -> None:
    server = start_server(tmp_path, config_with_model(tmp_path, "before/m"), args=["--workers", "2"])
    port = port_of(server)
    answers: list[int | str] = []
    done = threading.Event()

    def keep_asking() -> None:  # a new connection each time, all through the reload
        while not done.is_set():
            try:
                answers.append(httpx.get(server.base_url + "/healthz", timeout=10).status_code)
            except httpx.HTTPError as exc:
                answers.append(repr(exc))

    asker = threading.Thread(target=keep_asking)
    try:
        old = set(wait_for_workers(server, port, 2))
        server.config_path.write_text(config_with_model(tmp_path, "after/m"))
        asker.start()
        server.proc.send_signal(signal.SIGHUP)
        wait_for_log(server.log, "reloaded", within_s=120)
        now = wait_for_workers(server, port, 2)
        assert old.isdisjoint(now)
        done.set()
        asker.join()
        assert server.proc.poll() is None
        for _ in range(6):  # fresh connections: whichever worker answers has the new config
            ids = [m["id"] for m in httpx.get(server.base_url + "/v1/models", headers=server.headers).json()["data"]]
            assert "after/m" in ids and "before/m" not in ids
        # a connection still queued on an old worker's socket as it closes is reset by the kernel
        # (unless net.ipv4.tcp_migrate_req is on), one accepted whose request has not arrived yet is
        # closed by its graceful shutdown: the asker has one connection open at a time, so at most
        # one per worker replaced; with nobody listening for a moment, every connection then fails
        failed = [a for a in answers if a != 200]
        assert len(answers) > 20 and len(failed) <= 2, failed
    finally:
        done.set()
        if asker.is_alive():
            asker.join()
        server.stop()
