"""The storage interface every backend implements.

Narrow and fully abstract: a backend that misses a method fails when it is constructed,
not at its first call. Everything that can be written once on top of the primitives
(async twins, export/import, ids) lives here, so backends stay thin I/O shells.
"""

from __future__ import annotations

import logging
import re
import time
from abc import ABC, abstractmethod
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from datetime import datetime, timedelta
from typing import Any, ParamSpec, TypeVar

from statewise._workers import run_blocking
from statewise.db.listing import SessionPage, page_of
from statewise.db.records import (
    Commit,
    CommitResult,
    DeltaRecord,
    EventRecord,
    RunRecord,
    ScopeKey,
    ScopeState,
    SessionRecord,
)
from statewise.db.retention import Compaction, CompactionPlan, Horizon, Retention, plan_compaction
from statewise.exceptions import CorruptRecordError, InvalidIdError, VersionConflict

P = ParamSpec("P")
T = TypeVar("T")

ProbedTails = tuple[SessionRecord | None, dict[ScopeKey, int], dict[ScopeKey, list[DeltaRecord]]]
"""What `probe_tails` reads: the session row, each scope's version, and the deltas each
scope got after a given base."""

ProbedNew = tuple[SessionRecord | None, dict[ScopeKey, int], CommitResult | None]
"""What `commit_new` answers: the session row and each scope's version as probed, and the
commit's result (None: not sent)."""

ScopesRead = tuple[SessionRecord | None, dict[ScopeKey, int], dict[ScopeKey, ScopeState]]
"""What `read_scopes` reads: the session row, each scope's version, and the state of each
scope that is not at the version the reader holds."""

MAX_ID_LENGTH = 256
_ID_PATTERN = re.compile(r"[^\x00-\x1f\x7f]+")


def validate_id(value: object, what: str = "session_id") -> str:
    """Ids are short printable strings: they end up in URLs, file names and log lines."""
    if not isinstance(value, str):
        raise InvalidIdError(f"{what} must be a string, got {type(value).__name__}")
    if not value or not value.strip():
        raise InvalidIdError(f"{what} must not be empty")
    if len(value) > MAX_ID_LENGTH:
        raise InvalidIdError(
            f"{what} is {len(value)} characters long; the limit is {MAX_ID_LENGTH}"
        )
    if not _ID_PATTERN.fullmatch(value):
        raise InvalidIdError(f"{what} {value!r} contains control characters")
    if not value.isascii():
        try:
            value.encode("utf-8")
        except UnicodeEncodeError:
            raise InvalidIdError(
                f"{what} {value!r} contains a lone surrogate, which is not valid Unicode"
            ) from None
    return value


log = logging.getLogger("statewise.db")
R = TypeVar("R")


def readable_records(rows: Iterable[R], decode: Callable[[R], T]) -> list[T]:
    """Decode listed rows, leaving out (and logging, with the session) those that are
    corrupt: one bad row must not hide every other session from everyone."""
    out = []
    for row in rows:
        try:
            out.append(decode(row))
        except CorruptRecordError as exc:
            log.warning("list_sessions left out a corrupt session: %s", exc)
    return out


def to_timestamp_cutoff(older_than: float | timedelta | datetime, now: float) -> float:
    """`prune_sessions(older_than=...)` takes seconds, a timedelta, or an absolute datetime."""
    if isinstance(older_than, datetime):
        return older_than.timestamp()
    if isinstance(older_than, timedelta):
        return now - older_than.total_seconds()
    return now - float(older_than)


class RebasedOnUnlanded(VersionConflict):
    """A group commit's entry did not land, and was rebased onto an entry before it that
    did not land either (`BaseDb.commit_rebased_together`): its writer's tree holds that
    entry's delta, which the database does not, so it must reload what that delta touched
    before it rebases again (the store does, when it asks for the entry's bases again)."""


