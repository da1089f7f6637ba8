"""The Workflow: steps (agents, teams, functions, and blocks of them) sharing one session
state, committed step by step and resumable after a crash.

Sessions work as for an Agent: `session_state` is the template for new sessions, a run's
`session_state=` merges into the stored state (or replaces it with
`overwrite_db_session_state=True`), `user:`/`app:`/`temp:` scopes apply, and any Agent on
the same database can read the session by id.

Commit points: run start (input, default state), **every completed top-level step** (all
its state writes, the events of the agents inside it, and a `step_completed` event with
its output, in one commit), run end. `resume(run_id)` continues a failed or killed run
after its last completed step.
"""

from __future__ import annotations

import asyncio
import dataclasses
import time
from collections.abc import AsyncIterator, Coroutine, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal, cast, overload

from rich.console import Console
from rich.text import Text

from statewise.agent.printing import aprint_run, print_run
from statewise.agent.session_config import SessionConfig
from statewise.agent.session_owner import SessionOwner, db_or_storage
from statewise.db.base import BaseDb
from statewise.db.records import NewEvent, RunRecord
from statewise.db.store import SessionSpec, new_id
from statewise.exceptions import ConfigurationError, RunError
from statewise.models.messages import Message
from statewise.run.checkpoints import point_commit_id
from statewise.run.deadline import check_run_timeout
from statewise.run.driver import check_input, initialize_state
from statewise.run.emit import masked_event
from statewise.run.events import RunCompleted, RunEvent, RunStarted, StepStarted
from statewise.run.lease import RunLease
from statewise.run.lifecycle import RunLifecycle
from statewise.run.output import RunOutput
from statewise.run.stream import RunStream
from statewise.run.sync import iterate_sync, run_sync
from statewise.state.reducers import Rule
from statewise.workflow._engine import Executor, StepLike, StepWriter, observed_step
from statewise.workflow.steps import StepSpec, normalize_steps
from statewise.workflow.types import StepOutput, json_or_text


@dataclass(kw_only=True, eq=False)
class WorkflowRunOutput(RunOutput):
    """A workflow run's result: `content` is the last step's content; `step_outputs`
    holds every top-level step's output in order."""

    step_outputs: list[StepOutput] = field(default_factory=list)

    def get_step_content(self, name: str) -> Any:
        for top in self.step_outputs:
            for item in top.walk():
                if item.step_name == name:
                    return item.content
        return None


@dataclass(kw_only=True, eq=False)
class _Resume:
    record: RunRecord
    input: Any
    done: dict[int, StepOutput]


@dataclass(kw_only=True, eq=False)
class _Request:
    input: Any
    spec: SessionSpec
    session_state: Mapping[str, Any] | None
    stream: bool
    resume: _Resume | None = None
    run_id: str | None = None  # set by advance(): the run's id, chosen by the caller
    until: int | None = None  # run only the steps before this index (advance)
    run_timeout: float | None = None  # seconds; past them the run ends `failed`
    leased: bool = True  # False: a durable engine owns the run (advance)


RESUMABLE = ("failed", "running")


