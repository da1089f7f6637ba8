"""Per-session group commit for the writers of one process (`StateStore` uses it for
commits that lost a race, or write a session known to be contended)."""

from __future__ import annotations

import threading
import weakref
from collections.abc import Callable, Mapping
from dataclasses import dataclass

from statewise.db.base import BaseDb, ProbedTails
from statewise.db.records import Commit, CommitResult, ScopeKey

CONTENDED_KEPT = 1024  # sessions with a lock kept, then the idle ones forgotten at once

GROUP_MAX = 64  # commits of one session landed together at most


@dataclass(eq=False)
class _Entry:
    """One writer's rebased commit, waiting for its turn or for a leader to land it."""

    bases_of: Callable[[], Mapping[ScopeKey, int]]
    build: Callable[[ProbedTails], Commit]
    done: bool = False
    result: CommitResult | None = None
    error: Exception | None = None


class SessionTurns:
    """Per-session group commit for the writers of this process (every store on one
    database object shares it).

    A writer that lost a race on a session (or writes one known to be contended) joins
    the session's queue and takes the session's lock; whoever holds it lands every
    commit queued so far in one transaction (`BaseDb.commit_rebased_together`), each
    rebased onto those before it, and the others find theirs landed when they get the
    lock. So the writers of one process never lose to each other, and N of them pay one
    durable write instead of N. Each commit is still its own (id, deltas, events), and
    none returns before the transaction that holds it is durable."""

    def __init__(self) -> None:
        self._guard = threading.Lock()
        self._locks: dict[str, threading.Lock] = {}
        self._queues: dict[str, list[_Entry]] = {}

    def of(self, session_id: str) -> threading.Lock:
        with self._guard:
            lock = self._locks.get(session_id)
            if lock is None:
                if len(self._locks) >= CONTENDED_KEPT:
                    # Forget the idle ones (a lock someone holds or waits for stays).
                    busy = {k for k, v in self._locks.items() if v.locked() or self._queues.get(k)}
                    self._locks = {k: self._locks[k] for k in busy}
                    self._queues = {k: q for k, q in self._queues.items() if k in busy}
                lock = self._locks[session_id] = threading.Lock()
            return lock

    def busy(self, session_id: str) -> bool:
        """Whether writers of this process are queued for the session."""
        with self._guard:
            return bool(self._queues.get(session_id))

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
        entry = _Entry(bases_of, build)
        turn = self.of(session_id)
        if alone:
            with turn:
                self._land(db, session_id, [entry])
        else:
            with self._guard:
                self._queues.setdefault(session_id, []).append(entry)
        with turn:
            if not entry.done:
                with self._guard:
                    queue = self._queues.get(session_id, [])
                    group, queue[:] = queue[:GROUP_MAX], queue[GROUP_MAX:]
                if entry not in group:  # (more than GROUP_MAX ahead of it: its own)
                    group.append(entry)
                self._land(db, session_id, group)
        if entry.error is not None:
            raise entry.error
        assert entry.result is not None
        return entry.result

    @staticmethod
    def _land(db: BaseDb, session_id: str, group: list[_Entry]) -> None:
        try:
            if len(group) == 1:
                (only,) = group
                outcomes: list[CommitResult | Exception] = [
                    db.commit_rebased(session_id, only.bases_of(), only.build)
                ]
            else:
                outcomes = db.commit_rebased_together(
                    session_id, [(e.bases_of, e.build) for e in group]
                )
        except Exception as exc:
            outcomes = [exc] * len(group)
        for entry, outcome in zip(group, outcomes, strict=True):
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
