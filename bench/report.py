"""Results: the JSON file, the markdown tables, the printed ratios and the README's latest table."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import orjson
from scenarios import Row

README_START = "<!-- bench:latest:start -->"
README_END = "<!-- bench:latest:end -->"


def fmt(v: float | None) -> str:
    if v is None:
        return "—"
    a = abs(v)
    if a >= 100:
        return f"{v:,.0f}"
    if a >= 10:
        return f"{v:.1f}"
    return f"{v:.2f}"


def versus(row: Row, who: str, base: str = "direct") -> str:
    a, b = row.values.get(who), row.values.get(base)
    if a is None or b is None or row.compare == "none":
        return ""
    if row.compare == "diff":
        return f"{a - b:+.2f} {row.unit}".rstrip()
    return f"×{a / b:.2f}" if b else ""


def status(row: Row) -> str:
    if not row.budget:
        return ""
    if row.ok is None:
        return "n/a"
    return "met" if row.ok else "**not met**"


def _metric(row: Row) -> str:
    return f"{row.metric} ({row.unit})" if row.unit and row.unit != "×" else row.metric


def floor_ratio(row: Row, who: str = "tidegate", base: str = "relay") -> str:
    a, b = row.values.get(who), row.values.get(base)
    if a is None or not b or row.compare == "none":
        return ""
    return f"×{a / b:.2f}"


def main_table(rows: list[Row]) -> str:
    """direct, the plain relay (the floor), tidegate (and LiteLLM when it ran); tidegate − direct for
    latencies, tidegate ÷ relay for everything the relay measured."""
    litellm = any(r.values.get("litellm") is not None for r in rows)
    head = "| scenario | variant | metric | direct | plain relay | tidegate |" + (" LiteLLM |" if litellm else "")
    head += " tidegate − direct | tidegate ÷ relay |" + (" LiteLLM ÷ tidegate |" if litellm else "")
    cols = 5 + (2 if litellm else 0)
    out = [head + " budget | status |", "|---|---|---|" + "---:|" * cols + "---|---|"]
    for r in rows:
        note = f" ({r.note})" if r.note else ""
        cells = [r.scenario, r.variant, _metric(r) + note]
        cells += [fmt(r.values.get(k)) for k in ("direct", "relay", "tidegate", *(["litellm"] if litellm else []))]
        cells += [versus(r, "tidegate") if r.compare == "diff" else "", floor_ratio(r)]
        if litellm:
            cells.append(floor_ratio(r, "litellm", "tidegate"))
        cells += [r.budget, status(r)]
        out.append("| " + " | ".join(cells) + " |")
    return "\n".join(out)


def bare_of(name: str, names: list[str]) -> str:
    """`deployed-redis` is read against `bare-redis`, `deployed-sqlite` against `tidegate` (bare, SQLite)."""
    store = name.removeprefix("deployed-")
    bare = "tidegate" if store == "sqlite" else f"bare-{store}"
    return bare if bare in names else ""


def floor_table(rows: list[Row], base: str = "relay") -> str:
    """Every column's value with its ratio to the relay; each `deployed-<store>` column also ÷ the bare
    config on the same store."""
    names = list(dict.fromkeys(k for r in rows for k in r.values))
    against_bare = [n for n in names if n.startswith("deployed-") and bare_of(n, names)]
    head = "| scenario | variant | metric | " + " | ".join(names)
    head += "".join(f" | {n} ÷ {bare_of(n, names)}" for n in against_bare) + " | budget | status |"
    out = [head, "|---|---|---|" + "---:|" * (len(names) + len(against_bare)) + "---|---|"]
    for r in rows:
        cells = [r.scenario, r.variant, _metric(r)]
        for n in names:
            ratio = floor_ratio(r, n, base) if n != base else ""
            cells.append(fmt(r.values.get(n)) + (f" ({ratio})" if ratio else ""))
        cells += [floor_ratio(r, n, bare_of(n, names)) for n in against_bare]
        out.append("| " + " | ".join([*cells, r.budget, status(r)]) + " |")
    return "\n".join(out)


def pair_table(rows: list[Row]) -> str:
    names: list[str] = []
    for r in rows:
        for k in r.values:
            if k not in names:
                names.append(k)
    head = "| scenario | variant | metric | " + " | ".join(names) + " | ratio | budget | status |"
    out = [head, "|---|---|---|" + "---:|" * (len(names) + 1) + "---|---|"]
    for r in rows:
        vals = [r.values.get(n) for n in names]
        rat = f"×{vals[0] / vals[1]:.3f}" if len(vals) == 2 and vals[0] and vals[1] and r.compare != "none" else ""
        out.append(
            f"| {r.scenario} | {r.variant} | {_metric(r)} | "
            + " | ".join(fmt(v) for v in vals)
            + f" | {rat} | {r.budget} | {status(r)} |"
        )
    return "\n".join(out)


def markdown(meta: dict[str, Any], main_rows: list[Row], extra_rows: list[Row], notes: list[str]) -> str:
    la0, la1 = meta["loadavg_start"], meta["loadavg_end"]
    before = meta.get("cores_before_run") or {}
    quiet = "; ".join(
        f"CPU {cpu} busy {c['busy']:.0%}" + (f", stolen {c['steal']:.0%}" if c["steal"] else "")
        for cpu, c in sorted(before.items())
    )
    lines = [
        f"## tidegate benchmark, {meta['date']}{' (--quick)' if meta['quick'] else ''}",
        "",
        f"- machine: {meta['cpus']} CPUs; load average at start {la0[0]:.2f} / {la0[1]:.2f} / {la0[2]:.2f}, "
        f"at end {la1[0]:.2f} / {la1[1]:.2f} / {la1[2]:.2f}"
        + (f"; in the {meta.get('cores_before_run_s', 0):g} s before the run: {quiet}" if quiet else "")
        + (
            " — **measured under contention: other work shared the cores; absolute figures are not representative**"
            if meta["contended"]
            else ""
        ),
        f"- pinning: gateway on CPU {meta['gateway_cores'] or 'any'}, emulator + load generator on CPU "
        f"{meta['load_cores'] or 'any'}; rounds: {meta['rounds']} (interleaved, medians); "
        f"workers: {meta['workers']} (tidegate and LiteLLM)",
        f"- tidegate {meta['tidegate_rev']}; LiteLLM {meta['litellm_version']}; targets: "
        + ", ".join(f"{k}: {v}" for k, v in meta["availability"].items()),
        "",
        main_table(main_rows),
    ]
    for name in dict.fromkeys(r.scenario for r in extra_rows):
        table = floor_table if name in ("deployed", "rss") else pair_table
        lines += ["", table([r for r in extra_rows if r.scenario == name])]
    if notes:
        lines += ["", "Notes:", ""] + [f"- {n}" for n in notes]
    return "\n".join(lines) + "\n"


def ratios_text(rows: list[Row]) -> str:
    """One line per figure: every gateway's ratio to the plain relay of the same run (and tidegate's
    added latency over direct), with the budget's status."""
    out = []
    for r in rows:
        parts = [f"{who} {floor_ratio(r, who)}" for who in r.values if who != "relay" and floor_ratio(r, who)]
        if r.compare == "diff" and versus(r, "tidegate"):
            parts.append(f"tidegate − direct {versus(r, 'tidegate')}")
        if parts or r.budget:
            st = f"  [{status(r)}]" if r.budget else ""
            out.append(f"{r.scenario:10s} {r.variant[:50]:50s} {r.metric[:34]:34s} " + ", ".join(parts) + st)
    return "\n".join(out)


