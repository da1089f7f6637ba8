"""What the page tells about each run, in Chromium: tool results inline in the chat (also
when the session is opened again), the run's model, tokens and latency, dates with the
year in the timeline, and a hint when the agent sends no earlier turns to the model."""

from __future__ import annotations

import datetime
from pathlib import Path

import pytest
from playwright.sync_api import expect, sync_playwright

from statewise.db import SqliteDb
from statewise.server import create_app
from tests.server.conftest import make_agent, start_server, stop_server
from tests.server.test_browser import CHROMIUM, CHROMIUM_ARGS, send

pytestmark = pytest.mark.browser


def test_runs_show_results_model_tokens_latency_and_dates(tmp_path: Path) -> None:
    live = start_server(create_app([make_agent(SqliteDb(db_file=str(tmp_path / "d.db")))]))
    try:
        with sync_playwright() as p:
            browser = p.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
            page = browser.new_page(viewport={"width": 1440, "height": 900})
            errors: list[str] = []
            page.on("pageerror", lambda exc: errors.append(str(exc)))
            page.goto(f"{live.url}/")
            send(page, "add kiwi")
            messages = page.get_by_test_id("messages")
            expect(messages).to_contain_text("Done: added kiwi")
            session_id = page.get_by_test_id("session-select").input_value()
            page.goto(f"{live.url}/?session={session_id}")  # opened again: from storage
            expect(messages).to_contain_text("← add_item: added kiwi")
            expect(page.get_by_test_id("history-hint")).to_contain_text(
                "add_history_to_context=False"
            )
            metrics = page.get_by_test_id("run-metrics").first
            expect(metrics).to_contain_text("function:list-player")
            expect(metrics).to_contain_text(" ms")
            run = page.get_by_test_id("run").first
            expect(run).to_contain_text(str(datetime.date.today().year))
            browser.close()
            assert not errors, errors
    finally:
        stop_server(live)
