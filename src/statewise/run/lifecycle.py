"""The one lifecycle of a run: begin → observe → (the caller's body) → record failure → close.

Agent runs (`run.driver`), continuations of paused runs (`run.resume`) and workflow runs
(`workflow.workflow`) all go through `RunLifecycle`:

    async with RunLifecycle(store, spec, record, ...) as life:
        ...  # life.ctx, life.writer, life.txn: commit points, steps, emitting events

Entering opens the session transaction, builds the run's context and writer, arms the run's
deadline (`run_timeout`) and starts its span/debug log. Leaving normally closes the
transaction, keeping its tree cached. Leaving with an exception (any: an error, a storage
failure, cancellation, the deadline, an abandoned stream) undoes what was not committed
and records the run as `failed` with the reason, so no error leaves a run `running`
(DESIGN §3, "every failure is final"):

- the failure is committed through the run's own transaction, with the run record;
- if that commit fails too (the failure may be the storage's own: a value the backend
  refuses, a broken connection), a bare record (status, reason, input; no messages or
  answer, which may hold what storage refused) is committed on a fresh transaction;
- if the storage cannot take even that, the failure is logged; the run's lease (if it
  holds one) still expires, and a later resume or continue finds it.

A session that was never stored (its first commit failed) gets no record: there is no
run to mark.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Coroutine
from dataclasses import dataclass, field
from types import TracebackType
from typing import Any, TypeVar

from statewise.db.records import NewEvent, RunRecord
from statewise.db.store import SessionMode, SessionSpec, StateStore, WorkingState, new_id
from statewise.db.transaction import AsyncTransaction
from statewise.run import _observe
from statewise.run.context import RunContext
from statewise.run.deadline import DEADLINE_KEY, Deadline
from statewise.run.output import METRICS_KEY, RunMetrics
from statewise.run.writer import WRITER_KEY, RunWriter
from statewise.state.jsonvalue import clean_text

log = logging.getLogger("statewise.run")

T = TypeVar("T")

_MAX_REASON = 4000


def failure_reason(exc: BaseException) -> str:
    """What a failed run's record says about why it failed."""
    if isinstance(exc, asyncio.CancelledError) and not str(exc):
        return "CancelledError: the run was cancelled before it finished"
    return f"{type(exc).__name__}: {exc}"


def _storable(text: str) -> str:
    """`text` as any backend stores it: valid Unicode, no NUL, not huge."""
    text = clean_text(text).replace("\x00", "\\u0000")
    return text if len(text) <= _MAX_REASON else text[:_MAX_REASON] + "…"


