"""`read_scopes`, what a reader outside a run reads (the HTTP state GET), on every backend
(PostgreSQL and Redis answer it in one round trip, and `aread_scopes` with their async
drivers): the session and versions `probe` gives, and exactly the scopes that are not at
the version the reader holds, as `load_scopes` loads them."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

from statewise.db.base import ScopesRead
from statewise.db.planning import SessionSpec
from statewise.db.records import ScopeKey
from statewise.db.store import StateStore
from statewise.db.testing import Harness

SPEC = SessionSpec(session_id="read-1", user_id="u-read", app_name="app-read")


def _write(store: StateStore, n: int) -> None:
    for i in range(n):
        with store.begin(SPEC) as txn:
            txn.state.setdefault("items", []).append(i)
            if i % 2:
                txn.state["user:seen"] = i
            txn.commit(source=f"step{i}", run_id=f"r{i}", step=i)


def _plain(read: ScopesRead) -> tuple[Any, ...]:
    record, versions, loaded = read
    return record, versions, {k: (s.version, s.data, s.snapshot_version) for k, s in loaded.items()}


def test_read_scopes_loads_only_the_scopes_not_at_the_held_versions(harness: Harness) -> None:
    db = harness.db
    _write(StateStore(db), 5)
    session, user, app = keys = SPEC.scope_keys()
    record, versions = db.probe(SPEC.session_id, keys)
    full = db.load_scopes(keys)

    # Nothing held: every scope is loaded, as load_scopes loads it.
    got = db.read_scopes(SPEC.session_id, keys, {})
    assert got[0] == record and got[1] == versions == {session: 5, user: 2, app: 0}
    assert {k: s.data for k, s in got[2].items()} == {k: s.data for k, s in full.items()}
    assert got[2][session].data == {"items": [0, 1, 2, 3, 4]}

    # The session scope held at an older version, the others current: only it is loaded.
    got = db.read_scopes(SPEC.session_id, keys, {session: 3, user: 2, app: 0})
    assert (got[0], got[1]) == (record, versions)
    assert list(got[2]) == [session] and got[2][session].data == full[session].data
    assert got[2][session].version == 5

    # Everything held: nothing loaded, the probe alone.
    assert db.read_scopes(SPEC.session_id, keys, versions) == (record, versions, {})

    # The async twin reads the same.
    async_got = asyncio.run(db.aread_scopes(SPEC.session_id, keys, {session: 3}))
    assert _plain(async_got) == _plain(db.read_scopes(SPEC.session_id, keys, {session: 3}))


def test_read_scopes_of_a_missing_session_loads_nothing(harness: Harness) -> None:
    key = ScopeKey("session", "read-none")
    assert harness.db.read_scopes("read-none", [key], {}) == (None, {key: 0}, {})
    assert asyncio.run(harness.db.aread_scopes("read-none", [key], {})) == (None, {key: 0}, {})


def test_a_sqlite_read_on_a_shared_loop_does_not_wait_for_the_writer_thread(
    tmp_path: Path,
) -> None:
    import threading

    from statewise.db import SqliteDb

    with SqliteDb(db_file=str(tmp_path / "r.db")) as db:
        _write(StateStore(db), 2)
        keys = SPEC.scope_keys()

        async def main() -> None:
            busy = threading.Event()
            # The writer's thread is busy (a commit's disk sync, a busy timeout) ...
            held = asyncio.ensure_future(db.run_io(busy.wait, 10))
            await asyncio.sleep(0.05)
            try:
                # ... and a reader's read does not wait for it.
                record, _, loaded = await asyncio.wait_for(
                    db.aread_scopes(SPEC.session_id, keys, {}), 5
                )
                assert record is not None and loaded[keys[0]].data == {"items": [0, 1]}
                assert not held.done()
            finally:
                busy.set()
                await held

        asyncio.run(main())
