"""The console's pages in headless Chromium (docs/console.md), driven by Playwright with
Debian's `chromium`, against a real `tidegate serve` and the OpenAI emulator: a new user's whole
flow, keyboard navigation, every page at 1280x800 and at a 390 px phone width within the page's CSP,
the overview's charts, the logs' filters and pages. The screenshots docs/console.md shows are taken
here, into the `shots` directory (docs/ under `make screenshots`, a temporary one otherwise)."""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from playwright.sync_api import Browser, BrowserContext, Page, Route, expect, sync_playwright

from tests.emulators.openai_upstream import OpenAIUpstream, tidegate_toml
from tests.support.browser import chromium_binary
from tests.support.process import MASTER_KEY, ServerProcess, sqlite_url, start_server

MASTER = {"Authorization": f"Bearer {MASTER_KEY}"}
# every CSP violation and script error the page meets is kept where the test can read it
WATCH = """
window.tidegateViolations = [];
document.addEventListener("securitypolicyviolation",
  (e) => window.tidegateViolations.push(`${e.violatedDirective} ${e.blockedURI}`));
"""
PRICING = "[models.{0}.pricing]\nprompt = 100\ncompletion = 200\n"


@pytest.fixture(scope="module")
def gateway(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[ServerProcess, str]]:
    workdir = tmp_path_factory.mktemp("console-pages")
    with OpenAIUpstream() as emu:
        config = tidegate_toml(
            sqlite_url(workdir),
            {"emu": {"kind": "openai", "base_url": emu.base_url}},
            {
                "m/hello": [("emu", "text")],
                "m/flaky": [("emu", "http-500"), ("emu", "text")],  # the first route fails before the first byte
                "m/think": [("emu", "reasoning_content")],
                "m/broken": [("emu", "error-mid")],
                "m/down": [("emu", "http-503")],  # fails before any token
                "m/late": [("emu", "late-text:1.1")],  # a time to first token over a second
            },
            {"breaker_failures": 2},
        )
        config += PRICING.format('"m/hello"') + PRICING.format('"m/flaky"')
        server = start_server(workdir, config)
        r = httpx.post(server.base_url + "/api/v1/keys", json={"name": "ops", "admin": True}, headers=MASTER)
        assert r.status_code == 201, r.text
        ops = {"Authorization": f"Bearer {r.json()['key']}"}
        for model in ("m/hello", "m/think", "m/broken", "m/hello", "m/think", "m/late"):
            _stream(server, model, ops)
        # agent sessions: one whose every request failed with no token, one that went well
        for model, session in (("m/down", "sess-down"), ("m/down", "sess-down"), ("m/hello", "sess-ok")):
            _stream(server, model, ops, {"prompt_cache_key": session})
        try:
            yield server, r.json()["key"]
        finally:
            server.stop()
            assert MASTER_KEY not in server.log()


def _stream(
    server: ServerProcess, model: str, headers: dict[str, str], extra: dict[str, str] | None = None
) -> httpx.Response:
    body = {"model": model, "messages": [{"role": "user", "content": "hi"}], "stream": True, **(extra or {})}
    return httpx.post(server.base_url + "/v1/chat/completions", json=body, headers=headers, timeout=30)


class Console:
    """One browser with a logged-in context; `problems()` is what the pages reported."""

    def __init__(self, browser: Browser, server: ServerProcess, secret: str, width: int = 1280) -> None:
        self.base = server.base_url
        self.errors: list[str] = []
        self.missing: list[str] = []  # what the browser asked for outside the APIs and got 404 for
        self.context: BrowserContext = browser.new_context(viewport={"width": width, "height": 800})
        self.context.add_init_script(WATCH)
        self.page = self.open()
        self.page.goto(self.base + "/ui/")
        self.page.fill("#key", secret)
        self.page.click("#login")
        expect(self.page.locator("#nav")).to_be_visible()

    def open(self) -> Page:
        page = self.context.new_page()
        page.on("pageerror", lambda exc: self.errors.append(str(exc)))
        page.on("response", lambda r: self.missing.append(r.url) if r.status == 404 and "/api/" not in r.url else None)
        return page

    def go(self, where: str, page: Page | None = None) -> Page:
        page = page or self.page
        page.goto(f"{self.base}/ui/#{where}")
        expect(page.locator("main h2").first).to_be_visible()
        return page

    def problems(self, page: Page | None = None) -> list[str]:
        violations: list[str] = (page or self.page).evaluate("window.tidegateViolations")
        return violations + self.errors