class GroupReads:
    """What each entry of a group commit (`BaseDb.commit_rebased_together`) reads, from
    one read of what landed since the oldest base of the group: the rest are the deltas
    of the entries before it, known here as they are written, not read back."""

    def __init__(self, probed: ProbedTails) -> None:
        self.record, self.versions, tails = probed
        self.versions = dict(self.versions)
        self.landed: dict[ScopeKey, list[DeltaRecord]] = {k: list(v) for k, v in tails.items()}

    @staticmethod
    def oldest(bases: Sequence[Mapping[ScopeKey, int]]) -> dict[ScopeKey, int]:
        oldest: dict[ScopeKey, int] = {}
        for held in bases:
            for key, version in held.items():
                oldest[key] = min(version, oldest.get(key, version))
        return oldest

    def for_entry(self, held: Mapping[ScopeKey, int]) -> ProbedTails:
        """What `probe_tails(session, held)` would read now, in the group's transaction."""
        versions = self.versions
        return (
            self.record,
            {key: versions[key] for key in held},
            {
                key: [d for d in self.landed.get(key, ()) if d.version > after]
                for key, after in held.items()
                if versions[key] != after
            },
        )

    def wrote(self, commit: Commit, now: float) -> None:
        """`commit` was written in the group's transaction (before the entries after it)."""
        for write in commit.writes:
            self.landed.setdefault(write.key, []).append(
                DeltaRecord(
                    key=write.key,
                    version=write.base_version + 1,
                    session_id=commit.session.session_id,
                    run_id=commit.run_id,
                    step=commit.step,
                    segments=list(write.segments),
                    conflicts=list(write.conflicts),
                    created_at=now,
                    stored_bytes=write.delta_bytes,
                )
            )
            self.versions[write.key] = write.base_version + 1


GroupEntry = tuple[Callable[[], Mapping[ScopeKey, int]], Callable[[ProbedTails], Commit]]
"""One writer's part of a group commit (`BaseDb.commit_rebased_together`): how to ask it
for its bases when its turn comes, and how it builds its commit from what landed."""


