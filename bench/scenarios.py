"""The benchmark scenarios. Each runs rounds interleaved over the targets and returns rows.

A row is one metric for every target (median over rounds), how to compare it, and the tidegate
budget it is checked against (None when the issue sets no budget for it).
"""

from __future__ import annotations

import math
import os
import statistics
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from gateways import Service, run_load
from procstat import core_shares, core_ticks, worker_pids


@dataclass
class Target:
    name: str  # direct | tidegate | litellm | any label
    service: Service
    gateway: bool  # False for the emulator itself
    routes: set[str] = field(default_factory=lambda: {"openai", "anthropic"})  # routes that work


@dataclass
class Row:
    scenario: str
    variant: str
    metric: str
    unit: str
    values: dict[str, float | None]
    compare: str = "diff"  # diff (target - direct) | ratio (target / direct)
    budget: str = ""
    ok: bool | None = None
    note: str = ""


@dataclass
class Ctx:
    emulator: Service
    targets: list[Target]
    quick: bool
    rounds: int
    load_cores: str | None
    runs: list[dict[str, Any]] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    gateway_cores: str | None = None


def med(values: list[float]) -> float | None:
    vals = [v for v in values if v is not None and not (isinstance(v, float) and math.isnan(v))]
    return statistics.median(vals) if vals else None


# the route a door's load needs probed (doors.py): the Messages door's rides the anthropic route's
DOOR_ROUTES = {"messages": "anthropic", "gemini": "openai", "responses": "openai"}


def model_for(target: Target, shape: str, route: str) -> tuple[str, str]:
    """(api, model) to send: direct talks the upstream's own API; gateways get the catalog id."""
    if route == "messages":  # the Messages door on an Anthropic route (doors.py); direct: the emulator's own
        return "anthropic", (f"anth/{shape}" if target.gateway else shape)
    if route == "gemini":  # the Gemini door on a gemini route (doors.py)
        return "gemini", (f"gem/{shape}" if target.gateway else shape)
    if route == "responses":  # the Responses door on a `responses = true` route (doors.py)
        return "responses", (f"resp/{shape}" if target.gateway else shape)
    if not target.gateway:
        return route, shape
    return "openai", (f"anth/{shape}" if route == "anthropic" else shape)


def load(
    ctx: Ctx,
    target: Target,
    scenario: str,
    variant: str,
    shape: str,
    route: str = "openai",
    *,
    concurrency: int,
    requests: int = 0,
    ramp: float = 0.0,
    mode: str = "stream",
    duration: float = 0.0,
    timeout: float = 300.0,
    idempotency_keys: bool = False,
    warmup: int = 0,
    per_worker: bool = False,
) -> dict[str, Any] | None:
    if target.gateway and DOOR_ROUTES.get(route, route) not in target.routes:
        return None
    api, model = model_for(target, shape, route)
    args = [
        "--url",
        target.service.url,
        "--api",
        api,
        "--model",
        model,
        "--key",
        target.service.key,
        "--mode",
        mode,
        "--concurrency",
        str(concurrency),
        "--timeout",
        str(timeout),
        "--watch",
        f"emu={ctx.emulator.pid}",
    ]
    if requests:
        args += ["--requests", str(requests)]
    if ramp:
        args += ["--ramp-per-s", str(ramp)]
    if duration:
        args += ["--duration", str(duration)]
    if idempotency_keys:
        args += ["--idempotency-keys"]
    if warmup:
        args += ["--warmup", str(warmup)]
    if target.gateway:
        args += ["--watch", f"gw={target.service.pid}"]
    if per_worker:  # each worker process on its own: how the load was split between them
        args += [a for i, pid in enumerate(worker_pids(target.service.pid)) for a in ("--watch", f"worker{i}={pid}")]
    load_before = os.getloadavg()
    ticks_before = core_ticks()
    out = run_load(args, ctx.load_cores, timeout + 60)
    out["cores"] = core_shares(ticks_before, core_ticks())
    out["loadavg"] = [round(x, 2) for x in os.getloadavg()]
    out["loadavg_before"] = [round(x, 2) for x in load_before]
    record = {"scenario": scenario, "variant": variant, "target": target.name, "route": route, "result": out}
    ctx.runs.append(record)
    if "error" in out and "mode" not in out:
        ctx.notes.append(f"{scenario} {variant} {target.name}: {out['error']}")
        return None
    if out.get("error_count"):
        ctx.notes.append(f"{scenario} {variant} {target.name}: errors {out['errors']}")
    gw_core = out["cores"].get(ctx.gateway_cores or "", {})
    if target.gateway and gw_core.get("steal", 0.0) >= 0.05:
        ctx.notes.append(
            f"{scenario} {variant} {target.name}: the hypervisor took {gw_core['steal']:.0%} of the gateway's core "
            f"(steal time; softirq {gw_core['softirq']:.0%}, busy {gw_core['busy']:.0%}): latency tails here "
            "are partly the machine's"
        )
    busy = (out["watch"]["emu"]["cpu_s"] + out["load_cpu_s"]) / max(out["wall_s"], 1e-9)
    out["core1_busy"] = round(busy, 3)
    if busy >= 0.9 and ctx.load_cores and out["wall_s"] >= 0.2:  # shorter runs: 10 ms ticks are too coarse
        ctx.notes.append(
            f"{scenario} {variant} {target.name}: emulator + load generator used {busy:.0%} of their core: "
            "this figure may be limited by the harness, not the target"
        )
    return out


