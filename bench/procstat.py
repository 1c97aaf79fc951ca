"""CPU time and RSS of a process tree, read from /proc (Linux only).

CPU is utime + stime of every process in the tree plus cutime + cstime (children already reaped),
in seconds; RSS is the sum of VmRSS over the tree, in KiB. A tree is a root pid and every process
whose parent chain reaches it (uvicorn worker processes, LiteLLM's workers).
"""

from __future__ import annotations

import os

CLK_TCK = os.sysconf("SC_CLK_TCK")
PAGE_KB = os.sysconf("SC_PAGE_SIZE") // 1024


def _stat_fields(pid: int) -> list[str] | None:
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            raw = f.read().decode("ascii", "replace")
    except OSError:
        return None
    # comm (field 2) may contain spaces and parentheses: split after the last ')'.
    rest = raw[raw.rfind(")") + 2 :].split()
    return rest  # rest[0] is field 3 (state)


def tree(root: int) -> list[int]:
    """The root pid and all its descendants that are alive now."""
    parents: dict[int, list[int]] = {}
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        fields = _stat_fields(int(name))
        if fields is None:
            continue
        parents.setdefault(int(fields[1]), []).append(int(name))
    out = [root]
    i = 0
    while i < len(out):
        out.extend(parents.get(out[i], []))
        i += 1
    return out


def worker_pids(root: int) -> list[int]:
    """The worker processes of a multiprocess server (`tidegate serve --workers N`, uvicorn's own):
    the root's children started by multiprocessing's spawn, not its resource tracker."""
    out = []
    for pid in tree(root)[1:]:
        try:
            with open(f"/proc/{pid}/cmdline", "rb") as f:
                cmdline = f.read()
        except OSError:
            continue
        if b"spawn_main" in cmdline:
            out.append(pid)
    return out


def cpu_seconds(pids: list[int]) -> float:
    ticks = 0
    for pid in pids:
        fields = _stat_fields(pid)
        if fields is None:
            continue
        # fields 14-17 (utime, stime, cutime, cstime) are rest[11:15]
        ticks += sum(int(x) for x in fields[11:15])
    return ticks / CLK_TCK


def rss_kb(pids: list[int]) -> int:
    total = 0
    for pid in pids:
        try:
            with open(f"/proc/{pid}/statm", "rb") as f:
                total += int(f.read().split()[1]) * PAGE_KB
        except (OSError, IndexError, ValueError):
            continue
    return total


def core_ticks() -> dict[str, list[int]]:
    """Per CPU from /proc/stat: "0" -> [user, nice, system, idle, iowait, irq, softirq, steal] ticks."""
    out: dict[str, list[int]] = {}
    with open("/proc/stat", "rb") as f:
        for line in f.read().decode("ascii", "replace").splitlines():
            name, *values = line.split()
            if name.startswith("cpu") and name != "cpu":
                out[name[3:]] = [int(v) for v in values[:8]]
    return out


def core_shares(before: dict[str, list[int]], after: dict[str, list[int]]) -> dict[str, dict[str, float]]:
    """Per CPU, the share of its time between two `core_ticks` readings that this machine used (not idle,
    iowait or stolen), that went to softirq (loopback packet processing lands here, outside any
    process's CPU time) and that the hypervisor stole (another guest ran on the physical core)."""
    out: dict[str, dict[str, float]] = {}
    for cpu, b in before.items():
        a = after.get(cpu)
        if a is None:
            continue
        d = [y - x for x, y in zip(b, a, strict=True)]
        total = sum(d) or 1
        out[cpu] = {
            "busy": round((total - d[3] - d[4] - d[7]) / total, 3),
            "softirq": round(d[6] / total, 3),
            "steal": round(d[7] / total, 3),
        }
    return out


class TreeWatch:
    """A named process tree whose CPU and RSS are sampled during a run."""

    def __init__(self, name: str, root: int) -> None:
        self.name = name
        self.root = root
        self.pids = tree(root)
        self.cpu0 = cpu_seconds(self.pids)
        self.rss0 = rss_kb(self.pids)
        self.rss_peak = self.rss0
        self.open_at_peak = 0

    def sample(self, open_streams: int) -> None:
        rss = rss_kb(self.pids)
        if rss > self.rss_peak:
            self.rss_peak = rss
            self.open_at_peak = open_streams

    def result(self) -> dict[str, float | int]:
        # processes may have been born during the run (they were counted from 0)
        pids = sorted(set(self.pids) | set(tree(self.root)))
        return {
            "cpu_s": round(cpu_seconds(pids) - self.cpu0, 4),
            "rss_base_kb": self.rss0,
            "rss_peak_kb": self.rss_peak,
            "open_at_peak": self.open_at_peak,
            "processes": len(pids),
        }
