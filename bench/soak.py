"""Soak: many streams over many minutes against one real `tidegate serve`, with a mix of
successes, fallbacks, mid-stream failures, cancellations and client drops; then the checks.

    .venv/bin/python bench/soak.py                          # 10,000 streams over 10 minutes
    .venv/bin/python bench/soak.py --streams 600 --minutes 1   # a short run

Checks (the script exits 1 when one fails, and writes bench/results/<date>_soak.md either way):
- every stream ended as the contract says: `[DONE]` for successes and fallbacks, the failure chunk
  (and no `[DONE]`) for mid-stream failures and cancellations; client drops are not read to the end;
- every generation's record is final (none `in_progress`) a few seconds after the load;
- the gateway's RSS after warm-up (the first sixth of the run) stays within 10 % of its mean;
- no leak: no socket (client, upstream) or other descriptor open after the load that was not open
  before it, but the store's database files (its connections open lazily), and the running
  generations gauge (`tidegate_generations_running`) back to 0.
The upstream is the tests' fault-injecting OpenAI emulator (tests/emulators/openai_upstream.py).
"""

from __future__ import annotations

import argparse
import asyncio
import os
import random
import statistics
import subprocess
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path

import aiohttp
import orjson

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests"))

from emulators.openai_upstream import OpenAIUpstream, tidegate_toml  # noqa: E402

KEY = "tg-soak-master-key-0123456789"
HEADERS = {"Authorization": f"Bearer {KEY}", "Content-Type": "application/json"}
MIX = [("ok", 40), ("fallback", 15), ("midfail", 15), ("cancel", 15), ("drop", 15)]


def _rss_kb(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1])
    return 0


def _fds(pid: int) -> int:
    return len(os.listdir(f"/proc/{pid}/fd"))


def _fd_targets(pid: int) -> Counter[str]:
    """What the process's descriptors point at, sockets counted as one kind."""
    out: Counter[str] = Counter()
    for fd in os.listdir(f"/proc/{pid}/fd"):
        try:
            target = os.readlink(f"/proc/{pid}/fd/{fd}")
        except OSError:
            continue
        out["socket" if target.startswith("socket:") else target] += 1
    return out


def _start_gateway(workdir: Path, emu: OpenAIUpstream, port: int) -> subprocess.Popen[bytes]:
    config = workdir / "soak.toml"
    config.write_text(
        tidegate_toml(
            f"sqlite:///{workdir / 'soak.db'}",
            {"emu": {"kind": "openai", "base_url": emu.base_url}},
            {
                "ok": [("emu", "text")],
                "fallback": [("emu", "error-first"), ("emu", "text")],
                "midfail": [("emu", "error-mid")],
                "slow": [("emu", "slow:0.05")],
            },
        )
    )
    env = {k: v for k, v in os.environ.items() if not k.startswith("TIDEGATE_")}
    env["TIDEGATE_MASTER_KEY"] = KEY
    env["TIDEGATE_LOG_LEVEL"] = "WARNING"
    log = open(workdir / "gateway.log", "wb")
    proc = subprocess.Popen(
        [sys.executable, "-m", "tidegate", "serve", "--config", str(config), "--port", str(port)],
        cwd=workdir,
        env=env,
        stdout=log,
        stderr=subprocess.STDOUT,
    )
    return proc


async def _wait_ready(session: aiohttp.ClientSession, base: str) -> None:
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        try:
            async with session.get(base + "/readyz") as resp:
                if resp.status == 200:
                    return
        except aiohttp.ClientError:
            pass
        await asyncio.sleep(0.1)
    raise RuntimeError("the gateway did not become ready")


async def _stream(session: aiohttp.ClientSession, base: str, kind: str) -> tuple[str, str, str]:
    """One request of `kind`: (kind, generation id, how it ended)."""
    model = "slow" if kind in ("cancel", "drop") else kind
    body = {"model": model, "stream": True, "messages": [{"role": "user", "content": "soak"}]}
    headers = dict(HEADERS)
    if kind == "cancel":
        headers["Idempotency-Key"] = os.urandom(12).hex()  # keeps running without a client: cancel ends it
    async with session.post(base + "/v1/chat/completions", data=orjson.dumps(body), headers=headers) as resp:
        gid = resp.headers.get("x-generation-id", "")
        if resp.status != 200:
            return kind, gid, f"status_{resp.status}"
        events = 0
        last = b""
        buf = b""
        async for chunk in resp.content.iter_any():
            buf += chunk
            while b"\n\n" in buf:
                frame, buf = buf.split(b"\n\n", 1)
                data = [line[6:] for line in frame.split(b"\n") if line.startswith(b"data: ")]
                if not data:
                    continue
                events += 1
                last = data[-1]
                if kind == "drop" and events >= 3:
                    resp.connection.close() if resp.connection else None
                    return kind, gid, "dropped"
                if kind == "cancel" and events == 3:
                    async with session.post(f"{base}/api/v1/generations/{gid}/cancel", headers=HEADERS) as c:
                        if c.status != 202:
                            return kind, gid, f"cancel_status_{c.status}"
        if last == b"[DONE]":
            return kind, gid, "done"
        try:
            error = orjson.loads(last).get("error") or {}
        except orjson.JSONDecodeError:
            return kind, gid, "garbled"
        return kind, gid, f"failure:{error.get('code')}"


EXPECTED = {
    "ok": {"done"},
    "fallback": {"done"},
    "midfail": {"failure:upstream_error"},
    "cancel": {"failure:cancelled"},
    "drop": {"dropped"},
}


