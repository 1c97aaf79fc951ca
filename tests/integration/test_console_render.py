"""The overview's render time: bench/console_render.py's measurement, on a store seeded by
`tidegate seed-generations`, in headless Chromium against a real `tidegate serve`. The bench runs it
at 1M records (docs/console.md, "Render time"); here a smaller store keeps the test short, under the
same 1 s budget."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import httpx

from bench.console_render import BUDGET_MS, overview_render_ms
from tests.emulators.openai_upstream import OpenAIUpstream, tidegate_toml
from tests.support.process import MASTER_KEY, sqlite_url, start_server

SEEDED = 50_000


def test_the_overview_draws_its_charts_within_a_second(tmp_path: Path) -> None:
    with OpenAIUpstream() as emu:
        config = tidegate_toml(sqlite_url(tmp_path), {"emu": {"kind": "openai", "base_url": emu.base_url}}, {})
        (tmp_path / "seed.toml").write_text(config)
        seed = [sys.executable, "-m", "tidegate", "seed-generations", "--config", str(tmp_path / "seed.toml")]
        subprocess.run([*seed, "--count", str(SEEDED)], check=True, timeout=300)
        server = start_server(tmp_path, config)
        try:
            stats = httpx.get(
                server.base_url + "/api/v1/stats/series?window=month&by=none",
                headers={"Authorization": f"Bearer {MASTER_KEY}"},
            ).json()
            assert stats["totals"]["requests"] >= SEEDED * 0.9  # the charts draw the seeded records
            times = overview_render_ms(server.base_url, MASTER_KEY, "month", "model", runs=3)
        finally:
            server.stop()
    assert len(times) == 3 and all(0 < t for t in times)
    assert max(times) <= BUDGET_MS, times
