"""The AG-UI endpoint over real HTTP: event types, state snapshot + JSON Patch deltas that
rebuild the stored state, the frontend's edits merged as a writer, secrets, auth, errors."""

from __future__ import annotations

import copy
import json
import sqlite3
import threading
import uuid
from collections.abc import Callable
from typing import Any

import httpx
import jsonpatch
import pytest

from statewise import Agent, Workflow
from statewise.db import SqliteDb
from statewise.models import FunctionModel, Message, ModelResponse, RequestInfo, ToolCall
from statewise.workflow import Step
from tests.server.conftest import ADMIN, ALICE, BOB, LiveServer
from tests.server.test_api import assert_problem

URL = "/v1/agents/lister/agui"


def run_input(thread: str, text: str, **extra: Any) -> dict[str, Any]:
    messages = extra.pop("messages", [])
    return {
        "threadId": thread,
        "runId": uuid.uuid4().hex,
        "messages": [*messages, {"id": uuid.uuid4().hex, "role": "user", "content": text}],
        "tools": [],
        "context": [],
        "forwardedProps": {},
        **extra,
    }


def agui_events(client: httpx.Client, body: dict[str, Any], url: str = URL) -> list[dict[str, Any]]:
    r = client.post(url, json=body, headers={"Accept": "text/event-stream"})
    assert r.status_code == 200, r.text
    assert r.headers["content-type"].startswith("text/event-stream")
    events = []
    for block in r.text.strip().split("\n\n"):
        assert block.startswith("data: "), block
        events.append(json.loads(block[len("data: ") :]))
    return events


class Frontend:
    """What an AG-UI client keeps: state rebuilt only from the events it receives."""

    def __init__(self, client: httpx.Client, thread: str, url: str = URL) -> None:
        self.client, self.thread, self.url = client, thread, url
        self.state: Any = {}
        self.messages: list[dict[str, Any]] = []

    def run(self, text: str, **extra: Any) -> list[dict[str, Any]]:
        extra.setdefault("state", self.state)
        body = run_input(self.thread, text, messages=self.messages, **extra)
        events = agui_events(self.client, body, self.url)
        self.messages = body["messages"]
        for event in events:
            if event["type"] == "STATE_SNAPSHOT":
                self.state = event["snapshot"]
            elif event["type"] == "STATE_DELTA":
                self.state = jsonpatch.apply_patch(self.state, event["delta"])
            elif event["type"] == "MESSAGES_SNAPSHOT":
                self.messages = copy.deepcopy(event["messages"])
            else:
                self._message_event(event)
        return events

    def _message_event(self, event: dict[str, Any]) -> None:
        """Messages as the AG-UI client builds them (one per assistant turn, one per
        tool result)."""
        by_id = {m["id"]: m for m in self.messages}
        if event["type"] == "TEXT_MESSAGE_START":
            self.messages.append({"id": event["messageId"], "role": "assistant", "content": ""})
        elif event["type"] == "TEXT_MESSAGE_CONTENT":
            by_id[event["messageId"]]["content"] += event["delta"]
        elif event["type"] == "TOOL_CALL_START":
            parent = by_id.get(event.get("parentMessageId", ""))
            if parent is None:
                parent = {"id": event.get("parentMessageId"), "role": "assistant"}
                self.messages.append(parent)
            parent.setdefault("toolCalls", []).append(
                {
                    "id": event["toolCallId"],
                    "type": "function",
                    "function": {"name": event["toolCallName"], "arguments": ""},
                }
            )
        elif event["type"] == "TOOL_CALL_RESULT":
            self.messages.append(
                {
                    "id": event["messageId"],
                    "role": "tool",
                    "content": event["content"],
                    "toolCallId": event["toolCallId"],
                }
            )


def stored_state(client: httpx.Client, session_id: str) -> dict[str, Any]:
    r = client.get(f"/v1/sessions/{session_id}/state")
    assert r.status_code == 200, r.text
    state: dict[str, Any] = r.json()["state"]
    return state


def types(events: list[dict[str, Any]]) -> list[str]:
    return [e["type"] for e in events]


