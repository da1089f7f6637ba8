"""A commit that loses a race is rebased in memory: the other writers' deltas are applied
to the state the tree held before our ops, instead of reloading the scope. These tests run
the same races twice on real SQLite files, once that way and once with the reload, and
require the same outcome to the byte: the stored state, every delta's segments (which
source each op is attributed to) and conflicts, the events, the run's conflict records,
and the tree the writer keeps. The races cover lists both sides append to and remove
from, counters under `sum`, `max` and `union` keys, a secret (encrypted) key, the shared `user:`
and `app:` scopes, `temp:` keys, and a commit that loses two races in a row."""

from __future__ import annotations

import random
import secrets
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from cryptography.fernet import Fernet

from statewise.db import SqliteDb
from statewise.db.planning import SessionSpec
from statewise.db.records import Commit, CommitResult
from statewise.db.store import StateStore
from statewise.db.working import visible_state
from statewise.state.merge import Rules
from statewise.state.secrets import Cipher, is_encrypted

KEY = Fernet.generate_key()
RULES = Rules({"n": "sum", "hi": "max", "tags": "union"})
SPEC = SessionSpec(session_id="s1", user_id="u1", app_name="app1")

Writer = Callable[[Any, random.Random], None]


def _store(path: Path) -> StateStore:
    return StateStore(
        SqliteDb(db_file=str(path)), rules=RULES, secret_keys=["token"], cipher=Cipher(KEY)
    )


def _start(state: Any) -> None:
    state.update(
        {
            "items": ["a", "b", "c", "d"],
            "n": 0,
            "hi": 1,
            "tags": ["x"],
            "doc": {"title": "t", "body": {"p": 1}},
            "token": "secret-0",
            "user:prefs": {"lang": "en", "seen": []},
            "app:count": 0,
        }
    )


def _edit(state: Any, rng: random.Random, who: str) -> None:
    """Some changes of the kinds runs make, chosen by `rng`."""
    for _ in range(rng.randint(1, 4)):
        pick = rng.randrange(11)
        if pick == 0:
            state["items"].append(f"{who}{rng.randrange(100)}")
        elif pick == 1 and state["items"]:
            state["items"].pop(rng.randrange(len(state["items"])))
        elif pick == 2:
            state["items"].insert(rng.randrange(len(state["items"]) + 1), f"{who}-ins")
        elif pick == 3:
            state["n"] += rng.randint(1, 5)
        elif pick == 4:
            state["hi"] = rng.randrange(50)
        elif pick == 5:
            state["tags"].append(f"{who}t")
        elif pick == 6:
            state["doc"]["body"][who] = rng.randrange(9)
        elif pick == 7:
            state["token"] = f"secret-{who}-{rng.randrange(9)}"
        elif pick == 8:
            state["user:prefs"]["seen"].append(who)
        elif pick == 9:
            state["app:count"] += 1
        else:
            state[f"temp:{who}"] = rng.randrange(9)
            state["doc"]["title"] = f"{who}-title"


def _outcome(store: StateStore, committed: list[Any], kept: dict[str, Any]) -> dict[str, Any]:
    db = store.db
    deltas = {
        kind: [
            (d.version, [s.to_dict() for s in d.segments], d.conflicts) for d in db.read_deltas(key)
        ]
        for kind, key in zip(("session", "user", "app"), SPEC.scope_keys(), strict=True)
    }
    fresh = StateStore(db, rules=RULES, secret_keys=["token"], cipher=Cipher(KEY))
    fresh.cache.drop(SPEC.session_id)
    state, version = fresh.read_state(SPEC)
    fresh.cache.drop(SPEC.session_id)
    kept["stored_at_its_versions"] = fresh.state_at(SPEC, kept["versions"])
    events = [(e.seq, e.type, e.data) for e in db.read_events(SPEC.session_id)]
    outcome: dict[str, Any] = _plain(
        {
            "state": state,
            "version": version,
            "deltas": deltas,
            "events": events,
            "committed": [(c.versions, c.changes, c.conflicts) for c in committed],
            "kept": kept,
        }
    )
    return outcome