@pytest.fixture
def browser() -> Iterator[Browser]:
    with sync_playwright() as pw:
        chromium = pw.chromium.launch(executable_path=chromium_binary(), headless=True, args=["--no-sandbox"])
        yield chromium
        chromium.close()


def _shot(shots: Path, page: Page, name: str) -> None:
    page.screenshot(path=str(shots / f"console-{name}.png"), full_page=True)


def _until(page: Page, condition: str, timeout_s: float = 8.0) -> None:
    """Poll `condition` (a JS expression) from the test: the page's CSP forbids the string
    evaluation `wait_for_function` does inside it."""
    for _ in range(int(timeout_s / 0.1)):
        if page.evaluate(condition):
            return
        page.wait_for_timeout(100)
    raise AssertionError(f"never true: {condition}")


def _chart_last(page: Page, chart: str, series: int = 1) -> Any:
    return page.evaluate(
        f"(() => {{ const d = document.querySelector('#{chart}').uplot.data[{series}]; return d[d.length - 1]; }})()"
    )


def test_a_new_key_streams_spends_fails_over_and_is_revoked(
    gateway: tuple[ServerProcess, str], browser: Browser, shots: Path
) -> None:
    """A new user's whole flow, in the browser: they create a key with a budget, watch its
    spend climb in a chart while streaming through the playground with that key, see a failing route
    turn red with its last error, and revoke the key."""
    server, ops = gateway
    console = Console(browser, server, ops)
    console.context.grant_permissions(["clipboard-read", "clipboard-write"], origin=server.base_url)
    page = console.page
    page.click("nav >> text=Keys")
    expect(page.locator("main h2")).to_have_text("Keys")
    page.click("#new-key summary")
    form = page.locator("#create-key")
    form.locator('[name="name"]').fill("team-lead")
    form.locator('[name="credits"]').fill("5")
    form.locator('[name="rpm"]').fill("100")
    form.locator('[name="models"]').select_option(["m/hello", "m/flaky"])
    form.locator('button[type="submit"]').click()
    secret = page.locator("#new-secret").text_content()
    assert secret and secret.startswith("tg-")
    page.click("#copy-secret")
    expect(page.locator("#copied")).to_have_text("copied")
    assert page.evaluate("navigator.clipboard.readText()") == secret  # the copy button copied the secret
    new_id = (page.locator("#secret-box a").get_attribute("href") or "").rsplit("/", 1)[1]
    # the list shows the new key at once, first, while the secret is still on screen
    expect(page.locator("#keys-rows tr").first).to_have_attribute("data-key", new_id)
    expect(page.locator(f'#keys-rows tr[data-key="{new_id}"]')).to_contain_text("team-lead")
    expect(page.locator("#new-secret")).to_have_text(secret)
    _shot(shots, page, "key-created")
    page.click("#secret-box a")
    expect(page.locator("main h2")).to_have_text("Key team-lead")
    expect(page.locator('#key-facts dd[data-fact="budget"]')).to_have_text("$5.00")
    expect(page.locator('#key-facts dd[data-fact="spent"]')).to_have_text("$0")
    expect(page.locator("#chart-spend[data-drawn]")).to_be_visible()
    key_id = page.url.rsplit("/", 1)[1].split("?")[0]
    assert key_id == new_id
    # the window the picker marks is the one drawn: the last hour by default, in one-minute buckets
    expect(page.locator('button[data-window="hour"]')).to_have_attribute("aria-pressed", "true")
    expect(page.locator('button[aria-pressed="true"]')).to_have_count(1)
    assert page.evaluate("document.querySelector('#chart-spend').uplot.data[0].length") == 60

    # the playground, in a second tab, streams with the new key; the key's page follows its spend
    play = console.go("/playground", console.open())
    play.fill("#as-key", secret)
    spent: list[float] = []
    for _ in range(3):
        play.select_option("#model", "m/hello")
        play.fill("#prompt", "hello?")
        play.click("#send")
        expect(play.locator("#stream-state")).to_have_text("completed", timeout=10_000)
        gid = play.locator("#stream-state").get_attribute("data-generation")
        expect(page.locator(f'#key-generations-rows tr[data-id="{gid}"][data-status="completed"]')).to_be_visible(
            timeout=8_000
        )
        shown = page.locator('#key-facts dd[data-fact="spent"]')
        expect(shown).not_to_have_text(f"${spent[-1]:.4f}" if spent else "$0", timeout=8_000)
        spent.append(float((shown.text_content() or "").lstrip("$")))
        _until(page, f"document.querySelector('#chart-spend').uplot.data[1].at(-1) >= {spent[-1]} - 1e-9")
    assert spent[0] > 0 and spent[0] < spent[1] < spent[2], spent  # it climbs with each stream
    assert _chart_last(page, "chart-spend") == pytest.approx(spent[2], rel=1e-6)
    # far below its budget: the budget is named, not drawn (its line would flatten the climb)
    expect(page.locator("#chart-spend figcaption")).to_have_text("Spend over the last hour (budget $5.00)")
    assert page.evaluate("document.querySelector('#chart-spend').uplot.data.length") == 2
    _shot(shots, page, "key")

    # a model whose first route fails: the stream falls back and completes; the route turns red
    for _ in range(2):
        play.select_option("#model", "m/flaky")
        play.click("#send")
        expect(play.locator("#stream-state")).to_have_text("completed", timeout=10_000)
    console.go("/routes")
    failing = page.locator('tr[data-route="emu/http-500"]')
    expect(failing).to_have_attribute("data-health", "failing")
    route = next(
        r
        for r in httpx.get(server.base_url + "/api/v1/routes", headers=MASTER).json()["data"]
        if r["route"] == "emu/http-500"
    )
    assert route["error_rate"] == 1.0
    expect(failing.locator(".badge")).to_have_text(route["state"])
    assert (
        page.evaluate("getComputedStyle(document.querySelector('tr[data-route=\"emu/http-500\"] td')).backgroundColor")
        == "rgb(253, 236, 234)"
    )
    expect(page.locator('tr[data-route="emu/text"]').first).to_have_attribute("data-health", "ok")
    expect(failing).to_contain_text("The server had an error")  # its last failure's upstream error
    _shot(shots, page, "routes")

    # revoked after a confirmation; the key's next stream is refused
    console.go(f"/keys/{key_id}")
    page.click("#revoke")
    expect(page.locator("#revoke-dialog")).to_be_visible()
    page.click("#revoke-cancel")
    expect(page.locator('#key-facts dd[data-fact="state"]')).to_have_text("active")
    page.click("#revoke")
    page.click("#revoke-confirm")
    expect(page.locator('#key-facts dd[data-fact="state"]')).to_have_text("revoked")
    expect(page.locator("#revoke")).to_be_disabled()
    play.select_option("#model", "m/hello")
    play.click("#send")
    expect(play.locator("#stream-state")).to_contain_text("refused")
    assert httpx.get(f"{server.base_url}/api/v1/keys/{key_id}", headers=MASTER).json()["revoked"] is True
    # the audit page says who did each of those changes, and when, never with the secret
    console.go("/audit")
    for action in ("key.create", "key.revoke"):
        row = page.locator(f'#audit-rows tr[data-action="{action}"][data-target="{key_id}"]')
        expect(row).to_have_count(1)
        expect(row).to_contain_text("ops")
    assert secret not in (page.locator("#audit").text_content() or "")
    assert console.problems() == [] and console.problems(play) == []


