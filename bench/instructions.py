"""Instructions per paced chunk and per stream, counted under valgrind's callgrind: a figure that
does not move with the hour, for judging changes of a few percent on the gateway's own work.

    .venv/bin/python bench/instructions.py                           # tidegate (src) and the plain relay
    .venv/bin/python bench/instructions.py --targets tidegate=/tmp/before/src,tidegate=src
    .venv/bin/python bench/instructions.py --targets tidegate --memory --top 30

Each target runs under `valgrind --tool=callgrind` pinned to CPU 0 (the emulator and the load
generator on CPU 1, as `bench/run.py` pins), with keyless streams of `--conc` at a time through the
emulator's paced shapes (`--delay` ms between chunks: one chunk per upstream read even at valgrind's
~50x slowdown). After a warm-up the counters are zeroed, `--streams` streams of the first chunk count
run and are dumped, then the same for the second: per chunk = the difference over the chunks added,
per stream = the first dump less its chunks. Only user-space instructions of the gateway's process
(every thread) are counted: the kernel's share of a syscall is not, nor is time spent waiting. Two
runs of one tree agree to ~0.3 % per chunk; time per instruction differs between code paths (an
exception built and dropped runs at many instructions per nanosecond), so confirm a change's time
with `bench/ab.py` or `bench/run.py --scenarios cost`. `--top N` lists the C functions whose own
instructions per chunk, then per stream, differ most between the first two targets (CPython's
interpreter, allocator, the extensions: the Python functions are inside `_PyEval_EvalFrameDefault`).
Needs `valgrind` (Debian: `apt install valgrind`).
"""

from __future__ import annotations

import argparse
import collections
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import gateways as gw

FN_LINE = re.compile(r"(c?fn)=\((\d+)\)(?: (.*))?")


def own_instructions(path: Path) -> collections.Counter[str]:
    """Each function's own instructions (not its callees') in a callgrind dump."""
    names: dict[str, str] = {}
    cost: collections.Counter[str] = collections.Counter()
    fn = ""
    skip_next = False
    for line in path.read_text(errors="replace").splitlines():
        if skip_next:  # the inclusive cost of the call named on the line before
            skip_next = False
            continue
        if line.startswith(("fn=", "cfn=")):
            m = FN_LINE.match(line)
            if m:
                if m.group(3):
                    names[m.group(2)] = m.group(3)
                if m.group(1) == "fn":
                    fn = names.get(m.group(2), m.group(2))
            continue
        if line.startswith("calls="):
            skip_next = True
            continue
        if line[:1].isdigit() or line[:1] in "+-*":
            parts = line.split()
            if len(parts) >= 2 and fn:
                cost[fn] += int(parts[1])
    return cost


def total_instructions(path: Path) -> int:
    for line in path.read_text(errors="replace").splitlines():
        if line.startswith(("summary:", "totals:")):
            return int(line.split()[1])
    raise RuntimeError(f"no totals in {path}")


def start(target: str, src: str, work: Path, emu_url: str, shapes: list[str], memory: bool) -> gw.Service:
    env = gw.clean_env()
    env["PYTHONPATH"] = str(Path(src).resolve())
    valgrind = ["valgrind", "--tool=callgrind", f"--callgrind-out-file={work / 'callgrind.%p'}", "--dump-instr=no"]
    port = gw.free_port()
    if target == "tidegate":
        env["TIDEGATE_MASTER_KEY"] = gw.TIDEGATE_KEY
        store = "sqlite:///:memory:" if memory else f"sqlite:///{work / 'tidegate.db'}"
        config = work / "tidegate.toml"
        config.write_text(gw.tidegate_config(emu_url, shapes, store, 10.0, 1))
        cmd = [*gw.pin("0"), *valgrind, gw.PY, "-m", "tidegate", "serve", "--config", str(config), "--port", str(port)]
        key, ready = gw.TIDEGATE_KEY, "/readyz"
    else:
        cmd = [*gw.pin("0"), *valgrind, gw.PY, str(gw.BENCH / "plain_relay.py"), "--port", str(port)]
        cmd += ["--upstream", emu_url]
        key, ready = "none", "/health"
    proc, log = gw._spawn(target, cmd, work, env)
    svc = gw.Service(target, proc, f"http://127.0.0.1:{port}", key, log)
    svc.wait_ready(ready, 300)
    return svc


def load(svc: gw.Service, model: str, streams: int, conc: int) -> None:
    cmd = [*gw.pin("1"), gw.PY, str(gw.BENCH / "load.py"), "--url", svc.url, "--model", model, "--key", svc.key]
    cmd += ["--concurrency", str(conc), "--requests", str(streams), "--timeout", "900"]
    out = subprocess.run(cmd, capture_output=True, text=True, env=gw.clean_env(), check=True)
    result = json.loads(out.stdout)
    if result["error_count"] or result["ok"] != streams:
        raise RuntimeError(f"{svc.name}: {result['ok']} of {streams} streams complete, errors {result['errors']}")


