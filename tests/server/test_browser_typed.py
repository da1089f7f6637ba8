"""The web page shows a typed answer as a formatted object, while the run streams and when
the session is opened again."""

from __future__ import annotations

from pathlib import Path

import pytest
from playwright.sync_api import expect, sync_playwright

from statewise import Agent
from statewise.db import SqliteDb
from statewise.models import FunctionModel
from statewise.server import create_app
from tests.server.conftest import start_server, stop_server
from tests.server.test_browser import CHROMIUM, CHROMIUM_ARGS, send
from tests.server.test_typed_answers_http import Triage, triage_model

pytestmark = pytest.mark.browser


def test_the_page_shows_the_typed_answer_formatted(tmp_path: Path) -> None:
    agent = Agent(
        name="triage",
        model=FunctionModel(triage_model),
        db=SqliteDb(db_file=str(tmp_path / "p.db")),
        output_schema=Triage,
    )
    live = start_server(create_app([agent]))
    try:
        with sync_playwright() as p:
            browser = p.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
            page = browser.new_page()
            errors: list[str] = []
            page.on("pageerror", lambda exc: errors.append(str(exc)))
            page.goto(f"{live.url}/")
            send(page, "disk full")
            answer = page.get_by_test_id("structured-answer")
            expect(answer).to_contain_text('"priority": "high"')
            expect(answer).to_contain_text('"summary": "disk full"')
            assert "\n" in (answer.text_content() or "")  # indented, not one line
            session_id = page.get_by_test_id("session-select").input_value()
            page.goto(f"{live.url}/?session={session_id}")
            expect(page.get_by_test_id("structured-answer").first).to_contain_text(
                '"priority": "high"'
            )
            browser.close()
            assert not errors, errors
    finally:
        stop_server(live)