def test_cache_and_sessions_show_what_the_api_has(gateway: tuple[ServerProcess, str], browser: Browser) -> None:
    """The page draws the cache's numbers and the agent sessions when the API answers them, and
    "no data yet" where an endpoint is not there (404)."""
    server, ops = gateway
    console = Console(browser, server, ops)
    page = console.go("/cache")
    stats = httpx.get(server.base_url + "/api/v1/cache/stats?since=0", headers=MASTER)
    if stats.status_code == 404:
        expect(page.locator("#cache-empty")).to_have_text("no data yet")
    else:
        assert stats.status_code == 200, stats.text
        hits = stats.json()["hits"]
        expect(page.locator('[data-tile="hits"] .tile-value')).to_have_text(f"{hits:,}")
    sessions = httpx.get(server.base_url + "/api/v1/sessions?since=0", headers=MASTER)
    if sessions.status_code == 404:
        expect(page.locator("#sessions-empty")).to_have_text("no data yet")
    else:
        assert sessions.status_code == 200, sessions.text
        expect(page.locator("#sessions-rows tr, #sessions-empty")).to_have_count(len(sessions.json()["data"]) or 1)
    # a session whose every request failed (no token at all) says so, and leads to its failures
    down = page.locator('#sessions-rows tr[data-session="sess-down"]')
    expect(down).to_have_attribute("data-outcome", "failed")
    expect(down.locator(".status-failed")).to_have_text("failed")
    expect(page.locator('#sessions-rows tr[data-session="sess-ok"] .status-completed')).to_have_text("ok")
    down.locator(".status-failed").click()
    expect(page.locator("main h2")).to_have_text("Logs")
    expect(page.locator("#logs-rows tr")).to_have_count(2)
    assert set(page.locator("#logs-rows tr").evaluate_all("rows => rows.map(r => r.dataset.status)")) == {"failed"}
    assert console.problems() == []


