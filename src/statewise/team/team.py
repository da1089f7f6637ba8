"""A Team: a leader agent whose tools hand work to member agents (or teams).

The team *is* an Agent (same run/arun/print_response, sessions, state API, history, time
travel) whose model is the leader. Members run inside the leader's run, nested, on the
team's checked-out session state: what a member's tools write is visible at once to the
leader and to every member that runs after it, and is committed with the run.

- `mode="coordinate"`: the leader calls `delegate_task_to_member(member_name, task)` as
  often as it likes, reads the members' answers, and gives the final answer itself.
- `mode="route"`: the leader calls `transfer_to_member(member_name, task)` once; the
  member's answer is the team's answer, without another leader model call.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from typing import Any, Literal

from typing_extensions import Unpack

from statewise.agent.agent import Agent
from statewise.agent.options import AgentOptions
from statewise.exceptions import ConfigurationError
from statewise.models.base import Model
from statewise.run.context import RunContext
from statewise.run.driver import run_nested
from statewise.run.emit import Emit
from statewise.run.events import RunEvent
from statewise.run.loop import StepsResult
from statewise.run.tool_calls import EVENT_SINK
from statewise.run.writer import WRITER_KEY, RunWriter
from statewise.tools.function import Function

TeamMode = Literal["coordinate", "route"]


class Team(Agent):
    """A leader model plus members (agents or teams) sharing one session state.

    Every Agent argument applies to the leader (`instructions`, `tools`, `session_state`,
    `db`, `output_key`, callbacks, ...); a type checker checks them as `Agent`'s own
    (`AgentOptions`).
    """

    _kind = "team"

    def __init__(
        self,
        members: Sequence[Agent] | None = None,
        *,
        model: Model | str | None = None,
        name: str | None = None,
        mode: TeamMode = "coordinate",
        tools: Sequence[Any] | None = None,
        **kwargs: Unpack[AgentOptions],
    ) -> None:
        if mode not in ("coordinate", "route"):
            raise ConfigurationError(f"Team mode must be 'coordinate' or 'route', got {mode!r}")
        if members is None:
            members = []  # the leader alone, as in Agno
        if isinstance(members, Agent) or not isinstance(members, Sequence):
            raise ConfigurationError("Team needs members=[...]: a list of agents or teams")
        self.members: list[Agent] = []
        self._members_by_name: dict[str, Agent] = {}
        for index, member in enumerate(members):
            if not isinstance(member, Agent):
                raise ConfigurationError(
                    f"members[{index}] is not an Agent or Team: got {type(member).__name__}"
                )
            member_name = member.name or f"member_{index + 1}"
            if member_name.lower() in self._members_by_name:
                raise ConfigurationError(f"two team members are named {member_name!r}")
            self._members_by_name[member_name.lower()] = member
            self.members.append(member)
        self.mode: TeamMode = mode
        self._route_key = f"statewise.team.routed:{id(self)}"
        delegates = []
        if self.members:
            delegates = [self._transfer_tool() if mode == "route" else self._delegate_tool()]
        super().__init__(model, name=name, tools=[*(tools or []), *delegates], **kwargs)
        if mode == "route" and self.members:
            self.callbacks = dataclasses.replace(
                self.callbacks, before_model=(self._routed_answer, *self.callbacks.before_model)
            )

    def __repr__(self) -> str:
        names = [m.name for m in self.members]
        return f"Team(name={self.name!r}, mode={self.mode!r}, members={names!r})"

    def member_names(self) -> list[str]:
        return [m.name or f"member_{i + 1}" for i, m in enumerate(self.members)]

    # ---- the leader's prompt and tools ---------------------------------------------------

    def _system_prompt(self, ctx: RunContext) -> str | None:
        base = super()._system_prompt(ctx)
        if not self.members:
            return base
        lines = []
        for member_name, member in zip(self.member_names(), self.members, strict=True):
            about = member.description or ""
            if not about and isinstance(member.instructions, str):
                about = member.instructions.splitlines()[0] if member.instructions else ""
            lines.append(f"- {member_name}" + (f": {about}" if about else ""))
        verb = (
            "Transfer the request to the one member best suited to answer it with "
            "`transfer_to_member`; their answer is given to the user as it is."
            if self.mode == "route"
            else "Delegate tasks to members with `delegate_task_to_member`, then answer "
            "the user from their results."
        )
        team_part = "You lead a team. Members:\n" + "\n".join(lines) + f"\n{verb}"
        return f"{base}\n\n{team_part}" if base else team_part

    def _member(self, member_name: str) -> Agent:
        member = self._members_by_name.get(member_name.strip().lower())
        if member is None:
            known = ", ".join(self.member_names())
            raise ValueError(f"no team member named {member_name!r}; members: {known}")
        return member

    async def _run_member(self, run_context: RunContext, member_name: str, task: str) -> str:
        """Run a member nested in the current run, on the team's state."""
        member = self._member(member_name)
        txn = run_context._txn
        assert txn is not None
        writer = run_context.metadata.get(WRITER_KEY)
        if not isinstance(writer, RunWriter) or writer.txn is not txn:
            writer = RunWriter(txn=txn, run_id=run_context.run_id)
        savepoint = txn.savepoint()
        result = StepsResult()
        sink = run_context.metadata.get(EVENT_SINK)
        relay: Emit | None = None
        if sink is not None:  # a streamed run: the member's events go out live

            async def relay(event: RunEvent) -> None:
                if getattr(event, "member_of", "") is None:
                    event.member_of = self.name or "team"  # type: ignore[union-attr]
                sink.put_nowait(event)

        try:
            await run_nested(
                member._runtime(),
                writer,
                run_context,
                task,
                result,
                stream=sink is not None,
                emit=relay,
            )
        except Exception as exc:
            # The member may have committed some of its steps: keep those, undo the rest.
            txn.rollback(savepoint)
            return f"Error: member {member_name!r} failed: {type(exc).__name__}: {exc}"
        return result.content or ""

    def _delegate_tool(self) -> Function:
        async def delegate_task_to_member(
            member_name: str, task: str, run_context: RunContext
        ) -> str:
            """Give a task to one team member and get their answer back.

            Args:
                member_name: The name of the member to delegate to.
                task: What the member should do, stated completely.
            """
            return await self._run_member(run_context, member_name, task)

        return Function.from_callable(delegate_task_to_member, lazy=True)

    def _transfer_tool(self) -> Function:
        async def transfer_to_member(member_name: str, task: str, run_context: RunContext) -> str:
            """Hand the request to one team member; their answer is the team's answer.

            Args:
                member_name: The name of the member to transfer to.
                task: The request, as the member should receive it.
            """
            answer = await self._run_member(run_context, member_name, task)
            if not answer.startswith("Error: "):
                run_context.metadata[self._route_key] = answer
            return answer

        return Function.from_callable(transfer_to_member, lazy=True)

    def _routed_answer(self, callback_context: RunContext) -> str | None:
        """Route mode: once a member answered, that answer ends the leader's run."""
        answer = callback_context.metadata.pop(self._route_key, None)
        return answer if isinstance(answer, str) else None
