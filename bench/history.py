"""Every full run in `bench/results/` on one line each: the budgets' figures side by side, and the hour.

    .venv/bin/python bench/history.py            # a markdown table, oldest first
    .venv/bin/python bench/history.py --since 2026-12-03

A full run is a `bench/run.py` result of every scenario of the absolute set or of the relay-ratio (`make
bench` since 2026-12-07; not `--quick`, not a partial `--scenarios` run). Figures are tidegate's,
added to direct (`+` ms) or against direct / the in-memory store / the plain relay (`×`), with the
plain relay's beside them where the run had it (`tidegate / relay`). "Emulator µs" is the emulator's
own CPU per request in the cost scenario: the same code on the same core, so it says how fast the
hour was (65–120 µs in the runs so far; the budgets that move with the hour are the TTFT ones).
"Missed" lists the budgets a run did not meet. Reads the JSON files only; runs nothing.
"""

from __future__ import annotations

import argparse
import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

RESULTS = Path(__file__).resolve().parent / "results"
# a full run of the absolute scenarios (until 2026-12-05), or of the relay-ratio (`make bench` since)
FULL = {"capacity", "ttft", "gaps", "cost", "pace", "throughput", "complete", "store"}
FULL_52 = {"capacity", "ttft", "burst", "gaps", "throughput", "newstreams", "cost", "deployed", "rss"}

Row = dict[str, Any]


def _row(rows: list[Row], scenario: str, variant_start: str, metric_start: str) -> Row | None:
    for row in rows:
        if (
            row["scenario"] == scenario
            and row["variant"].startswith(variant_start)
            and row["metric"].startswith(metric_start)
        ):
            return row
    return None


def _value(row: Row | None, target: str) -> float | None:
    if row is None:
        return None
    value = row["values"].get(target)
    return None if value is None else float(value)


def _signed(ms: float) -> str:
    return f"{ms:+.2f}" if round(ms, 2) != 0 else "+0.00"


def _added(rows: list[Row], scenario: str, variant: str, metric: str) -> str:
    row = _row(rows, scenario, variant, metric)
    direct, tidegate, relay = _value(row, "direct"), _value(row, "tidegate"), _value(row, "relay")
    if direct is None or tidegate is None:
        return "—"
    text = _signed(tidegate - direct)
    return text + (f" / {_signed(relay - direct)}" if relay is not None else "")


def _store(rows: list[Row], variant: str) -> str:
    row = _row(rows, "store", variant, "")
    file, memory = _value(row, "store-file"), _value(row, "store-memory")
    return "—" if file is None or not memory else f"×{file / memory:.3f}"


def _per_stream(rows: list[Row]) -> str:
    # the absolute runs: the cost scenario's, at 256 in flight; the relay-ratio: one-chunk streams, closed loop
    row = _row(rows, "cost", "", "CPU per request") or _row(rows, "newstreams", "", "CPU per new stream")
    tidegate, relay = _value(row, "tidegate"), _value(row, "relay")
    if tidegate is None:
        return "—"
    return f"{tidegate:,.0f}" + (f" / {relay:,.0f}" if relay is not None else "")


def _of_relay(rows: list[Row], scenario: str, variant: str, metric: str) -> str:
    row = _row(rows, scenario, variant, metric)
    tidegate, relay = _value(row, "tidegate"), _value(row, "relay")
    return "—" if tidegate is None or not relay else f"×{tidegate / relay:.2f}"


def _emulator(rows: list[Row]) -> str:
    direct = _value(_row(rows, "cost", "", "CPU per request"), "direct")
    return "—" if direct is None else f"{direct:.0f}"


def _missed(rows: list[Row]) -> str:
    short = {
        ("ttft", "c=1"): "TTFT c=1",
        ("ttft", "c=256"): "TTFT p99 256",
        ("gaps", ""): "gap p99",
        ("pace", ""): "pace",
        ("capacity", ""): "capacity",
        ("throughput", ""): "CPU/chunk",
        ("store", "passthrough"): "store streams",
        ("store", "non-stream"): "store non-stream",
        ("scale", ""): "workers",
        ("burst", ""): "burst",
        ("newstreams", ""): "CPU/new stream",
        ("deployed", ""): "as deployed",
        ("rss", ""): "RSS",
    }
    missed: list[str] = []
    for row in rows:
        if row.get("ok") is not False:
            continue
        name = next(
            (v for (s, start), v in short.items() if row["scenario"] == s and row["variant"].startswith(start)),
            row["scenario"],
        )
        if name not in missed:
            missed.append(name)
    return ", ".join(missed) or "none"


COLUMNS: list[tuple[str, Callable[[list[Row]], str]]] = [
    ("emulator µs", _emulator),
    ("TTFT p50 c=1 (≤ 1 ms)", lambda r: _added(r, "ttft", "c=1,", "TTFT p50")),
    ("TTFT p99 256 (≤ 5 ms)", lambda r: _added(r, "ttft", "c=256 in flight", "TTFT p99")),
    ("gap p99 256 (≤ 2 ms)", lambda r: _added(r, "gaps", "c=256 in flight", "chunk gap p99")),
    ("store streams (≥ ×0.95)", lambda r: _store(r, "passthrough")),
    ("store non-stream (≥ ×0.95)", lambda r: _store(r, "non-stream")),
    ("CPU µs per new stream", _per_stream),
    ("burst 1,000 TTFT p99 ÷ relay (≤ 1.3)", lambda r: _of_relay(r, "burst", "c=1000", "TTFT p99")),
    ("CPU per new stream ÷ relay (≤ 1.2)", lambda r: _of_relay(r, "newstreams", "", "CPU per new stream")),
    ("missed", _missed),
]


def full_runs(since: str) -> list[tuple[str, dict[str, Any]]]:
    runs = []
    for path in sorted(RESULTS.glob("*.json")):
        if path.stem < since:
            continue
        data = json.loads(path.read_text())
        meta = data.get("meta", {})
        scenarios = set(meta.get("scenarios", ()))
        if meta.get("quick") or not (FULL <= scenarios or FULL_52 <= scenarios):
            continue
        runs.append((path.stem, data))
    return runs


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--since", default="", help="the first run's date (YYYY-MM-DD), by file name")
    args = ap.parse_args()
    header = ["run", "commit", *(name for name, _ in COLUMNS)]
    print("| " + " | ".join(header) + " |")
    print("|" + "---|" * len(header))
    for stem, data in full_runs(args.since):
        rows = data["rows"]
        cells = [f"`{stem}`", str(data["meta"].get("tidegate_rev", "?")), *(fn(rows) for _, fn in COLUMNS)]
        print("| " + " | ".join(cells) + " |")


if __name__ == "__main__":
    main()