def cpu_us_per_chunk(out: dict[str, Any]) -> float | None:
    n = out.get("content_total") or 0
    w = out["watch"].get("gw") or out["watch"]["emu"]
    if w["cpu_s"] < 0.05:  # fewer than 5 clock ticks of /proc/<pid>/stat: too coarse to report
        return None
    return w["cpu_s"] * 1e6 / n if n else None


Metric = Callable[[dict[str, Any]], float | None]


def collect(
    ctx: Ctx,
    scenario: str,
    variant: str,
    metrics: dict[str, Metric],
    run_one: Callable[[Target], dict[str, Any] | None],
    rounds: int | None = None,
) -> dict[str, dict[str, float | None]]:
    """Run `rounds` interleaved rounds over all targets; median of every metric per target."""
    samples: dict[str, dict[str, list[float]]] = {m: {t.name: [] for t in ctx.targets} for m in metrics}
    for _ in range(rounds or ctx.rounds):
        for target in ctx.targets:
            out = run_one(target)
            if out is None:
                continue
            for m, fn in metrics.items():
                v = fn(out)
                if v is not None:
                    samples[m][target.name].append(v)
    return {m: {t: med(vs) for t, vs in by_t.items()} for m, by_t in samples.items()}


def _p(key: str, q: str) -> Metric:
    return lambda out: out.get(key, {}).get(q)


def check(value: float | None, limit: float, lower_is_better: bool = True) -> bool | None:
    if value is None:
        return None
    return value <= limit if lower_is_better else value >= limit


def both(a: bool | None, b: bool | None) -> bool | None:
    """Two budgets on one figure: met when both are; unknown when either cannot be judged."""
    return None if a is None or b is None else a and b


def added(vals: dict[str, float | None], who: str = "tidegate", base: str = "direct") -> float | None:
    a, d = vals.get(who), vals.get(base)
    return None if a is None or d is None else a - d


def ratio(vals: dict[str, float | None], num: str, den: str) -> float | None:
    a, b = vals.get(num), vals.get(den)
    return None if a is None or b is None or b == 0 else a / b


# --- scenarios -------------------------------------------------------------------------------------


def steady(c: int, stream_s: float, waves: int = 3) -> dict[str, Any]:
    """c streams in flight with arrivals spread evenly (c per stream lifetime) instead of all in one
    instant; the first wave (the ramp up to c in flight) runs but is not timed."""
    return {"concurrency": c, "requests": c * waves, "ramp": c / stream_s, "warmup": c}


