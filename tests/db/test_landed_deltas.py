"""Writers of one session in one process catch their trees up from what this process
landed (`db._landed`), not by reading every other writer's delta back from storage; what
another process landed is still read. Real SQLite files, real threads."""

from __future__ import annotations

import secrets
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from statewise.db import SqliteDb
from statewise.db.base import BaseDb
from statewise.db.planning import SessionSpec
from statewise.db.records import DeltaRecord, DeltaSegment, ScopeKey
from statewise.db.state_codec import StateCodec
from statewise.db.store import StateStore
from statewise.db.testing.store_cases import run_threads
from statewise.state import ops as ops_module

SPEC = SessionSpec(session_id="hot", user_id="u1", app_name="app1")
WRITERS = 8
EACH = 25


class _CountingReads:
    """Counts the delta rows a SQLite database hands back (its `probe_tails` reads them
    through `read_deltas`)."""

    def __init__(self, db: SqliteDb) -> None:
        self.rows = 0
        self.lock = threading.Lock()
        read_deltas = db.read_deltas

        def counted(*args: Any, **kwargs: Any) -> list[DeltaRecord]:
            found = read_deltas(*args, **kwargs)
            with self.lock:
                self.rows += len(found)
            return found

        db.read_deltas = counted  # type: ignore[method-assign]


def _seed(store: StateStore) -> None:
    txn = store.begin(SPEC)
    try:
        txn.state.update({"n": 0, "by": []})
        txn.commit(source="seed")
    finally:
        txn.close()


def _append(store: StateStore, item: str) -> None:
    txn = store.begin(SPEC)
    try:
        txn.state["by"] = [*txn.state.get("by", []), item]
        txn.commit(source=item)
    finally:
        txn.close()


def _hot_writers(store: StateStore) -> None:
    start = threading.Barrier(WRITERS)

    def write() -> None:
        start.wait()
        for _ in range(EACH):
            txn = store.begin(SPEC)
            try:
                txn.state.increment("n")
                txn.commit(source="writer")
            finally:
                txn.close()

    run_threads([write] * WRITERS)


def test_hot_writers_of_one_process_read_back_few_of_each_others_deltas(tmp_path: Path) -> None:
    """Eight threads commit 25 times each to one session. Every checkout finds its tree a
    few commits behind; read back from storage, those deltas came to about three rows per
    commit (604 for 200). Kept in process, a checkout reads only what it cannot know, and
    what is left is a group commit's own read of what landed since its oldest writer's
    base: under one per commit (145-171 for 200)."""
    db = SqliteDb(db_file=str(tmp_path / "hot.db"))
    store = StateStore(db)
    _seed(store)
    counting = _CountingReads(db)
    _hot_writers(store)
    commits = WRITERS * EACH
    assert counting.rows < 1.5 * commits
    txn = store.begin(SPEC)
    try:
        assert txn.state["n"] == commits  # (none lost)
    finally:
        txn.close()


def test_what_another_process_landed_is_read_from_storage(tmp_path: Path) -> None:
    """Deltas landed through another database object (another process, as far as this one
    knows) are read from storage, and the tree this process kept catches up on them."""
    path = str(tmp_path / "two.db")
    here = StateStore(SqliteDb(db_file=path))
    there = StateStore(SqliteDb(db_file=path))
    _seed(here)
    for i in range(3):
        _append(there, f"there{i}")
    counting = _CountingReads(here.db)  # type: ignore[arg-type]
    txn = here.begin(SPEC)
    try:
        assert txn.state["by"] == ["there0", "there1", "there2"]
    finally:
        txn.close()
    assert counting.rows == 3


def test_a_delta_is_decoded_once_per_codec(monkeypatch: pytest.MonkeyPatch) -> None:
    """Sixteen writers applying one delta decode its ops once; another codec (another
    agent's secrets) decodes them again for itself."""
    calls = [0]
    from_json = ops_module.Op.from_json.__func__  # type: ignore[attr-defined]

    def counted(cls: type[ops_module.Op], data: Any) -> ops_module.Op:
        calls[0] += 1
        return from_json(cls, data)  # type: ignore[no-any-return]

    monkeypatch.setattr(ops_module.Op, "from_json", classmethod(counted))
    key = ScopeKey("session", "s")
    delta = DeltaRecord(
        key=key,
        version=1,
        session_id="s",
        run_id=None,
        step=None,
        segments=[DeltaSegment(source="x", ops=[{"op": "set", "path": ["a"], "value": [1]}])],
    )
    codec, other = StateCodec(frozenset()), StateCodec(frozenset())
    first = codec.decode_ops(key, [delta])
    for _ in range(15):
        assert codec.decode_ops(key, [delta]) == first
    assert calls[0] == 1
    assert other.decode_ops(key, [delta]) == first
    assert calls[0] == 2


