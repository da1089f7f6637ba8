"""What a commit is sent as and what comes back: the policy it commits under, one
attempt of it (and what a rebase of it needs), and what it wrote. `StoreCommits`
(`_store_commit`) makes and lands them; transactions hand them on."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from statewise.db.planning import SessionMode
from statewise.db.records import Commit, NewEvent, RunRecord, ScopeKey
from statewise.state.ops import Op


@dataclass(kw_only=True, slots=True)
class CommitPolicy:
    """What a commit is committing to (see `SessionMode`), and the version of the
    session's own scope it requires (`If-Match`): with `expected_version`, a lost race on
    that scope fails with `StaleStateVersionError` instead of rebasing."""

    mode: SessionMode = "open"
    expected_version: int | None = None


@dataclass(slots=True)
class CommitAttempt:
    """A commit as built for one attempt, and what a rebase of it would need."""

    commit_id: str
    segments: list[tuple[str, list[Op]]]
    undo: Callable[[], None]
    events: Sequence[NewEvent]  # the caller's (the commit adds its state deltas to them)
    run: RunRecord | None
    run_id: str | None
    step: int | None
    source: str  # (what ops after the last mark are attributed to)
    # As first tried; None for one that queues at once (built only rebased).
    commit: Commit | None = None
    changes: list[dict[str, Any]] = field(default_factory=list)


@dataclass(kw_only=True)
class Committed:
    """What a commit wrote: new scope versions, the ops (secrets redacted), conflicts,
    and its commit id (`already_landed`: the id had landed before, nothing was applied again)."""

    versions: dict[ScopeKey, int]
    last_seq: int
    changes: list[dict[str, Any]]
    conflicts: list[dict[str, Any]]
    commit_id: str = ""
    already_landed: bool = False
