"""An async load generator for the benchmarks (its own process, on uvloop).

Stream mode opens `--requests` streams, `--concurrency` at a time (optionally ramped at
`--ramp-per-s` new streams per second), parses the SSE incrementally and records per stream:
time to first content byte (`ttft_ms`, the first event carrying answer text), time to last byte
(`ttlb_ms`), data events received, content events received, and whether the stream ended with its
terminal event (`[DONE]`, or `message_stop` for `--api anthropic`). Gaps between content events and
between keep-alive comments are aggregated. Streams go through `stream_client.py` (keep-alive
connections as protocols that parse each read as it arrives: no task wake-up per chunk). Complete
mode runs a closed loop of non-stream requests for `--duration` seconds (aiohttp). Every error is
counted by kind; nothing is retried or dropped.

`--watch NAME=PID` samples that process tree's CPU time and RSS during the run (see procstat.py).
Output: one JSON object on stdout (or `--out`).
"""

from __future__ import annotations

import argparse
import asyncio
import resource
import sys
import time
import uuid
from collections import Counter
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import quote, urlsplit

import aiohttp
import httptools
import orjson
import uvloop
from procstat import TreeWatch
from stream_client import Connection, Pool, SSEStats, request_head

PROMPT = [{"role": "user", "content": "Tell me about tides."}]


def pct(values: list[float], q: float) -> float:
    """Nearest-rank percentile (q in 0..100) of unsorted values; NaN when empty."""
    if not values:
        return float("nan")
    s = sorted(values)
    k = max(0, min(len(s) - 1, round(q / 100.0 * len(s) + 0.5) - 1))
    return s[k]


def summary(values: list[float]) -> dict[str, float | int]:
    if not values:
        return {"n": 0}
    s = sorted(values)
    return {
        "n": len(s),
        "p50": round(pct(s, 50), 3),
        "p90": round(pct(s, 90), 3),
        "p99": round(pct(s, 99), 3),
        "max": round(s[-1], 3),
        "mean": round(sum(s) / len(s), 3),
    }


@dataclass(slots=True)
class StreamRecord:
    ttft_ms: float | None = None
    ttlb_ms: float | None = None
    chunks: int = 0
    content: int = 0
    done: bool = False
    status: int = 0
    error: str | None = None
    finished: bool = False
    measured: bool = True  # False for --warmup streams: run, checked for errors, not timed

    def row(self) -> list[Any]:
        return [self.ttft_ms, self.ttlb_ms, self.chunks, self.content, self.done, self.status, self.error]


@dataclass
class Run:
    args: argparse.Namespace
    records: list[StreamRecord] = field(default_factory=list)
    gaps_ms: list[float] = field(default_factory=list)
    keepalive_ms: list[float] = field(default_factory=list)
    latencies_ms: list[float] = field(default_factory=list)
    errors: Counter[str] = field(default_factory=Counter)
    open_now: int = 0
    max_open: int = 0
    started: int = 0


def with_key(args: argparse.Namespace, headers: dict[str, str]) -> dict[str, str]:
    """`--idempotency-keys`: a fresh Idempotency-Key per request (tidegate then logs every frame)."""
    if not args.idempotency_keys:
        return headers
    return {**headers, "idempotency-key": uuid.uuid4().hex}


def request_parts(args: argparse.Namespace, stream: bool) -> tuple[str, bytes, dict[str, str]]:
    headers = {"content-type": "application/json"}
    if args.api == "gemini":  # the Gemini door (model ids URL-encoded in the path)
        contents = [{"role": "user", "parts": [{"text": m["content"]}]} for m in PROMPT]
        body = {"contents": contents, "generationConfig": {"maxOutputTokens": 4096}}
        url = f"{args.url.rstrip('/')}/v1beta/models/{quote(args.model, safe='')}:streamGenerateContent?alt=sse"
        if args.key:
            headers["x-goog-api-key"] = args.key
        return url, orjson.dumps(body), headers
    if args.api == "responses":  # the Responses door
        body = {"model": args.model, "input": PROMPT[0]["content"], "stream": True, "max_output_tokens": 4096}
        if args.key:
            headers["authorization"] = f"Bearer {args.key}"
        return args.url.rstrip("/") + "/v1/responses", orjson.dumps(body), headers
    if args.api == "anthropic":
        body: dict[str, Any] = {"model": args.model, "max_tokens": 4096, "messages": PROMPT, "stream": stream}
        url = args.url.rstrip("/") + "/v1/messages"
        headers["anthropic-version"] = "2023-06-01"
        if args.key:
            headers["x-api-key"] = args.key
    else:
        body = {"model": args.model, "messages": PROMPT, "stream": stream, "max_tokens": 4096}
        if stream:
            body["stream_options"] = {"include_usage": True}
        url = args.url.rstrip("/") + "/v1/chat/completions"
        if args.key:
            headers["authorization"] = f"Bearer {args.key}"
    return url, orjson.dumps(body), headers


