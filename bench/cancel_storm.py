"""Cancel-storm soak: the same storm, again and again, against one real `tidegate serve`,
and whether its memory keeps growing.

    .venv/bin/python bench/cancel_storm.py                   # 40 storms of 800 streams on one key
    .venv/bin/python bench/cancel_storm.py --rounds 5 --streams 200

Each storm starts `--streams` streams at once on one key (a slow upstream: a chunk every 50 ms),
waits until each has its first chunk, then ends them all at once: half by
`POST /api/v1/generations/{id}/cancel` (they carry an Idempotency-Key, so they run on without a
client until cancelled), half by the client closing its connection. After each storm, once the
running-generations gauge is back to 0, the gateway's RSS and descriptors are read.

Checks (exit 1 when one fails; bench/results/<date>_cancel-storm.md either way):
- every stream got its 200 and first chunk; every cancel got 202;
- descriptors are back to the first storm's level after every storm;
- no leak: the RSS over the second half of the storms grows less than 2 % from its first storm to
  its last (the first storms warm allocator arenas and caches; a leak grows with every storm).
"""

from __future__ import annotations

import argparse
import asyncio
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import aiohttp
import orjson
from soak import HEADERS, ROOT, _fds, _rss_kb, _start_gateway, _wait_ready

from emulators.openai_upstream import OpenAIUpstream  # (soak.py put tests/ on the path)

BODY = orjson.dumps({"model": "slow", "stream": True, "messages": [{"role": "user", "content": "storm"}]})


async def _first_chunk(session: aiohttp.ClientSession, base: str, cancel: bool) -> tuple[str, aiohttp.ClientResponse]:
    headers = dict(HEADERS)
    if cancel:
        headers["Idempotency-Key"] = os.urandom(12).hex()
    resp = await session.post(base + "/v1/chat/completions", data=BODY, headers=headers)
    if resp.status != 200:
        raise RuntimeError(f"status {resp.status}")
    await resp.content.readuntil(b"\n\n")
    return resp.headers["x-generation-id"], resp


async def _running(session: aiohttp.ClientSession, base: str) -> float:
    async with session.get(base + "/metrics") as resp:
        for line in (await resp.text()).splitlines():
            if line.startswith("tidegate_generations_running"):
                return float(line.split()[-1])
    return 0.0


async def _storm(base: str, streams: int) -> None:
    connector = aiohttp.TCPConnector(limit=0, force_close=True)
    async with aiohttp.ClientSession(connector=connector, timeout=aiohttp.ClientTimeout(total=120)) as session:
        opened = await asyncio.gather(*(_first_chunk(session, base, i % 2 == 0) for i in range(streams)))

        async def end(i: int, gid: str, resp: aiohttp.ClientResponse) -> None:
            if i % 2 == 0:
                async with session.post(f"{base}/api/v1/generations/{gid}/cancel", headers=HEADERS) as c:
                    if c.status != 202:
                        raise RuntimeError(f"cancel status {c.status}")
            resp.close()

        await asyncio.gather(*(end(i, gid, resp) for i, (gid, resp) in enumerate(opened)))
        deadline = time.monotonic() + 60
        while await _running(session, base) > 0:
            if time.monotonic() > deadline:
                raise RuntimeError("generations still running a minute after the storm")
            await asyncio.sleep(0.2)


async def _run(args: argparse.Namespace) -> int:
    workdir = Path(tempfile.mkdtemp(prefix="tidegate-storm-"))
    base = f"http://127.0.0.1:{args.port}"
    rss: list[int] = []
    fds: list[int] = []
    with OpenAIUpstream() as emu:
        proc = _start_gateway(workdir, emu, args.port)
        try:
            async with aiohttp.ClientSession() as session:
                await _wait_ready(session, base)
            for n in range(args.rounds):
                t0 = time.monotonic()
                await _storm(base, args.streams)
                await asyncio.sleep(1.0)  # the store's writes and the event logs settle
                rss.append(_rss_kb(proc.pid))
                fds.append(_fds(proc.pid))
                print(f"storm {n + 1}: {time.monotonic() - t0:.1f} s, RSS {rss[-1] / 1024:.1f} MiB, fds {fds[-1]}")
        finally:
            proc.terminate()
            proc.wait(30)
    half = rss[len(rss) // 2 :]
    growth = (half[-1] - half[0]) / half[0] if half else 0.0
    checks = {
        "descriptors back to the first storm's level": max(fds) <= fds[0],
        f"RSS over the second half grows < 2 % (it grew {growth:+.1%})": growth < 0.02,
    }
    lines = [
        f"# Cancel storm: {args.rounds} storms of {args.streams} streams on one key",
        "",
        f"commit {args.commit}",
        "",
        "| storm | RSS MiB | fds |",
        "|---|---|---|",
        *(f"| {i + 1} | {r / 1024:.1f} | {f} |" for i, (r, f) in enumerate(zip(rss, fds, strict=True))),
        "",
        *(f"- {'PASS' if ok else 'FAIL'}: {name}" for name, ok in checks.items()),
    ]
    report = "\n".join(lines) + "\n"
    print(report)
    out = ROOT / "bench" / "results" / f"{time.strftime('%Y-%m-%d_%H%M%S')}_cancel-storm.md"
    out.write_text(report)
    print(f"written to {out.relative_to(ROOT)}")
    return 0 if all(checks.values()) else 1


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--rounds", type=int, default=40)
    ap.add_argument("--streams", type=int, default=800)
    ap.add_argument("--port", type=int, default=18766)
    ap.add_argument(
        "--commit",
        default=subprocess.run(
            ["git", "-C", str(ROOT), "rev-parse", "--short", "HEAD"], capture_output=True, text=True
        ).stdout.strip(),
    )
    sys.exit(asyncio.run(_run(ap.parse_args())))


if __name__ == "__main__":
    main()
