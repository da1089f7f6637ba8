"""How steps run: one `Executor` per line of execution (the run, or one parallel branch).

A workflow step is the workflow's commit point. Agents and teams inside a step commit
through a `StepScope`, which holds their events and leaves their ops in the recorder until
the step completes; the workflow then commits everything the step did in one commit,
together with a `step_completed` event holding its output. So a crash in the middle of a
step leaves no part of it in the database, and resuming re-runs exactly that step.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

from statewise.db.records import NewEvent, RunRecord
from statewise.run import _observe
from statewise.run.context import RunContext
from statewise.run.events import RunEvent, StateChanged
from statewise.run.writer import RunWriter
from statewise.team import WRITER_KEY
from statewise.workflow.types import StepInput, StepOutput


class StepLike(Protocol):
    name: str

    def execute(self, ex: Executor) -> AsyncIterator[RunEvent | StepOutput]: ...


async def observed_step(
    step: StepLike,
    ex: Executor,
    index: int | None = None,
    *,
    then: Callable[[], AsyncIterator[RunEvent]] | None = None,
) -> AsyncIterator[RunEvent | StepOutput]:
    """`step.execute(ex)` inside a span (and a debug log line) for the step. `then` (the
    step's commit, for a top-level step) runs inside the same span, so a trace shows the
    commit under the step whose effects it persists."""
    observed = _observe.step_started(ex.ctx, ex.writer, step.name, index=index)
    failure: BaseException | None = None
    try:
        async for item in step.execute(ex):
            yield item
        if then is not None:
            async for event in then():
                yield event
    except BaseException as exc:
        failure = exc
        raise
    finally:
        _observe.finish(observed, failure)


@dataclass(kw_only=True, eq=False)
class StepWriter(RunWriter):
    """A run writer whose agents' step ends wait for the end of the workflow step.

    `end_step` (what an agent's loop calls after each of its model steps) only marks where
    that step's ops end and holds its events; `commit` persists them all at once, with the
    workflow step's own events.
    """

    held: list[NewEvent] = field(default_factory=list)

    async def end_step(
        self,
        events: Sequence[NewEvent] = (),
        *,
        run: RunRecord | None = None,
        step: int | None = None,
        source: str = "unattributed",
        commit_id: str | None = None,
    ) -> StateChanged | None:
        self.working.mark(source)
        self.held.extend(events)
        return None

    def drop_uncommitted(self) -> None:
        self.held.clear()

    async def commit(
        self,
        events: Sequence[NewEvent] = (),
        *,
        run: RunRecord | None = None,
        step: int | None = None,
        source: str = "unattributed",
        commit_id: str | None = None,
    ) -> StateChanged | None:
        """Persist the step's ops and held events in one commit. `commit_id` (the run's
        point id for the step) makes a re-executed step's commit land at most once."""
        all_events = [*self.held, *events]
        self.held = []
        return await RunWriter.commit(
            self, all_events, run=run, step=step, source=source, commit_id=commit_id
        )


@dataclass(kw_only=True, eq=False)
class Executor:
    """Runs steps on one view of the state and keeps what they produced."""

    # The `Workflow` being run, only handed to the callables that ask for `workflow`
    # (typed loosely so the engine does not import the module that imports it).
    workflow: object
    input: Any
    ctx: RunContext
    writer: StepWriter
    stream: bool = False
    outputs: dict[str, StepOutput] = field(default_factory=dict)
    previous: Any = None
    stopped: bool = False

    @property
    def message(self) -> str:
        """The user message an agent or team step receives: the workflow's input."""
        return self.input if isinstance(self.input, str) else str(self.input)

    def step_input(self) -> StepInput:
        return StepInput(
            input=self.input,
            previous_step_content=self.previous,
            previous_step_outputs=dict(self.outputs),
        )

    def available(self, step_input: StepInput, **extra: Any) -> dict[str, Any]:
        """What evaluators, selectors, end conditions and function steps may ask for."""
        return {
            "step_input": step_input,
            "run_context": self.ctx,
            "session_state": self.ctx.session_state,
            "workflow": self.workflow,
            **extra,
        }

    def record(self, output: StepOutput) -> None:
        if output.step_name:
            self.outputs[output.step_name] = output
        if not output.skipped:
            self.previous = output.content
        if output.stop:
            self.stopped = True

    def restore(self, output: StepOutput) -> None:
        """Record a step completed by an earlier attempt of this run (resume)."""
        for item in output.walk():
            if item.step_name:
                self.outputs[item.step_name] = item
        self.record(output)

    async def run_sequence(self, steps: Sequence[StepLike]) -> AsyncIterator[RunEvent | StepOutput]:
        """Run steps in order, yielding their events and then each one's output; stops
        after a step that asked the workflow to stop."""
        for step in steps:
            async for item in observed_step(step, self):
                yield item
            if self.stopped:
                return

    def branch(self) -> Executor:
        """A new line of execution on its own copy of the current state (Parallel)."""
        txn = self.writer.txn.branch()
        working = txn.working
        writer = StepWriter(txn=txn, run_id=self.writer.run_id)
        metadata: dict[str, Any] = {**self.ctx.metadata, WRITER_KEY: writer}
        ctx = RunContext(
            run_id=self.ctx.run_id,
            session_id=self.ctx.session_id,
            user_id=self.ctx.user_id,
            agent=self.ctx.agent,
            agent_name=self.ctx.agent_name,
            metadata=metadata,
            _working=working,
            _store=self.ctx._store,
            _txn=txn,
        )
        return Executor(
            workflow=self.workflow,
            input=self.input,
            ctx=ctx,
            writer=writer,
            stream=self.stream,
            outputs=dict(self.outputs),
            previous=self.previous,
        )