class Workflow(SessionOwner):
    """Steps run in order on one persisted session state.

    `steps` takes Step, Condition, Router, Loop and Parallel blocks, Agents, Teams and
    functions (which get `step_input` and, by name, `run_context`).
    """

    _kind = "workflow"

    def __init__(
        self,
        name: str | None = None,
        *,
        steps: Sequence[StepSpec],
        description: str | None = None,
        session_state: Mapping[str, Any] | None = None,
        db: BaseDb | str | None = None,
        storage: BaseDb | str | None = None,
        session_id: str | None = None,
        user_id: str | None = None,
        app_name: str | None = None,
        overwrite_db_session_state: bool = False,
        state_schema: type | None = None,
        state_rules: Mapping[str, Rule] | None = None,
        default_state_rule: Rule = "last_write_wins",
        secret_keys: Sequence[str] | None = None,
        markdown: bool = False,
        debug_mode: bool = False,
        run_lease_seconds: float = 30.0,
        run_timeout: float | None = None,
    ) -> None:
        self.name = name
        self.description = description
        self.steps: list[StepLike] = normalize_steps(steps, "steps")
        if not self.steps:
            raise ConfigurationError("a Workflow needs at least one step")
        self._hold_sessions(
            SessionConfig(
                kind=self._kind,
                name=name,
                session_state=session_state,
                db=db_or_storage(db, storage),
                session_id=session_id,
                user_id=user_id,
                app_name=app_name,
                state_schema=state_schema,
                state_rules=state_rules,
                default_state_rule=default_state_rule,
                secret_keys=secret_keys,
            )
        )
        self.overwrite_db_session_state = overwrite_db_session_state
        self.markdown = markdown
        self.debug_mode = debug_mode
        if run_lease_seconds <= 0:
            raise ConfigurationError(f"run_lease_seconds must be positive, got {run_lease_seconds}")
        # A run is owned by the process running it through a lease on the run record,
        # renewed every third of this while it runs; a killed process's run becomes
        # resumable once its lease expires.
        self.run_lease_seconds = float(run_lease_seconds)
        # Seconds a run may take (None: no limit); past them it ends `failed`.
        self.run_timeout = check_run_timeout(run_timeout)

    def __repr__(self) -> str:
        return f"Workflow(name={self.name!r}, steps={[s.name for s in self.steps]!r})"

    # ---- runs -----------------------------------------------------------------------------

    def _request(
        self,
        input: Any,
        session_id: str | None,
        user_id: str | None,
        session_state: Mapping[str, Any] | None,
        stream: bool,
        resume: bool | str,
        run_timeout: float | None = None,
    ) -> _Request:
        spec = self._spec(session_id, user_id)  # (the run's ids stay in the request)
        plan = None
        if isinstance(resume, str):
            plan = self._resume_plan(spec.session_id, resume)
        elif resume:
            record = self._unfinished_run(spec.session_id)
            if record is not None:
                plan = self._resume_plan(spec.session_id, record.run_id, record)
        if plan is not None:
            input = plan.input
        elif input is None:
            raise ConfigurationError("Workflow.run needs input=...")
        check_input(input)
        return _Request(
            input=input,
            spec=spec,
            session_state=session_state,
            stream=stream,
            resume=plan,
            run_timeout=self._run_timeout(run_timeout),
        )

    def _run_timeout(self, per_run: float | None) -> float | None:
        """A run's deadline in seconds: its own `run_timeout=`, else the workflow's."""
        if per_run is None:
            return self.run_timeout
        return check_run_timeout(per_run)

    def _unfinished_run(self, session_id: str) -> RunRecord | None:
        """This workflow's latest run of the session, if it did not complete."""
        runs = [r for r in self.db.read_runs(session_id) if r.agent_name == self.name]
        if runs and runs[-1].status in RESUMABLE:
            return runs[-1]
        return None

    def _resume_plan(
        self, session_id: str, run_id: str, record: RunRecord | None = None
    ) -> _Resume:
        """What a run to continue did so far; `record`: its record, if just read."""
        if record is None:
            record = self.db.get_run(session_id, run_id)
        if record is None:
            raise RunError(f"no run {run_id!r} in session {session_id!r}")
        if record.status not in RESUMABLE:
            raise RunError(
                f"run {run_id!r} is {record.status}; only a failed or killed run resumes"
            )
        events = [
            e
            for e in self.db.read_events(session_id, types=["run_started", "step_completed"])
            if e.run_id == run_id
        ]
        input: Any = record.input
        done: dict[int, StepOutput] = {}
        for event in events:
            if event.type == "run_started" and "input" in event.data:
                input = event.data["input"]
            elif event.type == "step_completed":
                index, step_name = event.data["index"], event.data["name"]
                if index >= len(self.steps) or self.steps[index].name != step_name:
                    raise RunError(
                        f"cannot resume run {run_id!r}: its step {index} was {step_name!r}, "
                        f"but this workflow's steps are {[s.name for s in self.steps]}"
                    )
                done[index] = StepOutput.from_json(event.data["output"])
        return _Resume(record=record, input=input, done=done)

    async def _events(self, request: _Request) -> AsyncIterator[RunEvent]:
        """Own the run with a lease for as long as it runs, then run it."""
        sid = request.spec.session_id
        run_id = request.resume.record.run_id if request.resume else (request.run_id or new_id())
        if not request.leased:
            async for event in self._owned_events(request, run_id):
                yield event
            return
        ttl = self.run_lease_seconds
        lease = await self.db.run_io(RunLease.claim, self.db, sid, run_id, ttl)
        if lease is None:
            raise RunError(
                f"run {run_id!r} of session {sid!r} is being run by another process (it "
                f"holds the run's lease); resume it only after that process is gone: its "
                f"lease then expires within {ttl:g} s"
            )
        try:
            if request.resume is not None:
                # Another resumer may have finished or advanced the run since the plan
                # was read: plan again now that the run is ours.
                plan = await asyncio.to_thread(self._resume_plan, sid, run_id)
                request = dataclasses.replace(request, resume=plan, input=plan.input)
            async for event in self._owned_events(request, run_id):
                yield event
        finally:
            await lease.arelease()

    async def _owned_events(self, request: _Request, run_id: str) -> AsyncIterator[RunEvent]:
        started = time.perf_counter()
        plan = request.resume
        text = request.input if isinstance(request.input, str) else str(request.input)
        if plan is not None:
            record = plan.record
            record.status, record.error = "running", None
        else:
            record = RunRecord(
                session_id=request.spec.session_id, run_id=run_id, agent_name=self.name, input=text
            )
        outputs: list[StepOutput] = []
        life = RunLifecycle(
            store=self._store,
            spec=request.spec,
            record=record,
            agent=self,
            kind="workflow",
            debug=self.debug_mode,
            writer_type=StepWriter,
            share_writer=True,  # the agents and teams of its steps commit through it
            session_user=True,
            run_timeout=request.run_timeout,
        )
        try:
            async with life:
                async for event in self._steps(request, life, outputs, started):
                    # secret values never leave in an event (see run.emit.masking)
                    values = life.ctx.secret_values()
                    yield masked_event(event, values) if values else event
        except BaseException as exc:
            if life.stored:
                exc.add_note(
                    f"workflow run {run_id!r} of session {request.spec.session_id!r} failed "
                    f"after {len(outputs)} completed step(s); continue it with "
                    f"workflow.resume({run_id!r}, session_id={request.spec.session_id!r})"
                )
            raise

    async def _steps(
        self, request: _Request, life: RunLifecycle, outputs: list[StepOutput], started: float
    ) -> AsyncIterator[RunEvent]:
        """The run's body, inside its lifecycle: start, each step, end."""
        ctx, txn, record, run_id = life.ctx, life.txn, life.record, life.run_id
        writer = cast(StepWriter, life.writer)
        working = txn.working
        spec = working.spec
        plan = request.resume
        text = request.input if isinstance(request.input, str) else str(request.input)
        deadline = life.deadline
        ex = Executor(
            workflow=self, input=request.input, ctx=ctx, writer=writer, stream=request.stream
        )
        metrics = life.metrics
        initialize_state(
            working,
            self._default_state(),
            request.session_state,
            self.overwrite_db_session_state,
        )
        yield RunStarted(run_id=run_id, session_id=spec.session_id, agent_name=self.name)
        if plan is not None:
            for index in sorted(plan.done):
                ex.restore(plan.done[index])
                outputs.append(plan.done[index])
        if plan is not None and request.run_id is not None:
            events = []  # advance(): continuing a running run, not a resume
        elif plan is not None:
            events = [
                NewEvent(
                    type="run_resumed",
                    run_id=run_id,
                    data={"workflow": self.name, "completed_steps": sorted(plan.done)},
                )
            ]
        else:
            events = [
                NewEvent(
                    type="run_started",
                    run_id=run_id,
                    data={
                        "workflow": self.name,
                        "kind": "workflow",
                        "input": json_or_text(request.input),
                    },
                ),
                NewEvent(type="user_input", run_id=run_id, data={"content": text}),
            ]
        if events:
            changed = await writer.commit(events, run=record, step=0, source="run_start")
            if changed is not None:
                yield changed
        for index, step in enumerate(self.steps):
            if ex.stopped or (request.until is not None and index >= request.until):
                break
            if deadline is not None:
                deadline.check()
            if plan is not None and index in plan.done:
                continue
            produced: list[StepOutput] = []

            async def commit_step(
                index: int = index, step: StepLike = step, produced: list[StepOutput] = produced
            ) -> AsyncIterator[RunEvent]:
                assert produced, f"step {step.name!r} produced no output"
                changed = await writer.commit(
                    [
                        NewEvent(
                            type="step_completed",
                            run_id=run_id,
                            data={
                                "index": index,
                                "name": step.name,
                                "output": produced[0].to_json(),
                            },
                        )
                    ],
                    step=index + 1,
                    source=f"step:{step.name}",
                    # One id per run and step: a step executed again (a second
                    # resumer, a replaying executor) cannot apply its state twice.
                    commit_id=point_commit_id(run_id, index),
                )
                if changed is not None:
                    yield changed

            async for item in observed_step(step, ex, index, then=commit_step):
                if isinstance(item, StepOutput):
                    produced.append(item)
                else:
                    yield item
            outputs.append(produced[0])
        if not ex.stopped and request.until is not None:
            return  # the caller advances the run further later
        content = ex.previous
        metrics.duration = time.perf_counter() - started
        metrics.total_tokens = metrics.input_tokens + metrics.output_tokens
        messages = [
            Message(role="user", content=text),
            Message(role="assistant", content=None if content is None else str(content)),
        ]
        record.status = "completed"
        record.content = None if content is None else str(content)
        record.messages = [m.to_dict() for m in messages]
        record.metrics = metrics.to_dict()
        changed = await writer.commit(
            [
                NewEvent(
                    type="run_completed",
                    run_id=run_id,
                    data={"content": json_or_text(content), "metrics": metrics.to_dict()},
                )
            ],
            run=record,
            source="run_end",
        )
        if changed is not None:
            yield changed
        yield RunCompleted(
            output=WorkflowRunOutput(
                content=content,
                run_id=run_id,
                session_id=spec.session_id,
                user_id=spec.user_id,
                messages=messages,
                metrics=metrics,
                agent_name=self.name,
                conflicts=writer.conflicts,
                state_loader=txn.state_loader(),
                step_outputs=outputs,
            )
        )

    @overload
    def arun(
        self,
        input: Any = ...,
        *,
        session_id: str | None = ...,
        user_id: str | None = ...,
        session_state: Mapping[str, Any] | None = ...,
        stream: Literal[False] = ...,
        resume: bool = ...,
        run_timeout: float | None = ...,
    ) -> Coroutine[Any, Any, WorkflowRunOutput]: ...
    @overload
    def arun(
        self,
        input: Any = ...,
        *,
        session_id: str | None = ...,
        user_id: str | None = ...,
        session_state: Mapping[str, Any] | None = ...,
        stream: Literal[True],
        resume: bool = ...,
        run_timeout: float | None = ...,
    ) -> RunStream: ...

    def arun(
        self,
        input: Any = None,
        *,
        session_id: str | None = None,
        user_id: str | None = None,
        session_state: Mapping[str, Any] | None = None,
        stream: bool = False,
        resume: bool = False,
        run_timeout: float | None = None,
    ) -> Coroutine[Any, Any, WorkflowRunOutput] | RunStream:
        """Run the workflow once. With `resume=True`, a failed or killed run of this
        session is continued instead (after its last completed step), if there is one.
        `run_timeout` (seconds) overrides the workflow's for this run."""
        request = self._request(
            input, session_id, user_id, session_state, stream, resume, run_timeout
        )
        if stream:
            return RunStream(self._events(request))
        return _final_output(self._events(request))

    @overload
    def run(
        self,
        input: Any = ...,
        *,
        session_id: str | None = ...,
        user_id: str | None = ...,
        session_state: Mapping[str, Any] | None = ...,
        stream: Literal[False] = ...,
        resume: bool = ...,
        run_timeout: float | None = ...,
    ) -> WorkflowRunOutput: ...
    @overload
    def run(
        self,
        input: Any = ...,
        *,
        session_id: str | None = ...,
        user_id: str | None = ...,
        session_state: Mapping[str, Any] | None = ...,
        stream: Literal[True],
        resume: bool = ...,
        run_timeout: float | None = ...,
    ) -> Iterator[RunEvent]: ...

    def run(
        self,
        input: Any = None,
        *,
        session_id: str | None = None,
        user_id: str | None = None,
        session_state: Mapping[str, Any] | None = None,
        stream: bool = False,
        resume: bool = False,
        run_timeout: float | None = None,
    ) -> WorkflowRunOutput | Iterator[RunEvent]:
        """Run the workflow once on a session; works inside a running event loop too."""
        request = self._request(
            input, session_id, user_id, session_state, stream, resume, run_timeout
        )
        if stream:
            return iterate_sync(self._events(request))
        return run_sync(_final_output(self._events(request)))

    def resume(self, run_id: str, session_id: str | None = None) -> WorkflowRunOutput:
        """Continue a failed or killed run after its last completed step; completed steps
        are not run again. While another process runs (or resumes) the run, this raises
        `RunError`: the run is leased to that process. A killed process's lease expires
        `run_lease_seconds` after its last renewal; then the run resumes."""
        request = self._request(None, session_id, None, None, False, run_id)
        return run_sync(_final_output(self._events(request)))

    async def aresume(self, run_id: str, session_id: str | None = None) -> WorkflowRunOutput:
        request = self._request(None, session_id, None, None, False, run_id)
        return await _final_output(self._events(request))

    def advance(
        self,
        run_id: str,
        *,
        session_id: str,
        user_id: str | None = None,
        input: Any = None,
        until: int | None = None,
    ) -> WorkflowRunOutput | None:
        """Drive run `run_id` of a session forward, for a durable engine that makes each
        step a unit of its own (`statewise.fleet`).

        The first call starts the run with `input` under the given id (`until=0` commits
        only its start). Later calls run the steps before index `until` that have not
        completed yet, each committed as usual; steps that completed are never run again.
        With `until=None` the remaining steps run and the run completes: its output is
        returned. Returns None when the run has not completed yet, or had completed
        already (read it with `db.get_run`).
        """
        spec = self._spec(session_id, user_id)
        record = self.db.get_run(spec.session_id, run_id)
        if record is not None and record.status == "completed":
            return None
        plan = self._resume_plan(spec.session_id, run_id, record) if record is not None else None
        if plan is None and input is None:
            raise ConfigurationError("Workflow.advance needs input=... to start a run")
        request = _Request(
            input=plan.input if plan is not None else input,
            spec=spec,
            session_state=None,
            stream=False,
            resume=plan,
            run_id=run_id,
            until=until,
            # The engine decides who runs the run (and recovers it at once when a worker
            # dies); each step's commit id keeps a re-executed step from applying twice.
            leased=False,
            run_timeout=self.run_timeout,
        )
        return run_sync(_advance(self._events(request)))

    def print_response(
        self,
        input: Any = None,
        *,
        session_id: str | None = None,
        user_id: str | None = None,
        session_state: Mapping[str, Any] | None = None,
        stream: bool = False,
        show_tool_calls: bool = True,
        resume: bool = False,
    ) -> WorkflowRunOutput:
        """Run and print the exchange, with a line per step."""
        request = self._request(input, session_id, user_id, session_state, stream, resume)
        output = print_run(
            _announce_steps(iterate_sync(self._events(request))),
            input=str(request.input),
            markdown=self.markdown,
            stream=stream,
            show_tool_calls=show_tool_calls,
        )
        return cast(WorkflowRunOutput, output)

    async def aprint_response(
        self,
        input: Any = None,
        *,
        session_id: str | None = None,
        user_id: str | None = None,
        session_state: Mapping[str, Any] | None = None,
        stream: bool = False,
        show_tool_calls: bool = True,
        resume: bool = False,
    ) -> WorkflowRunOutput:
        request = self._request(input, session_id, user_id, session_state, stream, resume)
        output = await aprint_run(
            _aannounce_steps(self._events(request)),
            input=str(request.input),
            markdown=self.markdown,
            stream=stream,
            show_tool_calls=show_tool_calls,
        )
        return cast(WorkflowRunOutput, output)


_console = Console()


def _announce_steps(events: Iterator[RunEvent]) -> Iterator[RunEvent]:
    for event in events:
        if isinstance(event, StepStarted):
            _console.print(Text(f"▸ {event.step_name}", style="bold magenta"))
        yield event


async def _aannounce_steps(events: AsyncIterator[RunEvent]) -> AsyncIterator[RunEvent]:
    async for event in events:
        if isinstance(event, StepStarted):
            _console.print(Text(f"▸ {event.step_name}", style="bold magenta"))
        yield event


async def _advance(events: AsyncIterator[RunEvent]) -> WorkflowRunOutput | None:
    output = None
    async for event in events:
        if isinstance(event, RunCompleted):
            output = event.output
    return output if isinstance(output, WorkflowRunOutput) else None


async def _final_output(events: AsyncIterator[RunEvent]) -> WorkflowRunOutput:
    output = None
    async for event in events:
        if isinstance(event, RunCompleted):
            output = event.output
    assert isinstance(output, WorkflowRunOutput), "a workflow run ends with RunCompleted"
    return output
