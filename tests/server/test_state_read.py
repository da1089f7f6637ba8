"""The state read that clients poll during runs: one read of the session and its scopes
that loads only the scopes that moved since the tree last read (or cached by a run), and
the same state a run's checkout would show (defaults, TTL, secrets)."""

from __future__ import annotations

import time
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from statewise import Agent
from statewise.agent.sessions import read_session_state, session_version
from statewise.db import SqliteDb
from statewise.db.records import ScopeKey
from statewise.exceptions import SessionNotFoundError
from statewise.server import create_app
from tests.server.conftest import make_agent, start_server, stop_server


class CountingDb(SqliteDb):
    """A real SQLite database that counts the reads a state GET makes."""

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.reads: Counter[str] = Counter()
        self.loaded: list[ScopeKey] = []

    def probe(self, session_id: str, keys: Any) -> Any:
        self.reads["probe"] += 1
        return super().probe(session_id, keys)

    def get_session(self, session_id: str) -> Any:
        self.reads["get_session"] += 1
        return super().get_session(session_id)

    def load_scopes(self, keys: Any) -> Any:
        self.reads["load_scopes"] += 1
        self.loaded.extend(keys)
        return super().load_scopes(keys)


def test_a_state_get_of_a_cached_session_is_one_probe_and_leaves_the_tree_cached(
    tmp_path: Path,
) -> None:
    db = CountingDb(db_file=str(tmp_path / "a.db"))
    live = start_server(create_app([make_agent(db)]))
    try:
        with live.client() as c:
            r = c.post("/v1/agents/lister/runs", json={"input": "add a", "session_id": "s"})
            assert r.status_code == 200
            db.reads.clear()
            got = c.get("/v1/sessions/s/state")
            assert got.status_code == 200
            assert got.json()["state"]["items"] == ["a"]
            assert got.headers["ETag"] == f'"{got.json()["version"]}"'
            assert db.reads == Counter({"probe": 1})
            # The next run finds the tree where it was: nothing is loaded again.
            db.reads.clear()
            r = c.post("/v1/agents/lister/runs", json={"input": "add b", "session_id": "s"})
            assert r.status_code == 200 and db.reads["load_scopes"] == 0
            assert c.get("/v1/sessions/s/state").json()["state"]["items"] == ["a", "b"]
            assert c.get("/v1/sessions/nope/state").status_code == 404
    finally:
        stop_server(live)


def test_a_read_from_the_cache_shows_what_a_checkout_would(tmp_path: Path) -> None:
    db = SqliteDb(db_file=str(tmp_path / "a.db"))
    writer = make_agent(db)  # declares api_token secret
    writer.state.for_session("s").set("otp", "123456", ttl=0.2)
    writer.run("add a", session_id="s", session_state={"api_token": "sk-1"})
    # Another agent of the same app: new shared defaults, declares no secret of its own.
    reader = Agent(
        name="lister",
        db=db,
        session_state={"items": ["default"], "user:plan": "free", "app:motd": "hi"},
    )
    cached = read_session_state(reader, "s")
    assert cached.state["otp"] == "123456"
    assert cached.state["items"] == ["a"]  # the session's own keys are not defaulted
    assert cached.state["user:plan"] == "free" and cached.state["app:motd"] == "hi"
    assert "api_token" in cached.secret_keys  # recorded in the app's registry
    assert cached.record.session_id == "s"
    assert cached.version == session_version(writer, "s")
    time.sleep(0.25)
    expired = read_session_state(reader, "s")
    assert "otp" not in expired.state and expired.version == cached.version
    # The copy is the reader's: changing it changes nothing stored or cached.
    expired.state["items"].append("x")
    assert read_session_state(reader, "s").state["items"] == ["a"]
    assert writer.get_session_state("s")["items"] == ["a"]


def test_a_read_without_a_current_cache_entry_loads_the_stored_state(tmp_path: Path) -> None:
    path = str(tmp_path / "a.db")
    make_agent(SqliteDb(db_file=path)).run("add a, b", session_id="s")
    other = make_agent(CountingDb(db_file=path))  # another process: nothing cached
    db = other.db
    assert isinstance(db, CountingDb)
    read = read_session_state(other, "s")
    assert read.state["items"] == ["a", "b"] and read.version > 0
    assert db.reads["load_scopes"] == 1
    # ... and caches it for the next reader, which probes only.
    db.reads.clear()
    assert read_session_state(other, "s") == read
    assert db.reads == Counter({"probe": 1})
    with pytest.raises(SessionNotFoundError):
        read_session_state(other, "missing")