def ttft(ctx: Ctx) -> list[Row]:
    rows: list[Row] = []
    shape = "bench-50x20"
    # --quick stops at 64 streams (LiteLLM needs ~25 s for 256): the 256-stream budget is checked at 64.
    # Streams started all at once are the `burst` scenario's (bench/deployed.py).
    levels = [(1, 5)] if ctx.quick else [(1, 20)]
    top = 64 if ctx.quick else 256
    for c, n in levels:
        v = f"c={c}, 50 chunks @ 20 ms" + (", burst: all started in one instant" if c > 1 else "")
        res = collect(
            ctx,
            "ttft",
            v,
            {"p50": _p("ttft_ms", "p50"), "p99": _p("ttft_ms", "p99")},
            lambda t, c=c, n=n, v=v: load(ctx, t, "ttft", v, shape, concurrency=c, requests=n, timeout=120),
        )
        r50 = Row("ttft", v, "TTFT p50", "ms", res["p50"])
        r99 = Row("ttft", v, "TTFT p99", "ms", res["p99"])
        if c == 1:  # the relay-ratio budget: what tidegate adds over the floor relay of the same run
            r50.budget, r50.ok = "≤ relay + 1 ms", check(added(res["p50"], base="relay"), 1.0)
        rows += [r50, r99]
    # The budget's "p99 at 256 concurrent streams": 256 in flight, arrivals spread over a stream's
    # lifetime (1 s), the ramp-up wave untimed.
    plan = steady(top, 1.0)
    v = f"c={top} in flight, 50 chunks @ 20 ms, steady: {plan['ramp']:g} new/s, first wave untimed"
    res = collect(
        ctx,
        "ttft",
        v,
        {"p50": _p("ttft_ms", "p50"), "p99": _p("ttft_ms", "p99")},
        lambda t: load(ctx, t, "ttft", v, shape, timeout=180, **plan),
    )
    # the absolute "added ≤ 5 ms" here moved with the hour more than with the code; the relay-ratio budgets judge the
    # tails at 200 and 1,000 streams against the relay instead (`burst`)
    r99 = Row("ttft", v, "TTFT p99", "ms", res["p99"])
    return [*rows, Row("ttft", v, "TTFT p50", "ms", res["p50"]), r99]


def gaps(ctx: Ctx) -> list[Row]:
    shape, c = "bench-64x20", 64 if ctx.quick else 256
    rows: list[Row] = []
    plan = steady(c, 64 * 0.020)
    variants = [
        (f"c={c}, 64 chunks @ 20 ms, burst: all started in one instant", {"concurrency": c}),
        (f"c={c} in flight, 64 chunks @ 20 ms, steady: {plan['ramp']:g} new/s, first wave untimed", plan),
    ]
    for v, how in variants:
        res = collect(
            ctx,
            "gaps",
            v,
            {"p50": _p("gap_ms", "p50"), "p99": _p("gap_ms", "p99")},
            lambda t, v=v, how=how: load(ctx, t, "gaps", v, shape, timeout=180, **how),
        )
        r99 = Row("gaps", v, "chunk gap p99", "ms", res["p99"])
        if how is plan:
            r99.budget = "≤ 1.3 × relay" + (" (quick: c=64)" if ctx.quick else "")
            r99.ok = check(ratio(res["p99"], "tidegate", "relay"), 1.3)
        rows += [Row("gaps", v, "chunk gap p50", "ms", res["p50"]), r99]
    return rows


def pace(ctx: Ctx) -> list[Row]:
    shape = "bench-2000x1"
    v = "c=1, 2000 chunks @ 1 ms"
    res = collect(
        ctx,
        "pace",
        v,
        {"ttlb": _p("ttlb_ms", "p50")},
        lambda t: load(ctx, t, "pace", v, shape, concurrency=1, timeout=120),
    )
    row = Row("pace", v, "time to last byte", "ms", res["ttlb"], compare="ratio", budget="≤ 1.05 × direct")
    row.ok = check(ratio(res["ttlb"], "tidegate", "direct"), 1.05)
    return [row]


def throughput(ctx: Ctx) -> list[Row]:
    """Unpaced streams: chunks/s and CPU per chunk (the absolute budgets). Not judged against the relay:
    it copies whatever one read brought (hundreds of chunks of an unpaced stream in one write) where
    tidegate parses every event, so its figure here is the batching, not a floor; `cost` measures
    paced chunks, one read each, which is what the relay-ratio ratio is judged on."""
    rows: list[Row] = []
    shape = "bench-2000x0"
    levels = [(1, 1), (4, 4)] if ctx.quick else [(1, 4), (16, 16), (64, 64)]
    for route, limit in (("openai", 30.0), ("anthropic", 50.0)):
        kind = "passthrough" if route == "openai" else "translated (Anthropic → OpenAI)"
        for c, n in levels:
            v = f"{kind}, c={c}, 2000 chunks unpaced"
            res = collect(
                ctx,
                "throughput",
                v,
                {"cps": lambda o: o.get("content_per_s"), "cpu": cpu_us_per_chunk},
                lambda t, c=c, n=n, v=v, route=route: load(
                    ctx, t, "throughput", v, shape, route, concurrency=c, requests=n, timeout=600
                ),
            )
            cps = Row("throughput", v, "chunks/s", "1/s", res["cps"], compare="ratio")
            d, tg = res["cps"].get("direct"), res["cps"].get("tidegate")
            if d and tg and tg >= 0.9 * d:
                cps.note = "within 10 % of the emulator's direct ceiling"
            cpu = Row("throughput", v, "CPU per chunk (direct: emulator's)", "µs", res["cpu"], compare="ratio")
            cpu.budget = f"≤ {limit:g} µs and LiteLLM/tidegate ≥ 30×"
            ok = check(res["cpu"].get("tidegate"), limit)
            lt = ratio(res["cpu"], "litellm", "tidegate")
            if ok is not None and lt is not None:
                ok = ok and lt >= 30.0
            cpu.ok = ok
            rows += [cps, cpu]
    return rows


