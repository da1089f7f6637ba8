"""The web page on workflow and team runs, in headless Chromium (STATEWISE_SCREENSHOT=path
saves the README's screenshot of a workflow run): a workflow's steps show up
live while it runs (its model waits between steps) and, afterwards, each step with its tool
calls and output; a team's members and their tool calls; events that expand to show the
model request and response and the tool arguments and results; toasts that leave the Send
button free; a layout that works 800 px wide."""

from __future__ import annotations

import asyncio
import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from statewise import Agent, RunContext, Step, Team, Workflow
from statewise.db import SqliteDb
from statewise.models import FunctionModel, Message, ModelResponse, RequestInfo, ToolCall
from statewise.server import create_app
from tests.server.conftest import LiveServer, start_server, stop_server
from tests.server.test_browser import CHROMIUM, CHROMIUM_ARGS

from playwright.sync_api import FloatRect, Page, expect, sync_playwright  # isort: skip

pytestmark = pytest.mark.browser


def note(run_context: RunContext, text: str) -> str:
    """Write a note into the shared list.

    Args:
        text: what to note
    """
    run_context.session_state["notes"].append(text)
    return f"noted {text}"


def waiting_model(word: str) -> FunctionModel:
    """Notes `word`, then thinks for a while before answering: the page must show the step
    (and the state it wrote) before the workflow ends."""

    async def fn(messages: list[Message], info: RequestInfo) -> ModelResponse:
        if messages[-1].role == "tool":
            await asyncio.sleep(1.2)
            return ModelResponse(content=f"{word} done")
        return ModelResponse(tool_calls=[ToolCall("note", {"text": word}, f"n-{word}")])

    return FunctionModel(fn, id=f"{word}-model")


def leader_model(messages: list[Message], info: RequestInfo) -> ModelResponse:
    if messages[-1].role == "tool":
        return ModelResponse(content="team finished")
    call = ToolCall("delegate_task_to_member", {"member_name": "scribe", "task": "go"}, "d1")
    return ModelResponse(tool_calls=[call])


def apps(db: SqliteDb) -> list[Any]:
    first = Agent(
        name="first",
        model=waiting_model("alpha"),
        tools=[note],
        instructions="Draft. Notes: {notes}",
    )
    second = Agent(
        name="second", model=waiting_model("beta"), tools=[note], instructions="Review: {notes}"
    )
    workflow = Workflow(
        name="pipeline",
        db=db,
        session_state={"notes": []},
        steps=[Step(name="draft", agent=first), Step(name="review", agent=second)],
    )
    scribe = Agent(
        name="scribe", model=waiting_model("gamma"), tools=[note], description="Takes notes"
    )
    team = Team(
        name="office",
        members=[scribe],
        model=FunctionModel(leader_model, id="leader-model"),
        db=db,
        session_state={"notes": []},
        instructions="Notes so far: {notes}",
    )
    return [workflow, team]


@pytest.fixture
def page_at(tmp_path: Path) -> Iterator[tuple[LiveServer, Any]]:
    live = start_server(create_app(apps(SqliteDb(db_file=tmp_path / "runs.db"))))
    try:
        with sync_playwright() as p:
            browser = p.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
            errors: list[str] = []

            def open_page(width: int = 1440, app: str = "pipeline") -> Page:
                page = browser.new_page(viewport={"width": width, "height": 820})
                page.on("pageerror", lambda exc: errors.append(str(exc)))
                page.goto(f"{live.url}/?app={app}")
                expect(page.get_by_test_id("app-select")).to_contain_text(app)
                return page

            yield live, open_page
            browser.close()
            assert not errors, errors
    finally:
        stop_server(live)


def send(page: Page, text: str) -> None:
    page.get_by_test_id("chat-input").fill(text)
    page.get_by_test_id("send").click()