def test_run_streams_lifecycle_text_tools_and_state(live: LiveServer) -> None:
    with live.client() as client:
        ui = Frontend(client, "t1")
        events = ui.run("add milk, eggs")
        kinds = types(events)
        assert kinds[0] == "RUN_STARTED" and kinds[-1] == "RUN_FINISHED"
        assert kinds[1] == "STATE_SNAPSHOT"
        for needed in (
            "TOOL_CALL_START",
            "TOOL_CALL_ARGS",
            "TOOL_CALL_END",
            "TOOL_CALL_RESULT",
            "STATE_DELTA",
            "TEXT_MESSAGE_START",
            "TEXT_MESSAGE_CONTENT",
            "TEXT_MESSAGE_END",
        ):
            assert needed in kinds, (needed, kinds)
        assert events[0]["threadId"] == "t1" and events[0]["protocolVersion"]
        start = next(e for e in events if e["type"] == "TOOL_CALL_START")
        assert start["toolCallName"] == "add_item"
        args = next(e for e in events if e["type"] == "TOOL_CALL_ARGS")
        assert json.loads(args["delta"]) == {"item": "milk"}
        text = "".join(e["delta"] for e in events if e["type"] == "TEXT_MESSAGE_CONTENT")
        assert text.startswith("Done: ")
        deltas = [e["delta"] for e in events if e["type"] == "STATE_DELTA"]
        flat = [op for delta in deltas for op in delta]
        assert {"op": "add", "path": "/items/-", "value": "milk"} in flat
        assert {"op": "replace", "path": "/count", "value": 2} in flat
        assert (
            ui.state
            == stored_state(client, "t1")
            == {
                "items": ["milk", "eggs"],
                "count": 2,
            }
        )
        ui.run("add bread")
        assert ui.state == stored_state(client, "t1")
        assert ui.state["items"] == ["milk", "eggs", "bread"]


def test_frontend_edits_merge_with_concurrent_agent_writes(live: LiveServer) -> None:
    with live.client() as client:
        ui = Frontend(client, "t2")
        ui.run("add milk")
        # Meanwhile the agent appends from another client (no AG-UI)...
        r = client.post("/v1/agents/lister/runs", json={"input": "add eggs", "session_id": "t2"})
        assert r.status_code == 200, r.text
        # ...and the user edits the frontend's copy: a new item, a changed count, a new key.
        ui.state["items"].append("jam")
        ui.state["note"] = "from the UI"
        ui.run("hello")
        stored = stored_state(client, "t2")
        assert stored["items"] == ["milk", "eggs", "jam"]
        assert stored["note"] == "from the UI"
        assert ui.state == stored


def test_frontend_delete_and_list_removal_are_kept(live: LiveServer) -> None:
    with live.client() as client:
        ui = Frontend(client, "t3")
        ui.run("add a, b, c")
        ui.state["items"].remove("b")
        del ui.state["count"]
        ui.run("hi")
        stored = stored_state(client, "t3")
        assert stored == ui.state
        assert stored["items"] == ["a", "c"] and "count" not in stored


def test_new_frontend_on_existing_thread_gets_messages_snapshot(live: LiveServer) -> None:
    with live.client() as client:
        Frontend(client, "t4").run("add x")
        late = Frontend(client, "t4")
        events = late.run("hi again")
        snap = next(e for e in events if e["type"] == "MESSAGES_SNAPSHOT")
        roles = [m["role"] for m in snap["messages"]]
        assert roles[0] == "user" and "tool" in roles and roles[-1] == "user"
        assert snap["messages"][-1]["content"] == "hi again"
        # A fresh frontend with an empty state deletes nothing.
        assert late.state == stored_state(client, "t4")
        assert late.state["items"] == ["x"]
        # In step: no snapshot of messages next time.
        again = late.run("and again")
        assert "MESSAGES_SNAPSHOT" not in types(again)


def test_secrets_are_redacted_in_snapshot_and_deltas(live: LiveServer) -> None:
    with live.client() as client:
        ui = Frontend(client, "t5")
        ui.run("hi", state={"api_token": "sk-very-secret"})
        assert ui.state["api_token"] == "***"
        r = client.patch("/v1/sessions/t5/state", json={"api_token": "sk-other-secret"})
        assert r.status_code == 200
        events = ui.run("hi")
        assert "secret" not in json.dumps(events)
        assert ui.state["api_token"] == "***"
        # Sending the redacted value back changes nothing.
        events = ui.run("add z")
        assert "secret" not in json.dumps(events)
        assert ui.state == stored_state(client, "t5")


