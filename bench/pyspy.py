"""Sample a gateway with py-spy while a load runs; summarise where its CPU time goes."""

from __future__ import annotations

import re
import subprocess
from collections import Counter
from pathlib import Path

from gateways import LITELLM_VENV

_LINENO = re.compile(r":\d+\)$")
# the process's entry chain (every sample has it): left out of the inclusive list
_RUNNER = (
    "threading.py",
    "concurrent/futures/thread.py",
    "click/core.py",
    "<frozen runpy>",
    "uvicorn/main.py",
    "uvicorn/server.py",
    "uvicorn/_compat.py",
    "asyncio/runners.py",
    "tidegate/cli/serve.py",
    "tidegate/server/runtime/run.py",
    "tidegate/server/runtime/workers.py",
    "tidegate/__main__.py",
    "asyncio/base_events.py",
    "asyncio/events.py",
)


def py_spy() -> Path | None:
    exe = LITELLM_VENV / "bin" / "py-spy"
    return exe if exe.exists() else None


def start(pid: int, out: Path, duration: float, rate: int = 250) -> subprocess.Popen[bytes] | None:
    exe = py_spy()
    if exe is None:
        return None
    cmd = [
        str(exe),
        "record",
        "--pid",
        str(pid),
        "--format",
        "raw",
        "--output",
        str(out),
        "--duration",
        str(int(duration)),
        "--rate",
        str(rate),
        "--subprocesses",
        "--nonblocking",
    ]
    return subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)


def summarise(folded: Path, top: int = 25) -> str:
    """Self and inclusive sample shares per function (line numbers dropped) from py-spy's raw output."""
    self_c: Counter[str] = Counter()
    incl_c: Counter[str] = Counter()
    total = 0
    for line in folded.read_text(errors="replace").splitlines():
        stack, _, count = line.rpartition(" ")
        if not count.isdigit():
            continue
        n = int(count)
        frames = [_LINENO.sub(")", f) for f in stack.split(";")[1:]]  # [0] is the thread
        if not frames:
            continue
        total += n
        self_c[frames[-1]] += n
        for f in set(frames):
            incl_c[f] += n
    if not total:
        return "no samples\n"
    out = [f"{total} samples", "", "self %  function (file)"]
    out += [f"{100 * c / total:6.1f}  {f}" for f, c in self_c.most_common(top)]
    out += ["", "incl %  function (file)"]
    incl = [(f, c) for f, c in incl_c.most_common() if not f.endswith(tuple(r + ")" for r in _RUNNER))]
    out += [f"{100 * c / total:6.1f}  {f}" for f, c in incl[:top]]
    return "\n".join(out) + "\n"
