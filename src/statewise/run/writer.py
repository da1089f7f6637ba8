"""One run's hold on its session: the session transaction and the commits it makes."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, cast

from statewise.db.records import NewEvent, RunRecord
from statewise.db.store import StateStore, WorkingState
from statewise.db.transaction import AsyncTransaction
from statewise.run import _observe
from statewise.run.checkpoints import point_commit_id
from statewise.run.events import StateChanged

WRITER_KEY = "statewise.writer"
"""Where a host leaves its writer in the run context's metadata, so the members of a team
run inside it commit through it: a workflow step (which defers commits), and a durable
run (whose commits carry ids derived from its commit points)."""


@dataclass(kw_only=True, eq=False)
class RunWriter:
    """A run's session transaction plus the conflicts its commits resolved. Commits go
    through the transaction's async shell, so the event loop never waits on a network
    round trip."""

    txn: AsyncTransaction
    run_id: str
    conflicts: list[dict[str, Any]] = field(default_factory=list)
    # Durable runs (run.checkpoints): every commit gets a deterministic id, derived from
    # the commit point the run is at.
    durable: bool = False
    point: int | str = 0
    _inner: int = 0

    def enter(self, point: int | str) -> None:
        """The run is at commit point `point` now (durable runs)."""
        self.point = point
        self._inner = 0

    def point_commit_id(self) -> str | None:
        """The id of the current commit point's own commit (durable runs only)."""
        return point_commit_id(self.run_id, self.point) if self.durable else None

    @property
    def store(self) -> StateStore:
        # (A run's transaction always comes from `StateStore.begin`; the transaction types
        # its store as the layer it calls, so that it does not import `store`.)
        return cast(StateStore, self.txn.store)

    @property
    def working(self) -> WorkingState:
        return self.txn.working

    def drop_uncommitted(self) -> None:
        """Forget what is held for a later commit (nothing, here): the run failed."""

    async def commit(
        self,
        events: Sequence[NewEvent] = (),
        *,
        run: RunRecord | None = None,
        step: int | None = None,
        source: str = "unattributed",
        commit_id: str | None = None,
    ) -> StateChanged | None:
        """Persist everything changed since the last commit, with `events` and `run`
        (a durable commit, always: see `end_step` for a loop step's commit point)."""
        if commit_id is None and self.durable:
            self._inner += 1  # a commit inside the point: a team member's step, a failure
            commit_id = f"{point_commit_id(self.run_id, self.point)}.{self._inner}"
        txn = self.txn
        observed = _observe.commit_started(self, txn.working.spec.session_id, source, step)
        try:
            committed = await txn.commit(
                events, run=run, run_id=self.run_id, step=step, source=source, commit_id=commit_id
            )
        except BaseException as exc:
            _observe.commit_finished(observed, error=exc)
            raise
        if committed.conflicts:
            self.conflicts.extend(committed.conflicts)
        if not committed.changes and observed is _observe.QUIET:
            return None  # (a run's start and end commits, unobserved: nothing to report)
        versions: dict[str, int] = {key.kind: v for key, v in committed.versions.items()}
        _observe.commit_finished(
            observed, versions=versions, ops=committed.changes, conflicts=committed.conflicts
        )
        if not committed.changes:
            return None
        return StateChanged(versions=versions, ops=committed.changes, step=step)

    # The end of one of the run loop's model steps (commit point b): committed at once
    # here (`commit` itself, not a call more per step). A workflow step's writer
    # (`workflow._engine.StepScope`) holds it instead, for the workflow step's one commit.
    end_step = commit
