"""Benchmark tidegate against the upstream directly and against LiteLLM proxy (issue 7).

    .venv/bin/python bench/run.py            # every scenario, 3 interleaved rounds (make bench)
    .venv/bin/python bench/run.py --quick    # a smoke run, < 2 minutes
    .venv/bin/python bench/run.py --scenarios ttft,throughput --targets direct,tidegate

Starts bench/upstream.py, tidegate and LiteLLM (installed into bench/.venv-litellm on first use),
pins the gateway to CPU 0 and the emulator + load generator to CPU 1, runs the scenarios, writes
bench/results/<date>.json and .md, prints the ratios and refreshes bench/README.md's latest table.
Loopback only.
"""

from __future__ import annotations

import argparse
import os
import platform
import resource
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

import gateways as gw
import orjson
import pyspy
import report
import scenarios as sc
from procstat import core_shares, core_ticks

ALL = ("capacity", "ttft", "gaps", "cost", "pace", "throughput", "complete", "store", "scale")
MAIN = ("capacity", "ttft", "gaps", "cost", "pace", "throughput", "complete")
KEEPALIVE_S = 0.75
SHAPES = ["bench-1x0", "bench-1x20", "bench-20x0", "bench-50x20", "bench-64x20", "bench-2000x1", "bench-2000x0"]


def raise_nofile() -> int:
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    target = hard if hard != resource.RLIM_INFINITY else 65536
    if target > soft:
        resource.setrlimit(resource.RLIMIT_NOFILE, (target, hard))
    return target


def probe(svc: gw.Service, target: sc.Target, notes: list[str]) -> str:
    """Which routes answer; a route that does not is left out of that target's runs (and noted)."""
    working = set()
    for route, model in (("openai", "bench-1x0"), ("anthropic", "anth/bench-1x0")):
        body = orjson.dumps({"model": model, "messages": [{"role": "user", "content": "hi"}], "max_tokens": 16})
        status, data = gw.post_json(svc.url + "/v1/chat/completions", body, svc.key)
        if status == 200:
            working.add(route)
            # warm up the stream path too
            gw.post_json(
                svc.url + "/v1/chat/completions",
                orjson.dumps({"model": model, "messages": [{"role": "user", "content": "hi"}], "stream": True}),
                svc.key,
            )
        else:
            notes.append(
                f"{target.name}: route {route} unavailable (HTTP {status}: {data[:200].decode(errors='replace')})"
            )
    target.routes = working
    return "+".join(sorted(working)) or "unavailable"


def litellm_version() -> str:
    meta = gw.LITELLM_VENV / "lib"
    for p in meta.glob("python*/site-packages/litellm-*.dist-info"):
        return p.name.removeprefix("litellm-").removesuffix(".dist-info")
    return "not installed"


def git_rev() -> str:
    try:
        rev = subprocess.run(
            ["git", "-C", str(gw.ROOT), "rev-parse", "--short", "HEAD"], capture_output=True, text=True, timeout=10
        ).stdout.strip()
        dirty = subprocess.run(
            ["git", "-C", str(gw.ROOT), "status", "--porcelain", "src"], capture_output=True, text=True, timeout=10
        ).stdout.strip()
        return rev + ("+dirty src" if dirty else "")
    except (OSError, subprocess.SubprocessError):
        return "unknown"


def profile_tidegate(ctx: sc.Ctx, target: sc.Target, stamp: str, workdir: Path, results: Path) -> list[str]:
    """py-spy record of tidegate during passthrough and translated unpaced streams."""
    written: list[str] = []
    for route in sorted(target.routes):
        raw = workdir / f"pyspy-{route}.txt"
        duration = 8 if ctx.quick else 20
        proc = pyspy.start(target.service.pid, raw, duration)
        if proc is None:
            ctx.notes.append("profile: py-spy not found in bench/.venv-litellm")
            return written
        time.sleep(1.0)
        deadline = time.monotonic() + duration - 1.5
        while time.monotonic() < deadline:
            sc.load(ctx, target, "profile", route, "bench-2000x0", route, concurrency=4, requests=4, timeout=120)
        _, err = proc.communicate(timeout=duration + 60)
        if not raw.exists():
            ctx.notes.append(f"profile {route}: py-spy wrote nothing: {err.decode(errors='replace')[-300:]}")
            continue
        out = results / f"{stamp}-pyspy-tidegate-{route}.txt"
        out.write_text(
            f"py-spy record of tidegate, {route} route, 4 × 2000 unpaced chunks in a loop\n\n" + pyspy.summarise(raw)
        )
        written.append(out.name)
    ctx.runs[:] = [r for r in ctx.runs if r["scenario"] != "profile"]
    return written


