"""A URL picks the backend; passwords never appear in errors."""

from __future__ import annotations

import uuid
from pathlib import Path

import pytest

from statewise import Agent
from statewise.db import InMemoryDb, SqliteDb, resolve_db
from statewise.db.url import mask_password
from statewise.exceptions import ConfigurationError, DatabaseUnavailableError


def test_sqlite_memory_and_env(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    db = resolve_db(f"sqlite:///{tmp_path}/a.db")
    assert isinstance(db, SqliteDb) and db.db_file == f"{tmp_path}/a.db"
    assert isinstance(resolve_db("memory://"), InMemoryDb)
    assert isinstance(resolve_db(None), InMemoryDb)
    monkeypatch.setenv("STATEWISE_DB_URL", f"sqlite:///{tmp_path}/env.db")
    agent = Agent()
    agent.state.set("k", 1)
    assert (tmp_path / "env.db").exists()


def test_unknown_scheme_is_a_clear_error_with_the_password_masked() -> None:
    with pytest.raises(ConfigurationError, match=r"mysql://bob:\*\*\*@db") as info:
        resolve_db("mysql://bob:hunter2@db/x")
    assert "hunter2" not in str(info.value)
    assert mask_password("postgresql://u:p@h:5432/d") == "postgresql://u:***@h:5432/d"


def test_postgres_url_with_schema_option(pg_url: str) -> None:
    import psycopg

    schema = f"sw_url_{uuid.uuid4().hex[:8]}"
    try:
        writer = Agent(db=f"{pg_url}?schema={schema}", session_id="s")
        reader = Agent(db=f"{pg_url}?schema={schema}", session_id="s")
        with writer.db, reader.db:
            writer.state.set("k", 1)
            assert reader.state.get("k") == 1
    finally:
        with psycopg.connect(pg_url, autocommit=True) as conn:
            conn.execute(f'DROP SCHEMA IF EXISTS "{schema}" CASCADE')


def test_redis_url_with_prefix_option(redis_url: str) -> None:
    import redis

    prefix = f"sw_url_{uuid.uuid4().hex[:8]}"
    try:
        writer = Agent(db=f"{redis_url}?prefix={prefix}", session_id="s")
        reader = Agent(db=f"{redis_url}?prefix={prefix}", session_id="s")
        with writer.db, reader.db:
            writer.state.set("k", 1)
            assert reader.state.get("k") == 1
    finally:
        client = redis.Redis.from_url(redis_url)
        for key in client.scan_iter(f"{{{prefix}}}*"):
            client.delete(key)
        client.close()


def test_unreachable_postgres_names_the_url_without_the_password() -> None:
    with pytest.raises(DatabaseUnavailableError) as info:
        resolve_db("postgresql://bob:hunter2@127.0.0.1:1/x")
    assert "hunter2" not in str(info.value) and "127.0.0.1:1" in str(info.value)


def test_sqlite_url_with_table_prefix_opens_the_same_tables(tmp_path: Path) -> None:
    from statewise.cli._run import db_url_of

    file = tmp_path / "two.db"
    with SqliteDb(db_file=file, table_prefix="team_") as db:
        Agent(db=db, session_id="s").state.set("k", "team")
        url = db_url_of(db)
    assert url == f"sqlite:///{file}?table_prefix=team_"
    with resolve_db(url) as again:
        assert isinstance(again, SqliteDb) and again.table_prefix == "team_"
        assert Agent(db=again, session_id="s").state.get("k") == "team"
    assert db_url_of(SqliteDb(db_file=tmp_path / "plain.db")) == f"sqlite:///{tmp_path}/plain.db"