class BaseDb(ABC):
    """Sessions, their scoped state (snapshot + deltas), event log and runs."""

    retention: Retention | None = None
    """The history each session keeps (None: all of it); commits compact by it."""

    # ---- primitives every backend implements -------------------------------------------

    @abstractmethod
    def probe(
        self, session_id: str, keys: Sequence[ScopeKey]
    ) -> tuple[SessionRecord | None, dict[ScopeKey, int]]:
        """The session row (None if new) and the current version of each scope.

        This is the cheap freshness check made at the start of every run, so that a cached
        state is only reused when no other writer moved it.
        """

    @abstractmethod
    def load_scopes(self, keys: Sequence[ScopeKey]) -> dict[ScopeKey, ScopeState]:
        """The latest state of each scope (version 0 and empty when it was never written)."""

    @abstractmethod
    def commit(self, commit: Commit) -> CommitResult:
        """Persist a commit atomically, or raise VersionConflict and persist nothing."""

    @abstractmethod
    def read_deltas(
        self,
        key: ScopeKey,
        *,
        after_version: int = 0,
        upto_version: int | None = None,
        limit: int | None = None,
    ) -> list[DeltaRecord]:
        """Deltas of a scope with after_version < version <= upto_version, oldest first."""

    @abstractmethod
    def read_snapshot(self, key: ScopeKey, at_or_before: int) -> tuple[int, dict[str, Any]]:
        """The newest stored snapshot of a scope at or before a version: (version, data)."""

    @abstractmethod
    def read_events(
        self,
        session_id: str,
        *,
        after: int | None = None,
        before: int | None = None,
        limit: int | None = None,
        types: Sequence[str] | None = None,
        run_id: str | None = None,
    ) -> list[EventRecord]:
        """Events by sequence number, oldest first; with only `limit`, the newest ones.
        `types` and `run_id` filter before `limit` applies."""

    @abstractmethod
    def read_runs(
        self, session_id: str, *, limit: int | None = None, status: str | None = None
    ) -> list[RunRecord]:
        """The session's runs oldest first; with `limit`, the last `limit` of them."""

    @abstractmethod
    def get_run(self, session_id: str, run_id: str) -> RunRecord | None: ...

    @abstractmethod
    def list_sessions(
        self,
        *,
        user_id: str | None = None,
        app_name: str | None = None,
        limit: int = 50,
        offset: int = 0,
        cursor: str | None = None,
    ) -> list[SessionRecord]:
        """Sessions, most recently updated first (ties by session id), at most `limit`.

        `cursor` (a `SessionPage.next_cursor`) starts after the session it was made from,
        at a cost that does not grow with the depth of the page (see `statewise.db.listing`
        for what a walk sees while sessions change); `offset` skips that many more, at a
        cost that grows with the offset."""

    @abstractmethod
    def delete_session(self, session_id: str) -> bool:
        """Delete a session with its state, events and runs. False if it did not exist."""

    @abstractmethod
    def prune_sessions(
        self, *, older_than: float | timedelta | datetime, user_id: str | None = None
    ) -> int:
        """Delete sessions not updated since the cutoff; returns how many."""

    @abstractmethod
    def import_records(
        self,
        session: SessionRecord,
        deltas: Sequence[DeltaRecord],
        events: Sequence[EventRecord],
        runs: Sequence[RunRecord],
    ) -> None:
        """Write a session exactly as exported (refuses to overwrite an existing one)."""

    @abstractmethod
    def claim_run(self, session_id: str, run_id: str, owner: str, ttl: float) -> bool:
        """Take or renew the lease on a run, atomically (a compare-and-swap on the lease).

        True when nobody holds it, `owner` already holds it, or the holder's lease expired
        (its process died); the lease then belongs to `owner` for `ttl` more seconds.
        False, changing nothing, while another owner's lease is live.
        """

    @abstractmethod
    def release_run(self, session_id: str, run_id: str, owner: str) -> None:
        """Give up `owner`'s lease on a run (nothing if another owner holds it)."""

    @abstractmethod
    def read_horizon(self, session_id: str) -> Horizon:
        """Where the session's retained history starts (`Horizon()` if never compacted)."""

    @abstractmethod
    def write_compaction(self, plan: CompactionPlan) -> Compaction | None:
        """Apply a planned compaction in one transaction: store `plan.snapshot` at
        `plan.new.version` (making it the scope's base), delete the session scope's older
        deltas and snapshots, the events and finished runs stamped at or before
        `plan.new.before` (never a running or paused run's, nor their events), the commit
        ids landed before `plan.new.ids_before` (never a live run's), and record
        `plan.new`. Nothing (None) if the session is gone or its horizon is no longer
        `plan.old` (another compaction came first)."""

    @abstractmethod
    def close(self) -> None: ...

    # ---- written once for every backend (a backend may override for fewer round trips) ----

    def probe_tails(
        self, session_id: str, bases: Mapping[ScopeKey, int], *, limit: int | None = None
    ) -> ProbedTails:
        """`probe`, with the deltas each scope got after its version in `bases` (up to
        the version probed; none for a scope that did not move): what a commit that lost
        a race needs to rebase in memory. With `limit`, at most that many deltas per
        scope, the first ones: a reader that would rather reload a scope far behind
        does not read its whole history (it sees the tail stop short of the version)."""
        record, versions = self.probe(session_id, list(bases))
        tails = {
            key: self.read_deltas(
                key,
                after_version=after,
                upto_version=versions[key] if limit is None else min(versions[key], after + limit),
            )
            for key, after in bases.items()
            if versions[key] != after
        }
        return record, versions, tails

    def commit_new(self, commit: Commit, keys: Sequence[ScopeKey]) -> ProbedNew:
        """`commit` (which creates its session) only if the session does not exist and no
        scope of `keys` was ever written; and either way what `probe` finds of them (the
        session, the versions), as it was before the commit. None for the commit's result
        when it was not sent. VersionConflict when the session was made between the probe
        and the commit.

        What a writer that did not read the session needs (a run that assumed it new, see
        `StateStore.begin`): the commit lands only where what it assumed holds. Written
        once here as two calls; a backend overrides it with one round trip."""
        record, versions = self.probe(commit.session.session_id, keys)
        if record is not None or any(versions.values()):
            return record, versions, None
        return record, versions, self.commit(commit)

    def read_scopes(
        self, session_id: str, keys: Sequence[ScopeKey], held: Mapping[ScopeKey, int]
    ) -> ScopesRead:
        """`probe`, and `load_scopes` of the scopes whose version is not the one in `held`
        (the versions of the scopes a reader kept from its last read): what a reader
        outside a run needs. Nothing is loaded for a session that does not exist.

        Written once here as two calls; a backend overrides it with one round trip (and
        then the versions and the states come from one snapshot of the database)."""
        record, versions = self.probe(session_id, keys)
        moved = [k for k in keys if versions[k] != held.get(k)] if record is not None else []
        loaded = self.load_scopes(moved) if moved else {}
        versions.update({key: scope.version for key, scope in loaded.items()})
        return record, versions, loaded

    loses_replies: bool = True
    """Whether a commit's caller can be left not knowing if it landed (a network database
    whose reply was lost): then every commit carries an id, stored with it, so that
    sending it again is safe. A database in this process (SQLite, memory) always answers,
    and stores only the ids callers give (a durable run's, an API client's): a commit id
    nobody could send again would cost a write per commit for nothing."""

    @property
    def queues_rebased_commits(self) -> bool:
        """Whether `commit_rebased` keeps the session's other writers out while it reads
        and writes (they wait their turn). Then a writer that keeps losing races to the
        same session does better to queue at once than to try `commit` first."""
        return False

    def commit_rebased(
        self,
        session_id: str,
        bases: Mapping[ScopeKey, int],
        build: Callable[[ProbedTails], Commit],
    ) -> CommitResult:
        """How a commit that lost a race tries again: read what landed since `bases`
        (`probe_tails`), let `build` rebase onto it and make the commit (it is called at
        most once: it moves the caller's tree), and persist that.

        A backend that can keep other writers of the session out between the read and
        the write (PostgreSQL locks the session's row) does so, and then a writer loses at
        most once: the others wait their turn instead of racing it again. Written once here
        without such a lock: another writer may still land in between, and then this raises
        VersionConflict like `commit`, having persisted nothing.
        """
        return self.commit(build(self.probe_tails(session_id, bases)))

    def list_session_page(
        self,
        *,
        user_id: str | None = None,
        app_name: str | None = None,
        limit: int = 50,
        cursor: str | None = None,
        offset: int = 0,
    ) -> SessionPage:
        """`list_sessions` as a page with the cursor of the next one (None on the last):
        one session more is read to know whether there is a next page."""
        if limit <= 0:
            return SessionPage()
        found = self.list_sessions(
            user_id=user_id, app_name=app_name, limit=limit + 1, offset=offset, cursor=cursor
        )
        return page_of(found, limit)

    def compact_session(
        self, session_id: str, retention: Retention | None = None, *, now: float | None = None
    ) -> Compaction | None:
        """Fold the session's history older than `retention` (default: this database's
        policy) into a snapshot and remove it; what it removed, or None if there is no
        such session, no policy, or another compaction of it came first.

        `now` is the time the policy is measured from (tests move it)."""
        validate_id(session_id)
        policy = retention or self.retention
        if policy is None:
            return None
        plan = plan_compaction(self, session_id, policy, time.time() if now is None else now)
        if plan is None or plan.new == plan.old:
            return None
        return self.write_compaction(plan)

    async def acompact_session(
        self, session_id: str, retention: Retention | None = None, *, now: float | None = None
    ) -> Compaction | None:
        return await self._run_async(self.compact_session, session_id, retention, now=now)

    def commit_rebased_together(
        self,
        session_id: str,
        entries: Sequence[GroupEntry],
    ) -> list[CommitResult | Exception]:
        """Several writers' `commit_rebased` of one session, in order, each rebased onto
        the ones before it (an entry's bases are asked for when its turn comes). A
        backend that can makes them one transaction, hence one durable write for all
        (a group commit): each entry is still a commit of its own (its id, its deltas,
        its events). Each entry's outcome in order: its result, or what it raised, which
        does not stop the others. Written once here as one `commit_rebased` each."""
        outcomes: list[CommitResult | Exception] = []
        for bases_of, build in entries:
            try:
                outcomes.append(self.commit_rebased(session_id, bases_of(), build))
            except Exception as exc:
                outcomes.append(exc)
        return outcomes

    def get_session(self, session_id: str) -> SessionRecord | None:
        validate_id(session_id)
        return self.probe(session_id, ())[0]

    def iter_runs(self, session_id: str, *, page: int = 500) -> Iterator[RunRecord]:
        """Every run of the session, oldest first, read `page` runs at a time: what a
        whole-history reader (an export) uses to hold one page, not the whole session.
        Written once here as one read (the in-memory backend holds it all anyway); the
        stored backends page by their run order."""
        yield from self.read_runs(session_id)

    def export_session(self, session_id: str) -> Iterator[dict[str, Any]]:
        """The session as JSON-ready records: session, its deltas, events, runs.

        Only the session's own scope is exported; `user:`/`app:` scopes are shared and
        belong to no single session.
        """
        from statewise.exceptions import SessionNotFoundError

        record = self.get_session(session_id)
        if record is None:
            raise SessionNotFoundError(f"no session {session_id!r}")
        yield {"type": "session", **record.to_dict()}
        for delta in self.read_deltas(ScopeKey("session", session_id)):
            yield {"type": "delta", **delta.to_dict()}
        for event in self.read_events(session_id):
            data = event.to_dict()
            data["event_type"] = data.pop("type")
            yield {"type": "event", **data}
        for run in self.iter_runs(session_id):
            yield {"type": "run", **run.to_dict()}

    def __enter__(self: T) -> T:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # ---- async: one override point instead of an async twin of every method -------------

    async def _run_async(self, fn: Callable[P, T], *args: P.args, **kwargs: P.kwargs) -> T:
        """How async callers reach a sync primitive (a commit with its retries, a load).

        On a shared event loop it runs in a worker thread, so the loop never waits on I/O,
        a lock, a busy timeout or a retry's backoff; on a sync call's private loop it runs
        inline (the worker seam decides: see `statewise._workers`). SQLite overrides this
        with its own single thread."""
        return await run_blocking(fn, *args, **kwargs)

    async def run_io(self, fn: Callable[P, T], *args: P.args, **kwargs: P.kwargs) -> T:
        """Run a blocking function that does I/O on this database, from async code, the
        way this database's own async methods do (off the loop's thread on a shared loop,
        inline on a sync call's private loop; see `_run_async`)."""
        return await self._run_async(fn, *args, **kwargs)

    async def aprobe(
        self, session_id: str, keys: Sequence[ScopeKey]
    ) -> tuple[SessionRecord | None, dict[ScopeKey, int]]:
        return await self._run_async(self.probe, session_id, keys)

    async def aread_scopes(
        self, session_id: str, keys: Sequence[ScopeKey], held: Mapping[ScopeKey, int]
    ) -> ScopesRead:
        """`read_scopes` for async callers: the read a server makes while runs write, so
        PostgreSQL and Redis override it with their async drivers (on the loop, no thread)."""
        return await self._run_async(self.read_scopes, session_id, keys, held)

    async def aload_scopes(self, keys: Sequence[ScopeKey]) -> dict[ScopeKey, ScopeState]:
        return await self._run_async(self.load_scopes, keys)

    async def acommit(self, commit: Commit) -> CommitResult:
        return await self._run_async(self.commit, commit)

    async def aread_deltas(self, key: ScopeKey, **kwargs: Any) -> list[DeltaRecord]:
        return await self._run_async(self.read_deltas, key, **kwargs)

    async def aread_events(self, session_id: str, **kwargs: Any) -> list[EventRecord]:
        return await self._run_async(self.read_events, session_id, **kwargs)

    async def aread_runs(self, session_id: str, **kwargs: Any) -> list[RunRecord]:
        return await self._run_async(self.read_runs, session_id, **kwargs)

    async def aclaim_run(self, session_id: str, run_id: str, owner: str, ttl: float) -> bool:
        return await self._run_async(self.claim_run, session_id, run_id, owner, ttl)

    async def arelease_run(self, session_id: str, run_id: str, owner: str) -> None:
        await self._run_async(self.release_run, session_id, run_id, owner)


