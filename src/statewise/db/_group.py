"""Per-session group commit for the writers of one process (`StateStore` uses it for
commits that lost a race, or write a session known to be contended)."""

from __future__ import annotations

import threading
import weakref
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field

from statewise.db._landed import LandedDeltas
from statewise.db.base import BaseDb, ProbedTails
from statewise.db.records import Commit, CommitResult, ScopeKey

GROUP_MAX = 64  # commits of one session landed together at most


@dataclass(eq=False)
class _Entry:
    """One writer's rebased commit, waiting for its turn or for a leader to land it."""

    bases_of: Callable[[], Mapping[ScopeKey, int]]
    build: Callable[[ProbedTails], Commit]
    alone: bool
    built: Commit | None = None  # (the commit its last build made)
    done: bool = False
    result: CommitResult | None = None
    error: Exception | None = None
    wake: threading.Event = field(default_factory=threading.Event)

    def make(self, probed: ProbedTails) -> Commit:
        self.built = self.build(probed)
        return self.built


@dataclass(eq=False)
class _Queue:
    """A session's waiting writers, and whether one of them is landing commits now."""

    waiting: list[_Entry] = field(default_factory=list)
    leading: bool = False


class SessionTurns:
    """Per-session group commit for the writers of this process (every store on one
    database object shares it).

    A writer that lost a race on a session (or writes one known to be contended) joins
    the session's queue. One writer at a time leads: it lands every commit queued so far
    in one transaction (`BaseDb.commit_rebased_together`), each rebased onto those
    before it, wakes their writers with their outcomes and hands the lead to the first
    writer still waiting. So the writers of one process never lose to each other, N of
    them pay one durable write instead of N, and only the writers that have something to
    do next wake up (a lock they all waited on was passed through every landed writer
    before the next leader got it). Each commit is still its own (id, deltas, events),
    and none returns before the transaction that holds it is durable."""

    def __init__(self) -> None:
        self._guard = threading.Lock()
        self._queues: dict[str, _Queue] = {}  # (a session's goes when nobody leads it)
        self.landed = LandedDeltas()  # (what this process's writers landed, by scope)

    def busy(self, session_id: str) -> bool:
        """Whether a writer of this process is landing the session's commits, or waits to."""
        with self._guard:
            return session_id in self._queues

    def commit(
        self,
        db: BaseDb,
        session_id: str,
        bases_of: Callable[[], Mapping[ScopeKey, int]],
        build: Callable[[ProbedTails], Commit],
        *,
        alone: bool = False,
    ) -> CommitResult:
        """Land one writer's rebased commit in its turn; `alone`: in a transaction of its
        own (its rebase may reload a scope, which reads outside the group's transaction)."""
        entry = _Entry(bases_of, build, alone)
        with self._guard:
            queue = self._queues.get(session_id)
            if queue is None:
                queue = self._queues[session_id] = _Queue(leading=True)
                leads = True
            else:
                queue.waiting.append(entry)
                leads = False
        if not leads:
            entry.wake.wait()  # its outcome, or the lead
        if not entry.done:
            self._lead(db, session_id, queue, entry)
        if entry.error is not None:
            raise entry.error
        assert entry.result is not None
        return entry.result

    def _lead(self, db: BaseDb, session_id: str, queue: _Queue, entry: _Entry) -> None:
        """Land `entry` with the writers queued behind it (up to one that must land
        alone), then wake them and hand the lead on."""
        group = [entry]
        try:
            with self._guard:
                if not entry.alone:
                    waiting = queue.waiting
                    n = 0
                    while n < len(waiting) and n + 1 < GROUP_MAX and not waiting[n].alone:
                        n += 1
                    group += waiting[:n]
                    del waiting[:n]
            self._land(db, session_id, group)
        finally:
            with self._guard:
                # (a leader interrupted before its group landed: those writers lead again)
                queue.waiting[:0] = [e for e in group[1:] if not e.done]
                nxt = queue.waiting.pop(0) if queue.waiting else None
                if nxt is None:
                    del self._queues[session_id]
            if nxt is not None:
                nxt.wake.set()
            for other in group[1:]:
                if other.done:
                    other.wake.set()

    def _land(self, db: BaseDb, session_id: str, group: list[_Entry]) -> None:
        try:
            if len(group) == 1:
                (only,) = group
                outcomes: list[CommitResult | Exception] = [
                    db.commit_rebased(session_id, only.bases_of(), only.make)
                ]
            else:
                outcomes = db.commit_rebased_together(
                    session_id, [(e.bases_of, e.make) for e in group]
                )
        except Exception as exc:
            outcomes = [exc] * len(group)
        landed = self.landed
        for entry, outcome in zip(group, outcomes, strict=True):
            built = entry.built
            if isinstance(outcome, CommitResult) and built and not outcome.already_landed:
                landed.note(built, outcome)  # (before its writer wakes)
            if isinstance(outcome, Exception):
                entry.error = outcome
            else:
                entry.result = outcome
            entry.done = True


_turns: weakref.WeakKeyDictionary[BaseDb, SessionTurns] = weakref.WeakKeyDictionary()
_turns_guard = threading.Lock()


def session_turns(db: BaseDb) -> SessionTurns:
    with _turns_guard:
        turns = _turns.get(db)
        if turns is None:
            turns = _turns[db] = SessionTurns()
        return turns
