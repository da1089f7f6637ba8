"""Retention: how much history a session keeps, and the pure planning of a compaction.

A session's history (deltas, snapshots, events, finished runs, commit ids) grows with
every commit. Under a `Retention` policy a compaction folds everything older than a
horizon into one snapshot at the horizon version and removes it. What stays is exact:
the current state, every version from the horizon on, and the sequence numbers of the
events kept (nothing is renumbered). The horizon is recorded per session (`Horizon`), so
a read below it is a clear `HistoryCompactedError` rather than a wrong answer.

Only the session's own scope is compacted. `user:` and `app:` scopes are shared by many
sessions, and a session's history (a rollback with `include_shared=True`, a diff) may
look at any of their versions; they are written far less often than a session, and
are left whole.

Commit ids outlive any retry: an id is forgotten only once it is older than both the
retained history and `commit_id_window` (an hour at least), and never while its run is
running or paused. An id's age counts from when it was made (statewise's ids start with
that time, see `id_time`; an id made elsewhere counts from when it landed). A commit sent
with an id made before the session's forgetting point (`Horizon.ids_before`) is refused
with `CommitIdExpiredError`, since whether it landed can no longer be told
(`check_commit_id`): a retry is never applied twice.

The I/O is the backends' (`BaseDb.write_compaction`, one transaction each); the reads
and the planning are written once here, on the public read methods.
"""

from __future__ import annotations

import logging
import math
import os
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Protocol
from urllib.parse import parse_qsl

from statewise.db import _codec
from statewise.db.rebuild import apply_segments
from statewise.db.records import DeltaRecord, RunRecord, ScopeKey, SessionRecord
from statewise.exceptions import CommitIdExpiredError, ConfigurationError, HistoryCompactedError

MIN_COMMIT_ID_WINDOW = 3600.0
"""Seconds a commit id is remembered at the least, whatever the policy: longer than any
retry the engine makes (seconds) or a client waiting on a lost reply would."""

LIVE_RUN_STATUSES = ("running", "paused")
"""Runs a compaction never removes (with their events and commit ids): they go on."""

DAY = 86400.0

log = logging.getLogger("statewise.db")