def test_workflow_steps_show_live_and_in_the_run_detail(page_at: tuple[LiveServer, Any]) -> None:
    _live, open_page = page_at
    page: Page = open_page()
    send(page, "start")
    # While the second step's model still thinks, the first step is on the page.
    expect(page.get_by_test_id("step-completed").first).to_contain_text("step draft")
    expect(page.get_by_test_id("state-tree")).to_contain_text('"alpha"')
    assert page.evaluate("document.body.dataset.running") == "1", "steps arrived only at the end"
    expect(page.get_by_test_id("step-started").nth(1)).to_contain_text("step review")
    expect(page.locator("body")).not_to_have_attribute("data-running", "1")
    expect(page.get_by_test_id("step-completed")).to_have_count(2)
    # Each step's answer shows once; the start-a-session hint is gone.
    expect(page.locator(".msg.assistant").filter(has_text="beta done")).to_have_count(1)
    expect(page.get_by_test_id("messages")).not_to_contain_text("Say something")

    page.get_by_test_id("run").first.click()
    steps = page.get_by_test_id("run-step")
    expect(steps).to_have_count(2)
    expect(steps.nth(0)).to_contain_text("draft")
    expect(steps.nth(0).get_by_test_id("run-step-tool")).to_contain_text(
        'first: note({"text":"alpha"}) → noted alpha'
    )
    expect(steps.nth(0).get_by_test_id("run-step-output")).to_contain_text("alpha done")
    expect(steps.nth(1).get_by_test_id("run-step-output")).to_contain_text("beta done")

    shot = os.environ.get("STATEWISE_SCREENSHOT")
    if shot:  # the README's picture: a workflow run, its steps, an expanded event
        page.get_by_test_id("show-events").check()
        event = page.locator('li[data-type="model_response"]').filter(has_text="second step 2")
        event.locator("summary").click()
        expect(event.get_by_test_id("event-system-prompt")).to_be_visible()
        page.evaluate("document.getElementById('toast').classList.add('hidden')")
        page.screenshot(path=shot)


def test_events_expand_to_show_request_response_and_tool_io(
    page_at: tuple[LiveServer, Any],
) -> None:
    _live, open_page = page_at
    page: Page = open_page(app="office")
    send(page, "take a note")
    # The member's work streams into the chat, marked as the member's.
    expect(page.get_by_test_id("member-tool").first).to_contain_text(
        'scribe: note({"text":"gamma"})'
    )
    expect(page.locator(".msg.member")).to_contain_text("gamma done")
    expect(page.locator("body")).not_to_have_attribute("data-running", "1")
    expect(page.get_by_test_id("messages")).to_contain_text("team finished")

    page.get_by_test_id("run").first.click()
    members = page.get_by_test_id("run-member")
    expect(members).to_have_count(1)
    expect(members.first).to_contain_text("scribe · 1 tool call")
    expect(members.first).to_contain_text('note({"text":"gamma"}) → noted gamma')

    page.get_by_test_id("show-events").check()
    leader_request = page.locator('li[data-type="model_response"]').filter(has_text="office step 2")
    leader_request.locator("summary").click()
    # The system prompt as rendered for that call: the member's note is already in it.
    expect(leader_request.get_by_test_id("event-system-prompt")).to_contain_text(
        'Notes so far: ["gamma"]'
    )
    expect(leader_request.get_by_test_id("event-system-prompt")).to_contain_text("- scribe")
    expect(leader_request.get_by_test_id("event-messages")).to_contain_text(
        "tool delegate_task_to_member: gamma done"
    )
    expect(leader_request.get_by_test_id("event-response")).to_contain_text("team finished")
    tool = page.locator('li[data-type="tool_call"]').filter(has_text="scribe: note")
    tool.locator("summary").click()
    expect(tool.get_by_test_id("event-arguments")).to_contain_text('"text": "gamma"')
    expect(tool.get_by_test_id("event-result")).to_contain_text("noted gamma")


def boxes_overlap(a: FloatRect, b: FloatRect) -> bool:
    return not (
        a["x"] + a["width"] <= b["x"]
        or b["x"] + b["width"] <= a["x"]
        or a["y"] + a["height"] <= b["y"]
        or b["y"] + b["height"] <= a["y"]
    )


@pytest.mark.parametrize("width", [800, 1440])
def test_toasts_leave_send_free_and_the_layout_fits(
    width: int, page_at: tuple[LiveServer, Any]
) -> None:
    _live, open_page = page_at
    page: Page = open_page(width=width)
    page.evaluate("toast('a long message that could cover the chat form if it sat at the bottom')")
    toast_box = page.get_by_test_id("toast").bounding_box()
    send_box = page.get_by_test_id("send").bounding_box()
    input_box = page.get_by_test_id("chat-input").bounding_box()
    assert toast_box and send_box and input_box
    assert not boxes_overlap(toast_box, send_box)
    assert not boxes_overlap(toast_box, input_box)
    # Nothing sticks out sideways; every panel and the Send button are on screen.
    assert page.evaluate("document.documentElement.scrollWidth") <= width
    assert send_box["x"] + send_box["width"] <= width
    for panel in ("chat-panel", "state-panel", "timeline-panel"):
        box = page.locator(f"#{panel}").bounding_box()
        assert box and box["width"] >= 250 and box["x"] + box["width"] <= width, (panel, box)
    send(page, "go")
    expect(page.get_by_test_id("step-completed")).to_have_count(2, timeout=15000)