def dump(pid: int, work: Path, label: str) -> Path:
    before = set(work.glob("callgrind.*"))
    subprocess.run(["callgrind_control", "-d", label, str(pid)], capture_output=True, check=True)
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        new = set(work.glob("callgrind.*")) - before
        if new:
            time.sleep(0.5)  # written whole before the next step
            return max(new, key=os.path.getmtime)
        time.sleep(0.1)
    raise RuntimeError("callgrind wrote no dump")


@dataclass
class Measurement:
    target: str
    src: str
    per_chunk: float
    per_stream: float
    dumps: list[Path]


def measure(target: str, src: str, args: argparse.Namespace, emu_url: str, root: Path) -> Measurement:
    work = Path(tempfile.mkdtemp(prefix=f"{target}-", dir=root))
    counts = [int(c) for c in args.chunks.split(",")]
    shapes = [f"bench-{c}x{args.delay}" for c in counts]
    svc = start(target, src, work, emu_url, shapes, args.memory)
    try:
        load(svc, shapes[0], 20, args.conc)
        load(svc, shapes[1], 8, args.conc)
        dumps = []
        for count, shape in zip(counts, shapes, strict=True):
            subprocess.run(["callgrind_control", "-z", str(svc.pid)], capture_output=True, check=True)
            load(svc, shape, args.streams, args.conc)
            time.sleep(0.5)
            dumps.append(dump(svc.pid, work, f"chunks-{count}"))
    finally:
        svc.stop()
    totals = [total_instructions(d) for d in dumps]
    per_chunk = (totals[1] - totals[0]) / (args.streams * (counts[1] - counts[0]))
    per_stream = totals[0] / args.streams - counts[0] * per_chunk
    return Measurement(target, src, per_chunk, per_stream, dumps)


def own_per_chunk(row: Measurement, chunks: int) -> dict[str, float]:
    first, second = (own_instructions(d) for d in row.dumps)
    return {fn: (second.get(fn, 0) - first.get(fn, 0)) / chunks for fn in set(first) | set(second)}


def own_per_stream(row: Measurement, per_chunk: dict[str, float], streams: int, chunks: int) -> dict[str, float]:
    """Each function's own instructions per stream: the first dump's, less its streams' chunks."""
    first = own_instructions(row.dumps[0])
    return {fn: first.get(fn, 0) / streams - chunks * per_chunk.get(fn, 0.0) for fn in set(first) | set(per_chunk)}


def print_top(title: str, a_fns: dict[str, float], b_fns: dict[str, float], top: int) -> None:
    names = sorted(set(a_fns) | set(b_fns), key=lambda n: -abs(a_fns.get(n, 0) - b_fns.get(n, 0)))
    print(f"{'first':>9} {'second':>9} {'diff':>9}  own instructions per {title}")
    for name in names[:top]:
        x, y = a_fns.get(name, 0.0), b_fns.get(name, 0.0)
        print(f"{x:9.0f} {y:9.0f} {x - y:+9.0f}  {name[:100]}")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--targets", default="tidegate,relay", help="comma list of tidegate[=SRC] and relay")
    ap.add_argument("--chunks", default="4,44", help="the two chunk counts per stream")
    ap.add_argument("--delay", default="30", help="ms between the emulator's chunks")
    ap.add_argument("--conc", type=int, default=4)
    ap.add_argument("--streams", type=int, default=40)
    ap.add_argument("--memory", action="store_true", help="tidegate's store in memory (a SQLite file otherwise)")
    ap.add_argument("--top", type=int, default=0, help="list the N functions that differ most (first two targets)")
    args = ap.parse_args()
    if not shutil.which("valgrind") or not shutil.which("callgrind_control"):
        sys.exit("valgrind is not installed (Debian: apt install valgrind)")
    root = Path(tempfile.mkdtemp(prefix="tidegate-instructions-"))
    emu = gw.start_emulator(root, "1")
    rows: list[Measurement] = []
    try:
        for spec in args.targets.split(","):
            target, _, src = spec.partition("=")
            if target not in ("tidegate", "relay"):
                sys.exit(f"unknown target {target!r}")
            row = measure(target, src or str(gw.ROOT / "src"), args, emu.url, root)
            rows.append(row)
            print(f"{target:9} {row.src:28} {row.per_chunk:>9,.0f} per chunk {row.per_stream:>11,.0f} per stream")
    finally:
        emu.stop()
    if len(rows) >= 2:
        a, b = rows[0], rows[1]
        ratios = f"x{a.per_chunk / b.per_chunk:.3f} per chunk, x{a.per_stream / b.per_stream:.3f} per stream"
        print(f"first / second: {ratios}")
    if args.top and len(rows) >= 2:
        first_count, second_count = (int(c) for c in args.chunks.split(","))
        added = args.streams * (second_count - first_count)
        a_fns, b_fns = own_per_chunk(rows[0], added), own_per_chunk(rows[1], added)
        print_top("chunk", a_fns, b_fns, args.top)
        a_str = own_per_stream(rows[0], a_fns, args.streams, first_count)
        b_str = own_per_stream(rows[1], b_fns, args.streams, first_count)
        print_top("stream", a_str, b_str, args.top)
    print(f"dumps in {root}")


if __name__ == "__main__":
    main()
