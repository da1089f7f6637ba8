"""One run's hold on its session: the checked-out state and the commits it makes."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from statewise.db.records import NewEvent, RunRecord
from statewise.db.store import StateStore, WorkingState
from statewise.run import _observe
from statewise.run.events import StateChanged


@dataclass(kw_only=True, eq=False)
class RunScope:
    """Commits go through the database's own sync/async policy (inline for local
    databases, a worker thread for network ones), so the event loop is never blocked on
    a network round trip."""

    store: StateStore
    working: WorkingState
    run_id: str
    conflicts: list[dict[str, Any]] = field(default_factory=list)

    async def commit(
        self,
        events: Sequence[NewEvent] = (),
        *,
        run: RunRecord | None = None,
        step: int | None = None,
        source: str = "unattributed",
    ) -> StateChanged | None:
        observed = _observe.commit_started(self, self.working.spec.session_id, source, step)
        try:
            committed = await self.store.db._run_async(
                self.store.commit,
                self.working,
                events=events,
                run=run,
                run_id=self.run_id,
                step=step,
                source=source,
            )
        except BaseException as exc:
            _observe.commit_finished(observed, error=exc)
            raise
        _observe.commit_finished(
            observed,
            versions={key.kind: version for key, version in committed.versions.items()},
            ops=committed.changes,
            conflicts=committed.conflicts,
        )
        self.conflicts.extend(committed.conflicts)
        if not committed.changes:
            return None
        return StateChanged(
            versions={key.kind: version for key, version in committed.versions.items()},
            ops=committed.changes,
            step=step,
        )
