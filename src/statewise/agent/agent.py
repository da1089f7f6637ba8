"""The Agent: a model, tools and instructions working on a persisted session state.

The agent object holds configuration only, grouped by concern (see `statewise.agent.options`).
Its `session_id` is its own session, which a run without one uses; a run on another session
leaves it as it is. Each run's ids and working data live in the run (RunRequest,
RunContext, WorkingState), so one agent serves many concurrent runs and sessions.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable, Coroutine, Iterator, Mapping, Sequence
from typing import Any, Generic, Literal, overload

from typing_extensions import TypeVar

from statewise.agent.agentic import agentic_state_tool
from statewise.agent.instructions import Instructions, build_system_prompt
from statewise.agent.options import Callback, ContextConfig, Option, RunConfig, SummaryConfig
from statewise.agent.printing import print_run
from statewise.agent.session_config import SessionConfig
from statewise.agent.session_owner import SessionOwner, db_or_storage
from statewise.agent.summaries import (
    SUMMARY_KEY,
    SessionSummary,
    SessionSummaryManager,
    aread_summary,
)
from statewise.db.base import BaseDb, validate_id
from statewise.db.store import SessionSpec
from statewise.exceptions import ConfigurationError
from statewise.models.base import Model
from statewise.models.messages import OutputSpec, ToolDefinition
from statewise.models.registry import infer_model
from statewise.models.structured import OutputSchema
from statewise.run.callbacks import Callbacks, as_callbacks
from statewise.run.checkpoints import CommitPoints
from statewise.run.context import RunContext
from statewise.run.deadline import check_run_timeout
from statewise.run.driver import RunRequest, drive_run
from statewise.run.emit import Emit, events_of
from statewise.run.events import RunEvent
from statewise.run.output import RunOutput
from statewise.run.resume import ContinueRequest, PausedRun, drive_continue, paused_runs
from statewise.run.runtime import AgentRuntime
from statewise.run.stream import RunStream
from statewise.run.sync import iterate_sync, run_sync
from statewise.state.reducers import Rule
from statewise.tools import ToolSource, normalize_tools, split_tool_sources
from statewise.tools.function import Function

OutputT = TypeVar("OutputT", default=Any)
"""The type of an agent's answer: what `output_schema` names (else any)."""
_NO_CALLBACKS = Callbacks()
_NO_CALLBACK_ARGS = (None,) * 6


