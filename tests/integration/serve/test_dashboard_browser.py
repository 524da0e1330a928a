"""Headless Chromium (Debian's) loads the dashboard and sees the numbers change as events arrive."""

from __future__ import annotations

import json
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


def test_operations_view_and_pipelines(stack, kappa_env, serve_topics, topic_factory, sender, redis_client,
                                       prefix):
    """The operations view shows what Redis and Kafka hold (lag, batches, dead letters, version)."""
    from playwright.sync_api import expect, sync_playwright

    from jobs.config.load import load_config
    from jobs.serve.server import ServerThread
    from jobs.views.versions import switch_current

    cfg = load_config("test", environ=kappa_env, overrides={
        "serve.analyzed_topic": serve_topics["analyzed"], "serve.summaries_topic": serve_topics["summaries"],
        "streaming.redis_prefix": prefix, "streaming.views_topic": topic_factory(1, prefix="views"),
        "serve.port": 0})
    analyzed, query = serve_topics["analyzed"], cfg.streaming.query_name
    switch_current(cfg, 2, 1)
    sender.send(analyzed, [rsvp(n) for n in range(7)])  # partitions 0, 1, 2 get 3, 2, 2 records
    redis_client.hset(f"{prefix}:fence:summaries", mapping={f"{analyzed}:0": 1, f"{analyzed}:1": 0,
                                                            f"{analyzed}:2": 0, "updated_ms": W})
    redis_client.hset(f"{prefix}:metrics:{query}:status", mapping={"state": "running", "pid": os.getpid()})
    redis_client.hset(f"{prefix}:metrics:{query}", mapping={"batch_id": 41, "emitted_ms": W})
    redis_client.lpush(f"{prefix}:metrics:{query}:history",
                       *[json.dumps({"batch_duration_ms": ms}) for ms in (100, 200, 300, 400, 5000)])
    redis_client.hset(f"{prefix}:totals", mapping={"input": 10, "valid": 8, "dlq": 2, "late": 0})
    server = ServerThread(cfg).start()
    try:
        with sync_playwright() as pw:
            browser = pw.chromium.launch(executable_path=CHROMIUM, args=ARGS)
            try:
                page = browser.new_page(viewport={"width": 1366, "height": 900})
                page.goto(server.url + "/")
                expect(page.get_by_test_id("ops-lag")).to_have_text(
                    f"6 records ({analyzed}:0 2, {analyzed}:1 2, {analyzed}:2 2)", timeout=30_000)
                expect(page.get_by_test_id("ops-version")).to_have_text("2")
                expect(page.get_by_test_id("ops-batch")).to_have_text(
                    f"{query} up (running), batch 41: p50 0.3 s, p99 5 s")
                expect(page.get_by_test_id("ops-dlq")).to_contain_text("2 of 10 records")
                redis_client.hset(f"{prefix}:totals", mapping={"input": 110, "dlq": 52})
                expect(page.get_by_test_id("ops-dlq")).to_contain_text("52 of 110 records", timeout=30_000)
                expect(page.get_by_test_id("ops-dlq")).to_contain_text("50 % of input")
                cards = page.get_by_test_id("pipelines").locator("li", has_text="cards")
                expect(cards).to_contain_text("version 1")
                link = cards.get_by_role("link", name="flags_by_country")
                expect(link).to_have_attribute("href", "/api/v1/pipelines/cards/views/flags_by_country")
                followed = page.get_by_test_id("pipelines").locator("li", has_text="rsvp")   # followed
                expect(followed).to_contain_text("(kappa stream)")
                expect(followed.get_by_role("link", name="cities")).to_have_attribute("href", "/docs")
                ARTIFACTS.mkdir(parents=True, exist_ok=True)
                page.screenshot(path=str(ARTIFACTS / "dashboard-operations.png"), full_page=True)
            finally:
                browser.close()
    finally:
        server.stop()
        for key in redis_client.scan_iter(match=f"{prefix}:*"):
            redis_client.delete(key)


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
