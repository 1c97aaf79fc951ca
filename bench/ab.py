"""A/B of tidegate source trees: the same streams (unpaced by default) against each, alternating.

    git worktree add /tmp/before <commit>
    .venv/bin/python bench/ab.py before=/tmp/before/src after=src                     # keyed, memory store
    .venv/bin/python bench/ab.py old=/tmp/before/src:keyed:file new=src:keyed:file new-keyless=src:keyless
    .venv/bin/python bench/ab.py --mode complete --shape bench-20x0 memory=src:memory file=src:file

Each variant is NAME=SRC[:keyed|keyless][:limited][:STORE]: a tidegate whose `tidegate` package comes
from SRC (put first on PYTHONPATH), sent streams with a fresh Idempotency-Key each (keyed, the
default) or none; `apikey`: with an API key of the store (no credits, no limits) instead of the
master key; `limited`: with one that has credits and rpm, tpm and concurrent limits (every request
admitted and settled in the store, CONTRACT §11).
STORE: `memory` (SQLite in memory, the default), `file` (a SQLite file), `postgres` (the local
server's `test` database, a schema of the variant's own, emptied first) or `redis` (the local server,
a key prefix of the variant's own, emptied first). All variants run at once, idle but for the
one under load; every alternation runs each once, the order reversed every other time. Pinned as
`bench/run.py` pins: the gateways on CPU 0, the emulator and the load generator on CPU 1. Prints each
run, then the medians: CPU per chunk (the gateway's, from /proc), chunks/s and the streams' TTFT
p50, and the gateway's highest RSS over all runs (`--concurrency 1 --shape bench-3x20` for the
TTFT at one stream: keyless, `file`, as the bench's TTFT scenario runs). `--mode complete` sends
non-stream requests instead, a closed loop of `--concurrency` for `--duration` seconds, and reports
CPU per request and requests/s. Made for
judging a change on this shared VM, where the hour moves figures more than most changes do
(bench/README.md, "Comparing two commits"); the numbers are not the bench's table.
"""

from __future__ import annotations

import argparse
import dataclasses
import os
import statistics
import subprocess
import sys
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx

sys.path.insert(0, str(Path(__file__).resolve().parent))

import gateways as gw

STORES = ("memory", "file", "postgres", "redis")


@dataclass
class Variant:
    name: str
    src: str
    keyed: bool
    store: str
    limited: bool = False
    apikey: bool = False
    # CPU µs per chunk (per request), chunks/s (requests/s), peak MB, TTFT p50 ms (streams)
    runs: list[tuple[float, float, float, float]] = field(default_factory=list)


def parse_variant(spec: str) -> Variant:
    name, sep, rest = spec.partition("=")
    if not sep or not name or not rest:
        raise argparse.ArgumentTypeError(f"expected NAME=SRC[:keyed|keyless][:STORE], got {spec!r}")
    src, *options = rest.split(":")
    unknown = set(options) - {"keyed", "keyless", "limited", "apikey", *STORES}
    if unknown:
        raise argparse.ArgumentTypeError(f"{spec!r}: unknown option(s) {', '.join(sorted(unknown))}")
    if not (Path(src) / "tidegate").is_dir():
        raise argparse.ArgumentTypeError(f"{spec!r}: {src} holds no tidegate package")
    store = next((o for o in options if o in STORES), "memory")
    keyed = "keyless" not in options
    return Variant(name, str(Path(src).resolve()), keyed, store, "limited" in options, "apikey" in options)


def store_key(service: gw.Service, limited: bool) -> str:
    """A key of the store; `limited`: with credits and every limit, too high to refuse the bench's load."""
    body: dict[str, Any] = {"name": "bench"}
    if limited:
        body["credits"] = 1e9
        body["limits"] = {"rpm": 1_000_000_000, "tpm": 1_000_000_000, "concurrent": 1_000_000}
    resp = httpx.post(service.url + "/api/v1/keys", json=body, headers={"Authorization": f"Bearer {service.key}"})
    resp.raise_for_status()
    secret: str = resp.json()["key"]
    return secret