def cost(ctx: Ctx) -> list[Row]:
    """Where a gateway's CPU goes at the 256-stream load: the same arrivals (256 in flight, 256 new/s)
    once with 1 paced chunk per stream and once with 50. CPU per request = the 1-chunk run's gateway
    CPU / streams; CPU per paced chunk = (50-chunk CPU − 1-chunk CPU) / (streams × 49). The direct
    column is the emulator's own. Passthrough and translated; the relay-ratio budgets: per paced chunk
    ≤ 1.2 × the relay's passthrough, translated ≤ 2 × (the relay cannot translate)."""
    n = 256 if ctx.quick else 768
    rows: list[Row] = []
    floor: float | None = None
    for route, limit in (("openai", 1.2), ("anthropic", 2.0)):
        kind = "passthrough" if route == "openai" else "translated"
        v = f"{kind}, {n} streams, 256 in flight, 256 new/s, 1 vs 50 chunks @ 20 ms"
        res = collect(
            ctx,
            "cost",
            v,
            {"req": lambda o: o["per_request_us"], "chunk": lambda o: o["per_chunk_us"]},
            lambda t, v=v, route=route: _cost_run(ctx, t, v, route, n),
        )
        chunk = Row("cost", v, "CPU per paced chunk (direct: emulator's)", "µs", res["chunk"], compare="ratio")
        if route == "openai":
            floor = res["chunk"].get("relay")
        own = res["chunk"].get("tidegate")
        chunk.budget = f"≤ {limit:g} × relay's passthrough"
        chunk.ok = check(own / floor if own is not None and floor else None, limit)
        if route != "openai" and own is not None and floor:
            chunk.note = f"÷ the relay's passthrough {floor:.1f} µs: ×{own / floor:.2f}"
        rows += [Row("cost", v, "CPU per request (direct: emulator's)", "µs", res["req"], compare="ratio"), chunk]
    return rows


def _cost_run(ctx: Ctx, t: Target, v: str, route: str, n: int) -> dict[str, Any] | None:
    def cpu_of(out: dict[str, Any]) -> float:
        w = out["watch"].get("gw") or out["watch"]["emu"]
        return float(w["cpu_s"])

    one = load(ctx, t, "cost", v + " (1 chunk)", "bench-1x20", route, concurrency=256, requests=n, ramp=256.0)
    many = load(ctx, t, "cost", v + " (50 chunks)", "bench-50x20", route, concurrency=256, requests=n, ramp=256.0)
    if one is None or many is None:
        return None
    c1, c50 = cpu_of(one), cpu_of(many)
    return {"per_request_us": c1 * 1e6 / n, "per_chunk_us": max(0.0, c50 - c1) * 1e6 / (n * 49)}


def capacity_plan(quick: bool) -> tuple[int, float, int, str]:
    """(streams, ramp per s, chunks per stream, model shape): every stream stays open until all are."""
    n, ramp, hold = (300, 300.0, 3) if quick else (5000, 500.0, 10)
    chunks = math.ceil(n / ramp) + hold
    return n, ramp, chunks, f"bench-{chunks}x1000"


