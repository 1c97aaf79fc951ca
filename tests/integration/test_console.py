"""The web console at /ui (docs/api-edges.md §14): its session's security over plain HTTP, and the
pages in headless Chromium driven by Playwright (Debian's `chromium` as the browser; `.ci/run`
installs it when missing). The screenshots docs/console.md shows are taken here and by
test_console_pages.py, into the `shots` directory (docs/ under `make screenshots`, a temporary one
otherwise)."""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from playwright.sync_api import Page, expect, sync_playwright

from tests.emulators.openai_upstream import OpenAIUpstream, tidegate_toml
from tests.support.browser import chromium_binary
from tests.support.process import MASTER_KEY, ServerProcess, sqlite_url, start_server

KEYS = "/api/v1/keys"


@pytest.fixture(scope="module")
def gateway(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[ServerProcess, dict[str, str]]]:
    workdir = tmp_path_factory.mktemp("console")
    with OpenAIUpstream() as emu:
        config = tidegate_toml(
            sqlite_url(workdir),
            {"emu": {"kind": "openai", "base_url": emu.base_url}},
            {
                "m/quiet": [("emu", "silence:1.5")],
                "m/broken": [("emu", "error-mid")],
                "m/think": [("emu", "reasoning_content")],
                "m/hello": [("emu", "text")],
            },
        )
        config += '[models."tidegate/auto"]\ntype = "router"\ncandidates = ["m/hello"]\n'
        server = start_server(workdir, config)
        master = {"Authorization": f"Bearer {MASTER_KEY}"}
        keys = {}
        for name, admin in (("ops", True), ("app", False)):
            r = httpx.post(server.base_url + KEYS, json={"name": name, "admin": admin}, headers=master)
            assert r.status_code == 201, r.text
            keys[name] = r.json()["key"]
        try:
            yield server, keys
        finally:
            server.stop()
            assert MASTER_KEY not in server.log() and keys["ops"] not in server.log()


def _login(base: str, secret: str, headers: dict[str, str] | None = None) -> httpx.Response:
    return httpx.post(base + "/ui/login", json={"key": secret}, headers=headers)


def test_the_session_is_httponly_strict_signed_and_csrf_checked(gateway: tuple[ServerProcess, dict[str, str]]) -> None:
    server, keys = gateway
    base = server.base_url
    root = httpx.get(base + "/")
    assert root.status_code == 302 and root.headers["location"] == "/ui/"
    page = httpx.get(base + "/ui/")
    assert page.status_code == 200 and "script-src 'self'" in page.headers["content-security-policy"]
    assert httpx.get(base + "/ui/session").status_code == 401
    assert httpx.get(base + "/api/v1/generations").status_code == 401  # no key, no cookie
    assert _login(base, "tg-not-a-key").status_code == 401
    assert _login(base, keys["app"]).status_code == 403  # not an admin key
    ok = _login(base, keys["ops"])
    assert ok.status_code == 200
    cookie_header = ok.headers["set-cookie"]
    assert "HttpOnly" in cookie_header and "SameSite=Strict" in cookie_header and "Path=/" in cookie_header
    cookie = cookie_header.split(";")[0].split("=", 1)[1]
    assert keys["ops"] not in cookie_header and keys["ops"] not in ok.text
    jar = {"tidegate_session": cookie}
    csrf = ok.json()["csrf"]
    assert httpx.get(base + "/api/v1/generations", cookies=jar).status_code == 200
    refused = httpx.post(base + KEYS, json={"name": "x"}, cookies=jar)  # a change without the CSRF token
    assert refused.status_code == 403 and refused.json()["error"]["code"] == "forbidden"
    assert httpx.post(base + KEYS, json={"name": "x"}, cookies=jar, headers={"x-csrf-token": csrf}).status_code == 201
    forged = cookie[:-4] + ("0000" if not cookie.endswith("0000") else "1111")
    assert httpx.get(base + "/ui/session", cookies={"tidegate_session": forged}).status_code == 401
    out = httpx.post(base + "/ui/logout", cookies=jar, headers={"x-csrf-token": csrf})
    assert out.status_code == 200 and "Max-Age=0" in out.headers["set-cookie"]
    assert "Secure" not in cookie_header and "Secure" not in out.headers["set-cookie"]  # plain HTTP