class Agent(SessionOwner, Generic[OutputT]):
    """An LLM agent whose tools, hooks, callbacks and instructions share a session state.

    `session_state` is the template for new sessions; `db` (a database object or a URL
    such as "sqlite:///tmp/agents.db") persists each session's state, runs and events.

    With `output_schema` (a pydantic model, a dataclass, a TypedDict or a JSON Schema
    dict) the run's answer is a validated value of that type in `RunOutput.content`: the
    provider is asked for it natively where it can be, an answer that does not fit goes
    back to the model with the reason up to `output_retries` times, and then the run fails
    with `OutputValidationError`. With `output_key` too, the value is stored in state as
    JSON in the run's last commit.

    The keywords are kept in groups (`context_config`, `summary_config`, `run_config`,
    `session_config`), each also readable and settable under its keyword's name
    (`agent.max_steps`, `agent.markdown`, `agent.db`, ...). A run reads them and writes
    none: its session, user and working data live in the run.
    """

    add_session_state_to_context = Option[bool]("context_config")
    enable_agentic_state = Option[bool]("context_config")
    resolve_in_context = Option[bool]("context_config")
    add_history_to_context = Option[bool]("context_config")
    num_history_runs = Option[int]("context_config")
    markdown = Option[bool]("context_config")
    expose_secrets_to_model = Option[bool]("context_config")
    strict_templates = Option[bool]("context_config")
    enable_session_summaries = Option[bool]("summary_config")
    add_session_summary_to_context = Option[bool | None]("summary_config")
    session_summary_manager = Option[SessionSummaryManager | None]("summary_config")
    output_key = Option[str | None]("run_config")
    output_schema = Option[type[Any] | dict[str, Any] | None]("run_config")
    output_retries = Option[int]("run_config")
    max_steps = Option[int]("run_config")
    run_timeout = Option[float | None]("run_config")
    overwrite_db_session_state = Option[bool]("run_config")
    debug_mode = Option[bool]("run_config")

    def __init__(
        self,
        model: Model | str | None = None,
        *,
        name: str | None = None,
        description: str | None = None,
        instructions: Instructions = None,
        tools: Sequence[Any] | None = None,
        tool_hooks: Sequence[Callable[..., Any]] | None = None,
        session_state: Mapping[str, Any] | None = None,
        db: BaseDb | str | None = None,
        storage: BaseDb | str | None = None,
        session_id: str | None = None,
        user_id: str | None = None,
        app_name: str | None = None,
        add_session_state_to_context: bool = False,
        enable_agentic_state: bool = False,
        overwrite_db_session_state: bool = False,
        resolve_in_context: bool = True,
        add_history_to_context: bool = False,
        num_history_runs: int = 3,
        markdown: bool = False,
        state_schema: type | None = None,
        state_rules: Mapping[str, Rule] | None = None,
        default_state_rule: Rule = "last_write_wins",
        secret_keys: Sequence[str] | None = None,
        expose_secrets_to_model: bool = False,
        output_key: str | None = None,
        output_schema: type[OutputT] | dict[str, Any] | None = None,
        output_retries: int = 1,
        max_steps: int = 25,
        before_agent_callback: Callback = None,
        after_agent_callback: Callback = None,
        before_model_callback: Callback = None,
        after_model_callback: Callback = None,
        before_tool_callback: Callback = None,
        after_tool_callback: Callback = None,
        debug_mode: bool = False,
        strict_templates: bool = False,
        run_timeout: float | None = None,
        enable_session_summaries: bool = False,
        add_session_summary_to_context: bool | None = None,
        session_summary_manager: SessionSummaryManager | None = None,
    ) -> None:
        self.model: Model | None = infer_model(model) if model is not None else None
        self.name = name
        self.description = description
        self.instructions = instructions
        self.tools = list(tools or [])
        self.tool_hooks = tuple(tool_hooks or ())
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
        self.context_config = ContextConfig(
            add_session_state_to_context=add_session_state_to_context,
            enable_agentic_state=enable_agentic_state,
            resolve_in_context=resolve_in_context,
            add_history_to_context=add_history_to_context,
            num_history_runs=num_history_runs,
            markdown=markdown,
            expose_secrets_to_model=expose_secrets_to_model,
            strict_templates=strict_templates,
        )
        self.summary_config = SummaryConfig(
            enable_session_summaries=enable_session_summaries,
            add_session_summary_to_context=add_session_summary_to_context,
            session_summary_manager=session_summary_manager,
        )
        self.run_config = RunConfig(
            output_key=output_key,
            output_schema=output_schema,
            output_retries=output_retries,
            max_steps=max_steps,
            run_timeout=run_timeout,
            overwrite_db_session_state=overwrite_db_session_state,
            debug_mode=debug_mode,
        )
        self._answer_schema: OutputSchema[OutputT] | None = (
            OutputSchema(output_schema, name=name) if output_schema is not None else None
        )
        given = (
            before_agent_callback,
            after_agent_callback,
            before_model_callback,
            after_model_callback,
            before_tool_callback,
            after_tool_callback,
        )
        self.callbacks = _NO_CALLBACKS
        if given != _NO_CALLBACK_ARGS:
            self.callbacks = Callbacks(
                before_agent=as_callbacks(before_agent_callback, "before_agent_callback"),
                after_agent=as_callbacks(after_agent_callback, "after_agent_callback"),
                before_model=as_callbacks(before_model_callback, "before_model_callback"),
                after_model=as_callbacks(after_model_callback, "after_model_callback"),
                before_tool=as_callbacks(before_tool_callback, "before_tool_callback"),
                after_tool=as_callbacks(after_tool_callback, "after_tool_callback"),
            )
        plain, self._tool_sources = split_tool_sources(self.tools)
        functions = normalize_tools(plain)
        if enable_agentic_state:
            functions.append(agentic_state_tool())
        self._functions: dict[str, Function] = {}
        for function in functions:
            if function.name in self._functions:
                raise ConfigurationError(f"two tools are named {function.name!r}")
            self._functions[function.name] = function

    def __repr__(self) -> str:
        return f"Agent(name={self.name!r}, model={self.model.name if self.model else None!r})"

    @property
    def output_spec(self) -> OutputSpec | None:
        """The answer format the model is asked for (`output_schema` as a JSON Schema)."""
        return self._answer_schema.spec if self._answer_schema is not None else None

    _kind = "agent"

    # ---- lifecycle -----------------------------------------------------------------------

    @property
    def tool_sources(self) -> list[ToolSource]:
        """The tools listed when a run starts (`MCPTools`), in `tools` order."""
        return list(self._tool_sources)

    async def aclose(self) -> None:
        """Close the connections of the agent's tool sources (MCP servers) opened on the
        running event loop. The agent stays usable: a later run connects again."""
        for source in self._tool_sources:
            await source.aclose()

    def close(self) -> None:
        """`aclose` for sync code (the loop sync runs use)."""
        run_sync(self.aclose())

    async def __aenter__(self) -> Agent:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()

    def __enter__(self) -> Agent:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # ---- runs ----------------------------------------------------------------------------

    _shared_runtime: AgentRuntime | None = None

    def _runtime(
        self,
        injected: Mapping[str, Any] | None = None,
        client_tools: Sequence[ToolDefinition] = (),
    ) -> AgentRuntime:
        """What the run loop needs of this agent. Runs without injected values or client
        tools share one (the loop never changes it; a run that needs another makes a copy),
        made again when an attribute it holds was set to another object since."""
        if injected or client_tools:
            return self._make_runtime(injected or {}, tuple(client_tools))
        rt, limits = self._shared_runtime, self.run_config
        if (
            rt is None
            or rt.model is not self.model
            or rt.name is not self.name
            or rt.callbacks is not self.callbacks
            or rt.tool_hooks is not self.tool_hooks
            or rt.output_key is not limits.output_key
            or rt.output_retries is not limits.output_retries
            or rt.max_steps is not limits.max_steps
        ):
            rt = self._shared_runtime = self._make_runtime({}, ())
        return rt

    def _make_runtime(
        self, injected: Mapping[str, Any], client_tools: tuple[ToolDefinition, ...]
    ) -> AgentRuntime:
        return AgentRuntime(
            client_tools=client_tools,
            name=self.name,
            model=self.model,
            functions=self._functions,
            system_prompt=self._system_prompt,
            tool_hooks=self.tool_hooks,
            callbacks=self.callbacks,
            output_key=self.run_config.output_key,
            output=self._answer_schema,
            output_retries=self.run_config.output_retries,
            max_steps=self.run_config.max_steps,
            agent=self,
            injected=injected,
            tool_sources=tuple(self._tool_sources),
        )

    def _system_prompt(self, ctx: RunContext) -> str | None:
        context, summaries = self.context_config, self.summary_config
        if not (
            self.description
            or self.instructions
            or context.markdown
            or context.add_session_state_to_context
            or context.enable_agentic_state
            or summaries.add_session_summary_to_context
        ):
            return None  # nothing to render, so no state to read
        summary = (
            SessionSummary.from_dict(ctx.session_state.get(SUMMARY_KEY))
            if summaries.add_session_summary_to_context
            else None
        )
        return build_system_prompt(
            agent=self,
            ctx=ctx,
            description=self.description,
            instructions=self.instructions,
            resolve_in_context=context.resolve_in_context,
            markdown=context.markdown,
            add_session_state_to_context=context.add_session_state_to_context,
            enable_agentic_state=context.enable_agentic_state,
            secret_keys=self._store.secret_keys_in(ctx.session_state),
            expose_secrets_to_model=context.expose_secrets_to_model,
            strict_templates=context.strict_templates,
            extra=[summary.as_context()] if summary is not None else (),
        )

    def _request(
        self,
        input: Any,
        session_id: str | None,
        user_id: str | None,
        session_state: Mapping[str, Any] | None,
        stream: bool,
        run_timeout: float | None = None,
    ) -> RunRequest:
        # The run's session and user go in the request, never onto the agent: concurrent
        # runs on other sessions cannot change what this one, or a later call, uses.
        limits = self.run_config
        return RunRequest(
            input=input if isinstance(input, str) else str(input),
            spec=self._spec(session_id, user_id),
            defaults=self._default_state(),
            session_state=session_state,
            overwrite=limits.overwrite_db_session_state,
            history_runs=self.context_config.history_runs,
            stream=stream,
            # A run's own `run_timeout=` wins over the agent's.
            run_timeout=_timeout(limits, run_timeout),
        )

    def _output(
        self, request: RunRequest, client_tools: Sequence[ToolDefinition] = ()
    ) -> Coroutine[Any, Any, RunOutput[OutputT]]:
        """The run, for a caller that wants only its output: no events are made."""
        run = drive_run(self._runtime(client_tools=client_tools), self._store, request)
        return self._summarized(run, request.spec)

    def _events(
        self, request: RunRequest, client_tools: Sequence[ToolDefinition] = ()
    ) -> AsyncIterator[RunEvent]:
        """The run's events, for a caller that iterates them (streams, printing)."""
        rt, store = self._runtime(client_tools=client_tools), self._store
        return events_of(
            lambda emit: self._summarized(drive_run(rt, store, request, emit), request.spec)
        )

    async def _summarized(
        self, run: Coroutine[Any, Any, RunOutput[OutputT]], spec: SessionSpec
    ) -> RunOutput[OutputT]:
        """The run, then (when it completed) the session's summary brought up to date in a
        commit of its own; a summary that fails is logged, never the run's failure."""
        output = await run
        summarizer = self.summary_config.summarizer()
        if summarizer is not None and output.status == "completed":
            await summarizer.aupdate(self._store, spec, self.model)
        return output

    def get_session_summary(self, session_id: str | None = None) -> SessionSummary | None:
        """The session's summary (default: the agent's own session), with the
        range of runs it covers; None before the first one is made."""
        return run_sync(self.aget_session_summary(session_id))

    async def aget_session_summary(self, session_id: str | None = None) -> SessionSummary | None:
        """`get_session_summary` for async callers."""
        return await aread_summary(self._store, self._spec(session_id, None).session_id)

    # ---- paused runs (humans in the loop) --------------------------------------------------

    def _continue(
        self,
        run_id: str,
        session_id: str | None,
        approvals: Mapping[str, Any] | None,
        stream: bool,
        client_tools: Sequence[ToolDefinition],
        run_timeout: float | None = None,
    ) -> Callable[[Emit | None], Coroutine[Any, Any, RunOutput[OutputT]]]:
        """The continuation, started with where its events go (None: nowhere)."""
        validate_id(run_id, "run_id")
        request = ContinueRequest(
            run_id=run_id,
            spec=self._spec(session_id, None),
            approvals=approvals,
            history_runs=self.context_config.history_runs,
            stream=stream,
            run_timeout=_timeout(self.run_config, run_timeout),
        )
        rt, store = self._runtime(client_tools=client_tools), self._store
        return lambda emit: self._summarized(drive_continue(rt, store, request, emit), request.spec)

    def continue_run(
        self,
        run_id: str,
        *,
        session_id: str | None = None,
        approvals: Mapping[str, Any] | None = None,
        client_tools: Sequence[ToolDefinition] = (),
        run_timeout: float | None = None,
    ) -> RunOutput[OutputT]:
        """Continue a paused run (`output.status == "paused"`), here or in any other
        process, with the session's state as it is now.

        `approvals` answers every pending tool call by its id: `True` or `Approval()`
        runs it, `Approval.reject("why")` (or `{"approved": False, "reason": "why"}`)
        tells the model it was rejected and why, `Approval(arguments={...})` runs it with
        edited arguments, `Approval(result="...")` answers a client-side tool. A paused
        run is continued once: a second continue raises `RunNotPausedError`.
        """
        start = self._continue(run_id, session_id, approvals, False, client_tools, run_timeout)
        return run_sync(start(None))

    async def acontinue_run(
        self,
        run_id: str,
        *,
        session_id: str | None = None,
        approvals: Mapping[str, Any] | None = None,
        stream: bool = False,
        client_tools: Sequence[ToolDefinition] = (),
        run_timeout: float | None = None,
    ) -> Any:
        """`continue_run` for async callers; with `stream=True`, the events."""
        start = self._continue(run_id, session_id, approvals, stream, client_tools, run_timeout)
        if stream:
            return events_of(start)
        return await start(None)

    def get_paused_runs(self, session_id: str | None = None) -> list[PausedRun]:
        """The session's paused runs with the tool calls each waits on."""
        spec = self._spec(session_id, None)
        return paused_runs(self.db, spec.session_id)

    @overload
    def arun(
        self,
        input: Any,
        *,
        session_id: str | None = ...,
        user_id: str | None = ...,
        session_state: Mapping[str, Any] | None = ...,
        stream: Literal[False] = ...,
        client_tools: Sequence[ToolDefinition] = ...,
        run_timeout: float | None = ...,
    ) -> Coroutine[Any, Any, RunOutput[OutputT]]: ...
    @overload
    def arun(
        self,
        input: Any,
        *,
        session_id: str | None = ...,
        user_id: str | None = ...,
        session_state: Mapping[str, Any] | None = ...,
        stream: Literal[True],
        client_tools: Sequence[ToolDefinition] = ...,
        run_timeout: float | None = ...,
    ) -> RunStream: ...

    def arun(
        self,
        input: Any,
        *,
        session_id: str | None = None,
        user_id: str | None = None,
        session_state: Mapping[str, Any] | None = None,
        stream: bool = False,
        client_tools: Sequence[ToolDefinition] = (),
        run_timeout: float | None = None,
    ) -> Coroutine[Any, Any, RunOutput[OutputT]] | RunStream:
        """Run the agent once. `client_tools` are tools the caller's client runs (an AG-UI
        frontend's): when the model calls one, the run pauses with the call pending until
        `acontinue_run(..., approvals={call_id: Approval(result=...)})`. `run_timeout`
        (seconds) overrides the agent's for this run. `await agent.arun(...)` gives the
        output; with `stream=True`, `async for event in agent.arun(...)` the events (awaiting
        it first works too)."""
        request = self._request(input, session_id, user_id, session_state, stream, run_timeout)
        if stream:
            return RunStream(self._events(request, client_tools))
        return self._output(request, client_tools)

    @overload
    def run(
        self,
        input: Any,
        *,
        session_id: str | None = ...,
        user_id: str | None = ...,
        session_state: Mapping[str, Any] | None = ...,
        stream: Literal[False] = ...,
        run_timeout: float | None = ...,
    ) -> RunOutput[OutputT]: ...
    @overload
    def run(
        self,
        input: Any,
        *,
        session_id: str | None = ...,
        user_id: str | None = ...,
        session_state: Mapping[str, Any] | None = ...,
        stream: Literal[True],
        run_timeout: float | None = ...,
    ) -> Iterator[RunEvent]: ...

    def run(
        self,
        input: Any,
        *,
        session_id: str | None = None,
        user_id: str | None = None,
        session_state: Mapping[str, Any] | None = None,
        stream: bool = False,
        run_timeout: float | None = None,
    ) -> RunOutput[OutputT] | Iterator[RunEvent]:
        """Run the agent once on a session; works inside a running event loop too.
        `run_timeout` (seconds) overrides the agent's for this run."""
        request = self._request(input, session_id, user_id, session_state, stream, run_timeout)
        if stream:
            return iterate_sync(self._events(request))
        return run_sync(self._output(request))

    def run_durably(
        self,
        input: Any,
        *,
        run_id: str,
        session_id: str,
        user_id: str | None = None,
        points: CommitPoints,
    ) -> RunOutput[OutputT]:
        """Run `run_id` for a durable engine (`statewise.fleet`), whose steps are this run's
        commit points (`statewise.run.checkpoints`): executed again after a crash, the run
        goes on after its last completed commit point without asking the model or calling
        tools for the completed part, and no commit applies twice. Such a run does not
        pause for approvals (a tool that needs one answers the model with an error)."""
        validate_id(run_id, "run_id")
        request = self._request(input, session_id, user_id, None, False)
        request.run_id = run_id
        request.points = points
        return run_sync(self._output(request))

    def print_response(
        self,
        input: Any,
        *,
        session_id: str | None = None,
        user_id: str | None = None,
        session_state: Mapping[str, Any] | None = None,
        stream: bool = False,
        show_tool_calls: bool = True,
    ) -> RunOutput[OutputT]:
        """Run and print the exchange with rich (markdown when `markdown=True`)."""
        request = self._request(input, session_id, user_id, session_state, stream)
        return print_run(
            iterate_sync(self._events(request)),
            input=request.input,
            markdown=self.context_config.markdown,
            stream=stream,
            show_tool_calls=show_tool_calls,
        )

    async def aprint_response(
        self,
        input: Any,
        *,
        session_id: str | None = None,
        user_id: str | None = None,
        session_state: Mapping[str, Any] | None = None,
        stream: bool = False,
        show_tool_calls: bool = True,
    ) -> RunOutput[OutputT]:
        from statewise.agent.printing import aprint_run

        request = self._request(input, session_id, user_id, session_state, stream)
        return await aprint_run(
            self._events(request),
            input=request.input,
            markdown=self.context_config.markdown,
            stream=stream,
            show_tool_calls=show_tool_calls,
        )


def _timeout(limits: RunConfig, per_run: float | None) -> float | None:
    """A run's deadline in seconds: its own `run_timeout=`, else the agent's."""
    return limits.run_timeout if per_run is None else check_run_timeout(per_run)