def test_the_nav_is_keyboard_navigable_with_visible_focus(gateway: tuple[ServerProcess, str], browser: Browser) -> None:
    server, ops = gateway
    console = Console(browser, server, ops)
    page = console.go("/overview")
    links = page.locator("#nav a")
    names = links.all_text_contents()
    assert names[:4] == ["Overview", "Live log", "Logs", "Keys"]
    outline = (
        "(() => { const s = getComputedStyle(document.activeElement); return [s.outlineStyle, s.outlineWidth]; })()"
    )
    # the page's heading holds the focus after a page opens: back up through the nav to its first link
    for _ in range(len(names) + 1):  # the log-out button, then each link
        page.keyboard.press("Shift+Tab")
    focused = [page.evaluate("document.activeElement.textContent")]
    for _ in names[1:]:
        style = page.evaluate(outline)
        assert style[0] == "solid" and float(style[1].removesuffix("px")) >= 2, style  # the focus is seen
        page.keyboard.press("Tab")
        focused.append(page.evaluate("document.activeElement.textContent"))
    assert focused == names  # Tab walks the nav in order
    page.locator("#nav a", has_text="Keys").focus()
    page.keyboard.press("Enter")
    expect(page.locator("main h2")).to_have_text("Keys")
    assert page.url.endswith("#/keys")
    expect(page.locator("#nav a", has_text="Keys")).to_have_attribute("aria-current", "page")
    assert page.evaluate("document.activeElement.tagName") == "H2"  # the next Tab goes on in the page
    page.keyboard.press("Tab")
    assert page.evaluate("document.activeElement.closest('main') !== null")
    assert console.problems() == []


PAGES = [
    ("overview", "/overview?window=hour&by=model", "Overview"),
    ("log-page", "/log", "Live log"),
    ("logs", "/logs", "Logs"),
    ("keys", "/keys", "Keys"),
    ("routes-page", "/routes", "Routes"),
    ("audit", "/audit", "Audit"),
    ("cache", "/cache", "Cache and agent sessions"),
    ("playground-page", "/playground", "Playground"),
]


@pytest.mark.parametrize("width", [1280, 390])
def test_every_page_fits_and_stays_within_the_csp(
    gateway: tuple[ServerProcess, str], browser: Browser, width: int, shots: Path
) -> None:
    server, ops = gateway
    console = Console(browser, server, ops, width)
    page = console.page
    for name, where, title in PAGES:
        console.go(where)
        expect(page.locator("main h2")).to_have_text(title)
        if name == "overview":
            expect(page.locator("#main [data-chart][data-drawn]")).to_have_count(5)
        if name in (
            ("overview", "logs", "cache", "audit") if width == 1280 else ("overview", "keys", "routes-page", "logs")
        ):
            _shot(shots, page, name if width == 1280 else f"{name.removesuffix('-page')}-phone")
        assert page.evaluate("document.documentElement.scrollWidth") <= width, where
        # nothing but elements in the page's frame: a missing part must not render as "null"
        strays = (
            "[...document.querySelector('main').childNodes].filter((n) => n.nodeType === 3).map((n) => n.textContent)"
        )
        assert page.evaluate(strays) == [], where
    assert console.missing == []  # the page's own files, its icon included, all found
    assert console.problems() == []