def split_records(
    lines: Iterable[dict[str, Any]],
) -> Iterator[tuple[SessionRecord, list[DeltaRecord], list[EventRecord], list[RunRecord]]]:
    """Group exported records back into sessions (inverse of `export_session`)."""
    from statewise.db.records import DeltaSegment
    from statewise.exceptions import CorruptRecordError

    current: tuple[SessionRecord, list[DeltaRecord], list[EventRecord], list[RunRecord]] | None
    current = None
    for line in lines:
        kind = line.get("type")
        if kind == "session":
            if current is not None:
                yield current
            fields = {k: v for k, v in line.items() if k != "type"}
            current = (SessionRecord(**fields), [], [], [])
            continue
        if current is None:
            raise CorruptRecordError(f"export record of type {kind!r} before any session record")
        if kind == "delta":
            current[1].append(
                DeltaRecord(
                    key=ScopeKey(line["scope"], line["scope_id"]),
                    version=line["version"],
                    session_id=line.get("session_id"),
                    run_id=line.get("run_id"),
                    step=line.get("step"),
                    segments=[DeltaSegment(**s) for s in line.get("segments", [])],
                    conflicts=line.get("conflicts", []),
                    created_at=line.get("created_at", 0.0),
                )
            )
        elif kind == "event":
            current[2].append(
                EventRecord(
                    session_id=line["session_id"],
                    seq=line["seq"],
                    type=line["event_type"],
                    data=line["data"],
                    run_id=line.get("run_id"),
                    created_at=line.get("created_at", 0.0),
                )
            )
        elif kind == "run":
            fields = {k: v for k, v in line.items() if k != "type"}
            current[3].append(RunRecord(**fields))
        else:
            raise CorruptRecordError(f"unknown export record type {kind!r}")
    if current is not None:
        yield current
