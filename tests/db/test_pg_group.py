"""PostgreSQL's group commit (`db/_pg_group.py`): a group built from what this process's
last group landed, while a writer of another process lands in between, and a group whose
entries were rebased onto one that did not land."""

from __future__ import annotations

import secrets
import threading
from collections.abc import Iterator
from typing import Any

import pytest

from statewise import Agent
from statewise.db.records import Commit, DeltaSegment, NewEvent, ScopeKey, ScopeWrite, SessionRecord

psycopg = pytest.importorskip("psycopg")


@pytest.fixture
def schema(pg_url: str) -> Iterator[str]:
    name = f"sw_test_{secrets.token_hex(4)}"
    yield name
    with psycopg.connect(pg_url, autocommit=True) as conn:
        conn.execute(f'DROP SCHEMA IF EXISTS "{name}" CASCADE')


def _db(url: str, schema: str, **kw: Any) -> Any:
    from statewise.db.postgres import PostgresDb

    return PostgresDb(url, schema=schema, **kw)


def test_trees_stay_true_when_another_process_lands_between_groups(
    pg_url: str, schema: str
) -> None:
    """Writers of this process land in groups, those of another (another database object,
    its own groups) in between: every group built from what the last one landed finds
    the session moved. No writer's tree may keep a delta that did not land: what each
    store reads from its cached trees afterwards is what is stored."""
    ours, theirs = _db(pg_url, schema, pool_size=8), _db(pg_url, schema, pool_size=4)
    try:
        agents = [Agent(name="a", db=ours), Agent(name="a", db=theirs)]
        agents[0].state.for_session("s").set("items", [])
        errors: list[BaseException] = []

        def write(agent: Agent, tag: str) -> None:
            state = agent.state.for_session("s")
            try:
                for i in range(25):
                    state.increment("n")
                    state.increment(f"by_{tag}")
                    assert i >= 0
            except BaseException as exc:  # reported below
                errors.append(exc)

        threads = [threading.Thread(target=write, args=(agents[i % 2], f"w{i}")) for i in range(10)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(120)
        assert not errors
        fresh = _db(pg_url, schema)
        try:
            stored = Agent(name="a", db=fresh).state.for_session("s").get_all()
        finally:
            fresh.close()
        assert stored["n"] == 10 * 25
        assert all(stored[f"by_w{i}"] == 25 for i in range(10))
        for agent in agents:
            for _ in range(4):  # (each read checks out one of the store's cached trees)
                assert agent.state.for_session("s").get_all() == stored
    finally:
        ours.close()
        theirs.close()


def _commit(commit_id: str, base: int) -> Commit:
    segment = DeltaSegment(source="api", ops=[{"op": "set", "path": ["k"], "value": base}])
    return Commit(
        session=SessionRecord(session_id="g"),
        commit_id=commit_id,
        create_session=base == 0,
        writes=[ScopeWrite(key=ScopeKey("session", "g"), base_version=base, segments=[segment])],
        events=[NewEvent(type="note")],
    )


def test_entries_rebased_onto_one_that_did_not_land_are_asked_again(
    pg_url: str, schema: str
) -> None:
    """A commit id that landed before applies nothing in a group, so the entry after it,
    rebased onto what it would have written, must not land on what did, even where its
    own compare-and-swap would pass: it is skipped, asked for its bases again (its writer
    takes that rebase back) and rebuilt on what landed."""
    key = ScopeKey("session", "g")
    db = _db(pg_url, schema, pool_size=2)
    try:
        db.commit(_commit("c0", 0))
        db.commit(_commit("c1", 1))
        asked: list[str] = []

        def entry(commit_id: str, base_of: Any) -> Any:
            def bases() -> dict[ScopeKey, int]:
                asked.append(commit_id)
                return {key: 1}

            return (bases, lambda probed: _commit(commit_id, base_of(probed)))

        outcomes = db.commit_rebased_together(
            "g",
            [
                entry("c1", lambda probed: probed[1][key]),  # landed before: a replay
                entry("c2", lambda probed: 2),  # (would pass on what is stored)
            ],
        )
        assert not isinstance(outcomes[0], Exception) and outcomes[0].already_landed
        assert not isinstance(outcomes[1], Exception) and outcomes[1].versions[key] == 3
        assert asked.count("c2") == 2
        assert [d.version for d in db.read_deltas(key)] == [1, 2, 3]
    finally:
        db.close()