def test_the_overview_draws_real_charts_with_hover_values(gateway: tuple[ServerProcess, str], browser: Browser) -> None:
    server, ops = gateway
    console = Console(browser, server, ops)
    page = console.go("/overview?window=hour&by=model")
    chart = page.locator("#chart-requests[data-drawn]")
    expect(chart.locator("canvas")).to_be_visible()
    assert page.evaluate("document.querySelector('#chart-requests').uplot.data[0].length") == 60  # every minute
    labels = page.locator("#chart-requests .u-legend .u-series th").all_text_contents()
    assert {"m/hello", "m/think", "m/broken"} <= set(labels)
    expect(page.locator('[data-tile="requests"] .tile-value')).not_to_have_text("0")
    # the pointer over the newest bucket that has requests shows its values in the legend
    where = """(() => {
      const u = document.querySelector('#chart-requests').uplot;
      const i = u.data[0].findLastIndex((t, j) => u.data.slice(1).some((s) => s[j] > 0));
      return u.valToPos(u.data[0][i], 'x');
    })()"""
    box = chart.locator(".u-over").bounding_box()
    assert box is not None
    page.mouse.move(box["x"] + 5, box["y"] + 5)
    page.mouse.move(box["x"] + min(page.evaluate(where), box["width"] - 1), box["y"] + box["height"] / 2, steps=5)
    values = chart.locator(".u-legend .u-value").all_text_contents()
    assert values[0] != "–" and any(v not in ("–", "0") for v in values[1:]), values
    page.click('button[data-window="month"]')
    _until(page, "document.querySelector('#chart-requests')?.uplot?.data[0].length === 30")
    expect(page.locator('button[data-window="month"]')).to_have_attribute("aria-pressed", "true")
    page.select_option("#by", "none")
    expect(page.locator("#chart-requests .u-legend")).to_contain_text("all")
    assert console.problems() == []


def test_the_logs_filter_and_page(gateway: tuple[ServerProcess, str], browser: Browser, shots: Path) -> None:
    server, ops = gateway
    console = Console(browser, server, ops)
    page = console.go("/logs")
    page.fill('#log-filter [name="model"]', "m/think")
    page.click('#log-filter button[type="submit"]')
    expect(page.locator("#logs-rows tr").first).to_be_visible()
    models = page.locator("#logs-rows tr td:nth-child(2)").all_text_contents()
    assert models and set(models) == {"m/think"}
    page.select_option('#log-filter [name="status"]', "failed")
    page.fill('#log-filter [name="model"]', "")
    page.click('#log-filter button[type="submit"]')
    expect(page.locator("#logs-rows tr").first).to_have_attribute("data-status", "failed")
    assert set(page.locator("#logs-rows tr").evaluate_all("rows => rows.map(r => r.dataset.status)")) == {"failed"}
    # keyset pages, newest first: two rows a page, the next page goes on where the first ended
    # (the ops key's own: an admin key opens only its own generations' pages, GET /api/v1/generations/{id})
    keys = httpx.get(server.base_url + "/api/v1/keys", headers=MASTER).json()["data"]
    ops_id = next(k["id"] for k in keys if k["name"] == "ops")
    console.go(f"/logs?key_id={ops_id}&limit=2")
    expect(page.locator("#next-page")).to_be_visible()  # this page's, not the failed filter's (no next)
    expect(page.locator("#logs-rows tr")).to_have_count(2)
    first = page.locator("#logs-rows tr").evaluate_all("rows => rows.map(r => r.dataset.id)")
    page.click("#next-page")
    expect(page.locator("#first-page")).to_be_visible()
    second = page.locator("#logs-rows tr").evaluate_all("rows => rows.map(r => r.dataset.id)")
    listed = [
        g["id"]
        for g in httpx.get(f"{server.base_url}/api/v1/generations?key_id={ops_id}&limit=4", headers=MASTER).json()[
            "data"
        ]
    ]
    assert len(first) == 2 and first + second == listed
    # a generation's page: the record, and the request and answer when the API kept them
    page.locator("#logs-rows tr a").first.click()
    expect(page.locator("#facts")).to_be_visible()
    record = httpx.get(server.base_url + f"/api/v1/generations/{second[-1]}", headers=MASTER).json()
    console.go(f"/gen/{second[-1]}")
    expect(page.locator("#output")).to_have_text(record["output_text"])
    if record.get("request_body") is not None:
        expect(page.locator("#request-body")).to_contain_text('"hi"')
    elif "request_body" in record:  # not kept for this key or model: the page says so
        expect(page.locator("#no-bodies")).to_be_visible()
    else:
        expect(page.locator("#request-body, #no-bodies")).to_have_count(0)
    _shot(shots, page, "generation")
    assert console.problems() == []