async def one_stream(pool: Pool, run: Run, head: bytes, measured: bool = True) -> None:
    rec = StreamRecord(measured=measured)
    run.records.append(rec)
    t0 = time.perf_counter()
    stats = SSEStats(run, rec, run.args.api == "anthropic", measured, t0, api=run.args.api)
    opened = False

    def on_open(status: int, now: float) -> None:
        nonlocal opened
        rec.status = status
        if status == 200:
            opened = True
            run.open_now += 1
            run.max_open = max(run.max_open, run.open_now)
            stats.last_any = now

    conn: Connection | None = None
    try:
        conn = await pool.acquire()
        await conn.request(head, stats, on_open)
        if rec.status != 200:
            rec.error = f"status_{rec.status}"
            return
        rec.ttlb_ms = (conn.ended_at - t0) * 1000.0
        if not rec.done and rec.error is None:
            rec.error = "not_done"
    except asyncio.CancelledError:
        rec.error = rec.error or "timeout"
        raise
    except (TimeoutError, OSError, httptools.HttpParserError) as exc:
        rec.error = f"exception_{type(exc).__name__}"
    finally:
        rec.finished = True
        if opened:
            run.open_now -= 1
        if conn is not None:
            pool.release(conn)


async def one_completion(
    session: aiohttp.ClientSession, run: Run, url: str, body: bytes, headers: dict[str, str]
) -> None:
    t0 = time.perf_counter()
    try:
        async with session.post(url, data=body, headers=headers) as resp:
            data = await resp.read()
            if resp.status != 200:
                run.errors[f"status_{resp.status}"] += 1
                return
            if b'"choices"' not in data and b'"content"' not in data:
                run.errors["bad_body"] += 1
                return
    except (TimeoutError, aiohttp.ClientError, OSError) as exc:
        run.errors[f"exception_{type(exc).__name__}"] += 1
        return
    run.latencies_ms.append((time.perf_counter() - t0) * 1000.0)


async def stream_workers(run: Run) -> None:
    args = run.args
    url, body, headers = request_parts(args, True)
    target = urlsplit(url)
    host, port = target.hostname or "127.0.0.1", target.port or 80
    pool = Pool(host, port)
    total = args.requests or args.concurrency
    sem = asyncio.Semaphore(args.concurrency)
    interval = 1.0 / args.ramp_per_s if args.ramp_per_s > 0 else 0.0
    t_start = time.perf_counter()

    async def guarded(measured: bool) -> None:
        async with sem:
            head = request_head(
                "POST",
                host,
                port,
                target.path + (f"?{target.query}" if target.query else ""),
                with_key(args, headers),
                body,
            )
            await one_stream(pool, run, head, measured)

    tasks = []
    for i in range(total):
        if interval:
            delay = t_start + i * interval - time.perf_counter()
            if delay > 0:
                await asyncio.sleep(delay)
        tasks.append(asyncio.ensure_future(guarded(i >= args.warmup)))
        run.started += 1
    await asyncio.gather(*tasks)


async def complete_workers(session: aiohttp.ClientSession, run: Run) -> None:
    args = run.args
    url, body, headers = request_parts(args, False)
    deadline = time.perf_counter() + args.duration

    async def worker() -> None:
        while time.perf_counter() < deadline:
            run.started += 1
            await one_completion(session, run, url, body, with_key(args, headers))

    await asyncio.gather(*(worker() for _ in range(args.concurrency)))


async def sampler(run: Run, watches: list[TreeWatch]) -> None:
    while True:
        for w in watches:
            w.sample(run.open_now)
        await asyncio.sleep(0.2)


