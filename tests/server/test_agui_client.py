"""The real AG-UI client (`@ag-ui/client`'s HttpAgent, from npm, in Node) against the
endpoint: the client's state, built only by the client library applying the events it
received, equals the stored state after every run, including runs where the user edited
the frontend's state while the agent appended from elsewhere."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.server.conftest import ALICE, LiveServer

HERE = Path(__file__).parent / "agui_js"
IN_CI = os.environ.get("CI", "").lower() == "true"
NODE = shutil.which("node")

if not IN_CI and (NODE is None or not (HERE / "node_modules" / "@ag-ui" / "client").is_dir()):
    pytest.skip(
        "needs Node and @ag-ui/client: npm --prefix tests/server/agui_js ci "
        "(required when CI=true)",
        allow_module_level=True,
    )


class NodeClient:
    """One HttpAgent in a Node process, driven one JSON command per line."""

    def __init__(self, url: str, thread: str, key: str | None = None) -> None:
        assert NODE is not None, "node is required (CI=true)"
        args = [NODE, str(HERE / "drive.mjs"), url, thread, *([key] if key else [])]
        self.proc = subprocess.Popen(
            args,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            cwd=HERE,
        )

    def send(self, **command: Any) -> dict[str, Any]:
        assert self.proc.stdin is not None and self.proc.stdout is not None
        self.proc.stdin.write(json.dumps(command) + "\n")
        self.proc.stdin.flush()
        line = self.proc.stdout.readline()
        if not line:
            raise AssertionError(
                f"node exited: {self.proc.stderr.read() if self.proc.stderr else ''}"
            )
        reply: dict[str, Any] = json.loads(line)
        assert "error" not in reply, reply
        return reply

    def close(self) -> None:
        try:
            if self.proc.stdin is not None:
                self.proc.stdin.write('{"cmd": "quit"}\n')
                self.proc.stdin.close()
            self.proc.wait(timeout=10)
        except (OSError, subprocess.TimeoutExpired):
            self.proc.kill()
            self.proc.wait()
        for pipe in (self.proc.stdout, self.proc.stderr):
            if pipe is not None:
                pipe.close()


@pytest.fixture
def node_client(live: LiveServer) -> Iterator[Any]:
    started: list[NodeClient] = []

    def make(thread: str, key: str | None = None, kind: str = "agents/lister") -> NodeClient:
        client = NodeClient(f"{live.url}/v1/{kind}/agui", thread, key)
        started.append(client)
        return client

    yield make
    for client in started:
        client.close()


def stored(http: httpx.Client, thread: str) -> dict[str, Any]:
    r = http.get(f"/v1/sessions/{thread}/state")
    assert r.status_code == 200, r.text
    state: dict[str, Any] = r.json()["state"]
    return state


def test_client_state_equals_stored_state_after_every_run(
    live: LiveServer, node_client: Any
) -> None:
    ui = node_client("js-1")
    with live.client() as http:
        for text in ["add milk", "add eggs, butter", "hello", "add jam"]:
            reply = ui.send(cmd="run", text=text)
            assert reply["errors"] == [], reply
            assert reply["events"][0] == "RUN_STARTED" and reply["events"][-1] == "RUN_FINISHED"
            assert "STATE_SNAPSHOT" in reply["events"]
            assert "MESSAGES_SNAPSHOT" not in reply["events"]  # the client keeps up
            assert reply["state"] == stored(http, "js-1")
        assert reply["state"]["items"] == ["milk", "eggs", "butter", "jam"]
        assert "STATE_DELTA" in reply["events"]
        roles = [m["role"] for m in reply["messages"]]
        assert roles.count("user") == 4 and "tool" in roles


def test_frontend_edits_and_concurrent_agent_appends_both_survive(
    live: LiveServer, node_client: Any
) -> None:
    ui = node_client("js-2")
    with live.client() as http:
        reply = ui.send(cmd="run", text="add milk")
        assert reply["state"] == stored(http, "js-2")
        for round_ in range(3):
            # The agent appends from elsewhere (another client of the same session)...
            r = http.post(
                "/v1/agents/lister/runs",
                json={"input": f"add agent-{round_}", "session_id": "js-2"},
            )
            assert r.status_code == 200, r.text
            # ...while the user edits the frontend's copy, which has not seen that yet.
            edited = json.loads(json.dumps(reply["state"]))
            edited["items"].append(f"ui-{round_}")
            edited[f"note-{round_}"] = "typed in the UI"
            if round_ == 2:
                edited["items"].remove("milk")
            ui.send(cmd="setState", state=edited)
            reply = ui.send(cmd="run", text="hello")
            assert reply["errors"] == [], reply
            state = stored(http, "js-2")
            assert reply["state"] == state
            for n in range(round_ + 1):
                assert f"agent-{n}" in state["items"], state  # no agent write lost
                assert f"ui-{n}" in state["items"], state  # no UI edit lost
                assert state[f"note-{n}"] == "typed in the UI"
        assert "milk" not in state["items"]


def test_second_client_joins_with_the_history(live: LiveServer, node_client: Any) -> None:
    first = node_client("js-3")
    first.send(cmd="run", text="add tea")
    late = node_client("js-3")
    reply = late.send(cmd="run", text="what is on the list?")
    assert "MESSAGES_SNAPSHOT" in reply["events"]
    contents = [m.get("content") for m in reply["messages"] if m["role"] == "user"]
    assert sorted(contents) == ["add tea", "what is on the list?"]
    assert "tool" in [m["role"] for m in reply["messages"]]
    with live.client() as http:
        assert reply["state"] == stored(http, "js-3")
        assert reply["state"]["items"] == ["tea"]


def test_auth_applies_to_the_client(make_live: Any) -> None:
    live = make_live(api_keys={ALICE: "alice"})
    client = NodeClient(f"{live.url}/v1/agents/lister/agui", "js-auth", "wrong-key-123")
    try:
        assert client.proc.stdin is not None and client.proc.stdout is not None
        client.proc.stdin.write(json.dumps({"cmd": "run", "text": "hi"}) + "\n")
        client.proc.stdin.flush()
        reply = json.loads(client.proc.stdout.readline())
        assert "error" in reply and "401" in reply["error"]
    finally:
        client.close()
    good = NodeClient(f"{live.url}/v1/agents/lister/agui", "js-auth", ALICE)
    try:
        assert good.send(cmd="run", text="add a")["state"]["items"] == ["a"]
    finally:
        good.close()


def test_interrupt_lands_in_pending_interrupts_and_resume_continues(
    make_live: Any, tmp_path: Path
) -> None:
    from statewise.db import SqliteDb
    from tests.run.test_pause import bank

    live = make_live(apps=[bank(SqliteDb(db_file=str(tmp_path / "js-bank.db")))])
    ui = NodeClient(f"{live.url}/v1/agents/bank/agui", "js-hitl")
    try:
        reply = ui.send(cmd="run", text="pay bob")
        assert reply["outcome"] == "interrupt", reply
        [interrupt] = reply["pendingInterrupts"]
        assert interrupt["id"] == "t1" and interrupt["toolCallId"] == "t1"
        with live.client() as http:
            assert reply["state"] == stored(http, "js-hitl")
            assert "transfers" not in reply["state"]
            reply = ui.send(
                cmd="run",
                resume=[{"interruptId": "t1", "status": "resolved", "payload": {"approved": True}}],
            )
            assert reply["errors"] == [] and reply["outcome"] == "success", reply
            assert reply["pendingInterrupts"] == []
            assert reply["state"] == stored(http, "js-hitl")
            assert reply["state"]["transfers"] == [{"amount": 5, "to": "bob"}]
            results = [m for m in reply["messages"] if m["role"] == "tool"]
            assert any("sent 5 to bob" in str(m["content"]) for m in results)
    finally:
        ui.close()


def test_edits_while_another_writer_appends_during_the_runs(
    live: LiveServer, node_client: Any
) -> None:
    """Another client appends to the same session in a loop while the frontend runs and
    edits: every append and every edit is in the stored state, and after a last run the
    frontend's copy equals it."""
    import threading

    ui = node_client("js-live")
    reply = ui.send(cmd="run", text="add start")
    stop = threading.Event()
    appended: list[str] = []

    def writer() -> None:
        with live.client() as http:
            n = 0
            while not stop.is_set() and n < 40:
                r = http.post(
                    "/v1/agents/lister/runs", json={"input": f"add bg-{n}", "session_id": "js-live"}
                )
                assert r.status_code == 200, r.text
                appended.append(f"bg-{n}")
                n += 1

    thread = threading.Thread(target=writer)
    thread.start()
    try:
        for round_ in range(4):
            edited = json.loads(json.dumps(reply["state"]))
            edited["items"].append(f"ui-{round_}")
            edited[f"ui-note-{round_}"] = round_
            ui.send(cmd="setState", state=edited)
            reply = ui.send(cmd="run", text=f"add agent-{round_}")
            assert reply["errors"] == [], reply
    finally:
        stop.set()
        thread.join(timeout=120)
    reply = ui.send(cmd="run", text="hello")  # catch up with the last background writes
    with live.client() as http:
        state = stored(http, "js-live")
    assert reply["state"] == state
    for item in [
        "start",
        *appended,
        *(f"ui-{n}" for n in range(4)),
        *(f"agent-{n}" for n in range(4)),
    ]:
        assert item in state["items"], (item, state["items"])
    assert all(state[f"ui-note-{n}"] == n for n in range(4))
    assert len(appended) >= 2, "the other writer ran alongside"