def test_a_keys_limits_are_edited_in_the_page(gateway: tuple[ServerProcess, str], browser: Browser) -> None:
    server, ops = gateway
    made = httpx.post(server.base_url + "/api/v1/keys", json={"name": "edit-me", "credits": 2}, headers=MASTER).json()
    console = Console(browser, server, ops)
    page = console.go(f"/keys/{made['id']}")
    page.click("#edit summary")
    form = page.locator("#edit-key")
    expect(form.locator('[name="credits"]')).to_have_value("2")
    form.locator('[name="tpm"]').fill("5000")
    form.locator('[name="concurrent"]').fill("3")
    form.locator('[name="budget_period"]').select_option("daily")
    form.locator('button[type="submit"]').click()
    expect(page.locator('#key-facts dd[data-fact="limits"]')).to_have_text("5000 tpm, 3 concurrent")
    expect(page.locator('#key-facts dd[data-fact="budget"]')).to_have_text("$2.00 daily")
    key = httpx.get(server.base_url + f"/api/v1/keys/{made['id']}", headers=MASTER).json()
    assert key["limits"] == {"rpm": None, "tpm": 5000, "concurrent": 3} and key["budget_period"] == "daily"
    # a bad value is refused by the API, in the page, and changes nothing
    page.click("#edit summary")
    form.locator('[name="concurrent"]').fill("0")
    form.locator('[name="concurrent"]').evaluate("input => input.removeAttribute('min')")
    form.locator('button[type="submit"]').click()
    expect(form.locator("[data-form-error]")).to_contain_text("concurrent")
    assert httpx.get(server.base_url + f"/api/v1/keys/{made['id']}", headers=MASTER).json()["limits"]["concurrent"] == 3
    assert console.problems() == []


def test_the_overview_opens_on_the_last_hour_where_fresh_traffic_is_a_line(
    gateway: tuple[ServerProcess, str], browser: Browser
) -> None:
    """No window in the address: the last hour in one-minute buckets, the picker saying so; the
    minutes of traffic the fixture made are a line over every bucket, not one dot."""
    server, ops = gateway
    console = Console(browser, server, ops)
    page = console.go("/overview")
    expect(page.locator("#chart-requests[data-drawn]")).to_be_visible()
    expect(page.locator('button[data-window="hour"]')).to_have_attribute("aria-pressed", "true")
    expect(page.locator('button[aria-pressed="true"]')).to_have_count(1)
    series = page.evaluate("document.querySelector('#chart-requests').uplot.data")
    assert len(series[0]) == 60 and series[0][1] - series[0][0] == 60
    for values in series[1:]:
        assert None not in values  # every minute has a value: uPlot joins them into a line
    assert any(v > 0 for values in series[1:] for v in values)
    assert console.problems() == []