def test_a_read_while_runs_hold_the_session_loads_only_what_moved_since_the_last_read(
    tmp_path: Path,
) -> None:
    db = CountingDb(db_file=str(tmp_path / "a.db"))
    agent = make_agent(db)
    agent.run("add a", session_id="s")
    store, spec = agent._store, agent._spec("s", None)
    first = read_session_state(agent, "s")
    assert first.state["items"] == ["a"]
    # Runs go on: one ends, the next holds the session's tree (not in the cache) and
    # has committed a step when the reader polls again.
    with store.begin(spec) as ended:
        ended.state["items"].append("b")
        ended.commit(source="tool")
    run = store.begin(spec)
    run.state["items"].append("c")
    run.commit(source="tool")
    db.reads.clear()
    db.loaded.clear()
    second = read_session_state(agent, "s")
    assert second.state["items"] == ["a", "b", "c"] and second.version == first.version + 2
    # The session's own scope moved: it alone is loaded, the others are as last read.
    assert db.loaded == [ScopeKey("session", "s")]
    # Polled again while nothing moved: the read alone.
    db.reads.clear()
    assert read_session_state(agent, "s") == second
    assert db.reads == Counter({"probe": 1})
    run.close()
    # The reader's copy is its own: changing it changes nothing kept for the next read.
    second.state["items"].append("x")
    assert read_session_state(agent, "s").state["items"] == ["a", "b", "c"]


@pytest.fixture(params=["postgres", "redis"])
def network_db(request: pytest.FixtureRequest) -> Iterator[Any]:
    """A real PostgreSQL or Redis database in a schema / key prefix of its own."""
    import secrets

    from tests.db.conftest import (
        POSTGRES_URL,
        REDIS_URL,
        postgres_problem,
        redis_problem,
        require,
    )

    name = f"sw_read_{secrets.token_hex(4)}"
    if request.param == "postgres":
        require(postgres_problem())
        from statewise.db.postgres import PostgresDb

        db: Any = PostgresDb(POSTGRES_URL, schema=name)
    else:
        require(redis_problem())
        from statewise.db.redis import RedisDb

        db = RedisDb(REDIS_URL, prefix=name)
    try:
        yield db
    finally:
        db.close()
        if request.param == "postgres":
            import psycopg

            with psycopg.connect(POSTGRES_URL, autocommit=True) as conn:
                conn.execute(f'DROP SCHEMA IF EXISTS "{name}" CASCADE')
        else:
            import redis

            client = redis.Redis.from_url(REDIS_URL)
            keys = list(client.scan_iter(match="{" + name + "}*"))
            if keys:
                client.delete(*keys)
            client.close()


def test_the_state_get_on_postgres_and_redis_reads_on_the_servers_loop(network_db: Any) -> None:
    agent = make_agent(network_db)
    live = start_server(create_app([agent]))
    try:
        with live.client() as c:
            for item in ("a", "b"):
                r = c.post(
                    "/v1/agents/lister/runs", json={"input": f"add {item}", "session_id": "s"}
                )
                assert r.status_code == 200
                got = c.get("/v1/sessions/s/state")
                assert got.status_code == 200
                expected = read_session_state(agent, "s")
                assert got.json() == {
                    "session_id": "s",
                    "version": expected.version,
                    "state": expected.state,
                }
                assert got.headers["ETag"] == f'"{expected.version}"'
            assert got.json()["state"]["items"] == ["a", "b"]
            assert c.get("/v1/sessions/nope/state").status_code == 404
            agent.state.for_session("s").set("api_token", "sk-1")
            assert c.get("/v1/sessions/s/state").json()["state"]["api_token"] == "***"
    finally:
        stop_server(live)


def test_a_run_answer_hides_the_apps_recorded_secrets_without_reading_the_registry(
    tmp_path: Path,
) -> None:
    db = CountingDb(db_file=str(tmp_path / "a.db"))
    # Another agent of the app records api_token as secret; the served one declares none.
    make_agent(db).run("add a", session_id="other", session_state={"api_token": "sk-0"})
    live = start_server(create_app([make_agent(db, secrets=False)]))
    try:
        with live.client() as c:
            for n in range(2):
                db.reads.clear()
                r = c.post(
                    "/v1/agents/lister/runs",
                    json={"input": "add b", "session_id": "s", "session_state": {"api_token": "x"}},
                )
                assert r.status_code == 200
                assert r.json()["session_state"]["api_token"] == "***"
                if n:  # finding the session (a probe), the run's own probe; no registry read
                    assert db.reads == Counter({"get_session": 1, "probe": 2}), db.reads
    finally:
        stop_server(live)


def test_a_run_answer_takes_its_state_on_the_loop_when_the_run_left_it_cached(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import statewise.server._runs as runs
    from statewise._workers import run_blocking

    hops: list[str] = []

    async def counted(fn: Any, *args: Any, **kwargs: Any) -> Any:
        hops.append(getattr(fn, "__name__", "?"))
        return await run_blocking(fn, *args, **kwargs)

    monkeypatch.setattr(runs, "run_blocking", counted)
    live = start_server(create_app([make_agent(SqliteDb(db_file=str(tmp_path / "a.db")))]))
    try:
        with live.client() as c:
            for item in ("a", "b"):
                r = c.post(
                    "/v1/agents/lister/runs", json={"input": f"add {item}", "session_id": "s"}
                )
                assert r.status_code == 200
            assert r.json()["session_state"]["items"] == ["a", "b"]
            assert hops == ["_own_session", "_own_session"]  # finding the session only
    finally:
        stop_server(live)
