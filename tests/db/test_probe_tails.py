"""`probe_tails`, what a commit that lost a race reads to rebase in memory, on every
backend (PostgreSQL answers it in one statement): the same session record and versions as
`probe`, and for each scope that moved past the given version exactly the deltas after
it, in order, as `read_deltas` returns them; nothing for a scope that did not move."""

from __future__ import annotations

from statewise.db import _codec
from statewise.db.planning import SessionSpec
from statewise.db.records import ScopeKey
from statewise.db.store import StateStore
from statewise.db.testing import Harness


def test_probe_tails_is_probe_plus_the_deltas_after_each_base(harness: Harness) -> None:
    db = harness.db
    store = StateStore(db)
    spec = SessionSpec(session_id="tails-1", user_id="u-tails", app_name="app-tails")
    session, user, app = spec.scope_keys()
    for n in range(5):
        with store.begin(spec) as txn:
            txn.state.setdefault("items", []).append(n)
            if n % 2:
                txn.state["user:seen"] = n
            txn.commit(source=f"step{n}", run_id=f"r{n}", step=n)

    bases = {session: 2, user: 0, app: 0}
    record, versions, tails = db.probe_tails(spec.session_id, bases)

    assert (record, versions) == db.probe(spec.session_id, list(bases))
    assert versions == {session: 5, user: 2, app: 0}
    assert set(tails) == {session, user}  # the app scope did not move
    for key in (session, user):
        expected = db.read_deltas(key, after_version=bases[key])
        assert [d.to_dict() for d in tails[key]] == [d.to_dict() for d in expected]
        # Each delta knows its stored length: what the scope's tail grew by with it.
        for delta in [*tails[key], *expected]:
            encoded = _codec.dumps([segment.to_dict() for segment in delta.segments])
            assert delta.stored_bytes == len(encoded)
    assert [d.version for d in tails[session]] == [3, 4, 5]
    assert tails[session][0].segments[0].source == "step2"
    assert tails[session][0].run_id == "r2" and tails[session][0].step == 2


def test_probe_tails_of_a_missing_session(harness: Harness) -> None:
    key = ScopeKey("session", "tails-none")
    record, versions, tails = harness.db.probe_tails("tails-none", {key: 0})
    assert record is None
    assert versions == {key: 0}
    assert tails == {}


def test_probe_tails_with_a_limit_reads_at_most_that_many_deltas_per_scope(
    harness: Harness,
) -> None:
    db = harness.db
    store = StateStore(db)
    spec = SessionSpec(session_id="tails-limit", user_id="u-limit", app_name="app-limit")
    session, user, app = spec.scope_keys()
    for n in range(6):
        with store.begin(spec) as txn:
            txn.state["n"] = n
            txn.state["user:n"] = n
            txn.commit(source=f"step{n}")
    bases = {session: 1, user: 3, app: 0}
    record, versions, tails = db.probe_tails(spec.session_id, bases, limit=2)
    assert (record, versions) == db.probe(spec.session_id, list(bases))
    assert versions == {session: 6, user: 6, app: 0}
    assert [d.version for d in tails[session]] == [2, 3]  # the first two after the base
    assert [d.version for d in tails[user]] == [4, 5]
    assert app not in tails
    _, _, whole = db.probe_tails(spec.session_id, bases, limit=10)
    assert [d.version for d in whole[session]] == [2, 3, 4, 5, 6]
