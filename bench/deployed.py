"""The deployed scenarios: performance as deployed, each figure read against the plain relay of the same run.

- `burst`: 200 and 1,000 streams started in one instant against one provider (its default
  `max_connections`, 1000): TTFT p99, chunk gap p99, the wall time until the last stream ended.
- `newstreams`: short answers (one chunk) in a closed loop of 32: new streams per second and CPU
  per new stream.
- `deployed`: tidegate bare (the master key, nothing watching) against tidegate as deployed, each
  on SQLite, Redis and PostgreSQL: an API key with credits, a monthly budget and rpm / tpm /
  concurrent limits, every model priced, `/metrics` scraped every second and OpenTelemetry traces
  exported to a real OTLP/HTTP receiver (bench/observers.py). 256 streams in flight (steady) and
  new streams.
- `rss`: RSS at start and while serving: the default config (no config file: local models) and a
  passthrough-only config, bare and as deployed.

The targets' names: `relay`, `tidegate` (bare, SQLite), `bare-redis`, `bare-postgres` (the bare
config on those stores), `deployed-sqlite`, `deployed-redis`, `deployed-postgres`. The budget reads
each store's as-deployed figure against the bare config on the same store.
"""

from __future__ import annotations

import dataclasses
import subprocess
import time
import urllib.request
from pathlib import Path
from typing import Any

import gateways as gw
import orjson
import scenarios as sc
from procstat import rss_kb, tree

STORES = ("sqlite", "redis", "postgres")
NEW_STREAMS_C = 32


def ratio_ok(values: dict[str, float | None], who: str, base: str, limit: float) -> bool | None:
    return sc.check(sc.ratio(values, who, base), limit)


def _cpu_per_stream(out: dict[str, Any]) -> float | None:
    w = out["watch"].get("gw") or out["watch"]["emu"]
    streams = out.get("ok") or 0
    return w["cpu_s"] * 1e6 / streams if streams and w["cpu_s"] >= 0.05 else None


def _per_s(out: dict[str, Any]) -> float | None:
    return (out.get("ok") or 0) / out["wall_s"] if out.get("wall_s") else None


# --- burst ----------------------------------------------------------------------------------------


def burst(ctx: sc.Ctx) -> list[sc.Row]:
    rows: list[sc.Row] = []
    for n in (50, 200) if ctx.quick else (200, 1000):
        v = f"c={n}, 50 chunks @ 20 ms, all started in one instant"
        res = sc.collect(
            ctx,
            "burst",
            v,
            {"ttft": sc._p("ttft_ms", "p99"), "gap": sc._p("gap_ms", "p99"), "wall": lambda o: o["wall_s"] * 1e3},
            lambda t, n=n, v=v: sc.load(ctx, t, "burst", v, "bench-50x20", concurrency=n, requests=n, timeout=180),
        )
        ttft = sc.Row("burst", v, "TTFT p99", "ms", res["ttft"], budget="≤ 1.3 × relay")
        gap = sc.Row("burst", v, "chunk gap p99", "ms", res["gap"], budget="≤ 1.3 × relay")
        ttft.ok = ratio_ok(res["ttft"], "tidegate", "relay", 1.3)
        gap.ok = ratio_ok(res["gap"], "tidegate", "relay", 1.3)
        rows += [ttft, gap, sc.Row("burst", v, "wall (all streams ended)", "ms", res["wall"])]
    return rows


# --- new streams ----------------------------------------------------------------------------------


def new_stream_metrics() -> dict[str, sc.Metric]:
    return {"per_s": _per_s, "cpu": _cpu_per_stream}


def new_streams_load(ctx: sc.Ctx, scenario: str, v: str, n: int) -> Any:
    return lambda t: sc.load(ctx, t, scenario, v, "bench-1x0", concurrency=NEW_STREAMS_C, requests=n, timeout=300)


def newstreams(ctx: sc.Ctx) -> list[sc.Row]:
    n = 600 if ctx.quick else 3000
    v = f"{n} one-chunk streams, closed loop of {NEW_STREAMS_C}"
    res = sc.collect(ctx, "newstreams", v, new_stream_metrics(), new_streams_load(ctx, "newstreams", v, n))
    cpu = sc.Row("newstreams", v, "CPU per new stream (direct: emulator's)", "µs", res["cpu"], compare="ratio")
    cpu.budget, cpu.ok = "≤ 1.2 × relay", ratio_ok(res["cpu"], "tidegate", "relay", 1.2)
    return [sc.Row("newstreams", v, "new streams per second", "1/s", res["per_s"], compare="ratio"), cpu]


# --- as deployed ----------------------------------------------------------------------------------


