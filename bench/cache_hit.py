"""The response cache's bench: a streamed cache hit against a relayed answer, at one
stream at a time, as ratios to the plain relay of the same run (bench/plain_relay.py).

    .venv/bin/python bench/cache_hit.py [--requests 200]

Three targets take the same request (20 chunks, no pacing: `bench-20x0`), one at a time, interleaved
in rounds: the plain relay, tidegate relaying it (a model without cache), and tidegate answering it
from its cache (a model with `cache = { ... }`, warmed by one miss). Each request's time to first
token is measured from the request's first byte to the first content delta; the gateway's CPU per
request is its process's utime + stime over the run divided by the requests. Budget: a hit's TTFT at
c=1 ≤ 1 ms. Writes bench/results/<stamp>_cache_hit.md and .json.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path

import httpx

sys.path.insert(0, str(Path(__file__).resolve().parent))
import gateways as gw
import procstat

SHAPE = "bench-20x0"
BODY = {"model": "", "stream": True, "messages": [{"role": "user", "content": "the same question"}]}


def ttft_ms(client: httpx.Client, url: str, key: str, model: str) -> float:
    body = {**BODY, "model": model}
    start = time.perf_counter()
    with client.stream(
        "POST", url + "/v1/chat/completions", json=body, headers={"Authorization": f"Bearer {key}"}
    ) as r:
        if r.status_code != 200:
            raise RuntimeError(f"{url} {model}: {r.status_code} {r.read()[:300]!r}")
        assert model != "cached" or r.headers["x-cache"] == "hit", r.headers.get("x-cache")
        first = None
        for line in r.iter_lines():
            squeezed = line.replace(" ", "")
            if first is None and '"content":"' in squeezed and '"content":""' not in squeezed:
                first = time.perf_counter()
    return ((first or time.perf_counter()) - start) * 1000


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--requests", type=int, default=200)
    args = ap.parse_args(argv)
    stamp = time.strftime("%Y-%m-%d_%H%M%S", time.gmtime())
    work = Path("/tmp") / f"tidegate-bench-cache-{stamp}"
    work.mkdir(parents=True)
    emu = gw.start_emulator(work, "1")
    relay = gw.start_plain_relay(work, emu.url, "0")
    config = gw.tidegate_config(emu.url, [SHAPE], f"sqlite:///{work / 'tg.db'}", None, 1, passthrough_only=True)
    config += f'[models."cached"]\nroutes = [{{ provider = "emu-openai", model = "{SHAPE}" }}]\n'
    config += "cache = { ttl_s = 3600, max_bytes = 1048576 }\n"
    (work / "tg.toml").write_text(config)
    tg = gw._serve(work, "tg", ["--config", str(work / "tg.toml")], "0", None, 0)
    targets = {
        "relay": (relay.url, "none", SHAPE),
        "tidegate": (tg.url, tg.key, SHAPE),
        "hit": (tg.url, tg.key, "cached"),
    }
    ttfts: dict[str, list[float]] = {name: [] for name in targets}
    cpu: dict[str, float] = dict.fromkeys(targets, 0.0)
    pids = procstat.tree(tg.pid)
    try:
        with httpx.Client(timeout=30) as client:
            for url, key, model in targets.values():  # warm: connections, tokenizer, the cache's entry
                ttft_ms(client, url, key, "bench-20x0" if model == "cached" else model)
                if model == "cached":
                    client.post(
                        url + "/v1/chat/completions",
                        json={**BODY, "model": model},
                        headers={"Authorization": f"Bearer {key}"},
                    )
                    time.sleep(0.5)  # the miss's entry is written once its answer has ended
                for _ in range(5):
                    ttft_ms(client, url, key, model)
            for _ in range(args.requests):
                for name, (url, key, model) in targets.items():
                    before = procstat.cpu_seconds(pids)
                    ttfts[name].append(ttft_ms(client, url, key, model))
                    cpu[name] += procstat.cpu_seconds(pids) - before
    finally:
        for svc in (tg, relay, emu):
            svc.stop()
    return report(stamp, args.requests, ttfts, cpu)


def report(stamp: str, n: int, ttfts: dict[str, list[float]], cpu: dict[str, float]) -> int:
    def p(values: list[float], q: float) -> float:
        return statistics.quantiles(values, n=100)[int(q) - 1] if len(values) > 1 else values[0]

    rows = {
        name: {
            "ttft_p50_ms": round(statistics.median(v), 3),
            "ttft_p99_ms": round(p(v, 99), 3),
            "cpu_per_request_ms": round(cpu[name] / n * 1000, 3),
        }
        for name, v in ttfts.items()
    }
    floor = rows["relay"]["ttft_p50_ms"]
    hit, relayed = rows["hit"], rows["tidegate"]
    summary = {
        "requests_per_target": n,
        "targets": rows,
        "hit_ttft_minus_relay_ms": round(hit["ttft_p50_ms"] - floor, 3),
        "hit_ttft_ratio_to_relay": round(hit["ttft_p50_ms"] / floor, 3),
        "hit_cpu_ratio_to_relayed": round(hit["cpu_per_request_ms"] / max(relayed["cpu_per_request_ms"], 1e-9), 3),
        "budget_hit_ttft_ms": 1.0,
        "budget_met": hit["ttft_p50_ms"] <= 1.0,
    }
    out = Path(__file__).resolve().parent / "results" / f"{stamp}_cache_hit"
    out.with_suffix(".json").write_text(json.dumps(summary, indent=2) + "\n")
    lines = [
        f"# Response cache bench {stamp} (bench/cache_hit.py, c=1, {n} requests per target, `{SHAPE}`)",
        "",
        "| target | TTFT p50 ms | TTFT p99 ms | gateway CPU per request ms |",
        "|---|---|---|---|",
        *(f"| {k} | {v['ttft_p50_ms']} | {v['ttft_p99_ms']} | {v['cpu_per_request_ms']} |" for k, v in rows.items()),
        "",
        f"A hit's TTFT p50: {hit['ttft_p50_ms']} ms (budget ≤ 1 ms: {'met' if summary['budget_met'] else 'missed'}),"
        f" {summary['hit_ttft_ratio_to_relay']} × the plain relay's; its CPU {summary['hit_cpu_ratio_to_relayed']} ×"
        " a relayed answer's. (The relay's CPU column is tidegate's idle CPU while the relay served.)",
    ]
    out.with_suffix(".md").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