def test_auth_isolation_and_admin_only_app_scope(authed: LiveServer) -> None:
    with authed.client(ALICE) as alice, authed.client(BOB) as bob:
        Frontend(alice, "alice-thread").run("add a")
        r = bob.post(URL, json=run_input("alice-thread", "hi"))
        assert_problem(r, 404, "alice-thread")
        with authed.client() as anonymous:
            assert_problem(anonymous.post(URL, json=run_input("x", "hi")), 401)
        ui = Frontend(alice, "alice-thread")
        ui.run("hi")
        ui.state["app:motd"] = "hello all"
        body = run_input("alice-thread", "hi", state=ui.state)
        assert_problem(alice.post(URL, json=body), 403, "app:motd")
        fresh = run_input("alice-new-thread", "hi", state={"app:motd": "sneaky"})
        assert_problem(alice.post(URL, json=fresh), 403, "app:motd")
        assert alice.get("/v1/sessions/alice-new-thread").status_code == 404
    with authed.client(ADMIN) as admin:
        admin_ui = Frontend(admin, "ops-thread")
        admin_ui.run("hi")
        admin_ui.state["app:motd"] = "hello all"
        admin_ui.run("hi")
        assert stored_state(admin, "ops-thread")["app:motd"] == "hello all"


@pytest.mark.parametrize(
    ("body", "words"),
    [
        ({"runId": "r", "messages": []}, ["threadId"]),
        ({"threadId": "t", "runId": "r", "messages": "nope"}, ["messages"]),
        ({"threadId": "t", "runId": "r", "messages": [{"role": "user"}]}, ["messages"]),
        ({"threadId": "t", "runId": "r", "messages": []}, ["user"]),
        (
            {
                "threadId": "t\x00",
                "runId": "r",
                "messages": [{"id": "1", "role": "user", "content": "x"}],
            },
            ["control characters"],
        ),
        (
            {
                "threadId": "t",
                "runId": "r",
                "messages": [{"id": "1", "role": "user", "content": "x"}],
                "state": {"__ttl__": {}},
            },
            ["reserved"],
        ),
    ],
)
def test_malformed_input_is_422_with_a_reason(
    live: LiveServer, body: dict[str, Any], words: list[str]
) -> None:
    with live.client() as client:
        assert_problem(client.post(URL, json=body), 422, *words)
        assert client.get("/v1/sessions/t").status_code == 404  # nothing persisted


def test_workflow_steps_are_step_events(
    make_live: Callable[..., LiveServer], tmp_path: Any
) -> None:
    db = SqliteDb(db_file=str(tmp_path / "wf.db"))

    def shout(messages: list[Message], info: RequestInfo) -> ModelResponse:
        return ModelResponse(content=(messages[-1].content or "").upper())

    writer = Agent(name="writer", model=FunctionModel(shout), db=db)
    flow = Workflow(name="flow", steps=[Step(name="draft", agent=writer)], db=db)
    live = make_live(apps=[flow])
    with live.client() as client:
        events = agui_events(client, run_input("wf1", "hello"), "/v1/workflows/flow/agui")
        kinds = types(events)
        assert kinds.index("STEP_STARTED") < kinds.index("STEP_FINISHED")
        assert next(e for e in events if e["type"] == "STEP_STARTED")["stepName"] == "draft"
        assert kinds[-1] == "RUN_FINISHED"


def test_failing_run_ends_with_run_error(
    make_live: Callable[..., LiveServer], tmp_path: Any
) -> None:
    db = SqliteDb(db_file=str(tmp_path / "err.db"))

    def broken(messages: list[Message], info: RequestInfo) -> ModelResponse:
        raise RuntimeError("model exploded")

    live = make_live(apps=[Agent(name="lister", model=FunctionModel(broken), db=db)])
    with live.client() as client:
        events = agui_events(client, run_input("e1", "hi"))
        assert types(events)[0] == "RUN_STARTED"
        assert events[-1]["type"] == "RUN_ERROR" and events[-1]["message"]


def test_concurrent_writers_during_a_run_reach_the_frontend(
    make_live: Callable[..., LiveServer], tmp_path: Any
) -> None:
    """Deltas are read from the stored ops, so another writer's commit during the run
    reaches the frontend too, and the frontend ends equal to the stored state."""
    db = SqliteDb(db_file=str(tmp_path / "conc.db"))
    gate = threading.Event()
    agent_holder: list[Agent] = []

    def slow_tool(session_state: dict[str, Any], item: str) -> str:
        """Append after another writer wrote.

        Args:
            item: The item.
        """
        agent_holder[0].update_session_state({"other": item}, session_id="c1")
        session_state.setdefault("items", []).append(item)
        gate.set()
        return "ok"

    def model(messages: list[Message], info: RequestInfo) -> ModelResponse:
        if messages[-1].role == "tool":
            return ModelResponse(content="done")
        return ModelResponse(tool_calls=[ToolCall("slow_tool", {"item": "q"}, "c0")])

    agent = Agent(name="lister", model=FunctionModel(model), db=db, tools=[slow_tool])
    agent_holder.append(agent)
    live = make_live(apps=[agent])
    with live.client() as client:
        ui = Frontend(client, "c1")
        ui.run("go")
        assert gate.is_set()
        assert ui.state == stored_state(client, "c1")
        assert ui.state["other"] == "q" and ui.state["items"] == ["q"]