@dataclass(kw_only=True, eq=False)
class RunLifecycle:
    """One run's hold on its session from begin to close; see the module docstring."""

    store: StateStore
    spec: SessionSpec
    record: RunRecord  # the run's record: committed as `failed` if the run fails
    agent: Any  # the Agent, Team or Workflow running
    kind: str  # "agent", "team" or "workflow" (spans, logs)
    debug: bool = False
    mode: SessionMode = "open"
    writer_type: type[RunWriter] = RunWriter
    durable: bool = False  # commits carry ids from the run's commit points
    share_writer: bool = False  # team members commit through this run's writer
    session_user: bool = False  # the context's user_id: the stored session's, not the spec's
    step: int = 0  # the step a continuation resumes after
    metrics: RunMetrics = field(default_factory=RunMetrics)
    run_timeout: float | None = None
    # The state the run starts from, when nothing else reads it before the run-start
    # commit (see `StateStore.abegin`).
    initialize: Callable[[WorkingState], None] | None = None
    # Set on entering:
    txn: AsyncTransaction = field(init=False)
    writer: RunWriter = field(init=False)
    ctx: RunContext = field(init=False)
    deadline: Deadline | None = field(init=False, default=None)
    _observed: _observe.Token = field(init=False)

    @property
    def run_id(self) -> str:
        return self.record.run_id

    async def __aenter__(self) -> RunLifecycle:
        seconds = self.run_timeout
        deadline = None if seconds is None else Deadline.after(seconds)
        self.deadline = deadline
        self.txn = txn = await self.store.abegin(
            self.spec, mode=self.mode, initialize=self.initialize
        )
        try:
            self._start(txn, deadline)
        except BaseException:
            txn.close(keep=False)
            raise
        return self

    def _start(self, txn: AsyncTransaction, deadline: Deadline | None) -> None:
        """The run's writer, context and span, on its open transaction."""
        spec, run_id = self.spec, self.record.run_id
        working = txn.working
        self.writer = writer = self.writer_type(txn=txn, run_id=run_id, durable=self.durable)
        metadata: dict[str, Any] = {METRICS_KEY: self.metrics}
        if self.share_writer:
            metadata[WRITER_KEY] = writer
        if deadline is not None:
            metadata[DEADLINE_KEY] = deadline
        name = self.record.agent_name
        self.ctx = ctx = RunContext(
            run_id=run_id,
            session_id=spec.session_id,
            user_id=working.spec.user_id if self.session_user else spec.user_id,
            agent=self.agent,
            agent_name=name,
            step=self.step,
            metadata=metadata,
            _working=working,
            _store=self.store,
            _txn=txn,
        )
        self._observed = _observe.run_started(
            ctx,
            writer,
            kind=self.kind,
            name=name,
            session_id=spec.session_id,
            run_id=run_id,
            debug=self.debug,
        )

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        try:
            if exc is not None:
                self.txn.discard()
                self.writer.drop_uncommitted()
                await self._record_failure(exc)
        finally:
            self.txn.close(keep=exc is None)
            _observe.run_finished(self._observed, metrics=self.metrics, error=exc)

    @property
    def stored(self) -> bool:
        """True once the session exists in the database (a failure can be recorded)."""
        txn: AsyncTransaction | None = self.__dict__.get("txn")  # (None: never opened)
        return txn is not None and txn.working.record is not None

    async def _record_failure(self, exc: BaseException) -> None:
        if not self.stored:
            return
        record = self.record
        record.status = "failed"
        record.error = failure_reason(exc)
        try:
            # A fresh commit id: a durable run whose engine executes the same commit point
            # again and fails again still records this failure (a point's derived id
            # would be found stored and skipped).
            failed = self.writer.commit(
                self._failed_events(), run=record, source="run_failed", commit_id=new_id()
            )
            await _finish(failed)
            return
        except Exception as first:
            problem: Exception = first
        # The run's own transaction could not record it: a bare record, on a fresh one.
        bare = RunRecord(
            session_id=record.session_id,
            run_id=record.run_id,
            agent_name=record.agent_name,
            input=record.input,
            status="failed",
            error=_storable(record.error),
            metrics=record.metrics,
        )
        record.error = bare.error
        try:
            await _finish(self._commit_bare(bare))
            return
        except Exception as second:
            problem = second
        log.warning(
            "run %s of session %s failed (%s) and storage refused to record that: %s: %s",
            self.run_id,
            self.spec.session_id,
            bare.error,
            type(problem).__name__,
            problem,
        )

    def _failed_events(self) -> list[NewEvent]:
        return [NewEvent(type="run_failed", run_id=self.run_id, data={"error": self.record.error})]

    async def _commit_bare(self, bare: RunRecord) -> None:
        txn = await self.store.abegin(self.spec, mode="existing")
        try:
            await txn.commit(
                self._failed_events(), run=bare, run_id=self.run_id, source="run_failed"
            )
        finally:
            txn.close(keep=False)


async def _finish(commit: Coroutine[Any, Any, T]) -> T:
    """Await a failure's commit to its end even if the run's task is cancelled again
    meanwhile (a client that left, a shutdown): the record lands, and the transaction is
    not closed under a commit still in flight; the cancellation is raised after it."""
    task = asyncio.ensure_future(commit)
    cancelled = False
    while True:
        try:
            result = await asyncio.shield(task)
        except asyncio.CancelledError:
            if task.done():
                raise
            cancelled = True
            continue
        if cancelled:
            raise asyncio.CancelledError
        return result


__all__ = ["RunLifecycle", "failure_reason"]
