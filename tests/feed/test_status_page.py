"""The status page at ``/`` in a real headless browser (Playwright on the system
Chromium): the token asked for and kept in the tab's memory only, a demo pane seen
going ``blocked`` and ``done`` live with its screen, refusals without the token and
from a foreign Origin, and the headers (no-store, the strict CSP)."""

from __future__ import annotations

import os
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor

import httpx2
import pytest
from playwright.sync_api import Browser, expect, sync_playwright

from tests.service.conftest import REPO, Service, ServiceFactory, call, connect, ok, run, token_of

CHROMIUM = "/usr/bin/chromium"
CHROMIUM_ARGS = [
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--no-first-run",
]
SCREENSHOT = REPO / "docs" / "status-page.png"
LIVE_TIMEOUT_MS = 20_000

if not os.access(CHROMIUM, os.X_OK):
    pytest.skip(f"{CHROMIUM} is not installed (Debian package chromium)", allow_module_level=True)


@pytest.fixture
def service(services: ServiceFactory) -> Service:
    return services.start()


@pytest.fixture
def browser() -> Iterator[Browser]:
    with sync_playwright() as pw:
        chromium = pw.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS, headless=True)
        try:
            yield chromium
        finally:
            chromium.close()


def _tool(service: Service, tool: str, args: dict[str, object]) -> dict[str, object]:
    async def once() -> dict[str, object]:
        async with connect(service.url, token_of(service)) as client:
            return ok(await call(client, tool, args))

    # Playwright's sync API holds an event loop on this thread: the client runs on another.
    with ThreadPoolExecutor(1) as pool:
        return pool.submit(lambda: run(once())).result()


def _state_cell(name: str) -> str:
    return f'tr[data-pane="{name}"] td.state'


@pytest.mark.timeout(120)
def test_the_page_shows_a_pane_going_blocked_and_done_live(
    service: Service, browser: Browser
) -> None:
    base = service.url.removesuffix("/mcp")
    page = browser.new_page(viewport={"width": 1300, "height": 900})
    response = page.goto(base + "/")
    assert response is not None and response.status == 200
    headers = response.headers
    assert headers["cache-control"] == "no-store"
    assert "default-src 'none'" in headers["content-security-policy"]
    assert "script-src 'self'" in headers["content-security-policy"]

    # A wrong token is refused on the page, which asks again.
    page.fill("#token", "not-the-token")
    page.click("#connect")
    expect(page.locator("#error")).to_contain_text("refused", timeout=LIVE_TIMEOUT_MS)
    assert page.is_visible("#login")

    page.fill("#token", token_of(service))
    page.click("#connect")
    page.wait_for_selector("#main:not([hidden])", timeout=LIVE_TIMEOUT_MS)
    assert page.input_value("#token") == ""

    # A pane started after the page connected appears, live.
    _tool(service, "start_pane", {"name": "demo1", "profile": "demo"})
    page.wait_for_selector(_state_cell("demo1"), timeout=LIVE_TIMEOUT_MS)
    expect(page.locator("#screen")).to_contain_text(
        "panewarden demo agent", timeout=LIVE_TIMEOUT_MS
    )
    sent = _tool(service, "send_input", {"name": "demo1", "text": "dialog rm -rf build"})
    expect(page.locator(_state_cell("demo1"))).to_have_text("blocked", timeout=LIVE_TIMEOUT_MS)
    assert page.text_content('tr[data-pane="demo1"] td.kind') == "permission"
    _tool(
        service,
        "answer_dialog",
        {"name": "demo1", "answer": "allow_once", "expect_turn": sent["turn"]},
    )
    expect(page.locator(_state_cell("demo1"))).to_have_text("done", timeout=LIVE_TIMEOUT_MS)
    expect(page.locator("#screen")).to_contain_text("(3/3)", timeout=LIVE_TIMEOUT_MS)
    SCREENSHOT.parent.mkdir(exist_ok=True)
    page.screenshot(path=str(SCREENSHOT), full_page=True)

    # The token went nowhere but the tab's memory.
    assert token_of(service) not in page.url
    kept = page.evaluate("localStorage.length + sessionStorage.length + document.cookie.length")
    assert kept == 0
    # The page has no control that types: nothing but GET /feed is ever fetched.
    assert page.evaluate("document.querySelectorAll('textarea, [contenteditable]').length") == 0

    # Without the token the feed refuses the same page.
    status = page.evaluate("fetch('/feed').then(r => r.status)")
    assert status == 401
    page.close()
    assert token_of(service) not in service.stderr()

    # A page of another origin that holds the token still cannot read the feed.
    foreign = browser.new_page()
    foreign.route(
        "http://foreign.test/",
        lambda route: route.fulfill(status=200, content_type="text/html", body="<title>x</title>"),
    )
    foreign.goto("http://foreign.test/")
    outcome = foreign.evaluate(
        """(a) => fetch(a.url, {headers: {Authorization: "Bearer " + a.token}})
                 .then(r => "read " + r.status, () => "refused")""",
        {"url": base + "/feed?pane=demo1", "token": token_of(service)},
    )
    assert outcome == "refused"
    foreign.close()


def test_the_feed_refuses_a_foreign_origin_and_a_missing_token(service: Service) -> None:
    base = service.url.removesuffix("/mcp")
    bearer = {"Authorization": f"Bearer {token_of(service)}"}
    with httpx2.Client(trust_env=False, timeout=10) as http:
        foreign = http.get(base + "/feed", headers=bearer | {"Origin": "http://evil.example"})
        assert foreign.status_code == 403
        page = http.get(base + "/", headers={"Origin": "http://evil.example"})
        assert page.status_code == 403
        rebound = http.get(base + "/", headers={"Host": "evil.example"})
        assert rebound.status_code == 421
        missing = http.get(base + "/feed")
        assert missing.status_code == 401
        assert missing.headers["cache-control"] == "no-store"
        unknown = http.get(base + "/feed?pane=nope", headers=bearer)
        assert unknown.status_code == 404
        assert unknown.json()["code"] == "not_found"
        posted = http.post(base + "/feed", headers=bearer)
        assert posted.status_code == 405
