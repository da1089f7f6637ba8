"""The web page end to end in headless Chromium (Debian's `chromium`, driven by Playwright):
chat with an offline agent, watch the state tree change during the run, open a run's diff,
roll back and fork. Set STATEWISE_SCREENSHOT=path to save a screenshot of the page.
"""

from __future__ import annotations

import asyncio
import os
import shutil
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from statewise import Agent
from statewise.db import SqliteDb
from statewise.models import FunctionModel, Message, ModelResponse, RequestInfo
from statewise.server import create_app
from tests.server.conftest import LiveServer, add_item, list_model, start_server, stop_server

CHROMIUM = os.environ.get("STATEWISE_CHROMIUM", "/usr/bin/chromium")
CHROMIUM_ARGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--no-first-run",
]
IN_CI = os.environ.get("CI", "").lower() == "true"

pytestmark = pytest.mark.browser

if not IN_CI:
    if not Path(CHROMIUM).exists() and not shutil.which("chromium"):
        pytest.skip(
            f"no Chromium at {CHROMIUM}: apt-get install chromium (required when CI=true)",
            allow_module_level=True,
        )
    pytest.importorskip("playwright", reason="pip install playwright (required when CI=true)")

from playwright.sync_api import Dialog, Page, expect, sync_playwright  # noqa: E402

SECRET = "sk-live-do-not-show"


async def slow_list_model(messages: list[Message], info: RequestInfo) -> ModelResponse:
    """Like list_model, but it thinks for a while after its tool calls, so the state the
    tools committed is on the page before the run ends."""
    if messages[-1].role == "tool":
        await asyncio.sleep(1.0)
    return list_model(messages, info)


def shop_agent(db_file: str) -> Agent:
    return Agent(
        name="shopper",
        description="Keeps a shopping list in session state",
        model=FunctionModel(slow_list_model, id="slow-list-player"),
        db=SqliteDb(db_file=db_file),
        session_state={"items": [], "count": 0, "api_token": SECRET, "prefs": {"store": "corner"}},
        tools=[add_item],
        secret_keys=["api_token"],
    )


@pytest.fixture
def live_page(tmp_path: Path) -> Iterator[tuple[LiveServer, Page]]:
    live = start_server(create_app([shop_agent(str(tmp_path / "ui.db"))]))
    try:
        with sync_playwright() as p:
            browser = p.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
            page = browser.new_page(viewport={"width": 1440, "height": 820})
            errors: list[str] = []
            page.on("pageerror", lambda exc: errors.append(str(exc)))
            page.goto(f"{live.url}/")
            yield live, page
            browser.close()
            assert not errors, errors
    finally:
        stop_server(live)


def send(page: Page, text: str) -> None:
    page.get_by_test_id("chat-input").fill(text)
    page.get_by_test_id("send").click()


def state_of(live: LiveServer, session_id: str) -> dict[str, Any]:
    body: dict[str, Any] = httpx.get(f"{live.url}/v1/sessions/{session_id}/state").json()
    return body