def test_behind_a_tls_proxy_the_cookie_is_secure(gateway: tuple[ServerProcess, dict[str, str]]) -> None:
    """A proxy on loopback (docs/deployment.md's nginx) that says the browser came over HTTPS gets a
    `Secure` cookie, for the login and for the logout that clears it."""
    server, keys = gateway
    https = {"x-forwarded-proto": "https"}
    ok = _login(server.base_url, keys["ops"], https)
    assert ok.status_code == 200 and ok.headers["set-cookie"].endswith("; Secure")
    jar = {"tidegate_session": ok.headers["set-cookie"].split(";")[0].split("=", 1)[1]}
    out = httpx.post(server.base_url + "/ui/logout", cookies=jar, headers={**https, "x-csrf-token": ok.json()["csrf"]})
    assert (
        out.status_code == 200 and "Max-Age=0" in out.headers["set-cookie"] and "; Secure" in out.headers["set-cookie"]
    )
    assert "Secure" not in _login(server.base_url, keys["ops"], {"x-forwarded-proto": "http"}).headers["set-cookie"]


def test_x_forwarded_proto_from_an_untrusted_address_is_ignored(tmp_path: Path) -> None:
    """With `TIDEGATE_FORWARDED_ALLOW_IPS` naming another proxy, loopback is no longer trusted: its
    X-Forwarded-Proto changes nothing."""
    with OpenAIUpstream() as emu:
        config = tidegate_toml(sqlite_url(tmp_path), {"emu": {"kind": "openai", "base_url": emu.base_url}}, {})
        server = start_server(tmp_path, config, extra_env={"TIDEGATE_FORWARDED_ALLOW_IPS": "10.20.0.0/16"})
        try:
            ok = _login(server.base_url, MASTER_KEY, {"x-forwarded-proto": "https"})
            assert ok.status_code == 200 and "Secure" not in ok.headers["set-cookie"]
        finally:
            server.stop()


def test_every_answer_says_nosniff(gateway: tuple[ServerProcess, dict[str, str]]) -> None:
    """The console's files, its session answers, the API's JSON and errors and a stream: each head
    carries `X-Content-Type-Options: nosniff`."""
    server, keys = gateway
    base, bearer = server.base_url, {"Authorization": f"Bearer {keys['ops']}"}
    answers = [
        httpx.get(base + "/ui/"),
        httpx.get(base + "/ui/app.js"),
        httpx.get(base + "/ui/session"),  # 401
        httpx.get(base + "/"),  # 302
        httpx.get(base + "/v1/models", headers=bearer),
        httpx.get(base + "/v1/models"),  # 401
        httpx.get(base + "/healthz"),
    ]
    body = {"model": "m/hello", "messages": [{"role": "user", "content": "hi"}], "stream": True}
    with httpx.stream("POST", base + "/v1/chat/completions", json=body, headers=bearer, timeout=30) as stream:
        assert "[DONE]" in stream.read().decode()
        answers.append(stream)
    assert [r.headers.get("x-content-type-options") for r in answers] == ["nosniff"] * len(answers)