def write_results(path_base: Path, data: dict[str, Any], md: str) -> tuple[Path, Path]:
    path_base.parent.mkdir(parents=True, exist_ok=True)
    jpath, mpath = path_base.with_suffix(".json"), path_base.with_suffix(".md")
    for path, blob in ((jpath, orjson.dumps(data, option=orjson.OPT_INDENT_2)), (mpath, md.encode())):
        tmp = path.with_name(path.name + ".tmp")
        tmp.write_bytes(blob)
        os.replace(tmp, path)
    return jpath, mpath


def update_readme(readme: Path, md: str, results_name: str) -> None:
    if not readme.exists():
        return
    text = readme.read_text()
    if README_START not in text or README_END not in text:
        return
    head, rest = text.split(README_START, 1)
    _, tail = rest.split(README_END, 1)
    body = f"\n_From `bench/results/{results_name}`._\n\n" + md.replace("## tidegate benchmark, ", "### Run of ") + "\n"
    readme.write_text(head + README_START + body + README_END + tail)


def row_dict(r: Row) -> dict[str, Any]:
    return {
        "scenario": r.scenario,
        "variant": r.variant,
        "metric": r.metric,
        "unit": r.unit,
        "values": r.values,
        "compare": r.compare,
        "budget": r.budget,
        "ok": r.ok,
        "note": r.note,
    }
