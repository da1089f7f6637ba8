"""The building blocks of a workflow: Step, Condition, Router, Loop, Parallel.

Each block's `execute` is an async generator that yields the run's events (its own
StepStarted/StepCompleted and those of the agents inside it) and, last, its `StepOutput`.
"""

from __future__ import annotations

import asyncio
import inspect
from collections.abc import AsyncIterator, Callable, Sequence
from typing import Any

from statewise.agent.agent import Agent
from statewise.db.records import NewEvent
from statewise.db.store import scope_of
from statewise.exceptions import ConfigurationError, RunError, StateConflictError
from statewise.run.callbacks import call_with_available
from statewise.run.deadline import bounded
from statewise.run.driver import run_nested, typed_answer
from statewise.run.emit import events_of
from statewise.run.events import RunEvent, StepCompleted, StepStarted
from statewise.run.loop import StepsResult
from statewise.state.merge import rebase
from statewise.state.ops import Op, apply_op
from statewise.state.secrets import redact_conflict_error
from statewise.state.tracked import to_plain
from statewise.team import Team
from statewise.tools._introspect import callable_name
from statewise.workflow._engine import Executor, StepLike, observed_step
from statewise.workflow.types import StepOutput

StepSpec = Any
"""What a workflow accepts as a step: a Step, Condition, Router, Loop or Parallel, an Agent
or Team, or a function taking `step_input` (and, by name, `run_context`)."""

_STEP_KINDS = "a Step, Condition, Router, Loop, Parallel, Agent, Team or function"


def normalize_step(item: StepSpec, where: str) -> StepLike:
    """The step `item` stands for; a clear ConfigurationError naming `where` if none."""
    if isinstance(item, Step | Condition | Router | Loop | Parallel):
        return item
    if isinstance(item, Team):
        return Step(team=item)
    if isinstance(item, Agent):
        return Step(agent=item)
    if isinstance(item, type) or not callable(item):
        raise ConfigurationError(
            f"{where} is not a step: got {type(item).__name__} {item!r:.80}; pass {_STEP_KINDS}"
        )
    return Step(executor=item)


def normalize_steps(items: Sequence[StepSpec], where: str) -> list[StepLike]:
    if isinstance(items, str | bytes) or not isinstance(items, Sequence):
        raise ConfigurationError(f"{where} must be a list of steps, got {type(items).__name__}")
    return [normalize_step(item, f"{where}[{i}]") for i, item in enumerate(items)]


async def _collect(
    ex: Executor, steps: Sequence[StepLike], children: list[StepOutput]
) -> AsyncIterator[RunEvent]:
    async for item in ex.run_sequence(steps):
        if isinstance(item, StepOutput):
            children.append(item)
        else:
            yield item


def _last_content(children: Sequence[StepOutput]) -> Any:
    ran = [c for c in children if not c.skipped]
    return ran[-1].content if ran else None


class Step:
    """One unit of work: an agent, a team, or a function (`executor`).

    An agent or team receives the workflow's input as its user message and works on the
    workflow's session state; its answer is the step's content. A function receives
    `step_input` and, by name, `run_context`, `session_state` or `workflow`, and returns a
    `StepOutput` or any value (the step's content).
    """

    def __init__(
        self,
        name: str | None = None,
        *,
        agent: Agent | None = None,
        team: Team | None = None,
        executor: Callable[..., Any] | None = None,
        description: str | None = None,
    ) -> None:
        given = [x for x in (agent, team, executor) if x is not None]
        if len(given) != 1:
            raise ConfigurationError(
                f"Step {name!r} needs exactly one of agent=, team= or executor= (got {len(given)})"
            )
        if agent is not None and not isinstance(agent, Agent):
            raise ConfigurationError(f"Step {name!r}: agent= must be an Agent, got {agent!r:.80}")
        if team is not None and not isinstance(team, Team):
            raise ConfigurationError(f"Step {name!r}: team= must be a Team, got {team!r:.80}")
        if executor is not None and (isinstance(executor, type) or not callable(executor)):
            raise ConfigurationError(
                f"Step {name!r}: executor= must be a function, got {executor!r:.80}"
            )
        self.agent: Agent | None = team if team is not None else agent
        self.executor = executor
        self.description = description
        if name is None:
            name = (
                self.agent.name if self.agent is not None else callable_name(executor)  # type: ignore[arg-type]
            )
        if not name:
            raise ConfigurationError("a Step whose agent or team has no name needs name=...")
        self.name: str = name

    def __repr__(self) -> str:
        return f"Step(name={self.name!r})"

    async def execute(self, ex: Executor) -> AsyncIterator[RunEvent | StepOutput]:
        yield StepStarted(step_name=self.name)
        step_input = ex.step_input()
        if self.agent is not None:
            result = StepsResult()
            rt = self.agent._runtime()
            async for event in events_of(
                lambda emit: run_nested(
                    rt, ex.writer, ex.ctx, ex.message, result, stream=ex.stream, emit=emit
                )
            ):
                yield event
            output = StepOutput(content=typed_answer(rt, result.content))
        else:
            assert self.executor is not None
            value = await bounded(
                ex.ctx.metadata, call_with_available(self.executor, ex.available(step_input))
            )
            output = value if isinstance(value, StepOutput) else StepOutput(content=value)
        output.step_name = output.step_name or self.name
        ex.writer.working.mark(f"step:{self.name}")
        ex.record(output)
        yield StepCompleted(step_name=self.name, content=output.content)
        yield output