def capacity(ctx: Ctx, keepalive_s: float) -> list[Row]:
    n, ramp, chunks, shape = capacity_plan(ctx.quick)
    v = f"{n} streams, 1 chunk/s, ramp {ramp:g}/s"

    def rss_per_stream(o: dict[str, Any]) -> float | None:
        w = o["watch"].get("gw") or o["watch"]["emu"]
        # peak growth over the most streams ever open at once: an upper bound per stream
        opened = o.get("max_open") or 0
        return (w["rss_peak_kb"] - w["rss_base_kb"]) / opened if opened else None

    def ka_ratio(o: dict[str, Any]) -> float | None:
        ka = o.get("keepalive_ms", {})
        return ka["max"] / (keepalive_s * 1000.0) if ka.get("n") else None

    res = collect(
        ctx,
        "capacity",
        v,
        {
            "done": lambda o: float(o.get("done", 0)),
            "max_open": lambda o: float(o.get("max_open", 0)),
            "rss": rss_per_stream,
            "ka": ka_ratio,
            "gap99": _p("gap_ms", "p99"),
        },
        lambda t: load(ctx, t, "capacity", v, shape, concurrency=n, ramp=ramp, timeout=chunks + n / ramp + 60),
        rounds=1,
    )
    rss = Row(
        "capacity", v, "RSS per open stream (direct: emulator's)", "KB", res["rss"], compare="ratio", budget="≤ 30 KB"
    )
    rss.ok = check(res["rss"].get("tidegate"), 30.0)
    ka = Row(
        "capacity",
        v,
        f"latest keep-alive / interval ({keepalive_s:g} s)",
        "×",
        res["ka"],
        compare="none",
        budget="≤ 1.5",
    )
    ka.ok = check(res["ka"].get("tidegate"), 1.5)
    done = Row("capacity", v, f"streams completed (of {n})", "", res["done"], compare="none")
    return [
        done,
        Row("capacity", v, "max open at once", "", res["max_open"], compare="none"),
        rss,
        ka,
        Row("capacity", v, "chunk gap p99 (paced 1000 ms)", "ms", res["gap99"]),
    ]


def complete(ctx: Ctx) -> list[Row]:
    rows: list[Row] = []
    shape = "bench-20x0"
    levels = [1, 8] if ctx.quick else [1, 4, 16, 64]
    duration = 1.5 if ctx.quick else 5.0
    best: dict[str, float | None] = {t.name: None for t in ctx.targets}
    for c in levels:
        v = f"non-stream, c={c}, {duration:g} s closed loop"
        res = collect(
            ctx,
            "complete",
            v,
            {"rps": lambda o: o.get("requests_per_s"), "p99": _p("latency_ms", "p99")},
            lambda t, c=c, v=v: load(
                ctx, t, "complete", v, shape, concurrency=c, mode="complete", duration=duration, timeout=duration + 60
            ),
        )
        rows += [
            Row("complete", v, "requests/s", "1/s", res["rps"], compare="ratio"),
            Row("complete", v, "latency p99", "ms", res["p99"]),
        ]
        for t, rps in res["rps"].items():
            p99 = res["p99"].get(t)
            if rps is not None and p99 is not None and p99 < 50.0:
                cur = best.get(t)
                best[t] = rps if cur is None else max(cur, rps)
    rows.append(Row("complete", "best level", "requests/s with p99 < 50 ms", "1/s", best, compare="ratio"))
    return rows


def store(ctx: Ctx) -> list[Row]:
    """Recorder cost: the same tidegate with its store on a SQLite file vs SQLite in memory.

    tidegate has no switch that turns the recorder off, so this isolates the store's I/O cost only.
    Every request carries a fresh Idempotency-Key: the worst case, where each frame and each canonical
    event is logged for resume and replay (without a key only the record is written). The same streams
    without a key are run too, and their ratio says what the per-chunk log costs in all (building it
    and writing it), on either store.
    `ctx.targets` are the two tidegate instances, named `store-file` and `store-memory`.
    """
    rows: list[Row] = []
    # 128 streams (8 waves of 16, ~1.5 s a run): 32 (two waves, < 1 s) left the ratio at the mercy of
    # one wave's start and end (x0.85-1.0 between runs of one commit)
    c, n = (4, 8) if ctx.quick else (16, 128)
    # At least 5 rounds of the keyed streams, whose ratio is the budget: one run's rounds swing by
    # +-5 % (x0.912 / 0.934 / 0.987 in one run, x0.793-1.053 in a slow hour), the width of the margin,
    # on a CPU per chunk that differs by 0.4 % (bench/ab.py of the same tree: x0.984)
    store_rounds = ctx.rounds if ctx.quick else max(ctx.rounds, 5)
    measured: dict[str, dict[str, float | None]] = {}
    for keyed in (True, False):
        v = f"passthrough{' + Idempotency-Key' if keyed else ', no Idempotency-Key'}, c={c}, 2000 chunks unpaced"
        res = collect(
            ctx,
            "store",
            v,
            {"cps": lambda o: o.get("content_per_s"), "cpu": cpu_us_per_chunk},
            lambda t, v=v, keyed=keyed: load(
                ctx, t, "store", v, "bench-2000x0", concurrency=c, requests=n, timeout=600, idempotency_keys=keyed
            ),
            rounds=store_rounds if keyed else None,
        )
        measured[v] = res["cps"]
        cps = Row("store", v, "chunks/s", "1/s", res["cps"], compare="ratio")
        if keyed:
            cps.budget = "file ≥ 0.95 × memory"
            cps.ok = check(ratio(res["cps"], "store-file", "store-memory"), 0.95, lower_is_better=False)
        rows += [cps, Row("store", v, "CPU per chunk", "µs", res["cpu"], compare="ratio")]
    with_key, without = measured.values()
    share = {t: ratio({"k": with_key.get(t), "n": without.get(t)}, "k", "n") for t in with_key}
    rows.append(
        Row("store", f"passthrough, c={c}, 2000 chunks unpaced", "chunks/s with key ÷ without", "×", share, "none")
    )
    duration = 2.0 if ctx.quick else 5.0
    v2 = f"non-stream + Idempotency-Key, c=8, {duration:g} s closed loop"
    res2 = collect(
        ctx,
        "store",
        v2,
        {"rps": lambda o: o.get("requests_per_s"), "p99": _p("latency_ms", "p99")},
        lambda t: load(
            ctx,
            t,
            "store",
            v2,
            "bench-20x0",
            concurrency=8,
            mode="complete",
            duration=duration,
            timeout=duration + 60,
            idempotency_keys=True,
        ),
    )
    rps = Row("store", v2, "requests/s", "1/s", res2["rps"], compare="ratio", budget="file ≥ 0.95 × memory")
    rps.ok = check(ratio(res2["rps"], "store-file", "store-memory"), 0.95, lower_is_better=False)
    rows += [rps, Row("store", v2, "latency p99", "ms", res2["p99"])]
    return rows