def _race(path: Path, seed: int, losses: int) -> dict[str, Any]:
    """Writer A edits its checked-out state, then another writer (its own connection)
    commits its own edits before each of A's first `losses` commit attempts, so A loses
    up to that many races in a row (fewer when a writer touched no scope A writes) and
    lands after rebasing each time."""
    rng = random.Random(seed)
    store = _store(path)
    with store.begin(SPEC) as txn:
        _start(txn.state)
        txn.commit(source="start")
    committed = []
    with store.begin(SPEC) as mine:
        _edit(mine.state, rng, "a")
        mine.mark("tool_a")
        _edit(mine.state, rng, "b")
        others = [_store(path) for _ in range(losses)]
        real_commit = store.db.commit
        left = list(others)

        def commit_after_others(commit: Commit) -> CommitResult:
            if left:
                other = left.pop(0)
                with other.begin(SPEC) as theirs:
                    _edit(theirs.state, rng, f"o{len(left)}")
                    other_commit = theirs.commit(source="other")
                    assert not other_commit.already_landed
            return real_commit(commit)

        store.db.commit = commit_after_others  # type: ignore[method-assign]
        committed.append(mine.commit(source="tool_b"))
        store.db.commit = real_commit  # type: ignore[method-assign]
        kept = {
            "tree": visible_state(mine.state),
            "versions": dict(mine.versions),
            "races_lost": losses - len(left),  # A landed early when no scope overlapped
        }
        for other in others:
            other.db.close()
    outcome = _outcome(store, committed, kept)
    store.db.close()
    return outcome