class Condition:
    """Runs `steps` only when `evaluator` (a bool, or a function of `step_input`,
    `run_context`, `session_state`) is true; otherwise the block is skipped."""

    def __init__(
        self,
        name: str,
        *,
        evaluator: Callable[..., Any] | bool,
        steps: Sequence[StepSpec],
        description: str | None = None,
    ) -> None:
        if not isinstance(evaluator, bool) and not callable(evaluator):
            raise ConfigurationError(
                f"Condition {name!r}: evaluator must be a bool or a function, got {evaluator!r}"
            )
        self.name = name
        self.evaluator = evaluator
        self.steps = normalize_steps(steps, f"Condition {name!r} steps")
        self.description = description

    def __repr__(self) -> str:
        return f"Condition(name={self.name!r})"

    async def execute(self, ex: Executor) -> AsyncIterator[RunEvent | StepOutput]:
        yield StepStarted(step_name=self.name)
        if isinstance(self.evaluator, bool):
            passed = self.evaluator
        else:
            passed = bool(await call_with_available(self.evaluator, ex.available(ex.step_input())))
        children: list[StepOutput] = []
        if passed:
            async for event in _collect(ex, self.steps, children):
                yield event
        output = StepOutput(
            step_name=self.name,
            content=_last_content(children),
            steps=children,
            skipped=not passed or all(c.skipped for c in children),
        )
        ex.record(output)
        yield StepCompleted(step_name=self.name, content=output.content)
        yield output


class Router:
    """Runs the step(s) `selector` picks among `choices`.

    The selector (called with `step_input`, `run_context`, `session_state` by name) returns
    a step, a step's name, a list of those, or None to run nothing. With exactly two
    choices a bool also works: True picks the first, False the second.
    """

    def __init__(
        self,
        name: str,
        *,
        selector: Callable[..., Any],
        choices: Sequence[StepSpec],
        description: str | None = None,
    ) -> None:
        if not callable(selector):
            raise ConfigurationError(f"Router {name!r}: selector must be a function")
        self.name = name
        self.selector = selector
        self._originals = list(choices)
        self.choices = normalize_steps(choices, f"Router {name!r} choices")
        if not self.choices:
            raise ConfigurationError(f"Router {name!r} needs at least one choice")
        self.description = description

    def __repr__(self) -> str:
        return f"Router(name={self.name!r})"

    def _resolve(self, selected: Any) -> list[StepLike]:
        if selected is None:
            return []
        if isinstance(selected, bool):
            if len(self.choices) != 2:
                raise RunError(
                    f"Router {self.name!r}: the selector returned {selected}; a bool only "
                    f"selects between exactly two choices (this router has "
                    f"{len(self.choices)}); return a step or a step name"
                )
            return [self.choices[0 if selected else 1]]
        if isinstance(selected, list | tuple):
            return [step for item in selected for step in self._resolve(item)]
        if isinstance(selected, str):
            for step in self.choices:
                if step.name == selected:
                    return [step]
            known = ", ".join(repr(s.name) for s in self.choices)
            raise RunError(
                f"Router {self.name!r}: the selector returned {selected!r}, which is not the "
                f"name of one of its choices ({known})"
            )
        for original, step in zip(self._originals, self.choices, strict=True):
            if selected is original or selected is step:
                return [step]
        return [normalize_step(selected, f"Router {self.name!r} selection")]

    async def execute(self, ex: Executor) -> AsyncIterator[RunEvent | StepOutput]:
        yield StepStarted(step_name=self.name)
        selected = await call_with_available(self.selector, ex.available(ex.step_input()))
        chosen = self._resolve(selected)
        children: list[StepOutput] = []
        async for event in _collect(ex, chosen, children):
            yield event
        output = StepOutput(
            step_name=self.name,
            content=_last_content(children),
            steps=children,
            skipped=not children or all(c.skipped for c in children),
        )
        ex.record(output)
        yield StepCompleted(step_name=self.name, content=output.content)
        yield output