@dataclasses.dataclass
class Deployed:
    """One as-deployed tidegate: its service (whose key is the API key made for the bench), its
    observers (OTLP receiver + scraper) and how to empty its store afterwards."""

    name: str
    service: gw.Service
    observers: gw.Service | None  # none for a bare config
    cleanup: list[str]

    def stop(self) -> None:
        self.service.stop()
        if self.observers is not None:
            self.observers.stop()
        if self.cleanup:
            subprocess.run(self.cleanup, capture_output=True, check=False)


def store_url(store: str, workdir: Path, tag: str) -> tuple[str, list[str]]:
    """The store's URL, emptied first (Redis and PostgreSQL keep what earlier runs wrote), and the
    command that empties it again afterwards."""
    if store == "redis":
        script = "for _, k in ipairs(redis.call('KEYS', ARGV[1])) do redis.call('DEL', k) end"
        wipe = ["redis-cli", "-h", "127.0.0.1", "EVAL", script, "0", f"{tag}:*"]
        subprocess.run(wipe, capture_output=True, check=True)
        return f"redis://127.0.0.1:6379/0?prefix={tag}:", wipe
    if store == "postgres":
        wipe = ["psql", "-h", "127.0.0.1", "-d", "test", "-qc", f"DROP SCHEMA IF EXISTS {tag} CASCADE"]
        subprocess.run(wipe, capture_output=True, check=True)
        return f"postgresql://127.0.0.1:5432/test?schema={tag}", wipe
    return f"sqlite:///{workdir.resolve() / (tag + '.db')}", []


def api_key(svc: gw.Service) -> str:
    """An API key as an operator would hand it out: credits on a monthly budget, and every rate limit
    set (high enough never to refuse the bench: what is measured is the checking, not a refusal)."""
    body = {
        "name": "bench",
        "credits": 1e9,
        "budget_period": "monthly",
        "limits": {"rpm": 100_000_000, "tpm": 1_000_000_000, "concurrent": 100_000},
    }
    status, data = gw.post_json(svc.url + "/api/v1/keys", orjson.dumps(body), svc.key)
    if status != 201:
        raise RuntimeError(f"creating the bench's API key: HTTP {status}: {data[:200]!r}")
    return str(orjson.loads(data)["key"])


def start_deployed(
    workdir: Path, store: str, emu_url: str, shapes: list[str], cores: str | None, load_cores: str | None
) -> Deployed:
    """tidegate as deployed on `store`: priced models, an API key with credits and limits, observers."""
    tag = f"tgbench_{store}_{int(time.time())}"
    url, wipe = store_url(store, workdir, tag)
    port = gw.free_port()
    observers = gw.start_observers(workdir, f"http://127.0.0.1:{port}/metrics", load_cores)
    env = {"OTEL_EXPORTER_OTLP_ENDPOINT": observers.url, "OTEL_SERVICE_NAME": "tidegate-bench"}
    name = f"deployed-{store}"
    try:
        svc = gw.start_tidegate(
            workdir, name, emu_url, shapes, cores, store_url=url, pricing=True, extra_env=env, port=port
        )
    except BaseException:
        observers.stop()
        raise
    if "tracing: OTLP export on" not in svc.log_tail(200):
        svc.stop()
        observers.stop()
        raise RuntimeError(f"{name}: tidegate did not turn OTLP export on:\n{svc.log_tail()}")
    return Deployed(name, dataclasses.replace(svc, key=api_key(svc)), observers, wipe)


def start_bare(workdir: Path, store: str, emu_url: str, shapes: list[str], cores: str | None) -> Deployed:
    """The bare config on `store`: what the as-deployed one is read against, on the same store."""
    tag = f"tgbench_bare_{store}_{int(time.time())}"
    url, wipe = store_url(store, workdir, tag)
    svc = gw.start_tidegate(workdir, f"bare-{store}", emu_url, shapes, cores, store_url=url)
    return Deployed(f"bare-{store}", svc, None, wipe)


def observed(d: Deployed) -> str:
    assert d.observers is not None
    with urllib.request.urlopen(d.observers.url + "/stats", timeout=5) as resp:
        s = orjson.loads(resp.read())
    return (
        f"{d.name}: the OTLP receiver got {s['spans']:,} spans in {s['exports']:,} exports; "
        f"/metrics scraped {s['scrapes']} times ({s['scrape_errors']} failed)"
    )


