"""A run never opens a session owned by another user, whatever the route or the timing.

Bob sends an AG-UI run for a thread id that does not exist yet while Alice creates a
session with that id: Bob's run either gets its own new session or an error, never
Alice's session (her state in his STATE_SNAPSHOT, his input or state in her session).
40 attempts per backend. The cause is checked directly too: a run for a user opens no
session of another user, even when nobody raced.
"""

from __future__ import annotations

import threading
import uuid
from collections.abc import Iterator
from typing import Any

import pytest

from statewise.db.testing import Harness
from statewise.exceptions import SessionExistsError
from statewise.server import create_app
from tests.server.conftest import ALICE, BOB, LiveServer, make_agent, start_server, stop_server

ATTEMPTS = 40
PRIVATE = f"alice-private-{uuid.uuid4().hex[:8]}"
BOB_SAYS = f"bob-input-{uuid.uuid4().hex[:8]}"


@pytest.fixture
def race(backend: Harness) -> Iterator[tuple[LiveServer, Any]]:
    agent = make_agent(backend.db)
    live = start_server(create_app([agent], api_keys={ALICE: "alice", BOB: "bob"}))
    try:
        yield live, agent
    finally:
        stop_server(live)


def _bob(live: LiveServer, thread: str, barrier: threading.Barrier, out: dict[str, Any]) -> None:
    body = {
        "threadId": thread,
        "runId": uuid.uuid4().hex,
        "messages": [{"id": "m1", "role": "user", "content": BOB_SAYS}],
        "state": {"bob_key": "bob"},
        "tools": [],
        "context": [],
        "forwardedProps": {},
    }
    with live.client(BOB) as client:
        barrier.wait()
        r = client.post(
            "/v1/agents/lister/agui", json=body, headers={"Accept": "text/event-stream"}
        )
        out["bob"] = (r.status_code, r.text)


def _alice(agent: Any, thread: str, barrier: threading.Barrier, out: dict[str, Any]) -> None:
    barrier.wait()
    try:
        agent.create_session(thread, user_id="alice")
        agent.state.for_session(thread).set("private", PRIVATE)
        out["alice"] = "created"
    except SessionExistsError:
        out["alice"] = "exists"


def test_agui_thread_creation_never_crosses_tenants(race: tuple[LiveServer, Any]) -> None:
    live, agent = race
    crossings: list[str] = []
    outcomes: dict[str, int] = {}
    for attempt in range(ATTEMPTS):
        thread = f"race-{attempt}-{uuid.uuid4().hex[:6]}"
        out: dict[str, Any] = {}
        barrier = threading.Barrier(2)
        workers = [
            threading.Thread(target=_bob, args=(live, thread, barrier, out)),
            threading.Thread(target=_alice, args=(agent, thread, barrier, out)),
        ]
        for w in workers:
            w.start()
        for w in workers:
            w.join(timeout=60)
        status, text = out["bob"]
        record = agent.db.get_session(thread)
        runs = agent.db.read_runs(thread)
        events = agent.db.read_events(thread)
        owner = record.user_id if record else None
        key = f"{out['alice']}/{owner}/{status}"
        outcomes[key] = outcomes.get(key, 0) + 1
        if PRIVATE in text:
            crossings.append(f"{thread}: Alice's state reached Bob")
        if owner == "alice" and (
            any(r.input and BOB_SAYS in r.input for r in runs)
            or BOB_SAYS in repr([e.data for e in events])
            or "bob_key" in agent.get_session_state(thread)
        ):
            crossings.append(f"{thread}: Bob wrote into Alice's session")
        if owner == "bob" and out["alice"] == "created":
            crossings.append(f"{thread}: Alice's create landed in Bob's session")
    assert crossings == [], (crossings, outcomes)


def test_a_run_for_one_user_never_opens_another_users_session(backend: Harness) -> None:
    agent = make_agent(backend.db)
    agent.create_session("hers", user_id="alice")
    agent.state.for_session("hers").set("private", PRIVATE)
    version = agent.db.get_session("hers")
    with pytest.raises(SessionExistsError, match="another user"):
        agent.run(BOB_SAYS, session_id="hers", user_id="bob")
    assert agent.db.read_runs("hers") == []
    assert agent.db.get_session("hers") == version
    # Without a user, library code reads and runs on a session by id (it is trusted).
    assert agent.run("add tea", session_id="hers").status == "completed"
    assert agent.db.get_session("hers").user_id == "alice"  # type: ignore[union-attr]