QUIET_CHECK_S = 3.0


def cores_before_run() -> dict[str, dict[str, float]]:
    """Each core's busy and stolen share over `QUIET_CHECK_S` seconds before anything starts."""
    before = core_ticks()
    time.sleep(QUIET_CHECK_S)
    return core_shares(before, core_ticks())


def contended(shares: dict[str, dict[str, float]]) -> bool:
    """Other work on a core before the run (a fifth of it or more), or the hypervisor taking 5 %."""
    return any(c["busy"] >= 0.2 or c["steal"] >= 0.05 for c in shares.values())


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--quick", action="store_true", help="scaled-down smoke run (< 2 minutes)")
    ap.add_argument("--scenarios", default=",".join(ALL), help=f"comma list of {','.join(ALL)}")
    ap.add_argument(
        "--targets",
        default="direct,relay,tidegate,litellm",
        help="comma list of direct,relay,tidegate,litellm (relay: the issue's plain ASGI relay, bench/plain_relay.py)",
    )
    ap.add_argument("--rounds", type=int, default=0, help="interleaved rounds (default 3, --quick 1)")
    ap.add_argument("--workers", type=int, default=1, help="worker processes for tidegate and LiteLLM")
    ap.add_argument("--no-pin", action="store_true", help="do not pin processes to CPUs")
    ap.add_argument("--profile", action="store_true", help="py-spy profile of tidegate's relay hot path")
    ap.add_argument("--no-readme", action="store_true", help="do not refresh bench/README.md")
    ap.add_argument("--results", default=str(gw.BENCH / "results"))
    args = ap.parse_args(argv)
    chosen = [s.strip() for s in args.scenarios.split(",") if s.strip()]
    unknown = set(chosen) - set(ALL)
    if unknown:
        ap.error(f"unknown scenarios: {', '.join(sorted(unknown))}")
    wanted = [t.strip() for t in args.targets.split(",") if t.strip()]
    rounds = args.rounds or (1 if args.quick else 3)
    cpus = os.cpu_count() or 1
    pin_ok = not args.no_pin and cpus >= 2
    gw_cores, load_cores = ("0", "1") if pin_ok else (None, None)
    raise_nofile()

    stamp = time.strftime("%Y-%m-%d_%H%M%S") + ("-quick" if args.quick else "")
    results = Path(args.results)
    workdir = results / "work" / stamp
    workdir.mkdir(parents=True, exist_ok=True)
    la_start = os.getloadavg()
    before_run = cores_before_run()
    notes: list[str] = []
    services: list[gw.Service] = []
    main_rows: list[sc.Row] = []
    extra_rows: list[sc.Row] = []
    runs: list[dict[str, Any]] = []
    availability: dict[str, str] = {}
    profiles: list[str] = []
    t_begin = time.monotonic()
    try:
        emu = gw.start_emulator(workdir, load_cores)
        services.append(emu)
        targets: list[sc.Target] = []
        if "direct" in wanted:
            targets.append(sc.Target("direct", emu, gateway=False))
            availability["direct"] = "emulator"
        if "relay" in wanted:
            rl = gw.start_plain_relay(workdir, emu.url, gw_cores)
            services.append(rl)
            t = sc.Target("relay", rl, gateway=True)
            probe(rl, t, notes)
            t.routes &= {"openai"}  # it copies bytes: an Anthropic stream would not be translated
            availability["relay"] = "openai passthrough only (bench/plain_relay.py)"
            targets.append(t)
        if "tidegate" in wanted:
            tg = gw.start_tidegate(
                workdir,
                "tidegate",
                emu.url,
                SHAPES + capacity_shapes(args.quick),
                gw_cores,
                workers=args.workers,
                keepalive_s=KEEPALIVE_S,
            )
            services.append(tg)
            t = sc.Target("tidegate", tg, gateway=True)
            availability["tidegate"] = probe(tg, t, notes)
            targets.append(t)
        if "litellm" in wanted:
            ll = gw.start_litellm(workdir, emu.url, SHAPES + capacity_shapes(args.quick), gw_cores, args.workers)
            services.append(ll)
            t = sc.Target("litellm", ll, gateway=True)
            availability["litellm"] = probe(ll, t, notes)
            targets.append(t)
        ctx = sc.Ctx(emu, targets, args.quick, rounds, load_cores, notes=notes, gateway_cores=gw_cores)
        for name in chosen:
            if name not in MAIN:
                continue
            print(f"[{time.monotonic() - t_begin:6.1f} s] scenario {name} ...", flush=True)
            if name == "capacity":
                main_rows += sc.capacity(ctx, KEEPALIVE_S)
            else:
                main_rows += getattr(sc, name)(ctx)
        runs += ctx.runs
        tg_target = next((t for t in targets if t.name == "tidegate"), None)
        if args.profile and tg_target is not None and tg_target.routes:
            print(f"[{time.monotonic() - t_begin:6.1f} s] profiling tidegate with py-spy ...", flush=True)
            profiles = profile_tidegate(ctx, tg_target, stamp, workdir, results)
        if "store" in chosen and "tidegate" in wanted:
            print(f"[{time.monotonic() - t_begin:6.1f} s] scenario store ...", flush=True)
            a = gw.start_tidegate(workdir, "store-file", emu.url, SHAPES, gw_cores, workers=args.workers)
            services.append(a)
            b = gw.start_tidegate(
                workdir, "store-memory", emu.url, SHAPES, gw_cores, workers=args.workers, memory_store=True
            )
            services.append(b)
            ta, tb = sc.Target("store-file", a, True), sc.Target("store-memory", b, True)
            probe(a, ta, notes)
            probe(b, tb, notes)
            sctx = sc.Ctx(emu, [ta, tb], args.quick, rounds, load_cores, notes=notes, gateway_cores=gw_cores)
            extra_rows += sc.store(sctx)
            runs += sctx.runs
            a.stop()
            b.stop()
        if "scale" in chosen and "tidegate" in wanted:
            print(f"[{time.monotonic() - t_begin:6.1f} s] scenario scale ...", flush=True)
            w1 = gw.start_tidegate(workdir, "workers-1", emu.url, SHAPES, None, workers=1)
            services.append(w1)
            w2 = gw.start_tidegate(workdir, "workers-2", emu.url, SHAPES, None, workers=2)
            services.append(w2)
            t1, t2 = sc.Target("workers-1", w1, True), sc.Target("workers-2", w2, True)
            probe(w1, t1, notes)
            probe(w2, t2, notes)
            # emulator + load are pinned to CPU 1 in the other scenarios; here nothing is pinned
            sctx = sc.Ctx(emu, [t1, t2], args.quick, rounds, None, notes=notes)
            extra_rows += sc.scale(sctx)
            runs += sctx.runs
    finally:
        for svc in reversed(services):
            svc.stop()
    la_end = os.getloadavg()
    meta = {
        "date": time.strftime("%Y-%m-%d %H:%M:%S %Z"),
        "quick": args.quick,
        "cpus": cpus,
        "loadavg_start": [round(x, 2) for x in la_start],
        "loadavg_end": [round(x, 2) for x in la_end],
        # what used the cores in the seconds before the run (the 1-minute load average at its start
        # also counts work that has just ended; at its end, the benchmark's own processes)
        "cores_before_run": before_run,
        "cores_before_run_s": QUIET_CHECK_S,
        "contended": contended(before_run),
        "gateway_cores": gw_cores,
        "load_cores": load_cores,
        "rounds": rounds,
        "workers": args.workers,
        "tidegate_rev": git_rev(),
        "litellm_version": litellm_version() if "litellm" in wanted else "not run",
        "availability": availability,
        "python": platform.python_version(),
        "platform": platform.platform(),
        "elapsed_s": round(time.monotonic() - t_begin, 1),
        "scenarios": chosen,
        "profiles": profiles,
    }
    md = report.markdown(meta, main_rows, extra_rows, notes)
    data = {
        "meta": meta,
        "rows": [report.row_dict(r) for r in main_rows + extra_rows],
        "notes": notes,
        "runs": runs,
    }
    jpath, mpath = report.write_results(results / stamp, data, md)
    print()
    print(report.ratios_text(main_rows + extra_rows))
    print()
    print(md)
    print(f"wrote {jpath} and {mpath} in {meta['elapsed_s']} s")
    if not args.no_readme:
        report.update_readme(gw.BENCH / "README.md", md, mpath.name)
    return 0


def capacity_shapes(quick: bool) -> list[str]:
    return [sc.capacity_plan(quick)[3]]


if __name__ == "__main__":
    sys.exit(main())
