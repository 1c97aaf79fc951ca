"""What one `write` to a loopback TCP socket costs the sender: a response sent as two writes (head,
then body) against one, in CPU µs per response of the sending process.

    .venv/bin/python bench/write_cost.py                    # 50,000 responses, 3 alternations
    .venv/bin/python bench/write_cost.py --head 230 --body 600 --responses 100000

The sender is pinned to CPU 0 and a reader that drains the socket to CPU 1 (as `bench/run.py` pins
the gateway and the load generator), `TCP_NODELAY` on, as uvicorn sets it. CPU time is the
sender's user + system time (`getrusage`): on loopback the receiving side of TCP runs in the
sender's system call, so this is what a gateway's core pays per write. Made for docs/performance.md
item 54 (the response head sent with the first body bytes).
"""

from __future__ import annotations

import argparse
import os
import resource
import socket
import time


def cpu_s() -> float:
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


def reader(listener: socket.socket) -> None:
    os.sched_setaffinity(0, {1})
    conn, _ = listener.accept()
    while conn.recv(1 << 20):
        pass


def send_all(sock: socket.socket, head: bytes, body: bytes, responses: int, split: bool) -> float:
    """CPU µs per response."""
    joined = head + body
    start = cpu_s()
    for i in range(responses):
        if split:
            sock.send(head)
            sock.send(body)
        else:
            sock.send(joined)
        if i % 64 == 63:
            time.sleep(0.0002)  # the reader drains: no send ever waits for buffer space
    return (cpu_s() - start) / responses * 1e6


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--head", type=int, default=230, help="head bytes (a tidegate SSE head is ~230)")
    parser.add_argument("--body", type=int, default=600, help="first body bytes")
    parser.add_argument("--responses", type=int, default=50_000)
    parser.add_argument("--alternations", type=int, default=3)
    args = parser.parse_args()
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen(1)
    child = os.fork()
    if child == 0:
        try:
            reader(listener)
        finally:
            os._exit(0)
    os.sched_setaffinity(0, {0})
    sock = socket.create_connection(listener.getsockname())
    sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    head, body = b"h" * args.head, b"b" * args.body
    two: list[float] = []
    one: list[float] = []
    for _ in range(args.alternations):
        two.append(send_all(sock, head, body, args.responses, split=True))
        one.append(send_all(sock, head, body, args.responses, split=False))
        print(f"two writes {two[-1]:6.2f} µs   one write {one[-1]:6.2f} µs   per response")
    sock.close()
    os.waitpid(child, 0)
    two.sort()
    one.sort()
    print(f"medians: two writes {two[len(two) // 2]:.2f} µs, one write {one[len(one) // 2]:.2f} µs")


if __name__ == "__main__":
    main()