def test_team_members_are_step_events(make_live: Callable[..., LiveServer], tmp_path: Any) -> None:
    from statewise import Team

    db = SqliteDb(db_file=str(tmp_path / "team.db"))

    def helper_model(messages: list[Message], info: RequestInfo) -> ModelResponse:
        return ModelResponse(content="helped")

    def leader_model(messages: list[Message], info: RequestInfo) -> ModelResponse:
        if messages[-1].role == "tool":
            return ModelResponse(content="team done")
        return ModelResponse(
            tool_calls=[
                ToolCall("delegate_task_to_member", {"member_name": "helper", "task": "x"}, "d1")
            ]
        )

    helper = Agent(name="helper", model=FunctionModel(helper_model))
    team = Team(name="crew", members=[helper], model=FunctionModel(leader_model), db=db)
    live = make_live(apps=[team])
    with live.client() as client:
        events = agui_events(client, run_input("tm", "go"), "/v1/teams/crew/agui")
        steps = [e for e in events if e["type"] in ("STEP_STARTED", "STEP_FINISHED")]
        assert [(e["type"], e["stepName"]) for e in steps] == [
            ("STEP_STARTED", "member:helper"),
            ("STEP_FINISHED", "member:helper"),
        ]
        assert events[-1]["type"] == "RUN_FINISHED" and events[-1]["result"] == "team done"


def test_two_frontends_on_one_thread_with_their_versions(live: LiveServer) -> None:
    """A frontend that sends back the versions its copy is at (RUN_FINISHED metadata) is
    merged from exactly there, even when another frontend moved the thread meanwhile."""
    with live.client() as client:
        first = Frontend(client, "two")
        events = first.run("add a")
        versions = events[-1]["metadata"]["statewise"]["versions"]
        second = Frontend(client, "two")
        second.run("add b")  # the thread moves on; `first` has not seen it
        first.state["note"] = "from the first tab"
        first.run("hi", forwardedProps={"statewise": {"versions": versions}})
        stored = stored_state(client, "two")
        assert stored["items"] == ["a", "b"] and stored["note"] == "from the first tab"
        assert first.state == stored
        bad = run_input("two", "hi", forwardedProps={"statewise": {"versions": {"session": -1}}})
        assert_problem(client.post(URL, json=bad), 422, "versions")
        future = run_input(
            "two",
            "hi",
            state={"x": 1},
            forwardedProps={"statewise": {"versions": {"session": 10**6}}},
        )
        assert_problem(client.post(URL, json=future), 422, "newer")


def test_every_agui_write_is_a_transaction_commit_with_an_id(
    make_live: Callable[..., LiveServer], tmp_path: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The frontend's edits and the thread's sync record go through the one write
    lifecycle: each lands in a commit with a commit id (exactly once on a retry), so
    every event of the thread belongs to such a commit. SQLite stores only the ids
    callers give (it always answers, see `BaseDb.loses_replies`); told it might lose
    replies, as a network database does, it stores every commit's id, and the events can
    be matched to them."""
    monkeypatch.setattr(SqliteDb, "loses_replies", True)
    live = make_live()
    with live.client() as client:
        ui = Frontend(client, "ids")
        ui.run("add milk")
        ui.state["note"] = "from the UI"
        ui.run("add eggs")
        assert stored_state(client, "ids")["note"] == "from the UI"
    with sqlite3.connect(tmp_path / "api0.db") as conn:
        seqs = {
            row[0]: row[1]
            for row in conn.execute(
                "SELECT seq, type FROM statewise_events WHERE session_id = 'ids'"
            )
        }
        covered: set[int] = set()
        for (result,) in conn.execute(
            "SELECT result FROM statewise_commits WHERE session_id = 'ids'"
        ):
            last_seq, n_events = (int(f) for f in result.split("|")[:2])
            covered |= set(range(last_seq - n_events + 1, last_seq + 1))
    assert "agui_synced" in seqs.values() and "api_call" in seqs.values()
    assert {seq: t for seq, t in seqs.items() if seq not in covered} == {}