def deployed(ctx: sc.Ctx, runs: list[Deployed]) -> list[sc.Row]:
    """`ctx.targets`: relay, tidegate (bare) and one `deployed-<store>` per entry of `runs`."""
    plan = sc.steady(64 if ctx.quick else 256, 1.0)
    c = plan["concurrency"]
    v = f"c={c} in flight, 50 chunks @ 20 ms, steady: {plan['ramp']:g} new/s"
    res = sc.collect(
        ctx,
        "deployed",
        v,
        {"ttft": sc._p("ttft_ms", "p99"), "gap": sc._p("gap_ms", "p99"), "cpu": _cpu_per_stream},
        lambda t: sc.load(ctx, t, "deployed", v, "bench-50x20", timeout=180, **plan),
    )
    n = 300 if ctx.quick else 1000  # PostgreSQL as deployed takes ~100-200 a second here
    v2 = f"{n} one-chunk streams, closed loop of {NEW_STREAMS_C}"
    res2 = sc.collect(ctx, "deployed", v2, new_stream_metrics(), new_streams_load(ctx, "deployed", v2, n))
    for d in runs:
        if d.observers is not None:
            ctx.notes.append(observed(d))
    budget = "redis, postgres: as deployed ≤ 1.15 × bare on the same store"
    rows = [
        sc.Row("deployed", v, "TTFT p99", "ms", res["ttft"]),
        sc.Row("deployed", v, "chunk gap p99", "ms", res["gap"]),
        sc.Row("deployed", v, "CPU per stream (50 chunks)", "µs", res["cpu"], budget=budget),
        sc.Row("deployed", v2, "new streams per second", "1/s", res2["per_s"]),
        sc.Row("deployed", v2, "CPU per new stream", "µs", res2["cpu"], budget=budget),
    ]
    for row in rows:
        if row.budget:
            checks = [ratio_ok(row.values, f"deployed-{s}", f"bare-{s}", 1.15) for s in ("redis", "postgres")]
            row.ok = None if None in checks else all(checks)
    return rows


# --- RSS ------------------------------------------------------------------------------------------


def rss_mib(svc: gw.Service) -> float:
    return rss_kb(tree(svc.pid)) / 1024


def serving_rss(ctx: sc.Ctx, target: sc.Target) -> float | None:
    """The highest RSS while 256 streams are in flight (64 with --quick)."""
    plan = sc.steady(64 if ctx.quick else 256, 1.0)
    out = sc.load(ctx, target, "rss", "serving", "bench-50x20", timeout=180, **plan)
    return None if out is None else out["watch"]["gw"]["rss_peak_kb"] / 1024


def default_config_rss(workdir: Path, cores: str | None, notes: list[str]) -> tuple[float, float | None]:
    """The embedded default config: RSS at start, and once its local chat model and embedding model
    have each answered (they load on their first request)."""
    svc = gw.start_tidegate_default(workdir, cores)
    try:
        time.sleep(1.0)
        start = rss_mib(svc)
        chat = {"model": "local/smollm2", "messages": [{"role": "user", "content": "hi"}], "max_tokens": 8}
        s1, _ = gw.post_json(svc.url + "/v1/chat/completions", orjson.dumps(chat), svc.key, timeout=120)
        s2, _ = gw.post_json(
            svc.url + "/v1/embeddings", orjson.dumps({"model": "local/e5-small", "input": "hi"}), svc.key, timeout=120
        )
        if (s1, s2) != (200, 200):
            notes.append(f"rss: the default config's local models answered {s1} (chat) and {s2} (embeddings)")
            return start, None
        return start, rss_mib(svc)
    finally:
        svc.stop()


def rss(ctx: sc.Ctx, workdir: Path, emu_url: str, shapes: list[str], cores: str | None) -> list[sc.Row]:
    """Fresh processes, one at a time: RSS once ready, then the peak while serving."""
    start: dict[str, float | None] = {}
    serving: dict[str, float | None] = {}
    relay = gw.start_plain_relay(workdir, emu_url, cores)
    bare = gw.start_tidegate(workdir, "rss-passthrough", emu_url, shapes, cores, passthrough_only=True)
    keyed = gw.start_tidegate(
        workdir, "rss-passthrough-keyed", emu_url, shapes, cores, passthrough_only=True, pricing=True
    )
    try:
        keyed = dataclasses.replace(keyed, key=api_key(keyed))
        for name, svc in (("relay", relay), ("passthrough", bare), ("passthrough-keyed", keyed)):
            time.sleep(1.0)
            start[name] = rss_mib(svc)
            serving[name] = serving_rss(ctx, sc.Target(name, svc, gateway=True, routes={"openai"}))
            svc.stop()
    finally:
        for svc in (relay, bare, keyed):
            svc.stop()
    start["default-config"], serving["default-config"] = default_config_rss(workdir, cores, ctx.notes)
    v = "fresh process: once ready / peak while serving"
    at_start = sc.Row("rss", v, "RSS at start", "MiB", start)
    budget = "passthrough-only ≤ 100 MiB (bare and keyed)"
    while_serving = sc.Row("rss", v, "RSS while serving", "MiB", serving, budget=budget)
    checks = [sc.check(serving.get(name), 100.0) for name in ("passthrough", "passthrough-keyed")]
    while_serving.ok = None if None in checks else all(checks)
    return [at_start, while_serving]
