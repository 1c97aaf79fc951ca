"""The console overview's render time: headless Chromium (Debian's `chromium`, driven by
Playwright) opens `/ui/#/overview` on a gateway and reads when the page's last chart was drawn at its
size, in ms from the navigation's start (the page, its modules, the stats API's answer and uPlot's
drawing, all included). Budget: 1 s at 1M generation records.

    .venv/bin/python bench/console_render.py --count 1000000        # seed SQLite, serve, measure
    .venv/bin/python bench/console_render.py --url URL --key KEY     # a gateway already running

`overview_render_ms` is what bench/console_scale.py and tests/integration/test_console_render.py call.
"""

from __future__ import annotations

import argparse
import os
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import httpx
from playwright.sync_api import sync_playwright

BUDGET_MS = 1000.0
CHARTS = 5  # the overview's: requests, tokens, cost, error rate, TTFT
MASTER = "tg-bench-console-render-0123456789"
DRAWN = (
    f"document.querySelectorAll('#main [data-chart][data-drawn]').length === {CHARTS} && window.tidegateChartsDrawnAt"
)


def chromium() -> str:
    found = shutil.which("chromium") or shutil.which("chromium-browser")
    if found is None:
        raise SystemExit("Debian's chromium is needed (apt-get install chromium)")
    return found


def overview_render_ms(
    base_url: str, secret: str, window: str = "month", by: str = "model", runs: int = 5
) -> list[float]:
    """Each run's time to the overview's charts drawn, in ms, each in a fresh page (a cold load)."""
    login = httpx.post(base_url + "/ui/login", json={"key": secret}, timeout=30)
    login.raise_for_status()
    cookie = login.headers["set-cookie"].split(";")[0].split("=", 1)[1]
    times: list[float] = []
    with sync_playwright() as pw:
        browser = pw.chromium.launch(executable_path=chromium(), headless=True, args=["--no-sandbox"])
        context = browser.new_context(viewport={"width": 1280, "height": 800})
        context.add_cookies([{"name": "tidegate_session", "value": cookie, "url": base_url}])
        for _ in range(runs):
            page = context.new_page()
            page.goto(f"{base_url}/ui/#/overview?window={window}&by={by}")
            deadline = time.monotonic() + 30
            while not (drawn := page.evaluate(DRAWN)):  # polled: the page's CSP forbids wait_for_function's eval
                if time.monotonic() > deadline:
                    raise TimeoutError("the overview's charts were not drawn in 30 s")
                page.wait_for_timeout(5)
            times.append(float(drawn))
            page.close()
        browser.close()
    return times


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _seeded_gateway(workdir: Path, count: int) -> tuple[subprocess.Popen[bytes], str]:
    config = workdir / "tidegate.toml"
    config.write_text(
        f'[server]\nhost = "127.0.0.1"\n[store]\nurl = "sqlite:///{workdir}/bench.db"\n'
        '[providers.openai]\nkind = "openai"\nbase_url = "http://127.0.0.1:9"\n'
        '[models."gpt-4o"]\nroutes = [{ provider = "openai", model = "gpt-4o" }]\n'
    )
    env = {**os.environ, "TIDEGATE_MASTER_KEY": MASTER}
    began = time.monotonic()
    subprocess.run(
        [sys.executable, "-m", "tidegate", "seed-generations", "--config", str(config), "--count", str(count)],
        check=True,
        env=env,
    )
    print(f"seeded {count:,} records in {time.monotonic() - began:.0f} s")
    port = _free_port()
    log = open(workdir / "server.log", "wb")
    proc = subprocess.Popen(
        [sys.executable, "-m", "tidegate", "serve", "--config", str(config), "--port", str(port)],
        env=env,
        stdout=log,
        stderr=log,
    )
    base = f"http://127.0.0.1:{port}"
    for _ in range(600):
        try:
            if httpx.get(base + "/readyz", timeout=1).status_code == 200:
                return proc, base
        except httpx.HTTPError:
            pass
        time.sleep(0.1)
    proc.kill()
    raise SystemExit(f"the gateway did not start: {workdir / 'server.log'}")


def report(base: str, secret: str, runs: int) -> bool:
    ok = True
    print(f"| window | p50 ms | max ms | budget {BUDGET_MS:.0f} ms |\n|---|---|---|---|")
    for window in ("hour", "day", "month"):
        times = overview_render_ms(base, secret, window, "model", runs)
        met = max(times) <= BUDGET_MS
        ok = ok and met
        print(f"| {window} | {statistics.median(times):.0f} | {max(times):.0f} | {'met' if met else 'missed'} |")
    return ok


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--url", help="a running gateway (else one is seeded and started)")
    parser.add_argument("--key", help="its master or admin key, with --url")
    parser.add_argument("--count", type=int, default=1_000_000, help="records to seed without --url")
    parser.add_argument("--runs", type=int, default=5)
    args = parser.parse_args()
    if args.url:
        sys.exit(0 if report(args.url, args.key or os.environ.get("TIDEGATE_MASTER_KEY", ""), args.runs) else 1)
    with tempfile.TemporaryDirectory(prefix="console-render-") as tmp:
        proc, base = _seeded_gateway(Path(tmp), args.count)
        try:
            ok = report(base, MASTER, args.runs)
        finally:
            proc.terminate()
            proc.wait(30)
    sys.exit(0 if ok else 1)


if __name__ == "__main__":
    main()