POSITIONAL = "*"
"""What `_single_parameter` answers for `fn(*args, **kwargs)`: it takes the outputs
positionally, as Agno calls it."""


def _single_parameter(fn: Callable[..., Any] | None) -> str | None:
    """The name of `fn`'s only parameter when it can be passed positionally (`POSITIONAL`
    for a function that takes `*args`), else None."""
    if fn is None:
        return None
    try:
        params = list(inspect.signature(fn).parameters.values())
    except (TypeError, ValueError):
        return None
    if params and params[0].kind is inspect.Parameter.VAR_POSITIONAL:
        return POSITIONAL
    if len(params) == 1 and params[0].kind in (
        inspect.Parameter.POSITIONAL_ONLY,
        inspect.Parameter.POSITIONAL_OR_KEYWORD,
    ):
        return params[0].name
    return None


class Loop:
    """Runs `steps` again and again, at most `max_iterations` times (required: a loop
    without a bound is refused), until `end_condition` returns true.

    `end_condition` gets, by name, `outputs` (this iteration's step outputs), `iteration`,
    `step_input`, `run_context` and `session_state`. A function of one parameter with
    another name gets this iteration's step outputs, as in Agno: `end_condition=fn`,
    `fn(outputs: list[StepOutput]) -> bool`.
    """

    def __init__(
        self,
        name: str,
        *,
        steps: Sequence[StepSpec],
        end_condition: Callable[..., Any] | None = None,
        max_iterations: int | None = None,
        description: str | None = None,
    ) -> None:
        if max_iterations is None:
            raise ConfigurationError(
                f"Loop {name!r} has no bound: pass max_iterations=N (with end_condition= "
                "to stop earlier)"
            )
        if isinstance(max_iterations, bool) or not isinstance(max_iterations, int):
            raise ConfigurationError(f"Loop {name!r}: max_iterations must be an int")
        if max_iterations < 1:
            raise ConfigurationError(
                f"Loop {name!r}: max_iterations must be at least 1, got {max_iterations}"
            )
        if end_condition is not None and not callable(end_condition):
            raise ConfigurationError(f"Loop {name!r}: end_condition must be a function")
        self.name = name
        self.steps = normalize_steps(steps, f"Loop {name!r} steps")
        if not self.steps:
            raise ConfigurationError(f"Loop {name!r} needs at least one step")
        self.end_condition = end_condition
        self._outputs_positionally = _single_parameter(end_condition)
        self.max_iterations = max_iterations
        self.description = description

    def __repr__(self) -> str:
        return f"Loop(name={self.name!r}, max_iterations={self.max_iterations})"

    async def execute(self, ex: Executor) -> AsyncIterator[RunEvent | StepOutput]:
        yield StepStarted(step_name=self.name)
        children: list[StepOutput] = []
        for iteration in range(1, self.max_iterations + 1):
            this_round: list[StepOutput] = []
            async for event in _collect(ex, self.steps, this_round):
                yield event
            children.extend(this_round)
            if ex.stopped:
                break
            if self.end_condition is not None:
                available = ex.available(
                    ex.step_input(),
                    outputs=this_round,
                    step_outputs=this_round,
                    iteration=iteration,
                )
                if self._outputs_positionally and self._outputs_positionally not in available:
                    done = self.end_condition(this_round)
                    done = await done if inspect.isawaitable(done) else done
                else:
                    done = await call_with_available(self.end_condition, available)
                if done:
                    break
        output = StepOutput(step_name=self.name, content=_last_content(children), steps=children)
        ex.record(output)
        yield StepCompleted(step_name=self.name, content=output.content)
        yield output