def busiest_worker_share(out: dict[str, Any]) -> float | None:
    """The busiest worker's share of all the workers' CPU time (1/N: an even split); None for one."""
    cpu = [w["cpu_s"] for name, w in out["watch"].items() if name.startswith("worker")]
    if len(cpu) < 2 or sum(cpu) < 0.05:
        return None
    return max(cpu) / sum(cpu)


def scale(ctx: Ctx) -> list[Row]:
    """`--workers 1` vs `--workers 2`, not pinned. `ctx.targets`: `workers-1`, `workers-2`.
    Two shared cores (the emulator and the load generator need one) cannot show throughput growing
    with workers; what they can show is whether the load is split evenly between the workers (the
    busiest one's share of their CPU) and whether a second worker costs more CPU per chunk. The
    kernel hashes each new connection to a worker's socket: c connections split like a coin tossed c
    times (16: 8 ± 2), which the share's budget leaves room for. The non-stream load keeps 16
    keep-alive connections: few connections are where one shared listening socket went wrong (one
    worker of two took 57-100 % of the CPU, docs/performance.md item 48)."""
    c, n = (16, 16) if ctx.quick else (64, 64)
    v = f"passthrough, c={c}, 2000 chunks unpaced, unpinned"
    res = collect(
        ctx,
        "scale",
        v,
        {"cps": lambda o: o.get("content_per_s"), "cpu": cpu_us_per_chunk, "share": busiest_worker_share},
        lambda t: load(ctx, t, "scale", v, "bench-2000x0", concurrency=c, requests=n, timeout=600, per_worker=True),
    )
    duration, c2 = 2.0 if ctx.quick else 5.0, 16
    v2 = f"non-stream, c={c2}, {duration:g} s closed loop, unpinned"
    res2 = collect(
        ctx,
        "scale",
        v2,
        {"share": busiest_worker_share},
        lambda t: load(
            ctx,
            t,
            "scale",
            v2,
            "bench-20x0",
            concurrency=c2,
            mode="complete",
            duration=duration,
            timeout=duration + 60,
            per_worker=True,
        ),
    )
    rows = [
        Row(
            "scale",
            v,
            "chunks/s",
            "1/s",
            res["cps"],
            compare="ratio",
            budget="near-linear in cores (not measurable with 2 shared cores)",
        ),
        Row("scale", v, "CPU per chunk", "µs", res["cpu"], compare="ratio"),
    ]
    for variant, got in ((v, res), (v2, res2)):
        share = Row(
            "scale",
            variant,
            "busiest worker's share of the workers' CPU",
            "",
            got["share"],
            budget="≤ 0.70 with 2 workers (0.5: even)",
        )
        share.ok = check(got["share"].get("workers-2"), 0.70, lower_is_better=True)
        rows.append(share)
    return rows
