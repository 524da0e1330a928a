"""Headless Chromium (Debian's) loads the dashboard and sees the numbers change as events arrive."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from tests.conftest import REPO
from tests.integration.serve.support import city_summary, rsvp, topics_summary

CHROMIUM = os.environ.get("KAPPA_CHROMIUM", "/usr/bin/chromium")
ARGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
        "--disable-component-update", "--disable-sync", "--no-first-run"]
ARTIFACTS = REPO / "var" / "test-artifacts"
W = 1_767_225_600_000

pytestmark = [pytest.mark.slow, pytest.mark.skipif(
    not Path(CHROMIUM).exists(), reason=f"{CHROMIUM} missing: run scripts/ensure-chromium.sh (make setup)")]


def test_dashboard_updates_live(start_serve, sender, serve_topics, redis_client, prefix):
    from playwright.sync_api import expect, sync_playwright

    redis_client.zadd(f"{prefix}:topics:all", {"Hiking": 3})
    server = start_serve()
    with sync_playwright() as pw:
        browser = pw.chromium.launch(executable_path=CHROMIUM, args=ARGS)
        try:
            page = browser.new_page(viewport={"width": 1366, "height": 800})
            page.goto(server.url + "/")
            expect(page.locator("#conn")).to_have_text("live", timeout=15_000)
            expect(page.get_by_test_id("top-topics")).to_contain_text("Hiking")
            assert page.get_by_test_id("rsvp-count").inner_text() == "0"

            rsvps = [rsvp(n, city=("Barcelona", "Oslo")[n % 2]) for n in range(7)]
            sender.send(serve_topics["analyzed"], rsvps)
            sender.send(serve_topics["summaries"], [
                topics_summary("top_topics", [("Salsa", 7), ("Hiking", 3)]),
                topics_summary("trending", [("Salsa", 7)], start=W),
                city_summary(W, "Barcelona", 4), city_summary(W, "Oslo", 3)], key="key")
            expect(page.get_by_test_id("rsvp-count")).to_have_text("7", timeout=15_000)
            expect(page.get_by_test_id("summary-count")).to_have_text("4")
            expect(page.get_by_test_id("top-topics").locator("li").first).to_contain_text("Salsa7")
            expect(page.get_by_test_id("trending")).to_contain_text("Salsa")
            expect(page.get_by_test_id("cities").locator("li").first).to_contain_text("Barcelona4")

            sender.send(serve_topics["summaries"], [city_summary(W, "Oslo", 9)], key="key")
            expect(page.get_by_test_id("cities").locator("li").first).to_contain_text("Oslo9", timeout=15_000)
            ARTIFACTS.mkdir(parents=True, exist_ok=True)
            shot = ARTIFACTS / "dashboard.png"
            page.screenshot(path=str(shot), full_page=True)
            print(f"\ndashboard screenshot: {shot}")
        finally:
            browser.close()


def test_dashboard_asks_for_the_token(start_serve):
    from playwright.sync_api import expect, sync_playwright

    server = start_serve(token="s3cret")
    with sync_playwright() as pw:
        browser = pw.chromium.launch(executable_path=CHROMIUM, args=ARGS)
        try:
            page = browser.new_page()
            page.goto(server.url + "/#token=wrong")
            expect(page.get_by_test_id("auth-msg")).to_contain_text("refused", timeout=15_000)
            expect(page.locator("#conn")).to_have_text("token refused")
            page.goto(server.url + "/")
            page.reload()
            expect(page.get_by_test_id("auth-msg")).to_contain_text("needs an access token", timeout=15_000)
            page.fill("#token-input", "s3cret")
            page.get_by_role("button", name="Connect").click()
            expect(page.locator("#conn")).to_have_text("live", timeout=15_000)
            expect(page.get_by_test_id("auth")).to_be_hidden()
        finally:
            browser.close()