def test_a_session_another_process_writes_is_caught_up_in_one_read(tmp_path: Path) -> None:
    """A cached tree behind by one delta of ours and one of another process's: the first
    catch-up probes plainly and reads the other's delta after it; from then on the
    session counts as shared, and its catch-ups read what moved with the probe
    (`probe_tails`), until one finds nothing but ours."""
    path = str(tmp_path / "shared.db")
    here = StateStore(SqliteDb(db_file=path))
    there = StateStore(SqliteDb(db_file=path))
    _seed(here)
    here._contended.add(SPEC.session_id)  # (its writers raced: their commits are kept)
    calls: list[str] = []
    db = here.db
    probe, probe_tails = db.probe, db.probe_tails

    def counted_probe(*args: Any, **kwargs: Any) -> Any:
        calls.append("probe")
        return probe(*args, **kwargs)

    def counted_probe_tails(*args: Any, **kwargs: Any) -> Any:
        calls.append("probe_tails")
        return probe_tails(*args, **kwargs)

    db.probe, db.probe_tails = counted_probe, counted_probe_tails  # type: ignore[method-assign]

    expected: list[str] = []
    for round_ in range(3):
        behind = here.cache.take(SPEC.session_id)  # (a tree a writer holds meanwhile)
        assert behind is not None
        _append(here, f"here{round_}")
        if round_ < 2:
            _append(there, f"there{round_}")
        here.cache.take(SPEC.session_id)
        here.cache.give(behind)
        expected += [f"here{round_}"] + ([f"there{round_}"] if round_ < 2 else [])
        calls.clear()
        txn = here.begin(SPEC)
        try:
            assert txn.state["by"] == expected
        finally:
            txn.close()
        # (SQLite's probe_tails probes through `probe`, then reads the deltas)
        catch_up = [["probe"], ["probe_tails", "probe"], ["probe_tails", "probe"]][round_]
        assert calls == catch_up, round_
    assert not here._landed.shared(SPEC.session_id)  # (the last catch-up found only ours)


def test_a_large_delta_is_read_back_not_kept(tmp_path: Path) -> None:
    """What is kept is bounded: a delta over `KEPT_DELTA_BYTES` is not kept in memory, and
    a writer behind it reads it from storage."""
    from statewise.db._landed import KEPT_DELTA_BYTES

    store = StateStore(SqliteDb(db_file=str(tmp_path / "big.db")))
    _seed(store)
    store._contended.add(SPEC.session_id)
    sizes = {"small": 10, "large": KEPT_DELTA_BYTES + 1}
    for name, size in sizes.items():
        behind = store.cache.take(SPEC.session_id)
        assert behind is not None
        txn = store.begin(SPEC)
        try:
            txn.state["blob"] = name * (size // len(name) + 1)
            txn.commit(source=name)
        finally:
            txn.close()
        store.cache.take(SPEC.session_id)
        store.cache.give(behind)
        counting = _CountingReads(store.db)  # type: ignore[arg-type]
        txn = store.begin(SPEC)
        try:
            assert txn.state["blob"].startswith(name)
        finally:
            txn.close()
        assert counting.rows == (0 if name == "small" else 1), name


@pytest.fixture(params=["sqlite", "postgres"])
def two_processes(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[tuple[Any, Any]]:
    """Two database objects on one storage (two processes, as far as each one knows)."""
    here: BaseDb
    there: BaseDb
    if request.param == "sqlite":
        path = str(tmp_path / "two.db")
        here, there = SqliteDb(db_file=path), SqliteDb(db_file=path)
    else:
        from statewise.db.postgres import PostgresDb

        url = request.getfixturevalue("pg_url")
        schema = f"sw_test_{secrets.token_hex(4)}"
        here, there = PostgresDb(url, schema=schema), PostgresDb(url, schema=schema)
    try:
        yield here, there
    finally:
        here.close()
        there.close()
        if request.param == "postgres":
            import psycopg

            with psycopg.connect(url, autocommit=True) as conn:
                conn.execute(f'DROP SCHEMA IF EXISTS "{schema}" CASCADE')


def test_a_session_deleted_and_made_anew_is_not_caught_up_with_its_old_deltas(
    two_processes: tuple[Any, Any],
) -> None:
    """Versions start from 1 again when a deleted session's id is used anew: what this
    process kept of the old one must not stand in for the new one's deltas (here landed
    by another process, which this one would not read back if it trusted them)."""
    here, there = (StateStore(db) for db in two_processes)
    here._contended.add(SPEC.session_id)

    for i in range(4):
        _append(here, f"old{i}")  # (versions 1-4, kept)
    assert here.delete_session(SPEC.session_id)
    here._contended.add(SPEC.session_id)
    _append(here, "new0")  # (version 1 of the new session)
    behind = here.cache.take(SPEC.session_id)
    assert behind is not None
    _append(there, "new1")
    _append(there, "new2")
    here.cache.give(behind)
    txn = here.begin(SPEC)
    try:
        assert txn.state["by"] == ["new0", "new1", "new2"]
    finally:
        txn.close()