def store_url(variant: Variant, workdir: Path) -> str:
    """The variant's store, emptied (PostgreSQL and Redis keep what earlier runs wrote)."""
    tag = "".join(c if c.isalnum() else "_" for c in variant.name)
    if variant.store == "postgres":
        subprocess.run(
            ["psql", "-h", "127.0.0.1", "-d", "test", "-qc", f"DROP SCHEMA IF EXISTS ab_{tag} CASCADE"], check=True
        )
        return f"postgresql://127.0.0.1:5432/test?schema=ab_{tag}"
    if variant.store == "redis":
        script = "for _, k in ipairs(redis.call('KEYS', ARGV[1])) do redis.call('DEL', k) end"
        subprocess.run(
            ["redis-cli", "-h", "127.0.0.1", "EVAL", script, "0", f"tidegate-ab-{tag}:*"],
            check=True,
            capture_output=True,
        )
        return f"redis://127.0.0.1:6379/0?prefix=tidegate-ab-{tag}:"
    if variant.store == "file":
        return f"sqlite:///{workdir / f'ab-{tag}.db'}"
    return "sqlite:///:memory:"


def load_args(service: gw.Service, variant: Variant, args: argparse.Namespace) -> list[str]:
    out = ["--url", service.url, "--api", "openai", "--model", args.shape, "--key", service.key]
    out += ["--mode", args.mode, "--concurrency", str(args.concurrency)]
    out += ["--requests", str(args.requests)] if args.mode == "stream" else ["--duration", str(args.duration)]
    out += ["--timeout", "300", "--watch", f"gw={service.pid}"]
    return out + (["--idempotency-keys"] if variant.keyed else [])


def figures(mode: str, cpu: float, rate: float, peak: float, ttft: float) -> str:
    if mode == "stream":
        return f"CPU per chunk {cpu:6.2f} µs  chunks/s {rate:9,.0f}  RSS peak {peak:6.1f} MB  TTFT p50 {ttft:7.3f} ms"
    return f"CPU per request {cpu:6.2f} µs  requests/s {rate:9,.0f}  RSS peak {peak:6.1f} MB"


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("variants", nargs="+", type=parse_variant, metavar="NAME=SRC[:keyed|keyless][:STORE]")
    ap.add_argument("--alternations", type=int, default=8)
    ap.add_argument("--concurrency", type=int, default=16)
    ap.add_argument("--requests", type=int, default=128, help="streams per run")
    ap.add_argument("--shape", default="bench-2000x0", help="the emulator's model: chunks x delay_ms")
    ap.add_argument("--mode", choices=("stream", "complete"), default="stream")
    ap.add_argument("--duration", type=float, default=5.0, help="complete mode: seconds per run")
    args = ap.parse_args()
    gw_cores, load_cores = ("0", "1") if (os.cpu_count() or 1) >= 2 else (None, None)
    workdir = Path(tempfile.mkdtemp(prefix="tidegate-ab-"))
    emulator = gw.start_emulator(workdir, load_cores)
    services: dict[str, gw.Service] = {}
    try:
        for v in args.variants:
            os.environ["PYTHONPATH"] = v.src
            try:
                services[v.name] = gw.start_tidegate(
                    workdir, f"ab-{v.name}", emulator.url, [args.shape], gw_cores, store_url=store_url(v, workdir)
                )
            finally:
                del os.environ["PYTHONPATH"]
            if v.limited or v.apikey:
                services[v.name] = dataclasses.replace(services[v.name], key=store_key(services[v.name], v.limited))
        for i in range(args.alternations):
            for v in args.variants if i % 2 == 0 else args.variants[::-1]:
                out: dict[str, Any] = gw.run_load(load_args(services[v.name], v, args), load_cores, 400)
                if "error" in out or out.get("error_count"):
                    print(f"{v.name}: {out.get('error') or out.get('errors')}", file=sys.stderr)
                    return 1
                watch = out["watch"]["gw"]
                if args.mode == "stream":
                    cpu = watch["cpu_s"] * 1e6 / out["content_total"]
                    ttft = float(out["ttft_ms"]["p50"])
                    v.runs.append((cpu, float(out["content_per_s"]), watch["rss_peak_kb"] / 1024, ttft))
                else:
                    cpu = watch["cpu_s"] * 1e6 / out["ok"]
                    v.runs.append((cpu, float(out["requests_per_s"]), watch["rss_peak_kb"] / 1024, 0.0))
                print(f"{i} {v.name:12s} {figures(args.mode, *v.runs[-1])}", flush=True)
        print("medians:")
        for v in args.variants:
            cpu = statistics.median(run[0] for run in v.runs)
            rate = statistics.median(run[1] for run in v.runs)
            peak = max(run[2] for run in v.runs)
            ttft = statistics.median(run[3] for run in v.runs)
            kind = f"{'keyed' if v.keyed else 'keyless'}, {v.store}"
            print(f"  {v.name:12s} {figures(args.mode, cpu, rate, peak, ttft)}  ({kind}, {v.src})")
    finally:
        for service in services.values():
            service.stop()
        emulator.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