def test_chat_watch_state_diff_rollback_fork(live_page: tuple[LiveServer, Page]) -> None:
    live, page = live_page
    tree = page.get_by_test_id("state-tree")
    expect(page.get_by_test_id("app-select")).to_contain_text("shopper")

    # a chat turn: the tree shows the tool's writes while the run is still going
    send(page, "add milk, eggs")
    expect(tree).to_contain_text('"milk"')
    assert page.evaluate("document.body.dataset.running") == "1", "state arrived only at the end"
    expect(page.get_by_test_id("messages")).to_contain_text("Done: added eggs")
    expect(page.locator("body")).not_to_have_attribute("data-running", "1")
    expect(tree).to_contain_text("*** (secret)")
    session_id = page.get_by_test_id("session-select").input_value()
    assert session_id, "the new session is selected"
    assert state_of(live, session_id)["state"]["items"] == ["milk", "eggs"]

    send(page, "add bread")
    expect(tree).to_contain_text('"bread"')
    expect(page.get_by_test_id("run")).to_have_count(2)
    expect(page.locator("body")).not_to_have_attribute("data-running", "1")

    # the second run's diff: items and count changed, coloured as changes
    page.get_by_test_id("run").nth(1).click()
    diff = page.get_by_test_id("run-diff")
    expect(diff).to_contain_text("count: 2 → 3")
    expect(page.get_by_test_id("diff-changed").first).to_be_visible()
    color = page.get_by_test_id("diff-changed").first.evaluate(
        "el => getComputedStyle(el).backgroundColor"
    )
    assert color not in ("rgba(0, 0, 0, 0)", "rgb(255, 255, 255)")

    # roll back to before it: first it asks; saying no changes nothing
    version_before = state_of(live, session_id)["version"]
    asked: list[str] = []

    def answer(accept: bool) -> Callable[[Dialog], None]:
        def handle(dialog: Dialog) -> None:
            asked.append(dialog.message)
            dialog.accept() if accept else dialog.dismiss()

        return handle

    page.once("dialog", answer(False))
    page.get_by_test_id("rollback-before").click()
    expect(page.get_by_test_id("run-diff")).to_be_visible()
    assert asked and "Roll the state back to version" in asked[0]
    assert state_of(live, session_id)["version"] == version_before
    # saying yes rolls back: bread is gone, as a new version
    page.once("dialog", answer(True))
    page.get_by_test_id("rollback-before").click()
    expect(page.get_by_test_id("toast")).to_contain_text("Rolled back")
    expect(tree).not_to_contain_text('"bread"')
    after = state_of(live, session_id)
    assert after["state"]["items"] == ["milk", "eggs"] and after["state"]["count"] == 2
    assert after["version"] == version_before + 1
    expect(page.get_by_test_id("state-version")).to_have_text(f"v{after['version']}")

    # fork from the first run: a new session holding that run's state
    page.get_by_test_id("run").first.click()
    expect(diff).to_contain_text("items")
    page.get_by_test_id("fork").click()
    expect(page.get_by_test_id("toast")).to_contain_text("Forked")
    expect(page.get_by_test_id("session-select")).not_to_have_value(session_id)
    forked = page.get_by_test_id("session-select").input_value()
    assert forked
    assert state_of(live, forked)["state"]["items"] == ["milk", "eggs"]
    # the fork keeps the chat that led there, says where it came from, and links back
    banner = page.get_by_test_id("fork-banner")
    expect(banner).to_contain_text(f"forked from {session_id} at version 2")
    expect(page.get_by_test_id("messages")).to_contain_text("add milk, eggs")
    expect(page.get_by_test_id("messages")).not_to_contain_text("add bread")
    expect(page.get_by_test_id("run")).to_have_count(1)
    page.get_by_test_id("fork-origin").click()
    expect(page.get_by_test_id("session-select")).to_have_value(session_id)
    expect(page.get_by_test_id("run")).to_have_count(2)
    expect(banner).to_be_hidden()

    # the events view and no secret anywhere on the page
    page.get_by_test_id("show-events").check()
    expect(page.get_by_test_id("event").first).to_be_visible()
    assert SECRET not in page.content()

    shot = os.environ.get("STATEWISE_SCREENSHOT")
    if shot:
        page.get_by_test_id("session-select").select_option(session_id)
        expect(page.get_by_test_id("run")).to_have_count(2)
        page.get_by_test_id("show-events").uncheck()
        page.get_by_test_id("run").nth(1).click()
        expect(diff).to_contain_text("count")
        page.evaluate("document.getElementById('toast').classList.add('hidden')")
        page.screenshot(path=shot)


@pytest.fixture
def bank_page(tmp_path: Path) -> Iterator[tuple[LiveServer, Page]]:
    from tests.run.test_pause import bank

    live = start_server(create_app([bank(SqliteDb(db_file=str(tmp_path / "bank.db")))]))
    try:
        with sync_playwright() as p:
            browser = p.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
            page = browser.new_page(viewport={"width": 1440, "height": 820})
            errors: list[str] = []
            page.on("pageerror", lambda exc: errors.append(str(exc)))
            page.goto(f"{live.url}/")
            yield live, page
            browser.close()
            assert not errors, errors
    finally:
        stop_server(live)


def test_paused_runs_approve_reject_edit(bank_page: tuple[LiveServer, Page]) -> None:
    live, page = bank_page
    approvals = page.get_by_test_id("approvals")

    # A run pauses before the transfer: the page shows it with its arguments.
    send(page, "pay bob")
    expect(approvals).to_be_visible()
    expect(approvals).to_contain_text('transfer({"amount":5,"to":"bob"})')
    expect(approvals).to_contain_text("transfer requires confirmation")
    session_id = page.get_by_test_id("session-select").input_value()
    assert "transfers" not in state_of(live, session_id)["state"]

    # Approve: the run goes on, the tool runs once, the box goes away.
    page.get_by_test_id("approve").click()
    expect(page.get_by_test_id("toast")).to_contain_text("Run continued")
    expect(approvals).to_be_hidden()
    expect(page.get_by_test_id("messages")).to_contain_text("sent 5 to bob")
    assert state_of(live, session_id)["state"]["transfers"] == [{"amount": 5, "to": "bob"}]

    # Reject with a reason: the model is told why.
    send(page, "pay bob again")
    expect(approvals).to_be_visible()
    page.get_by_test_id("reject").click()
    page.get_by_test_id("reject-reason").fill("bob was paid already")
    page.get_by_test_id("confirm-reject").click()
    expect(page.get_by_test_id("messages")).to_contain_text("bob was paid already")
    expect(approvals).to_be_hidden()
    assert len(state_of(live, session_id)["state"]["transfers"]) == 1

    # Edit the arguments, then approve them.
    send(page, "pay someone")
    expect(approvals).to_be_visible()
    page.get_by_test_id("edit").click()
    page.get_by_test_id("edit-arguments").fill('{"amount": 2, "to": "eve"}')
    page.get_by_test_id("confirm-edit").click()
    expect(page.get_by_test_id("messages")).to_contain_text("sent 2 to eve")
    assert state_of(live, session_id)["state"]["transfers"][-1] == {"amount": 2, "to": "eve"}
    expect(page.get_by_test_id("run").first).to_be_visible()