async def main_async(args: argparse.Namespace) -> dict[str, Any]:
    run = Run(args)
    watches = [TreeWatch(name, pid) for name, pid in args.watch]
    connector = aiohttp.TCPConnector(limit=0, ttl_dns_cache=300)
    timeout = aiohttp.ClientTimeout(total=None, sock_connect=30)
    ru0 = resource.getrusage(resource.RUSAGE_SELF)
    async with aiohttp.ClientSession(connector=connector, timeout=timeout, auto_decompress=False) as session:
        t0 = time.perf_counter()
        sample_task = asyncio.ensure_future(sampler(run, watches))
        work = stream_workers(run) if args.mode == "stream" else complete_workers(session, run)
        timed_out = False
        try:
            await asyncio.wait_for(work, timeout=args.timeout)
        except TimeoutError:
            timed_out = True
        wall = time.perf_counter() - t0
        sample_task.cancel()
        for w in watches:
            w.sample(run.open_now)
    ru1 = resource.getrusage(resource.RUSAGE_SELF)
    for rec in run.records:
        if not rec.finished and rec.error is None:
            rec.error = "timeout"
        if rec.error:
            run.errors[rec.error] += 1
    ok = [r for r in run.records if r.error is None and r.done]
    out: dict[str, Any] = {
        "mode": args.mode,
        "api": args.api,
        "model": args.model,
        "concurrency": args.concurrency,
        "started": run.started,
        "timed_out": timed_out,
        "wall_s": round(wall, 4),
        "errors": dict(run.errors),
        "error_count": sum(run.errors.values()),
        "load_cpu_s": round((ru1.ru_utime + ru1.ru_stime) - (ru0.ru_utime + ru0.ru_stime), 4),
        "watch": {w.name: w.result() for w in watches},
    }
    if args.mode == "stream":
        content = sum(r.content for r in run.records)
        out.update(
            {
                "streams": len(run.records),
                "ok": len(ok),
                "done": sum(1 for r in run.records if r.done),
                "chunks_total": sum(r.chunks for r in run.records),
                "content_total": content,
                "content_per_s": round(content / wall, 1) if wall > 0 else 0.0,
                "max_open": run.max_open,
                "measured": sum(1 for r in run.records if r.measured),
                "ttft_ms": summary([r.ttft_ms for r in run.records if r.ttft_ms is not None and r.measured]),
                "ttlb_ms": summary([r.ttlb_ms for r in run.records if r.ttlb_ms is not None and r.measured]),
                "gap_ms": summary(run.gaps_ms),
                "keepalive_ms": summary(run.keepalive_ms),
            }
        )
        if args.per_stream:
            out["per_stream_fields"] = ["ttft_ms", "ttlb_ms", "chunks", "content", "done", "status", "error"]
            out["per_stream"] = [r.row() for r in run.records]
    else:
        n = len(run.latencies_ms)
        out.update(
            {
                "ok": n,
                "requests_per_s": round(n / wall, 1) if wall > 0 else 0.0,
                "latency_ms": summary(run.latencies_ms),
            }
        )
    return out


def parse_watch(value: str) -> tuple[str, int]:
    name, _, pid = value.partition("=")
    if not name or not pid.isdigit():
        raise argparse.ArgumentTypeError("expected NAME=PID")
    return name, int(pid)


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--url", required=True, help="base URL, e.g. http://127.0.0.1:9100")
    ap.add_argument("--api", choices=("openai", "anthropic", "gemini", "responses"), default="openai")
    ap.add_argument("--model", required=True)
    ap.add_argument("--key", default="", help="API key (Bearer, or x-api-key for --api anthropic)")
    ap.add_argument("--mode", choices=("stream", "complete"), default="stream")
    ap.add_argument("--concurrency", type=int, default=1)
    ap.add_argument("--requests", type=int, default=0, help="streams in total (default: --concurrency)")
    ap.add_argument("--ramp-per-s", type=float, default=0.0, help="new streams per second (0: all at once)")
    ap.add_argument(
        "--warmup", type=int, default=0, help="the first N streams run but are not timed (TTFT, gaps, last byte)"
    )
    ap.add_argument("--duration", type=float, default=5.0, help="complete mode: seconds")
    ap.add_argument("--timeout", type=float, default=300.0, help="stop everything after this many seconds")
    ap.add_argument("--watch", type=parse_watch, action="append", default=[], metavar="NAME=PID")
    ap.add_argument("--per-stream", action="store_true", help="include one row per stream")
    ap.add_argument("--idempotency-keys", action="store_true", help="send a fresh Idempotency-Key per request")
    ap.add_argument("--out", default="-")
    args = ap.parse_args(argv)
    if not args.url.startswith(("http://127.", "http://localhost")):
        sys.exit("bench/load.py sends loopback traffic only")
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if hard != resource.RLIM_INFINITY and hard > soft:
        resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
    t = time.monotonic()
    result = uvloop.run(main_async(args))
    result["process_s"] = round(time.monotonic() - t, 3)
    data = orjson.dumps(result)
    if args.out == "-":
        sys.stdout.buffer.write(data + b"\n")
    else:
        with open(args.out, "wb") as f:
            f.write(data)


if __name__ == "__main__":
    main()