def _plain(value: Any) -> Any:
    """Plain data, with each encrypted value decrypted (a ciphertext differs each time)."""
    if isinstance(value, dict):
        if is_encrypted(value):
            return ("decrypted", Cipher(KEY).decrypt_value(value))
        return {k: _plain(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_plain(v) for v in value]
    return value


@pytest.fixture
def reload_only(monkeypatch: pytest.MonkeyPatch) -> Iterator[Callable[[], None]]:
    def force() -> None:
        monkeypatch.setattr(StateStore, "_rebase_in_memory", lambda self, *a: False)

    yield force


@pytest.mark.parametrize("losses", [1, 2])
def test_in_memory_rebase_matches_reloading_the_scope(
    tmp_path: Path, losses: int, reload_only: Callable[[], None]
) -> None:
    in_memory = [_race(tmp_path / f"m{seed}.db", seed, losses) for seed in range(25)]
    reload_only()
    reloaded = [_race(tmp_path / f"r{seed}.db", seed, losses) for seed in range(25)]
    conflicts = most_lost = 0
    for seed, (a, b) in enumerate(zip(in_memory, reloaded, strict=True)):
        assert a == b, f"seed {seed}: the in-memory rebase differs from the reload"
        # The kept tree is the stored state plus temp: keys: what the next run starts from.
        # The tree the writer keeps for its next run is the stored state at its versions.
        assert a["kept"]["tree"] == a["kept"]["stored_at_its_versions"], f"seed {seed}"
        conflicts += len(a["committed"][0][2])
        most_lost = max(most_lost, a["kept"]["races_lost"])
    assert conflicts > 0, "the races recorded no conflict: they test too little"
    assert most_lost == losses, f"no race made A lose {losses} times in a row"


@pytest.fixture(params=["sqlite", "postgres"])
def opener(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Callable[[], StateStore]]:
    """Stores on one database: a SQLite file, or a schema of the PostgreSQL test server."""
    if request.param == "sqlite":
        yield lambda: _store(tmp_path / "t.db")
        return
    pg_url = request.getfixturevalue("pg_url")
    import psycopg

    from statewise.db.postgres import PostgresDb

    schema = f"sw_rebase_{secrets.token_hex(4)}"
    yield lambda: StateStore(
        PostgresDb(pg_url, schema=schema, pool_size=2),
        rules=RULES,
        secret_keys=["token"],
        cipher=Cipher(KEY),
    )
    with psycopg.connect(pg_url, autocommit=True) as conn:
        conn.execute(f'DROP SCHEMA IF EXISTS "{schema}" CASCADE')


def test_in_memory_rebase_reads_no_snapshot(opener: Callable[[], StateStore]) -> None:
    """The lever itself: losing a race reads the other writer's deltas (with the versions,
    in one statement on PostgreSQL), never the scope's snapshot and tail again."""
    store = opener()
    reads: list[str] = []
    db: Any = store.db
    real_load, real_probe, real_rebased = db.load_scopes, db.probe_tails, db.commit_rebased

    def load(keys: Any) -> Any:
        reads.append("load_scopes")
        return real_load(keys)

    def probe_tails(session_id: str, bases: Any, **kwargs: Any) -> Any:
        reads.append("probe_tails")
        return real_probe(session_id, bases, **kwargs)

    def commit_rebased(session_id: str, bases: Any, build: Any) -> Any:
        reads.append("commit_rebased")
        return real_rebased(session_id, bases, build)

    with store.begin(SPEC) as txn:
        _start(txn.state)
        txn.commit(source="start")
    other = opener()
    with store.begin(SPEC) as mine:
        mine.state["items"].append("mine")
        mine.state["n"] += 2
        with other.begin(SPEC) as theirs:
            theirs.state["items"].append("theirs")
            theirs.state["n"] += 3
            theirs.commit(source="other")
        db.load_scopes, db.probe_tails, db.commit_rebased = load, probe_tails, commit_rebased
        committed = mine.commit(source="tool")
    # PostgreSQL reads the tails inside commit_rebased, under the session's lock.
    assert reads in (["commit_rebased", "probe_tails"], ["commit_rebased"])
    state = store.read_state(SPEC)[0]
    assert state["items"][-2:] == ["theirs", "mine"]
    assert state["n"] == 5
    assert [c["rule"] for c in committed.conflicts] == ["sum"]
    other.db.close()
    store.db.close()


def test_in_memory_rebase_copies_nothing(tmp_path: Path) -> None:
    """The rebase runs on the tree's own containers: the list both sides appended to and
    the 10,000 items beside it are the very objects they were. (Copying the state was
    its cost, ~0.4 µs an item, paid while PostgreSQL holds the session's lock.)"""
    store, other = _store(tmp_path / "t.db"), _store(tmp_path / "t.db")
    with store.begin(SPEC) as txn:
        _start(txn.state)
        txn.state["big"] = [{"i": i} for i in range(10_000)]
        txn.commit(source="start")
    with store.begin(SPEC) as mine:
        items, big = mine.state["items"], mine.state["big"]
        first = big[0]
        items.append("mine")
        mine.state["n"] += 2
        with other.begin(SPEC) as theirs:
            theirs.state["items"].append("theirs")
            theirs.state["n"] += 3
            theirs.commit(source="other")
        committed = mine.commit(source="tool")
        assert [c["rule"] for c in committed.conflicts] == ["sum"]
        assert mine.state["items"] is items and mine.state["big"] is big
        assert mine.state["big"][0] is first
        assert items[-2:] == ["theirs", "mine"] and mine.state["n"] == 5
    assert store.read_state(SPEC)[0]["items"][-2:] == ["theirs", "mine"]
    other.db.close()
    store.db.close()


def test_a_strict_conflict_leaves_the_tree_as_stored_at_its_versions(tmp_path: Path) -> None:
    """A rebase that raises (a `strict` key both sides set) takes its partial work off
    the tree: what is left is the stored state at the versions the tree names, so the
    transaction's next commit cannot write deltas against a state it does not name."""
    from statewise.exceptions import StateConflictError

    def strict_store() -> StateStore:
        return StateStore(
            SqliteDb(db_file=str(tmp_path / "t.db")),
            rules=Rules({"k": "strict", "n": "sum"}),
            secret_keys=["token"],
            cipher=Cipher(KEY),
        )

    store, other = strict_store(), strict_store()
    with store.begin(SPEC) as txn:
        _start(txn.state)
        txn.state["k"] = "base"
        txn.commit(source="start")
    with store.begin(SPEC) as mine:
        mine.state["items"].append("mine")
        mine.state["n"] += 2
        mine.state["k"] = "mine"
        with other.begin(SPEC) as theirs:
            theirs.state["items"].append("theirs")
            theirs.state["k"] = "theirs"
            theirs.state["token"] = "secret-theirs"
            theirs.commit(source="other")
        with pytest.raises(StateConflictError):
            mine.commit(source="tool")
        fresh = strict_store()
        assert visible_state(mine.state) == fresh.state_at(SPEC, dict(mine.versions))
        assert mine.state["k"] == "base" and "theirs" not in mine.state["items"]
        fresh.db.close()
    assert store.read_state(SPEC)[0]["k"] == "theirs"
    other.db.close()
    store.db.close()


def _count_loads(store: StateStore) -> list[Any]:
    """The scope keys of each `load_scopes` the store's database is asked for."""
    db: Any = store.db
    loads: list[Any] = []
    real_load = db.load_scopes

    def load_scopes(keys: Any) -> Any:
        loads.append(keys)
        return real_load(keys)

    db.load_scopes = load_scopes
    return loads


def test_a_cached_tree_catches_up_on_the_other_writers_deltas(
    opener: Callable[[], StateStore],
) -> None:
    """A run that finds its cached tree behind (another process wrote the session since)
    applies what landed to it, a secret's new value decrypted, instead of reloading the
    scope: no snapshot read, and the 10,000 items nobody touched stay the very objects
    they were. The tree is then what the database holds at its versions."""
    store, other = opener(), opener()
    with store.begin(SPEC) as txn:
        _start(txn.state)
        txn.state["big"] = [{"i": i} for i in range(10_000)]
        txn.commit(source="start")
    with store.begin(SPEC) as txn:
        big = txn.state["big"]
    for i in range(3):
        with other.begin(SPEC) as theirs:
            theirs.state["items"].append(f"theirs{i}")
            theirs.state["n"] += 1
            theirs.state["token"] = f"secret-{i}"
            theirs.state["user:prefs"]["seen"].append(i)
            theirs.commit(source="other")
    loads = _count_loads(store)
    with store.begin(SPEC) as txn:
        assert txn.state["big"] is big
        assert txn.state["items"][-3:] == ["theirs0", "theirs1", "theirs2"]
        assert txn.state["n"] == 3 and txn.state["token"] == "secret-2"
        assert txn.state["user:prefs"]["seen"] == [0, 1, 2]
        fresh = opener()
        assert visible_state(txn.state) == fresh.state_at(SPEC, dict(txn.versions))
        txn.state["items"].append("mine")
        txn.commit(source="tool")
    assert loads == []
    assert store.read_state(SPEC)[0]["items"][-2:] == ["theirs2", "mine"]
    for s in (store, other, fresh):
        s.db.close()


def test_a_cached_tree_far_behind_is_reloaded(tmp_path: Path) -> None:
    """More than `CATCH_UP_DELTAS` deltas behind, reading and applying them all would
    cost more than the scope's snapshot and tail: the scope is reloaded."""
    from statewise.db.store import CATCH_UP_DELTAS

    store, other = _store(tmp_path / "t.db"), _store(tmp_path / "t.db")
    with store.begin(SPEC) as txn:
        _start(txn.state)
        txn.commit(source="start")
    with store.begin(SPEC):
        pass
    for _ in range(CATCH_UP_DELTAS + 1):
        with other.begin(SPEC) as theirs:
            theirs.state["n"] += 1
            theirs.commit(source="other")
    loads = _count_loads(store)
    with store.begin(SPEC) as txn:
        assert txn.state["n"] == CATCH_UP_DELTAS + 1
    assert len(loads) == 1
    other.db.close()
    store.db.close()


def test_a_catch_up_that_would_make_the_next_write_snapshot_reloads(tmp_path: Path) -> None:
    """A cached tree counts the bytes its scope's tail grew by, to know when its next
    write must snapshot; it cannot see a snapshot another writer took meanwhile. When the
    count says "snapshot next", the scope is reloaded with its real sizes instead, so a
    session many processes write is snapshotted once per snapshot's worth of deltas, not
    once by each of them."""
    from statewise.db.store import SNAPSHOT_MIN_BYTES

    store, other = _store(tmp_path / "t.db"), _store(tmp_path / "t.db")
    key = SPEC.scope_keys()[0]
    with store.begin(SPEC) as txn:
        _start(txn.state)
        txn.commit(source="start")
    with store.begin(SPEC):
        pass
    piece = "x" * (SNAPSHOT_MIN_BYTES // 3)
    for i in range(2):  # a tail short of the threshold: caught up, not reloaded
        with other.begin(SPEC) as theirs:
            theirs.state[f"p{i}"] = piece
            theirs.commit(source="other")
    loads = _count_loads(store)
    with store.begin(SPEC) as txn:
        assert txn.state["p1"] == piece
    assert loads == []
    for i in range(2, 4):  # the other writer snapshots as its tail passes the threshold
        with other.begin(SPEC) as theirs:
            theirs.state[f"p{i}"] = piece
            theirs.commit(source="other")
    with store.begin(SPEC) as txn:
        assert txn.state["p3"] == piece
        assert len(loads) == 1
        stored = store.db.load_scopes([key])[key]
        assert txn.working.sizes[key].tail_bytes == stored.tail_bytes
        assert txn.working.sizes[key].snapshot_bytes == stored.snapshot_bytes > 0
    other.db.close()
    store.db.close()


def _count_reads(store: StateStore) -> list[tuple[str, int | None]]:
    """Each probe (`("probe", None)`) and `probe_tails` (with its limit) of the store's
    database, and each `load_scopes` (`("load_scopes", None)`)."""
    db: Any = store.db
    reads: list[tuple[str, int | None]] = []
    real_probe, real_tails, real_load = db.probe, db.probe_tails, db.load_scopes
    inside: list[bool] = []  # (the generic probe_tails probes: count the call, not that)

    def probe(session_id: str, keys: Any) -> Any:
        if not inside:
            reads.append(("probe", None))
        return real_probe(session_id, keys)

    def probe_tails(session_id: str, bases: Any, *, limit: int | None = None) -> Any:
        reads.append(("probe_tails", limit))
        inside.append(True)
        try:
            probed = real_tails(session_id, bases, limit=limit)
        finally:
            inside.pop()
        assert limit is None or all(len(tail) <= limit for tail in probed[2].values())
        return probed

    def load_scopes(keys: Any) -> Any:
        reads.append(("load_scopes", None))
        return real_load(keys)

    db.probe, db.probe_tails, db.load_scopes = probe, probe_tails, load_scopes
    return reads


def test_on_a_contended_session_checkout_probes_and_catches_up_in_one_read(
    opener: Callable[[], StateStore],
) -> None:
    """Once a commit of ours lost a race on a session, other writers are at it: a run's
    checkout reads the versions and what moved since its cached tree in one read
    (`probe_tails` from the tree's versions), not a probe and then the tails. A tree
    further behind than `CATCH_UP_DELTAS` reads that many deltas at most, then reloads."""
    from statewise.db.store import CATCH_UP_DELTAS

    store, other = opener(), opener()
    with store.begin(SPEC) as txn:
        _start(txn.state)
        txn.commit(source="start")
    with store.begin(SPEC) as mine:  # a lost race: the session is contended now
        mine.state["n"] += 1
        with other.begin(SPEC) as theirs:
            theirs.state["n"] += 10
            theirs.commit(source="other")
        mine.commit(source="tool")
    for i in range(3):
        with other.begin(SPEC) as theirs:
            theirs.state["items"].append(f"theirs{i}")
            theirs.commit(source="other")
    reads = _count_reads(store)
    with store.begin(SPEC) as txn:
        assert txn.state["items"][-3:] == ["theirs0", "theirs1", "theirs2"]
        assert txn.state["n"] == 11
    assert reads == [("probe_tails", CATCH_UP_DELTAS)]
    reads.clear()
    for _ in range(CATCH_UP_DELTAS + 1):
        with other.begin(SPEC) as theirs:
            theirs.state["n"] += 1
            theirs.commit(source="other")
    with store.begin(SPEC) as txn:
        assert txn.state["n"] == 12 + CATCH_UP_DELTAS
        assert txn.state["items"][-1] == "theirs2"
    assert reads == [("probe_tails", CATCH_UP_DELTAS), ("load_scopes", None)]
    other.db.close()
    store.db.close()