def test_head_answers_like_get_on_the_root_and_the_console(gateway: tuple[ServerProcess, dict[str, str]]) -> None:
    """A probe's `HEAD /` (Claude Code sends one) follows the redirect to the console and finds it: HEAD
    answers each of these with GET's status and head, and no body; the icon a browser asks every page
    for is there too."""
    server, _ = gateway
    with httpx.Client(base_url=server.base_url) as client:
        for path in ("/", "/ui", "/ui/", "/ui/app.js", "/ui/app.css", "/ui/favicon.svg", "/favicon.ico"):
            got, head = client.get(path), client.head(path)
            assert head.status_code == got.status_code, path
            for name in ("content-type", "content-length", "location", "content-security-policy"):
                assert head.headers.get(name) == got.headers.get(name), (path, name)
            assert head.content == b"", path
        probe = client.head("/", follow_redirects=True)
        assert probe.status_code == 200 and probe.url.path == "/ui/"
        icon = client.get("/favicon.ico")
        assert icon.status_code == 200 and icon.headers["content-type"] == "image/svg+xml"
        assert icon.content.startswith(b"<svg") and icon.content == client.get("/ui/favicon.svg").content
        assert client.head("/ui/nothing-here").status_code == 404
        refused = client.post("/ui/app.js")
        assert refused.status_code == 405 and refused.json()["error"]["message"] == "use GET /ui/app.js"


def _shot(page: Page, out: Path, name: str) -> None:
    page.screenshot(path=str(out / f"console-{name}.png"), full_page=True)


