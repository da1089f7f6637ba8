"""The session cache is bounded by bytes, not only by count: big states push older trees
out, a tree bigger than the whole budget is not kept, and everything still reads right."""

from __future__ import annotations

from pathlib import Path

import pytest

from statewise import Agent
from statewise.db import SqliteDb
from statewise.db.cache import SessionCache, cache_bytes, cache_for
from statewise.exceptions import ConfigurationError
from statewise.models import FunctionModel

KB = 1024


def _agent(db: SqliteDb) -> Agent:
    return Agent(model=FunctionModel(lambda messages, info: "ok"), db=db)


def test_big_states_are_held_within_the_byte_budget(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("STATEWISE_CACHE_MB", str(350 / 1024))  # 350 KB
    db = SqliteDb(db_file=str(tmp_path / "c.db"))
    agent = _agent(db)
    for i in range(6):
        agent.run("x", session_id=f"s{i}", session_state={"big": str(i) * (100 * KB)})
    cache = cache_for(db)
    assert cache.max_bytes == 350 * KB
    assert len(cache) == 3 and cache.bytes <= 350 * KB  # the three most recent
    agent.run("x", session_id="huge", session_state={"big": "h" * (400 * KB)})
    assert len(cache) == 3, "a tree bigger than the budget pushed the others out"
    for i in range(6):  # evicted or not, every session reads as it was written
        assert agent.get_session_state(f"s{i}")["big"] == str(i) * (100 * KB)
    assert agent.get_session_state("huge")["big"] == "h" * (400 * KB)
    assert cache.bytes <= 350 * KB


def test_the_count_bound_still_holds_for_small_states(tmp_path: Path) -> None:
    db = SqliteDb(db_file=str(tmp_path / "n.db"))
    cache_for(db).max_sessions = 4
    agent = _agent(db)
    for i in range(10):
        agent.run("x", session_id=f"s{i}", session_state={"n": i})
    assert len(cache_for(db)) == 4


def test_the_budget_comes_from_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("STATEWISE_CACHE_MB", raising=False)
    assert cache_bytes() == 64 * 1024 * KB
    monkeypatch.setenv("STATEWISE_CACHE_MB", "8")
    assert SessionCache().max_bytes == 8 * 1024 * KB
    monkeypatch.setenv("STATEWISE_CACHE_MB", "lots")
    with pytest.raises(ConfigurationError, match="STATEWISE_CACHE_MB='lots' is not a number"):
        SessionCache()