@dataclass(frozen=True, kw_only=True, slots=True)
class Retention:
    """Keep the last `keep_versions` versions of each session's own state and/or
    `keep_days` days of its history; each limit given applies (the stricter wins).

    Commit ids are kept for `commit_id_window` seconds (an hour at the least) or as long
    as the history that holds them, whichever is longer. `slack`: how many versions past
    `keep_versions` a session grows before a commit compacts it (see `every`)."""

    keep_versions: int | None = None
    keep_days: float | None = None
    commit_id_window: float = MIN_COMMIT_ID_WINDOW
    slack: int | None = None

    def __post_init__(self) -> None:
        if self.keep_versions is None and self.keep_days is None:
            raise ConfigurationError("Retention needs keep_versions, keep_days or both")
        if self.slack is not None and (
            isinstance(self.slack, bool) or not isinstance(self.slack, int) or self.slack < 1
        ):
            raise ConfigurationError(
                f"slack must be a whole number of at least 1, not {self.slack!r}"
            )
        if self.keep_versions is not None and (
            isinstance(self.keep_versions, bool)
            or not isinstance(self.keep_versions, int)
            or self.keep_versions < 1
        ):
            raise ConfigurationError(
                f"keep_versions must be a whole number of at least 1, not {self.keep_versions!r}"
            )
        if self.keep_days is not None and not (
            isinstance(self.keep_days, int | float)
            and not isinstance(self.keep_days, bool)
            and math.isfinite(self.keep_days)
            and self.keep_days > 0
        ):
            raise ConfigurationError(f"keep_days must be a positive number, not {self.keep_days!r}")
        if not (
            isinstance(self.commit_id_window, int | float)
            and math.isfinite(self.commit_id_window)
            and self.commit_id_window >= MIN_COMMIT_ID_WINDOW
        ):
            raise ConfigurationError(
                f"commit_id_window must be at least {MIN_COMMIT_ID_WINDOW:g} seconds, "
                f"not {self.commit_id_window!r}"
            )

    @property
    def every(self) -> int:
        """Versions a session may grow past `keep_versions` before a commit compacts it
        (`slack`; by default a quarter of `keep_versions`, at least 16): compaction is
        amortized over that many commits."""
        if self.slack is not None:
            return self.slack
        return max(16, self.keep_versions // 4) if self.keep_versions else 64

    def due(self, version: int | None, last_seq: int, n_events: int) -> bool:
        """Whether the commit that left the session's own state at `version` (None: it
        wrote none) and its events at `last_seq` should be followed by a compaction.

        Each version is made by exactly one commit, so exactly one commit in `every`
        compacts; commits that write no state count by their events."""
        if version is not None and version > 0:
            if self.keep_versions is not None:
                over = version - self.keep_versions
                if over >= self.every and over % self.every == 0:
                    return True
            elif version % self.every == 0:
                return True
        step = EVENTS_PER_COMPACTION
        return (
            self.keep_days is not None
            and n_events > 0
            and ((last_seq - n_events) // step != last_seq // step)
        )

    @classmethod
    def from_options(cls, options: Mapping[str, str]) -> Retention | None:
        """The policy named by URL options (`keep_versions`, `keep_days`,
        `commit_id_window`, `slack`), or None when there are none."""
        if not any(name in options for name in URL_OPTIONS):
            return None
        try:
            return cls(
                keep_versions=int(options["keep_versions"]) if "keep_versions" in options else None,
                keep_days=float(options["keep_days"]) if "keep_days" in options else None,
                commit_id_window=float(options.get("commit_id_window", MIN_COMMIT_ID_WINDOW)),
                slack=int(options["slack"]) if "slack" in options else None,
            )
        except ValueError as exc:
            raise ConfigurationError(f"bad retention option: {exc}") from None

    @classmethod
    def from_env(cls) -> Retention | None:
        """The default policy of a database opened without one: `STATEWISE_RETENTION`,
        in the URL options' form (`keep_versions=1000&keep_days=30`), or None."""
        text = os.environ.get(ENV_VAR, "").strip()
        if not text:
            return None
        options = dict(parse_qsl(text, keep_blank_values=True))
        unknown = set(options) - URL_OPTIONS
        if unknown:
            raise ConfigurationError(
                f"{ENV_VAR} names unknown options {sorted(unknown)}; "
                f"use {', '.join(sorted(URL_OPTIONS))}"
            )
        return cls.from_options(options)


def default_retention(retention: Retention | None) -> Retention | None:
    """A backend's policy: the one given to its constructor, else `Retention.from_env`."""
    return retention if retention is not None else Retention.from_env()


ENV_VAR = "STATEWISE_RETENTION"


EVENTS_PER_COMPACTION = 512
"""Under `keep_days`, a session whose commits write no state is compacted each time its
event log grows by this many."""

URL_OPTIONS = frozenset({"keep_versions", "keep_days", "commit_id_window", "slack"})


@dataclass(frozen=True, kw_only=True, slots=True)
class Horizon:
    """Where a session's retained history starts.

    `version`: the oldest version of its own state still answerable (0: nothing was
    compacted; version 0, the empty state, always is). `before`: events and finished runs
    stamped at or before this time were removed. `ids_before`: commit ids made before
    this time were forgotten (see `forgets`)."""

    version: int = 0
    before: float = 0.0
    ids_before: float = 0.0

    def to_dict(self) -> dict[str, Any]:
        return {"version": self.version, "before": self.before, "ids_before": self.ids_before}


@dataclass(kw_only=True, slots=True)
class CompactionPlan:
    """What one compaction writes, planned from reads (see `plan_compaction`); the
    backend applies it in one transaction if the session's horizon is still `old`."""

    session_id: str
    old: Horizon
    new: Horizon
    snapshot: str | None  # the state at `new.version` as stored JSON (None: no fold)


@dataclass(kw_only=True, slots=True)
class Compaction:
    """What a compaction removed, and the horizon it left."""

    session_id: str
    horizon: Horizon
    deltas: int = 0
    snapshots: int = 0
    events: int = 0
    runs: int = 0
    commit_ids: int = 0

    @property
    def removed(self) -> int:
        return self.deltas + self.snapshots + self.events + self.runs + self.commit_ids

    def to_dict(self) -> dict[str, Any]:
        return {
            "session_id": self.session_id,
            "horizon": self.horizon.to_dict(),
            "deltas": self.deltas,
            "snapshots": self.snapshots,
            "events": self.events,
            "runs": self.runs,
            "commit_ids": self.commit_ids,
        }


class HistoryStore(Protocol):
    """What planning a compaction and checking a horizon read of a database (a `BaseDb`;
    named here so this module needs nothing above it)."""

    def read_horizon(self, session_id: str) -> Horizon: ...

    def probe(
        self, session_id: str, keys: Sequence[ScopeKey]
    ) -> tuple[SessionRecord | None, dict[ScopeKey, int]]: ...

    def read_snapshot(self, key: ScopeKey, at_or_before: int) -> tuple[int, dict[str, Any]]: ...

    def read_deltas(
        self,
        key: ScopeKey,
        *,
        after_version: int = 0,
        upto_version: int | None = None,
        limit: int | None = None,
    ) -> list[DeltaRecord]: ...

    def get_run(self, session_id: str, run_id: str) -> RunRecord | None: ...

    def compact_session(
        self, session_id: str, retention: Retention | None = None, *, now: float | None = None
    ) -> Compaction | None: ...


def plan_compaction(
    db: HistoryStore, session_id: str, retention: Retention, now: float
) -> CompactionPlan | None:
    """Read what a compaction of `session_id` needs and plan it; None when there is no
    such session. Reads only what it folds (the deltas from the newest snapshot at or
    before the new horizon up to it) and, under `keep_days`, a few single deltas to find
    the horizon by time; the part below the new horizon becomes a snapshot, in the stored
    form (secret values stay encrypted)."""
    key = ScopeKey("session", session_id)
    old = db.read_horizon(session_id)
    record, versions = db.probe(session_id, [key])
    if record is None:
        return None
    version = versions[key]
    target = old.version
    before = old.before
    if retention.keep_versions is not None:
        target = max(target, version - retention.keep_versions)
    if retention.keep_days is not None:
        cutoff = now - retention.keep_days * DAY
        before = max(before, cutoff)
        target = max(target, _last_version_before(db, key, old.version, version, cutoff))
    snapshot = None
    if target > old.version:
        base, data = db.read_snapshot(key, target)
        folded = db.read_deltas(key, after_version=max(base, old.version), upto_version=target)
        last = folded[-1] if folded else _delta_at(db, key, target)
        if last is None or last.version != target:
            return None  # (the history moved under us: another compaction; try later)
        for delta in folded:
            apply_segments(key, delta.version, data, delta.segments)
        before = max(before, last.created_at)
        snapshot = _codec.dumps(data)
    ids_before = max(old.ids_before, min(before, now - retention.commit_id_window))
    new = Horizon(version=target, before=before, ids_before=ids_before)
    return CompactionPlan(session_id=session_id, old=old, new=new, snapshot=snapshot)


def _delta_at(db: HistoryStore, key: ScopeKey, version: int) -> DeltaRecord | None:
    found = db.read_deltas(key, after_version=version - 1, upto_version=version)
    return found[0] if found else None


def _last_version_before(
    db: HistoryStore, key: ScopeKey, low: int, high: int, cutoff: float
) -> int:
    """The newest version in (low, high] made before `cutoff` (`low` if none), found by
    bisection: versions are made in time order, and reading every delta kept would cost
    as much as the days kept."""
    while low < high:
        middle = (low + high + 1) // 2
        delta = _delta_at(db, key, middle)
        if delta is not None and delta.created_at < cutoff:
            low = middle
        else:
            high = middle - 1
    return low


def id_time(commit_id: str) -> float | None:
    """When an id made by statewise was made (its first 16 hex digits are the time in
    nanoseconds; a run's commit-point id starts with its run's id); None for any other."""
    head = commit_id[:16]
    if len(head) != 16:
        return None
    try:
        return int(head, 16) / 1e9
    except ValueError:
        return None


def id_run(commit_id: str) -> str | None:
    """The run a durable commit-point id (`<run id>:step:<point>`) belongs to."""
    run_id, sep, _point = commit_id.partition(":step:")
    return run_id if sep else None


def forgets(plan: CompactionPlan, commit_id: str, landed: float | None, live: set[str]) -> bool:
    """Whether the compaction `plan` forgets a commit id: one made (`id_time`) before
    `plan.new.ids_before`, or, for an id made elsewhere, that landed before it (`landed`;
    None when its last event is gone: it landed at or before the last horizon). A live
    run's ids are kept."""
    if id_run(commit_id) in live:
        return False
    made = id_time(commit_id)
    if made is None:
        made = landed if landed is not None else plan.old.before
        return made <= plan.new.ids_before if landed is None else made < plan.new.ids_before
    return made < plan.new.ids_before


def is_old_id(commit_id: str, now: float | None = None) -> bool:
    """Whether a compaction may have forgotten an id this old: one made within the last
    `MIN_COMMIT_ID_WINDOW` seconds never is (nor one not made by statewise)."""
    made = id_time(commit_id)
    now = time.time() if now is None else now
    return made is not None and made < now - MIN_COMMIT_ID_WINDOW


def check_commit_id(
    db: HistoryStore, session_id: str, commit_id: str, *, now: float | None = None
) -> None:
    """Refuse a commit whose id the session may have forgotten (see the module's
    docstring). Costs no I/O for a new id (`is_old_id`): only an old one reads the
    session's horizon. (`now` is for tests.)"""
    if not is_old_id(commit_id, now):
        return
    made = id_time(commit_id)
    assert made is not None
    horizon = db.read_horizon(session_id)
    if made >= horizon.ids_before:
        return
    run_id = id_run(commit_id)
    if run_id is not None:
        run = db.get_run(session_id, run_id)
        if run is not None and run.status in LIVE_RUN_STATUSES:
            return  # (a live run's ids are never forgotten)
    raise CommitIdExpiredError(
        f"session {session_id!r}: commit id {commit_id!r} was made before the session's "
        "retention forgot the commit ids of that time, so whether it already landed cannot "
        "be told; it is refused rather than risk applying it twice"
    )


def compact_after_commit(db: HistoryStore, session_id: str) -> None:
    """The compaction a commit triggers (`Retention.due`): a transaction of its own,
    after the commit's; a failure is logged, never raised (the commit landed, and a later
    one compacts again)."""
    try:
        db.compact_session(session_id)
    except Exception:
        log.warning("compacting session %r after a commit failed", session_id, exc_info=True)


def require_retained(db: HistoryStore, session_id: str, version: int) -> None:
    """Raise HistoryCompactedError if `version` of the session's own state lies below
    its retained history (version 0, the empty state, is always there)."""
    if version <= 0:
        return
    oldest = db.read_horizon(session_id).version
    if version < oldest:
        raise HistoryCompactedError(session_id, version, oldest)


__all__ = [
    "ENV_VAR",
    "LIVE_RUN_STATUSES",
    "MIN_COMMIT_ID_WINDOW",
    "Compaction",
    "CompactionPlan",
    "Horizon",
    "Retention",
    "check_commit_id",
    "compact_after_commit",
    "default_retention",
    "forgets",
    "id_run",
    "id_time",
    "is_old_id",
    "plan_compaction",
    "require_retained",
]
