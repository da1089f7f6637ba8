"""Session transactions at the edges: racing forks, deleting a session under a run, a
team leader's tool failing after a member committed, and `+=` on every backend never
losing an increment silently. Each test counts its failures over many rounds, so its
message says how often the old behaviour showed up."""

from __future__ import annotations

import secrets
import threading
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from statewise import Agent, Team
from statewise.db import SqliteDb
from statewise.db.base import BaseDb
from statewise.db.records import ScopeKey
from statewise.db.store import SessionSpec, StateStore
from statewise.exceptions import InvalidInputError, StatewiseError
from statewise.models import FunctionModel, Message, ModelResponse, RequestInfo, ToolCall
from tests.db._mp_worker import increment_worker, open_backend, run_workers

Opener = Callable[[], BaseDb]


def _sqlite(tmp_path: Path) -> Opener:
    path = str(tmp_path / "t.db")
    return lambda: SqliteDb(db_file=path)


@pytest.fixture(params=["sqlite", "postgres"])
def opener(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Opener]:
    if request.param == "sqlite":
        yield _sqlite(tmp_path)
        return
    pg_url = request.getfixturevalue("pg_url")
    import psycopg

    from statewise.db.postgres import PostgresDb

    schema = f"sw_test_{secrets.token_hex(4)}"
    yield lambda: PostgresDb(pg_url, schema=schema, pool_size=2)
    with psycopg.connect(pg_url, autocommit=True) as conn:
        conn.execute(f'DROP SCHEMA IF EXISTS "{schema}" CASCADE')


def _race(*calls: Callable[[], Any]) -> list[Any]:
    """Run the calls at the same moment; each result is its value or its exception."""
    barrier = threading.Barrier(len(calls))
    results: list[Any] = [None] * len(calls)

    def go(i: int) -> None:
        barrier.wait()
        try:
            results[i] = calls[i]()
        except Exception as exc:
            results[i] = exc

    threads = [threading.Thread(target=go, args=(i,)) for i in range(len(calls))]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    return results


def test_two_forks_racing_for_one_new_id_exactly_one_wins(opener: Opener) -> None:
    dbs = [opener(), opener()]
    try:
        agents = [Agent(name="a", db=db, app_name="app", user_id="u") for db in dbs]
        agents[0].update_session_state({"source": True, "n": 1}, session_id="src")
        both, none, merged = 0, 0, 0
        for i in range(15):
            target = f"fork{i}"
            results = _race(
                *(lambda a=a, t=target: a.fork_session("src", new_session_id=t) for a in agents)
            )
            wins = [r for r in results if r == target]
            errors = [r for r in results if isinstance(r, StatewiseError)]
            both += len(wins) == 2
            none += len(wins) == 0
            if len(wins) == 1:
                assert len(errors) == 1 and "exists" in str(errors[0]), results
            assert agents[0].get_session_state(target) == {"source": True, "n": 1}
            merged += len(dbs[0].read_events(target, types=["forked"])) != 1
        assert (both, none, merged) == (0, 0, 0), (
            f"of 15 rounds, {both} let both forks succeed, {none} let none, "
            f"{merged} merged both forks into one session"
        )
        with pytest.raises(StatewiseError, match="exists"):
            agents[0].fork_session("src", new_session_id="fork0")
    finally:
        for db in dbs:
            db.close()


def test_deleting_a_session_under_a_running_run_is_final(opener: Opener) -> None:
    runner_db, deleter_db = opener(), opener()
    try:
        deleter = Agent(name="a", db=deleter_db, app_name="app")
        came_back, silent = 0, 0
        for i in range(10):
            sid = f"doomed{i}"

            def work(session_state: dict[str, Any], sid: str = sid) -> str:
                """Write, while another process deletes the session."""
                session_state["written"] = True
                deleter.delete_session(sid)
                return "done"

            def fn(messages: list[Message], info: RequestInfo) -> ModelResponse:
                if messages[-1].role == "tool":
                    return ModelResponse(content="finished")
                return ModelResponse(tool_calls=[ToolCall("work", {}, "w")])

            runner = Agent(
                name="a", db=runner_db, app_name="app", model=FunctionModel(fn), tools=[work]
            )
            try:
                runner.run("go", session_id=sid)
            except StatewiseError as exc:
                assert "deleted" in str(exc)
            else:
                silent += 1
            came_back += deleter_db.get_session(sid) is not None
        assert (came_back, silent) == (0, 0), (
            f"the deleted session came back {came_back} of 10 times; "
            f"{silent} runs did not report it"
        )
    finally:
        runner_db.close()
        deleter_db.close()


