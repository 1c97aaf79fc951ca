"""Benchmark tidegate against the upstream directly and against LiteLLM proxy.

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

import deployed as dp
import doors
import gateways as gw
import orjson
import pyspy
import report
import scenarios as sc
from procstat import core_shares, core_ticks

# every scenario, in the order a run takes them; DEFAULT is `make bench` (the relay-ratio budgets)
ALL = (
    "capacity", "ttft", "burst", "gaps", "throughput", "newstreams", "cost", "pace", "complete",
    "deployed", "store", "scale", "rss", "doors",
)  # fmt: skip
DEFAULT = ("capacity", "ttft", "burst", "gaps", "throughput", "newstreams", "cost", "deployed", "rss")
MAIN = ("capacity", "ttft", "burst", "gaps", "throughput", "newstreams", "cost", "pace", "complete")
KEEPALIVE_S = 0.75  # the capacity scenario's: every silent second of its 1-chunk-a-second streams has one
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


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--quick", action="store_true", help="scaled-down smoke run (a few minutes)")
    ap.add_argument(
        "--scenarios", default=",".join(DEFAULT), help=f"comma list of {','.join(ALL)} (default: {','.join(DEFAULT)})"
    )
    ap.add_argument(
        "--targets",
        default="direct,relay,tidegate",
        help="comma list of direct,relay,tidegate,litellm (relay: the plain ASGI relay, bench/plain_relay.py)",
    )
    ap.add_argument("--rounds", type=int, default=0, help="interleaved rounds (default 3, --quick 1)")
    ap.add_argument("--workers", type=int, default=1, help="worker processes for tidegate and LiteLLM")
    ap.add_argument("--no-pin", action="store_true", help="do not pin processes to CPUs")
    ap.add_argument("--profile", action="store_true", help="py-spy profile of tidegate's relay hot path")
    ap.add_argument("--no-readme", action="store_true", help="do not refresh bench/README.md")
    ap.add_argument("--results", default=str(gw.BENCH / "results"))
    args = ap.parse_args(argv)
    args.chosen = [s.strip() for s in args.scenarios.split(",") if s.strip()]
    unknown = set(args.chosen) - set(ALL)
    if unknown:
        ap.error(f"unknown scenarios: {', '.join(sorted(unknown))}")
    args.wanted = [t.strip() for t in args.targets.split(",") if t.strip()]
    args.rounds = args.rounds or (1 if args.quick else 3)
    return args


class Bench:
    """One run: the processes it started (stopped at the end, newest first) and what it measured."""

    def __init__(self, args: argparse.Namespace, workdir: Path) -> None:
        self.args = args
        self.workdir = workdir
        pin_ok = not args.no_pin and (os.cpu_count() or 1) >= 2
        self.gw_cores, self.load_cores = ("0", "1") if pin_ok else (None, None)
        self.notes: list[str] = []
        self.services: list[gw.Service] = []
        self.main_rows: list[sc.Row] = []
        self.extra_rows: list[sc.Row] = []
        self.runs: list[dict[str, Any]] = []
        self.availability: dict[str, str] = {}
        self.profiles: list[str] = []
        self.t_begin = time.monotonic()

    def say(self, what: str) -> None:
        print(f"[{time.monotonic() - self.t_begin:6.1f} s] {what} ...", flush=True)

    def started(self, svc: gw.Service) -> gw.Service:
        self.services.append(svc)
        return svc

    def ctx(self, targets: list[sc.Target], load_cores: str | None = "pinned") -> sc.Ctx:
        cores = self.load_cores if load_cores == "pinned" else load_cores
        gw_cores = self.gw_cores if load_cores == "pinned" else None
        return sc.Ctx(
            self.emu, targets, self.args.quick, self.args.rounds, cores, self.runs, self.notes, gateway_cores=gw_cores
        )

    def tidegate(self, name: str, label: str = "", **options: Any) -> sc.Target:
        """A tidegate started with `options` (gateways.start_tidegate's), its files named `name`, its
        column `label` (default: `name`)."""
        shapes = options.pop("shapes", SHAPES)
        svc = gw.start_tidegate(
            self.workdir, name, self.emu.url, shapes, self.gw_cores, workers=self.args.workers, **options
        )
        self.started(svc)
        target = sc.Target(label or name, svc, True)
        probe(svc, target, self.notes)
        return target

    def start_targets(self) -> list[sc.Target]:
        self.emu = self.started(gw.start_emulator(self.workdir, self.load_cores))
        targets: list[sc.Target] = []
        if "direct" in self.args.wanted:
            targets.append(sc.Target("direct", self.emu, gateway=False))
            self.availability["direct"] = "emulator"
        if "relay" in self.args.wanted:
            rl = self.started(gw.start_plain_relay(self.workdir, self.emu.url, self.gw_cores))
            t = sc.Target("relay", rl, gateway=True)
            probe(rl, t, self.notes)
            t.routes &= {"openai"}  # it copies bytes: an Anthropic stream would not be translated
            self.availability["relay"] = "openai passthrough only (bench/plain_relay.py)"
            targets.append(t)
        if "tidegate" in self.args.wanted:
            t = self.tidegate("tidegate")
            self.availability["tidegate"] = "+".join(sorted(t.routes)) + ", the default limits and keep-alive"
            targets.append(t)
        if "litellm" in self.args.wanted:
            shapes = SHAPES + capacity_shapes(self.args.quick)
            ll = self.started(gw.start_litellm(self.workdir, self.emu.url, shapes, self.gw_cores, self.args.workers))
            t = sc.Target("litellm", ll, gateway=True)
            self.availability["litellm"] = probe(ll, t, self.notes)
            targets.append(t)
        return targets

    def capacity(self, targets: list[sc.Target]) -> list[sc.Row]:
        """5,000 open streams need more than the default connection limits (an operator's setting), and
        a short keep-alive interval so that every silent second carries one: a tidegate of its own."""
        chosen = [t for t in targets if t.name != "tidegate"]
        own = None
        if len(chosen) < len(targets):
            shapes = SHAPES + capacity_shapes(self.args.quick)
            own = self.tidegate("tidegate-5k", "tidegate", shapes=shapes, raise_limits=True, keepalive_s=KEEPALIVE_S)
            chosen.append(own)
        try:
            return sc.capacity(self.ctx(chosen), KEEPALIVE_S)
        finally:
            if own is not None:
                own.service.stop()

    def deployed(self, targets: list[sc.Target]) -> list[sc.Row]:
        floor = [t for t in targets if t.name in ("relay", "tidegate")]
        runs: list[dp.Deployed] = []
        try:
            for store in dp.STORES[1:]:
                runs.append(dp.start_bare(self.workdir, store, self.emu.url, SHAPES, self.gw_cores))
            for store in dp.STORES:
                runs.append(
                    dp.start_deployed(self.workdir, store, self.emu.url, SHAPES, self.gw_cores, self.load_cores)
                )
            extra = [sc.Target(d.name, d.service, True, routes={"openai"}) for d in runs]
            return dp.deployed(self.ctx(floor + extra), runs)
        finally:
            for d in runs:
                d.stop()

    def scenario(self, name: str, targets: list[sc.Target]) -> None:
        self.say(f"scenario {name}")
        if name in MAIN:
            if name == "capacity":
                self.main_rows += self.capacity(targets)
            else:
                module = dp if name in ("burst", "newstreams") else sc
                self.main_rows += getattr(module, name)(self.ctx(targets))
        elif name == "deployed":
            self.extra_rows += self.deployed(targets)
        elif name == "doors":
            self.extra_rows += doors.doors(self.ctx(targets))
        elif name == "rss":
            rss_ctx = self.ctx([t for t in targets if t.name == "direct"])
            self.extra_rows += dp.rss(rss_ctx, self.workdir, self.emu.url, SHAPES, self.gw_cores)
        elif name == "store":
            a = self.tidegate("store-file")
            b = self.tidegate("store-memory", memory_store=True)
            self.extra_rows += sc.store(self.ctx([a, b]))
            a.service.stop()
            b.service.stop()
        elif name == "scale":
            w1 = self.started(gw.start_tidegate(self.workdir, "workers-1", self.emu.url, SHAPES, None, workers=1))
            w2 = self.started(gw.start_tidegate(self.workdir, "workers-2", self.emu.url, SHAPES, None, workers=2))
            t1, t2 = sc.Target("workers-1", w1, True), sc.Target("workers-2", w2, True)
            probe(w1, t1, self.notes)
            probe(w2, t2, self.notes)
            # emulator + load are pinned to CPU 1 in the other scenarios; here nothing is pinned
            self.extra_rows += sc.scale(self.ctx([t1, t2], load_cores=None))

    def run(self, stamp: str, results: Path) -> None:
        try:
            targets = self.start_targets()
            for name in [n for n in ALL if n in self.args.chosen]:
                if name in ("store", "scale", "deployed") and "tidegate" not in self.args.wanted:
                    continue
                self.scenario(name, targets)
            tg_target = next((t for t in targets if t.name == "tidegate"), None)
            if self.args.profile and tg_target is not None and tg_target.routes:
                self.say("profiling tidegate with py-spy")
                ctx = self.ctx(targets)
                self.profiles = profile_tidegate(ctx, tg_target, stamp, self.workdir, results)
        finally:
            for svc in reversed(self.services):
                svc.stop()


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    raise_nofile()
    stamp = time.strftime("%Y-%m-%d_%H%M%S") + ("-quick" if args.quick else "")
    results = Path(args.results)
    workdir = results / "work" / stamp
    workdir.mkdir(parents=True, exist_ok=True)
    la_start = os.getloadavg()
    before_run = cores_before_run()
    bench = Bench(args, workdir)
    bench.run(stamp, results)
    meta = {
        "date": time.strftime("%Y-%m-%d %H:%M:%S %Z"),
        "quick": args.quick,
        "cpus": os.cpu_count() or 1,
        "loadavg_start": [round(x, 2) for x in la_start],
        "loadavg_end": [round(x, 2) for x in os.getloadavg()],
        # what used the cores in the seconds before the run (the 1-minute load average at its start
        # also counts work that has just ended; at its end, the benchmark's own processes)
        "cores_before_run": before_run,
        "cores_before_run_s": QUIET_CHECK_S,
        "contended": contended(before_run),
        "gateway_cores": bench.gw_cores,
        "load_cores": bench.load_cores,
        "rounds": args.rounds,
        "workers": args.workers,
        "tidegate_rev": git_rev(),
        "litellm_version": litellm_version() if "litellm" in args.wanted else "not run",
        "availability": bench.availability,
        "python": platform.python_version(),
        "platform": platform.platform(),
        "elapsed_s": round(time.monotonic() - bench.t_begin, 1),
        "scenarios": args.chosen,
        "profiles": bench.profiles,
    }
    rows = bench.main_rows + bench.extra_rows
    md = report.markdown(meta, bench.main_rows, bench.extra_rows, bench.notes)
    data = {"meta": meta, "rows": [report.row_dict(r) for r in rows], "notes": bench.notes, "runs": bench.runs}
    jpath, mpath = report.write_results(results / stamp, data, md)
    print()
    print(report.ratios_text(rows))
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
