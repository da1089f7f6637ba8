"""Per-session group commit: the writers of one process that race on one session land
together, several commits in one transaction (one durable write), each still its own
commit (its id, its delta version, its events), none lost. A writer whose own commit
fails in a group (here: a strict key both sides set) fails alone."""

from __future__ import annotations

import secrets
import threading
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from statewise import Agent
from statewise.db import SqliteDb
from statewise.db.base import BaseDb
from statewise.db.records import (
    Commit,
    DeltaSegment,
    NewEvent,
    ScopeKey,
    ScopeWrite,
    SessionRecord,
)
from statewise.exceptions import VersionConflict

Opener = Callable[[], BaseDb]
WRITERS = 16
EACH = 12


@pytest.fixture(params=["sqlite", "postgres"])
def opener(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Opener]:
    if request.param == "sqlite":
        path = str(tmp_path / "g.db")
        yield lambda: SqliteDb(db_file=path)
        return
    pg_url = request.getfixturevalue("pg_url")
    import psycopg

    from statewise.db.postgres import PostgresDb

    schema = f"sw_test_{secrets.token_hex(4)}"
    yield lambda: PostgresDb(pg_url, schema=schema, pool_size=WRITERS + 2)
    with psycopg.connect(pg_url, autocommit=True) as conn:
        conn.execute(f'DROP SCHEMA IF EXISTS "{schema}" CASCADE')


def test_writers_of_one_session_land_together_and_none_is_lost(
    opener: Opener, monkeypatch: pytest.MonkeyPatch
) -> None:
    db = opener()
    groups: list[int] = []
    together = type(db).commit_rebased_together

    def counting(self: BaseDb, session_id: str, entries: Any) -> Any:
        groups.append(len(entries))
        return together(self, session_id, entries)

    monkeypatch.setattr(type(db), "commit_rebased_together", counting)
    agent = Agent(name="hot", db=db)
    agent.state.for_session("hot").set("n", 0)
    barrier = threading.Barrier(WRITERS)
    errors: list[BaseException] = []

    def write() -> None:
        state = agent.state.for_session("hot")
        barrier.wait()
        try:
            for _ in range(EACH):
                state.increment("n")
        except BaseException as exc:
            errors.append(exc)

    threads = [threading.Thread(target=write) for _ in range(WRITERS)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(120)
    try:
        assert not errors
        assert agent.state.for_session("hot").get("n") == WRITERS * EACH
        # Each increment is a commit of its own: one delta version and one event each.
        deltas = db.read_deltas(ScopeKey("session", "hot"))
        assert [d.version for d in deltas] == list(range(1, WRITERS * EACH + 2))
        assert max(groups, default=0) > 1, "no two writers ever landed together"
    finally:
        db.close()


def _commit(commit_id: str, base: int, value: int, *, create: bool = False) -> Commit:
    segment = DeltaSegment(source="api", ops=[{"op": "set", "path": ["k"], "value": value}])
    return Commit(
        session=SessionRecord(session_id="g"),
        commit_id=commit_id,
        create_session=create,
        writes=[ScopeWrite(key=ScopeKey("session", "g"), base_version=base, segments=[segment])],
        events=[NewEvent(type="note")],
    )


def test_an_entry_that_fails_its_build_leaves_the_others_landing(opener: Opener) -> None:
    db = opener()
    key = ScopeKey("session", "g")
    try:
        db.commit(_commit("c0", 0, 0, create=True))

        def entry(commit_id: str, value: int | None) -> Any:
            def build(probed: Any) -> Commit:
                if value is None:
                    raise ValueError("this writer's own problem")
                _record, versions, _tails = probed
                return _commit(commit_id, versions[key], value)

            return (lambda: {key: 1}, build)

        outcomes = db.commit_rebased_together(
            "g", [entry("c1", 1), entry("c2", None), entry("c3", 3)]
        )
        assert isinstance(outcomes[1], ValueError)
        assert [o.versions[key] for o in (outcomes[0], outcomes[2])] == [2, 3]  # type: ignore[union-attr]
        assert [d.version for d in db.read_deltas(key)] == [1, 2, 3]
        assert [e.seq for e in db.read_events("g")] == [1, 2, 3]

        # A commit id already landed is answered, not applied again, inside a group too.
        again = db.commit_rebased_together("g", [entry("c1", 9), entry("c4", 4)])
        assert not isinstance(again[0], Exception) and again[0].already_landed
        assert not isinstance(again[1], Exception) and not again[1].already_landed
        assert [d.version for d in db.read_deltas(key)] == [1, 2, 3, 4]
    finally:
        db.close()


def test_a_stale_base_in_a_group_is_a_conflict_for_that_entry_only(opener: Opener) -> None:
    db = opener()
    key = ScopeKey("session", "g")
    try:
        db.commit(_commit("c0", 0, 0, create=True))
        outcomes = db.commit_rebased_together(
            "g",
            [
                (lambda: {key: 1}, lambda probed: _commit("a", probed[1][key], 1)),
                (lambda: {key: 1}, lambda probed: _commit("b", 1, 2)),  # ignores what landed
            ],
        )
        assert not isinstance(outcomes[0], Exception)
        assert isinstance(outcomes[1], VersionConflict)
        assert [d.version for d in db.read_deltas(key)] == [1, 2]
    finally:
        db.close()
