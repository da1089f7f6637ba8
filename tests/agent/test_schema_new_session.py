"""A state_schema field that is required, on a session that does not exist yet: the first
commit says the new session lacks it and how to give it, and stores nothing; shared keys
a new session sees are not reported as something it stored."""

from __future__ import annotations

from pathlib import Path

import pytest
from pydantic import BaseModel

from statewise import Agent
from statewise.db import SqliteDb
from statewise.exceptions import StateValidationError
from statewise.models import FunctionModel


class Profile(BaseModel):
    name: str
    visits: int = 0


def _agent(db: SqliteDb, **kwargs: object) -> Agent:
    return Agent(model=FunctionModel(lambda m, i: "ok"), db=db, state_schema=Profile, **kwargs)  # type: ignore[arg-type]


def test_a_new_session_without_a_required_key_says_so_and_stores_nothing(tmp_path: Path) -> None:
    db = SqliteDb(db_file=str(tmp_path / "s.db"))
    agent = _agent(db)
    with pytest.raises(StateValidationError) as caught:
        agent.run("hi", session_id="brand-new")
    message = str(caught.value)
    assert "missing in the new session 'brand-new'" in message
    assert "give the field a default" in message and "session_state={'name': ...}" in message
    assert "no longer fits" not in message and "stored in" not in message
    assert db.get_session("brand-new") is None
    with pytest.raises(StateValidationError, match="missing in the new session"):
        agent.state.for_session("other").set("visits", 1)
    assert db.get_session("other") is None


def test_the_required_key_given_on_the_run_or_the_agent_creates_the_session(
    tmp_path: Path,
) -> None:
    db = SqliteDb(db_file=str(tmp_path / "s.db"))
    out = _agent(db).run("hi", session_id="a", session_state={"name": "Ann"})
    assert out.session_state == {"name": "Ann", "visits": 0}
    out = _agent(db, session_state={"name": "Bo"}).run("hi", session_id="b")
    assert out.session_state["name"] == "Bo"
    # a new process (no cache) loads them: they fit
    again = _agent(SqliteDb(db_file=str(tmp_path / "s.db")))
    assert again.get_session_state("a")["name"] == "Ann"


def test_shared_keys_a_new_session_sees_are_not_called_stored_in_it(tmp_path: Path) -> None:
    db = SqliteDb(db_file=str(tmp_path / "s.db"))
    agent = Agent(model=FunctionModel(lambda m, i: "ok"), db=db)
    agent.run("hi", session_id="first", user_id="u", session_state={"user:theme": "dark"})
    typed = _agent(SqliteDb(db_file=str(tmp_path / "s.db")))
    with pytest.raises(StateValidationError) as caught:
        typed.run("hi", session_id="second", user_id="u")
    assert "missing in the new session 'second'" in str(caught.value)
