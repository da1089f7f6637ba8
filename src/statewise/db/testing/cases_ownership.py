"""Conformance cases on who a write belongs to: commit ids applied exactly once, and run
leases (claim, renew, expiry, release, two claimants).

Both are lines of the contract a backend can break while every read and write still looks
right: a retry that applies a commit twice, or a lease another owner can take while it is
live, only shows when a reply is lost or two processes want the same run.
"""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Callable

from statewise.db.base import BaseDb
from statewise.db.records import (
    Commit,
    CommitResult,
    DeltaSegment,
    NewEvent,
    ScopeWrite,
    SessionRecord,
)
from statewise.db.testing.base import Harness
from statewise.db.testing.cases import CASES, S, case, setop, state

__all__ = ["CASES"]


def _commit(
    db: BaseDb, sid: str, commit_id: str, value: object, base: int, *, create: bool
) -> Commit:
    return Commit(
        session=SessionRecord(session_id=sid, user_id="u1", app_name="app"),
        commit_id=commit_id,
        create_session=create,
        writes=[
            ScopeWrite(
                key=S(sid),
                base_version=base,
                segments=[DeltaSegment(source="test", ops=[setop(commit_id, value)])],
            )
        ],
        events=[NewEvent(type="note", data={"id": commit_id, "i": i}) for i in range(2)],
    )


def _same_landing(again: CommitResult, first: CommitResult) -> bool:
    return (again.versions, again.first_seq, again.last_seq) == (
        first.versions,
        first.first_seq,
        first.last_seq,
    )


def _resends(db: BaseDb, send: Callable[[Commit], CommitResult]) -> None:
    """Every commit sent again (as a retry after a lost reply would) applies nothing and
    answers what it landed as, even once later commits moved the version past it."""
    sid = "once"
    landed = {
        "c-create": send(_commit(db, sid, "c-create", 1, 0, create=True)),
        "c-second": send(_commit(db, sid, "c-second", 2, 1, create=False)),
        "c-third": send(_commit(db, sid, "c-third", 3, 2, create=False)),
    }
    assert not any(result.already_landed for result in landed.values())
    events_before = [(e.seq, e.data) for e in db.read_events(sid)]
    for commit_id, base, create in (("c-create", 0, True), ("c-second", 1, False)):
        again = send(_commit(db, sid, commit_id, "retried", base, create=create))
        assert again.already_landed, f"{commit_id} sent again was applied a second time"
        assert _same_landing(again, landed[commit_id]), (commit_id, again, landed[commit_id])
    assert [(e.seq, e.data) for e in db.read_events(sid)] == events_before
    assert state(db, S(sid)) == {"c-create": 1, "c-second": 2, "c-third": 3}
    assert [d.version for d in db.read_deltas(S(sid))] == [1, 2, 3]
    record, versions = db.probe(sid, [S(sid)])
    assert record is not None and record.last_seq == 6 and versions[S(sid)] == 3


@case
def commit_id_sent_again_applies_nothing(h: Harness) -> None:
    _resends(h.db, h.db.commit)


@case
def commit_id_sent_again_on_the_loop_applies_nothing(h: Harness) -> None:
    db = h.db
    _resends(db, lambda commit: asyncio.run(db.acommit(commit)))


@case
def commit_ids_belong_to_their_session(h: Harness) -> None:
    """The same commit id in another session is another commit."""
    db = h.db
    first = db.commit(_commit(db, "a", "shared-id", 1, 0, create=True))
    other = db.commit(_commit(db, "b", "shared-id", 1, 0, create=True))
    assert not first.already_landed and not other.already_landed
    assert state(db, S("b")) == {"shared-id": 1} and len(db.read_events("b")) == 2


@case
def lease_claim_renew_release(h: Harness) -> None:
    db = h.db
    assert db.claim_run("s", "r1", "alice", 30.0)
    assert not db.claim_run("s", "r1", "bob", 30.0), "a live lease was taken by another owner"
    assert db.claim_run("s", "r1", "alice", 30.0), "the holder could not renew its lease"
    assert db.claim_run("s", "r2", "bob", 30.0), "a lease on one run held another run"
    assert db.claim_run("other", "r1", "bob", 30.0), "a lease in one session held another"
    db.release_run("s", "r1", "bob")  # not bob's: changes nothing
    assert not db.claim_run("s", "r1", "bob", 30.0), "releasing another owner's lease freed it"
    db.release_run("s", "r1", "alice")
    assert db.claim_run("s", "r1", "bob", 30.0), "a released lease could not be claimed"
    assert not db.claim_run("s", "r1", "alice", 30.0)
    assert asyncio.run(db.aclaim_run("s", "r1", "bob", 30.0))
    asyncio.run(db.arelease_run("s", "r1", "bob"))
    assert asyncio.run(db.aclaim_run("s", "r1", "alice", 30.0))


@case
def lease_expires_and_renewal_extends_it(h: Harness) -> None:
    db = h.db
    ttl = 0.6
    # A slow moment can push the check past the renewed expiry too: then the try proves
    # nothing and is made again on another run (a check that ends in time is conclusive).
    for attempt in range(4):
        run_id = f"r{attempt}"
        started = time.monotonic()
        assert db.claim_run("s", run_id, "alice", ttl)
        time.sleep(ttl / 2)
        renewing = time.monotonic()
        assert db.claim_run("s", run_id, "alice", ttl)  # renewed: another ttl from now
        time.sleep(max(0.0, started + ttl * 1.15 - time.monotonic()))  # past the first expiry
        held = not db.claim_run("s", run_id, "bob", ttl)
        if time.monotonic() < renewing + ttl:
            assert held, "a renewed lease expired at its old time"
            break
    else:
        raise AssertionError("the machine was too slow to check a lease renewal four times")
    deadline = time.monotonic() + ttl * 5
    while not db.claim_run("s", run_id, "bob", ttl):
        assert time.monotonic() < deadline, "an expired lease was never given up"
        time.sleep(ttl / 6)
    assert not db.claim_run("s", run_id, "alice", ttl), "the old owner kept its expired lease"


@case
def lease_has_one_winner_among_claimants(h: Harness) -> None:
    dbs = [h.db, *(h.reopen() for _ in range(3))]

    def claim(
        db: BaseDb, owner: str, run_id: str, start: threading.Barrier, won: list[str]
    ) -> None:
        start.wait()
        if db.claim_run("s", run_id, owner, 30.0):
            won.append(owner)

    for attempt in range(5):
        start = threading.Barrier(len(dbs) * 2)
        won: list[str] = []
        threads = [
            threading.Thread(
                target=claim, args=(db, f"owner-{i}-{j}", f"race-{attempt}", start, won)
            )
            for i, db in enumerate(dbs)
            for j in range(2)
        ]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(30)
        assert len(won) == 1, f"attempt {attempt}: {len(won)} claimants won one lease: {won}"