class Parallel:
    """Runs its steps concurrently, each on its own copy of the state.

    When all are done, each branch's state ops are merged into the workflow's state in
    declaration order with the state engine's rebase and the workflow's rules: appends,
    increments and writes of different keys all survive; a path two branches set to
    different values is resolved by its rule (default last-writer-wins, so the later
    branch) and recorded as a `conflict_resolved` event. The result does not depend on
    which branch finished first. The block's content is `{step name: content}`.

    Events of the branches are yielded after they finish, branch by branch.
    """

    def __init__(self, *steps: StepSpec, name: str, description: str | None = None) -> None:
        if len(steps) == 1 and isinstance(steps[0], list | tuple):
            steps = tuple(steps[0])
        self.name = name
        self.steps = normalize_steps(list(steps), f"Parallel {name!r} steps")
        if not self.steps:
            raise ConfigurationError(f"Parallel {name!r} needs at least one step")
        self.description = description

    def __repr__(self) -> str:
        return f"Parallel(name={self.name!r}, steps={len(self.steps)})"

    async def execute(self, ex: Executor) -> AsyncIterator[RunEvent | StepOutput]:
        yield StepStarted(step_name=self.name)
        branches = [ex.branch() for _ in self.steps]

        async def run_branch(
            step: StepLike, branch: Executor
        ) -> tuple[list[RunEvent], list[StepOutput]]:
            events: list[RunEvent] = []
            outputs: list[StepOutput] = []
            async for item in observed_step(step, branch):
                if isinstance(item, StepOutput):
                    outputs.append(item)
                else:
                    events.append(item)
            return events, outputs

        results = await asyncio.gather(
            *(run_branch(s, b) for s, b in zip(self.steps, branches, strict=True)),
            return_exceptions=True,
        )
        done: list[tuple[list[RunEvent], list[StepOutput]]] = []
        for result in results:
            if isinstance(result, BaseException):
                raise result
            done.append(result)
        children: list[StepOutput] = []
        for events, outputs in done:
            for event in events:
                yield event
            children.extend(outputs)
        self._merge(ex, branches)
        for branch in branches:
            for name, out in branch.outputs.items():
                ex.outputs[name] = out
        output = StepOutput(
            step_name=self.name,
            content={c.step_name: c.content for c in children if c.step_name},
            steps=children,
            stop=any(b.stopped for b in branches),
        )
        ex.record(output)
        yield StepCompleted(step_name=self.name, content=output.content)
        yield output

    def _merge(self, ex: Executor, branches: Sequence[Executor]) -> None:
        store = ex.writer.store
        root = ex.writer.working.root
        merged = {k: to_plain(v) for k, v in dict.items(root)}
        applied: list[Op] = []
        secrets = store.secret_keys_in(root)  # the data's own secret keys
        for step, branch in zip(self.steps, branches, strict=True):
            ops = branch.writer.working.recorder.drain()
            try:
                result = rebase(merged, applied, ops, store.rules)
            except StateConflictError as exc:
                # Its text goes wherever errors go (responses, run records, logs, spans).
                raise redact_conflict_error(exc, secrets) from None
            for op in result.ops:
                apply_op(root, op)  # (an increment stays an increment: it keeps merging)
            ex.writer.working.mark(f"parallel:{self.name}/{step.name}")
            applied.extend(result.ops)
            ex.writer.held.extend(branch.writer.held)
            for conflict in result.conflicts:
                data = conflict.to_json()
                key = str(conflict.path[0])
                if key in secrets:
                    data = {"path": data["path"], "rule": data["rule"]}
                data = {"scope": scope_of(key)[0], "step": self.name, "branch": step.name, **data}
                ex.writer.conflicts.append(data)
                ex.writer.held.append(
                    NewEvent(type="conflict_resolved", run_id=ex.writer.run_id, data=data)
                )