def test_legends_are_short_and_axis_labels_fit(gateway: tuple[ServerProcess, str], browser: Browser) -> None:
    """By key, a legend names each key by its name, not its full id; the TTFT legend names each
    group once (its p95 is "p95"), five entries a line or more; every value axis label is drawn inside the
    chart, over a second of TTFT included."""
    server, ops = gateway
    keys = httpx.get(server.base_url + "/api/v1/keys", headers=MASTER).json()["data"]
    console = Console(browser, server, ops)
    page = console.go("/overview?window=hour&by=key")
    expect(page.locator("#main [data-chart][data-drawn]")).to_have_count(5)
    labels = page.locator("#chart-requests .u-legend .u-series th").all_text_contents()
    assert "ops" in labels and not any("key_" in label for label in labels), labels
    assert not any(k["id"] in (page.locator("#chart-ttft .u-legend").text_content() or "") for k in keys)

    page = console.go("/overview?window=hour&by=model")
    expect(page.locator("#main [data-chart][data-drawn]")).to_have_count(5)
    ttft = page.locator("#chart-ttft .u-legend .u-series th").all_text_contents()
    assert ttft.count("p95") == len(ttft[1:]) // 2 and "m/late" in ttft, ttft
    tops = "[...document.querySelectorAll('#chart-ttft .u-legend .u-series')].map((e) => e.getBoundingClientRect().top)"
    rows = len({round(top) for top in page.evaluate(tops)})
    assert len(ttft) >= 9 and rows <= (len(ttft) + 4) // 5, (rows, ttft)  # five entries a line or more
    late = page.evaluate(
        "Math.max(...document.querySelector('#chart-ttft').uplot.data.slice(1).flat().filter((v) => v != null))"
    )
    assert late >= 1000  # the slow model's time to first token is on this chart
    fits = """((id) => {
      const box = document.querySelector(id), u = box.uplot;
      const ctx = document.createElement('canvas').getContext('2d');
      ctx.font = '12px system-ui, sans-serif';
      const widest = Math.max(...box.axisLabels.map((v) => ctx.measureText(String(v)).width));
      return [widest, u.bbox.left / devicePixelRatio - 15, box.axisLabels];
    })"""
    for chart in ("#chart-ttft", "#chart-tokens", "#chart-cost", "#chart-requests", "#chart-errors"):
        widest, room, shown = page.evaluate(f"{fits}('{chart}')")
        assert shown and widest <= room, (chart, widest, room, shown)  # left of the ticks, inside the canvas
    assert console.problems() == []


def test_refused_requests_in_the_logs_filter_and_the_overview_error_rate(
    gateway: tuple[ServerProcess, str], browser: Browser
) -> None:
    server, ops = gateway
    body = {"model": "m/nowhere", "messages": [{"role": "user", "content": "hi"}]}
    refused = httpx.post(
        server.base_url + "/v1/chat/completions", json=body, headers={"Authorization": f"Bearer {ops}"}
    )
    assert refused.status_code == 404
    gid = refused.headers["x-generation-id"]
    console = Console(browser, server, ops)
    page = console.go("/logs")
    page.select_option('#log-filter [name="status"]', "rejected")
    page.click('#log-filter button[type="submit"]')
    row = page.locator(f'#logs-rows tr[data-id="{gid}"]')
    expect(row).to_have_attribute("data-status", "rejected")
    expect(row.locator(".status")).to_have_text("rejected 404 model_not_found")
    expect(row.locator("td:nth-child(2)")).to_have_text("m/nowhere")  # the model it asked for
    assert set(page.locator("#logs-rows tr").evaluate_all("rows => rows.map(r => r.dataset.status)")) == {"rejected"}
    # the overview counts it as an error, under its code when grouped by provider
    page = console.go("/overview?window=hour&by=provider")
    group = page.locator('#groups-rows tr[data-group="rejected:model_not_found"]')
    expect(group).to_be_visible()
    expect(group.locator("td").last).to_have_text("100.0%")
    rate = page.locator('[data-tile="error-rate"] .tile-value').text_content() or ""
    assert rate.endswith("%") and float(rate[:-1]) > 0, rate
    assert console.problems() == []


def test_a_page_left_while_it_loads_never_draws_over_the_next(
    gateway: tuple[ServerProcess, str], browser: Browser
) -> None:
    """A generation's page whose record is still on its way when the user goes to the live log: the
    record's late answer must not replace the log with the generation."""
    server, ops = gateway
    gid = _stream(server, "m/hello", {"Authorization": f"Bearer {ops}"}).headers["x-generation-id"]
    console = Console(browser, server, ops)
    page = console.page
    held: list[Route] = []
    page.route(f"**/api/v1/generations/{gid}", lambda route: held.append(route))  # answered when the test says
    page.goto(f"{console.base}/ui/#/gen/{gid}")
    deadline = time.monotonic() + 8
    while not held and time.monotonic() < deadline:
        page.wait_for_timeout(50)
    assert held, "the generation's page asked for its record"
    console.go("/log")
    expect(page.locator("main h2")).to_have_text("Live log")
    held[0].continue_()
    page.wait_for_timeout(500)  # the record's answer arrives, and must change nothing
    expect(page.locator("main h2")).to_have_text("Live log")
    assert console.problems() == []