def test_the_console_in_chromium(gateway: tuple[ServerProcess, dict[str, str]], tmp_path: Path, shots: Path) -> None:
    server, keys = gateway
    with sync_playwright() as pw:
        browser = pw.chromium.launch(executable_path=chromium_binary(), headless=True, args=["--no-sandbox"])
        context = browser.new_context(viewport={"width": 1200, "height": 800})
        page = context.new_page()
        page.goto(server.base_url + "/")
        expect(page.locator("#key")).to_be_visible()
        expect(page.locator("#nav")).to_be_hidden()  # no page to go to before the login
        page.fill("#key", keys["ops"])
        page.click("#login")
        expect(page.locator("#nav")).to_be_visible()
        expect(page.locator("#who")).to_have_text("ops")

        # the playground streams through the gateway; the live log (a second tab) follows the same row
        log = context.new_page()
        log.goto(server.base_url + "/ui/#/log")
        page.goto(server.base_url + "/ui/#/playground")
        page.select_option("#model", "m/quiet")
        page.fill("#prompt", "say hello")
        page.click("#send")
        expect(page.locator("#reply")).to_contain_text("Hello")  # the first tokens, before the silence
        expect(page.locator("#stream-state")).to_have_text("streaming")
        gid = page.locator("#stream-state").get_attribute("data-generation")
        assert gid
        row = log.locator(f'tr[data-id="{gid}"]')
        expect(row).to_have_attribute("data-status", "in_progress")
        # while it runs (the upstream silent after "Hello"): who serves, its TTFT, its tokens so far
        running = log.locator(f'tr[data-id="{gid}"][data-status="in_progress"]')
        expect(running.locator('[data-col="provider"]')).to_have_text("emu")
        expect(running.locator('[data-col="ttft"]')).to_have_text(re.compile(r"^\d+ ms$"))
        expect(running.locator('[data-col="tokens"]')).to_have_text(re.compile(r"^~\d+$"))
        _shot(log, tmp_path, "log-running")
        expect(page.locator("#stream-state")).to_have_text("completed", timeout=10_000)
        expect(row).to_have_attribute("data-status", "completed", timeout=5_000)
        _shot(page, shots, "playground")
        _shot(log, shots, "log")

        # its page replays it at the pace it streamed: "Hello", then 1.5 s of nothing, then the rest
        page.goto(server.base_url + f"/ui/#/gen/{gid}")
        expect(page.locator("#output")).to_have_text("Hello, world \u00e9\u2713!")
        fact = lambda name: page.locator(f'#facts dd[data-fact="{name}"]')  # noqa: E731
        expect(fact("key")).to_have_text(re.compile(r"^ops \(\w+\)$"))
        expect(fact("created")).to_have_text(re.compile(r"\d"))
        expect(fact("route reason")).to_have_text("strategy=ordered")
        page.click("#replay")
        seen: list[tuple[float, str]] = []  # (the replay's clock, the text shown then), read together
        shown = "[document.querySelector('#replay-clock').textContent, document.querySelector('#output').textContent]"
        clock = ""
        while not clock or clock.split()[0] != clock.split()[3]:  # "0.4 s of 1.5 s" until the end
            clock, text = page.evaluate(shown)
            if clock:
                seen.append((float(clock.split()[0]), text))
            assert len(seen) < 200, seen
            page.wait_for_timeout(50)
        silence = [t for t, text in seen if 0.4 <= t <= 1.3]  # an even spread would show more and more
        assert max(silence) - min(silence) >= 0.6 and all(text == "Hello" for t, text in seen if 0.4 <= t <= 1.3)
        expect(page.locator("#output")).to_have_text("Hello, world \u00e9\u2713!", timeout=2_000)
        expect(page.locator("#replay")).to_be_enabled()
        page.click("#replay")  # again, for the picture: in the silence
        expect(page.locator("#output")).to_have_text("Hello", timeout=3_000)
        _shot(page, shots, "generation-replay")

        # reasoning is shown apart from the answer
        body = {"model": "m/think", "messages": [{"role": "user", "content": "think"}], "stream": True}
        headers = {"Authorization": f"Bearer {keys['ops']}"}
        r = httpx.post(server.base_url + "/v1/chat/completions", json=body, headers=headers, timeout=30)
        assert r.status_code == 200 and "[DONE]" in r.text
        page.goto(server.base_url + f"/ui/#/gen/{r.headers['x-generation-id']}")
        expect(page.locator("#reasoning")).to_have_text("Let me think \u00fcber it.")
        expect(page.locator("#output")).to_have_text("42")
        _shot(page, shots, "generation-reasoning")

        # a stream that fails mid-way is shown incomplete, with its partial text, here and on its page
        page.goto(server.base_url + "/ui/#/playground")
        page.select_option("#model", "m/broken")
        page.click("#send")
        expect(page.locator("#stream-state")).to_contain_text("incomplete")
        expect(page.locator("#reply")).to_have_class("incomplete")
        broken = page.locator("#stream-state").get_attribute("data-generation")
        page.goto(server.base_url + f"/ui/#/gen/{broken}")
        expect(page.locator("#completeness")).to_contain_text("Incomplete (failed)")
        expect(page.locator("#output")).to_have_class("incomplete")
        _shot(page, shots, "generation-failed")

        # a router model is in the playground's list and streams like any chat model
        page.goto(server.base_url + "/ui/#/playground")
        page.select_option("#model", "tidegate/auto", timeout=5_000)
        page.fill("#prompt", "hello?")
        page.click("#send")
        expect(page.locator("#stream-state")).to_have_text("completed", timeout=10_000)
        expect(page.locator("#reply")).to_have_text("Hello, world \u00e9\u2713!")

        # the old usage page is the overview now: its charts by model name the models that ran
        page.goto(server.base_url + "/ui/#/usage?window=hour")
        expect(page.locator("#chart-tokens[data-drawn] canvas")).to_be_visible()
        expect(page.locator("#chart-tokens .u-legend")).to_contain_text("m/quiet")
        expect(page.locator('#groups-rows tr[data-group="m/quiet"]')).to_be_visible()

        # at a phone's width the page fits; the log's table scrolls sideways inside its box
        phone = context.new_page()
        phone.set_viewport_size({"width": 375, "height": 740})
        for where in ("#/log", "#/overview", f"#/gen/{gid}", "#/playground"):
            phone.goto(server.base_url + "/ui/" + where)
            expect(phone.locator("main h2")).to_be_visible()
            if where == "#/log":
                expect(phone.locator("#log-rows tr").first).to_be_visible()
                _shot(phone, shots, "log-phone")
            assert phone.evaluate("document.documentElement.scrollWidth") <= 375, where
        phone.goto(server.base_url + "/ui/#/log")
        expect(phone.locator("#log-rows tr").first).to_be_visible()
        box = "document.querySelector('#log-box')"
        assert phone.evaluate(f"{box}.scrollWidth > {box}.clientWidth")  # the columns are all there, scrolled to
        browser.close()
    assert [p.name for p in tmp_path.glob("console-*.png")] == ["console-log-running.png"]
