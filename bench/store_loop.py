"""The SQLite store alone under a non-stream request's writes: the CPU they cost per request.

    taskset -c 0 .venv/bin/python bench/store_loop.py --store file --concurrency 8 --requests 8000
    PYTHONPATH=/tmp/before/src taskset -c 0 .venv/bin/python bench/store_loop.py --store file

`--concurrency` coroutines each run, `--requests / --concurrency` times: a keyed `begin_generation`
(the durable record before the upstream call), one loop iteration (`sleep(0)`, where the upstream
call would be), and `update_generation` with a small log (a 600-byte frame and five events, as a
short non-stream answer's). Prints the process's CPU (all its threads: the checkpoints' too) and the
wall time per request. No gateway, no sockets: a check on the store's own cost, not the bench's
table (the store scenario of `bench/run.py` is).
"""

from __future__ import annotations

import argparse
import asyncio
import tempfile
import time
import uuid
from pathlib import Path

import uvloop

from tidegate.ids import new_ulid
from tidegate.records import LOG_FRAME, LOG_JSON, GenerationRecord, LogRun
from tidegate.store.sqlite import SQLiteStore

_FRAME = b"data: " + b"x" * 600 + b"\n\n"


async def one_request(store: SQLiteStore) -> None:
    record = GenerationRecord(
        id=new_ulid(),
        key_id="key_bench",
        model="bench",
        door="chat",
        created_at=time.time(),
        idempotency_key=uuid.uuid4().hex,
        request_hash="h" * 64,
    )
    await store.begin_generation(record)
    await asyncio.sleep(0)
    record.status = "completed"
    record.output_text = "x" * 120
    record.finish_reason = "stop"
    await store.update_generation(record, [LogRun(LOG_FRAME, 0, [_FRAME]), LogRun(LOG_JSON, 0, [b'{"a":1}'] * 5)])


async def run(args: argparse.Namespace) -> None:
    with tempfile.TemporaryDirectory(prefix="tidegate-store-loop-") as workdir:
        url = "sqlite:///:memory:" if args.store == "memory" else f"sqlite:///{Path(workdir) / 'store.db'}"
        store = SQLiteStore(url)
        await store.open()
        per_worker = args.requests // args.concurrency

        async def worker() -> None:
            for _ in range(per_worker):
                await one_request(store)

        cpu0, wall0 = time.process_time(), time.perf_counter()
        await asyncio.gather(*(worker() for _ in range(args.concurrency)))
        cpu, wall = time.process_time() - cpu0, time.perf_counter() - wall0
        await store.close()
    n = per_worker * args.concurrency
    print(
        f"{args.store:6s} concurrency {args.concurrency}: CPU per request {cpu * 1e6 / n:6.1f} µs,"
        f" wall per request {wall * 1e6 / n:6.1f} µs ({n:,} requests)"
    )


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--store", choices=("file", "memory"), default="file")
    ap.add_argument("--concurrency", type=int, default=8)
    ap.add_argument("--requests", type=int, default=8000)
    uvloop.run(run(ap.parse_args()))


if __name__ == "__main__":
    main()