def test_leader_callback_failing_after_a_member_committed_is_a_tool_error(
    tmp_path: Path,
) -> None:
    def note(session_state: dict[str, Any], item: str) -> str:
        """Note an item.

        Args:
            item: the item
        """
        session_state.setdefault("notes", []).append(item)
        return "noted"

    def member_fn(messages: list[Message], info: RequestInfo) -> ModelResponse:
        if messages[-1].role == "tool":
            return ModelResponse(content="member done")
        return ModelResponse(tool_calls=[ToolCall("note", {"item": "from member"}, "n")])

    def leader_fn(messages: list[Message], info: RequestInfo) -> ModelResponse:
        tool_results = [m for m in messages if m.role == "tool"]
        if not tool_results:
            return ModelResponse(
                tool_calls=[
                    ToolCall("delegate_task_to_member", {"member_name": "m", "task": "x"}, "d")
                ]
            )
        return ModelResponse(content="leader saw: " + (tool_results[-1].content or ""))

    def after_tool(tool_context: Any) -> None:
        tool_context.session_state["leader_after_member"] = True
        raise RuntimeError("leader hook failed")

    member = Agent(name="m", model=FunctionModel(member_fn), tools=[note])
    with SqliteDb(db_file=str(tmp_path / "team.db")) as db:
        team = Team(
            name="t",
            members=[member],
            model=FunctionModel(leader_fn),
            db=db,
            after_tool_callback=after_tool,
        )
        out = team.run("go", session_id="s")
        assert out.content == "leader saw: Error: RuntimeError: leader hook failed"
        state = team.get_session_state("s")
        assert state.get("notes") == ["from member"]  # the member's committed work stays
        assert "leader_after_member" not in state  # the leader's failed call is undone


# ---- `+=` on every backend: a lost increment is always a recorded conflict ---------------


def test_a_transaction_opened_at_past_versions_rebases_its_edits(opener: Opener) -> None:
    """`begin(spec, at_versions=...)`: the state as it was at those versions; its commit
    merges with what landed since (appends both kept, a field both set is a recorded
    conflict) and carries a commit id like any other; versions that the session never had
    are refused with nothing written."""
    db = opener()
    try:
        store = StateStore(db)
        spec = SessionSpec(session_id="at", user_id="u", app_name="app")
        key = ScopeKey("session", "at")
        with store.begin(spec) as txn:
            txn.state["items"] = ["a"]
            txn.state["n"] = 1
            seen = dict(txn.commit(source="first").versions)
        with store.begin(spec) as txn:
            txn.state["items"].append("b")
            txn.state["n"] = 2
            txn.commit(source="other")
        with store.begin(spec, at_versions=seen) as txn:
            assert txn.plain() == {"items": ["a"], "n": 1}
            txn.state["items"].append("c")
            txn.state["n"] = 5
            committed = txn.commit(source="late")
        assert not committed.already_landed
        assert bool(committed.commit_id) == db.loses_replies  # (an id only where a resend can be)
        assert [c["path"] for c in committed.conflicts] == [["n"]]
        state, version = store.read_state(spec)
        assert state == {"items": ["a", "b", "c"], "n": 5} and version == 3
        with pytest.raises(InvalidInputError, match=r"'at'.*'session': 4.*newer.*'session': 3"):
            store.begin(spec, at_versions={key: 4})
        with pytest.raises(InvalidInputError, match="negative"):
            store.begin(spec, at_versions={key: -1})
        assert store.read_state(spec) == (state, 3)
    finally:
        db.close()


def _silent_losses(db: BaseDb) -> tuple[int, int, int]:
    """(lossy commits without a conflict record, lossy commits, final n)."""
    previous, lossy, silent = 0, 0, 0
    for delta in db.read_deltas(ScopeKey("session", "counter")):
        values = [op["value"] for op in delta.ops if op["path"] == ["n"] and "value" in op]
        if not values:
            continue
        value = values[-1]
        if value != previous + 1:
            lossy += 1
            if not any(c.get("path") == ["n"] for c in delta.conflicts):
                silent += 1
        previous = value
    return silent, lossy, previous


def test_concurrent_increments_never_lose_an_update_silently(
    mp_spec: tuple[str, ...],
) -> None:
    """2 processes x 100 `n += 1` under the default rule: increments are lost (that is
    what last_write_wins means), but every commit that lost one records a conflict. (Two
    writers mostly collide from one base, writing equal values: the case that used to go
    unrecorded.)"""
    run_workers(increment_worker, [(mp_spec, "counter", 100)] * 2)
    db = open_backend(mp_spec)
    try:
        silent, lossy, final = _silent_losses(db)
    finally:
        db.close()
    assert silent == 0, f"{silent} of {lossy} lossy commits recorded no conflict (n={final} of 200)"
