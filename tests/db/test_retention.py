"""Retention: the policy and where it is set (constructor, URL, environment), compaction
after commits, the errors below the horizon from every time-travel method, the commit-id
check on the commit path, and `Sessions.compact`. The storage cases themselves run on
every backend in the conformance suite (`statewise.db.testing.cases_retention`)."""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from statewise import Agent, Retention, Sessions
from statewise.db import InMemoryDb, SqliteDb, db_from_url
from statewise.db.base import BaseDb
from statewise.db.records import NewEvent, ScopeKey
from statewise.db.retention import ENV_VAR, id_run, id_time
from statewise.db.store import SessionSpec, StateStore, new_id
from statewise.exceptions import (
    CommitIdExpiredError,
    ConfigurationError,
    HistoryCompactedError,
    StateError,
)

LATER = 3 * 3600.0


@pytest.fixture(params=["memory", "sqlite"])
def db(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[BaseDb]:
    opened: BaseDb = InMemoryDb() if request.param == "memory" else SqliteDb(tmp_path / "r.db")
    with opened:
        yield opened


def _agent(db: BaseDb, versions: int, sid: str = "s1") -> Agent:
    agent = Agent(db=db, session_state={"n": 0})
    api = agent.state.for_session(sid)
    for i in range(1, versions):
        api.set("n", i)
    return agent


# ---- the policy -------------------------------------------------------------------------


def test_a_policy_needs_a_limit_and_sane_values() -> None:
    with pytest.raises(ConfigurationError, match="keep_versions, keep_days or both"):
        Retention()
    for bad in (
        {"keep_versions": 0},
        {"keep_versions": True},
        {"keep_days": -1},
        {"keep_days": float("nan")},
        {"keep_versions": 5, "commit_id_window": 60},
        {"keep_versions": 5, "slack": 0},
    ):
        with pytest.raises(ConfigurationError):
            Retention(**bad)
    assert Retention(keep_versions=1000).every == 250
    assert Retention(keep_versions=10).every == 16
    assert Retention(keep_days=30).every == 64
    assert Retention(keep_versions=10, slack=3).every == 3


def test_due_once_per_slack_and_by_events_under_keep_days() -> None:
    policy = Retention(keep_versions=100)  # every 25 versions past 100
    due = [v for v in range(1, 300) if policy.due(v, v, 1)]
    assert due == [125, 150, 175, 200, 225, 250, 275]
    assert not policy.due(None, 10_000, 3), "no state written, no version limit to apply"
    by_days = Retention(keep_days=1)
    assert by_days.due(None, 513, 2) and not by_days.due(None, 515, 2)


def test_url_options_and_the_environment_set_a_policy(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    url = f"sqlite:///{tmp_path}/u.db?keep_versions=7&keep_days=2.5&table_prefix=t_"
    with db_from_url(url) as from_url:
        assert from_url.retention == Retention(keep_versions=7, keep_days=2.5)
        assert isinstance(from_url, SqliteDb) and from_url.table_prefix == "t_"
    assert db_from_url("memory://?keep_versions=3&slack=1").retention == Retention(
        keep_versions=3, slack=1
    )
    assert db_from_url("memory://").retention is None
    with pytest.raises(ConfigurationError, match="retention option"):
        db_from_url("memory://?keep_versions=lots")
    monkeypatch.setenv(ENV_VAR, "keep_days=30")
    assert InMemoryDb().retention == Retention(keep_days=30)
    assert InMemoryDb(retention=Retention(keep_versions=2)).retention == Retention(keep_versions=2)
    monkeypatch.setenv(ENV_VAR, "keep_weeks=3")
    with pytest.raises(ConfigurationError, match="unknown options"):
        InMemoryDb()


def test_ids_made_by_statewise_carry_their_time() -> None:
    made = id_time(new_id())
    assert made is not None and abs(made - time.time()) < 5
    run_id = new_id()
    assert id_run(f"{run_id}:step:3") == run_id and id_time(f"{run_id}:step:3") is not None
    assert id_time("my-own-id") is None and id_run("my-own-id") is None


# ---- on commit, and below the horizon ---------------------------------------------------


def test_commits_compact_the_session_by_the_databases_policy(db: BaseDb) -> None:
    db.retention = Retention(keep_versions=10, slack=4)
    agent = _agent(db, 41)
    horizon = db.read_horizon("s1")
    assert horizon.version == 28, "compacted at versions 14, 18, ..., 38 (keeping 10)"
    assert agent.get_session_state("s1") == {"n": 40}
    history = agent.get_state_history("s1")
    assert [h["version"] for h in history] == list(range(29, 41))


def test_every_time_travel_method_refuses_a_version_below_the_horizon(db: BaseDb) -> None:
    agent = _agent(db, 31)
    done = db.compact_session("s1", Retention(keep_versions=10))
    assert done is not None and done.horizon.version == 20
    calls: dict[str, Callable[[], object]] = {
        "state at": lambda: agent.get_state_at("s1", 5),
        "diff": lambda: agent.diff_state("s1", from_=5, to=25),
        "rollback": lambda: agent.rollback_state("s1", to=5),
        "fork": lambda: agent.fork_session("s1", at=5, new_session_id="f"),
        "history": lambda: agent.get_state_history("s1", after_version=5),
    }
    for what, call in calls.items():
        with pytest.raises(HistoryCompactedError, match=r"'s1': version 5 .* version 20") as exc:
            call()
        assert (exc.value.version, exc.value.oldest) == (5, 20), what
    assert agent.get_state_at("s1", 20) == {"n": 20}
    assert agent.diff_state("s1", from_=0, to=20)  # (version 0 is the empty state)
    assert agent.get_state_history("s1", after_version=20)[0]["version"] == 21
    agent.rollback_state("s1", to=20)
    assert agent.get_session_state("s1") == {"n": 20}
    forked = agent.fork_session("s1", at=25, new_session_id="f")
    assert agent.get_session_state(forked) == {"n": 25}
    with pytest.raises((HistoryCompactedError, StateError)):
        agent.get_state_at("s1", "no-such-run")


def test_a_failed_compaction_after_a_commit_is_logged_not_raised(
    db: BaseDb, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    db.retention = Retention(keep_versions=1, slack=1)

    def broken(*args: object, **kwargs: object) -> None:
        raise OSError("disk on fire")

    monkeypatch.setattr(db, "compact_session", broken)
    with caplog.at_level(logging.WARNING, logger="statewise.db"):
        agent = _agent(db, 6)
    assert agent.get_session_state("s1") == {"n": 5}
    assert "compacting session 's1' after a commit failed" in caplog.text


def test_a_retried_commit_whose_id_was_forgotten_is_refused(db: BaseDb) -> None:
    store = StateStore(db)
    spec = SessionSpec(session_id="s1", user_id="u1")
    made_long_ago = f"{int((time.time() - 2 * 3600) * 1e9):016x}{'7' * 16}"
    with store.begin(spec, mode="create") as txn:
        txn.state["n"] = 0
        txn.commit(events=[NewEvent(type="note")], commit_id=made_long_ago)
    for i in range(1, 12):
        with store.begin(spec) as txn:
            txn.state["n"] = i
            txn.commit(events=[NewEvent(type="note")])
    db.compact_session("s1", Retention(keep_versions=3), now=time.time() + LATER)
    with store.begin(spec) as txn, pytest.raises(CommitIdExpiredError, match="refused"):
        txn.state["n"] = 100
        txn.commit(events=[NewEvent(type="note")], commit_id=made_long_ago)
    assert store.db.load_scopes([ScopeKey("session", "s1")])[ScopeKey("session", "s1")].data == {
        "n": 11
    }


# ---- Sessions.compact --------------------------------------------------------------------


def test_sessions_compact_one_or_every_session(db: BaseDb) -> None:
    for sid in ("a", "b", "c"):
        _agent(db, 21, sid)
    sessions = Sessions(db)
    with pytest.raises(ConfigurationError, match="no retention policy"):
        sessions.compact()
    one = sessions.compact("a", retention=Retention(keep_versions=5))
    assert [c.session_id for c in one] == ["a"] and one[0].horizon.version == 15
    every = sessions.compact(retention=Retention(keep_versions=5))
    assert sorted(c.session_id for c in every if c.deltas) == ["b", "c"]
    assert {sid: db.read_horizon(sid).version for sid in "abc"} == dict.fromkeys("abc", 15)
    assert sessions.state("b").state == {"n": 20}


def test_over_http_the_errors_are_gone_and_conflict_not_server_errors() -> None:
    from statewise.server._errors import problem_for

    compacted = problem_for(HistoryCompactedError("s1", 3, 8))
    assert (compacted.status, compacted.extra["oldest_version"]) == (410, 8)
    assert problem_for(CommitIdExpiredError("refused")).status == 409


def test_rollback_to_the_horizon_takes_shared_scopes_back_to_its_time(db: BaseDb) -> None:
    agent = Agent(db=db, user_id="u")
    api = agent.state.for_session("s")
    api.set("user:tier", "free")
    for i in range(1, 6):
        api.set("own", i)
    time.sleep(0.01)
    api.set("user:tier", "pro")
    for i in range(6, 11):
        api.set("own", i)
    done = db.compact_session("s", Retention(keep_versions=5))
    assert done is not None and done.horizon.version == 5
    agent.rollback_state("s", to=5, include_shared=True)
    assert agent.get_session_state("s") == {"user:tier": "free", "own": 5}


def test_keep_days_finds_the_horizon_by_time(db: BaseDb) -> None:
    agent = _agent(db, 11)  # versions 1..10
    key = ScopeKey("session", "s1")
    made = {d.version: d.created_at for d in db.read_deltas(key)}
    policy = Retention(keep_days=1)
    now = (made[6] + made[7]) / 2 + 86400  # a day after a moment between versions 6 and 7
    done = db.compact_session("s1", policy, now=now)
    assert done is not None and done.horizon.version == 6
    assert [d.version for d in db.read_deltas(key)] == [7, 8, 9, 10]
    assert agent.get_state_at("s1", 6) == {"n": 6}
    everything = db.compact_session("s1", policy, now=made[10] + 2 * 86400)
    assert everything is not None and everything.horizon.version == 10
    assert db.read_deltas(key) == [] and agent.get_session_state("s1") == {"n": 10}
    agent.state.for_session("s1").set("n", 11)
    assert agent.get_state_history("s1")[0]["version"] == 11