async def _run(args: argparse.Namespace) -> int:
    workdir = Path(tempfile.mkdtemp(prefix="tidegate-soak-"))
    port = args.port
    base = f"http://127.0.0.1:{port}"
    kinds = [k for k, w in MIX for _ in range(w)]
    rng = random.Random(7)
    results: list[tuple[str, str, str]] = []
    samples: list[tuple[float, int, int]] = []  # (t, rss kB, fds)
    with OpenAIUpstream() as emu:
        proc = _start_gateway(workdir, emu, port)
        connector = aiohttp.TCPConnector(limit=args.concurrency * 2)
        timeout = aiohttp.ClientTimeout(total=120)
        try:
            async with aiohttp.ClientSession(connector=connector, timeout=timeout) as session:
                await _wait_ready(session, base)
                await asyncio.sleep(1)
                idle_fds = _fds(proc.pid)
                idle_targets = _fd_targets(proc.pid)
                t0 = time.monotonic()
                interval = args.minutes * 60 / args.streams
                sem = asyncio.Semaphore(args.concurrency)

                async def one(i: int) -> None:
                    async with sem:
                        kind = rng.choice(kinds)
                        try:
                            results.append(await _stream(session, base, kind))
                        except (TimeoutError, aiohttp.ClientError) as exc:
                            results.append((kind, "", f"exception:{type(exc).__name__}"))

                async def sampler() -> None:
                    while True:
                        samples.append((time.monotonic() - t0, _rss_kb(proc.pid), _fds(proc.pid)))
                        await asyncio.sleep(5)

                sampling = asyncio.ensure_future(sampler())
                tasks = []
                for i in range(args.streams):
                    tasks.append(asyncio.ensure_future(one(i)))
                    await asyncio.sleep(max(0.0, t0 + (i + 1) * interval - time.monotonic()))
                await asyncio.gather(*tasks)
                elapsed = time.monotonic() - t0
                await asyncio.sleep(3)  # drops and cancels finalise (CONTRACT §16: within 2 s)
                sampling.cancel()
                statuses: Counter[str] = Counter()
                for _, gid, _ in results:
                    if not gid:
                        statuses["no id"] += 1
                        continue
                    async with session.get(f"{base}/api/v1/generations/{gid}", headers=HEADERS) as r:
                        statuses[(await r.json())["status"]] += 1
                async with session.get(base + "/metrics") as r:
                    metrics = await r.text()
                await session.close()
                await asyncio.sleep(17)  # idle upstream connections close after 15 s (the pool's keep-alive)
                final_fds = _fds(proc.pid)
                new_targets = _fd_targets(proc.pid) - idle_targets
        finally:
            proc.terminate()
            proc.wait(60)
    running = next(
        (float(line.split()[-1]) for line in metrics.splitlines() if line.startswith("tidegate_generations_running")),
        None,
    )
    endings = Counter((k, e) for k, _, e in results)
    wrong = {f"{k} -> {e}": n for (k, e), n in endings.items() if e not in EXPECTED[k]}
    warm = [rss for t, rss, _ in samples if t >= elapsed / 6]
    mean = statistics.mean(warm) if warm else 0.0
    spread = (max(warm) - min(warm)) / mean if warm else 0.0
    checks = {
        "every stream ended as the contract says": not wrong,
        "every record final": statuses.get("in_progress", 0) == 0 and statuses.get("no id", 0) == 0,
        "RSS after warm-up within 10 % of its mean": spread <= 0.10,
        # the store's connections open lazily (the loop's own, the checkpointer's): files of the
        # database, once; anything else left open (a socket above all) is a leak
        "no socket or other descriptor leaked": all(
            target.startswith(str(workdir / "soak.db")) for target in new_targets
        ),
        "no generation left running": running == 0,
    }
    lines = [
        f"# Soak, {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}",
        "",
        f"`bench/soak.py --streams {args.streams} --minutes {args.minutes} --concurrency {args.concurrency}`: "
        f"{len(results)} streams in {elapsed:.0f} s against one `tidegate serve` (SQLite file store).",
        "",
        "| check | result |",
        "|---|---|",
        *[f"| {name} | {'pass' if ok else 'FAIL'} |" for name, ok in checks.items()],
        "",
        "Endings by kind: " + ", ".join(f"{k} → {e}: {n}" for (k, e), n in sorted(endings.items())),
        "",
        "Records: " + ", ".join(f"{s}: {n}" for s, n in sorted(statuses.items())),
        "",
        f"RSS after warm-up: mean {mean / 1024:.1f} MiB, min {min(warm) / 1024:.1f}, max {max(warm) / 1024:.1f} "
        f"(spread {spread * 100:.1f} %); file descriptors idle {idle_fds}, peak {max(s[2] for s in samples)}, "
        f"after {final_fds} (new: {dict(new_targets) or 'none'}); `tidegate_generations_running` after: {running}.",
    ]
    if wrong:
        lines += ["", f"Unexpected endings: {wrong}"]
    report = "\n".join(lines) + "\n"
    print(report)
    out = ROOT / "bench" / "results" / f"{time.strftime('%Y-%m-%d_%H%M%S')}_soak.md"
    out.write_text(report)
    print(f"written to {out.relative_to(ROOT)}")
    return 0 if all(checks.values()) else 1


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--streams", type=int, default=10_000)
    ap.add_argument("--minutes", type=float, default=10.0)
    ap.add_argument("--concurrency", type=int, default=64)
    ap.add_argument("--port", type=int, default=18765)
    sys.exit(asyncio.run(_run(ap.parse_args())))


if __name__ == "__main__":
    main()
