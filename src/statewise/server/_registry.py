"""The agents, teams and workflows a server serves, and which one owns a session."""

from __future__ import annotations

import asyncio
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from statewise import Agent, Sessions, Team, Workflow
from statewise.agent.service import BaseDb, SessionRecord, StateRead
from statewise.exceptions import ConfigurationError, SessionNotFoundError, StatewiseError
from statewise.server._errors import Problem

KINDS = ("agents", "teams", "workflows")
KIND_NAMES = {"agents": "agent", "teams": "team", "workflows": "workflow"}
_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._~-]{0,127}$")


def kind_of(obj: Any) -> str:
    """'agents', 'teams' or 'workflows': what the object is (a Team is an Agent too)."""
    if isinstance(obj, Workflow):
        return "workflows"
    if isinstance(obj, Team):
        return "teams"
    if isinstance(obj, Agent):
        return "agents"
    raise ConfigurationError(f"cannot serve {obj!r}: expected an Agent, Team or Workflow")


@dataclass(eq=False)
class Served:
    """One served agent, team or workflow: what it is, and its sessions (the public
    session service over its database, which every session route goes through)."""

    kind: str
    name: str
    obj: Any
    default_user: str | None = None
    default_run_timeout: float | None = None  # the server's, for objects that set none
    sessions: Sessions = field(init=False)

    def __post_init__(self) -> None:
        self.sessions = Sessions.of(self.obj)

    @property
    def kind_name(self) -> str:
        """'agent', 'team' or 'workflow'."""
        return KIND_NAMES[self.kind]

    @property
    def pausable(self) -> bool:
        """Whether its runs pause for approvals and client-side tools (agents and teams;
        a workflow's steps run their own agents)."""
        return self.kind != "workflows"

    @property
    def run_timeout(self) -> float | None:
        """The deadline of a run started here: the object's `run_timeout`, else the
        server's default."""
        own: float | None = getattr(self.obj, "run_timeout", None)
        return own if own is not None else self.default_run_timeout

    @property
    def db(self) -> BaseDb:
        return self.sessions.db

    @property
    def app_name(self) -> str | None:
        return getattr(self.obj, "app_name", None)

    def describe(self) -> dict[str, Any]:
        return {
            "kind": self.kind,
            "name": self.name,
            "app_name": self.app_name,
            "description": getattr(self.obj, "description", None),
            "runs_url": f"/v1/{self.kind}/{self.name}/runs",
            "sends_history": bool(getattr(self.obj, "add_history_to_context", False)),
        }


@dataclass
class Registry:
    served: dict[tuple[str, str], Served] = field(default_factory=dict)

    @classmethod
    def build(
        cls, apps: Sequence[Any] | Mapping[str, Any], *, run_timeout: float | None = None
    ) -> Registry:
        items: list[tuple[str | None, Any]]
        if isinstance(apps, Mapping):
            items = list(apps.items())
        elif isinstance(apps, Agent | Workflow):
            items = [(None, apps)]
        else:
            items = [(None, obj) for obj in apps]
        if not items:
            raise ConfigurationError("create_app needs at least one agent, team or workflow")
        registry = cls()
        for name, obj in items:
            kind = kind_of(obj)
            name = name or getattr(obj, "name", None)
            if not name:
                raise ConfigurationError(
                    f"{obj!r} has no name: give it name=... or pass a mapping of name -> object"
                )
            if not _NAME.match(name):
                slug = re.sub(r"[^A-Za-z0-9._~-]+", "-", name).strip("-")
                if not slug:
                    raise ConfigurationError(f"cannot make a URL name out of {name!r}")
                name = slug
            if (kind, name) in registry.served:
                raise ConfigurationError(f"two {kind} are named {name!r}")
            registry.served[(kind, name)] = Served(
                kind=kind,
                name=name,
                obj=obj,
                default_user=getattr(obj, "user_id", None),
                default_run_timeout=run_timeout,
            )
        return registry

    def get(self, kind: str, name: str) -> Served | None:
        return self.served.get((kind, name))

    def all(self) -> list[Served]:
        return list(self.served.values())

    def databases(self) -> list[tuple[BaseDb, Served]]:
        """Each distinct database once, with the first object served on it."""
        seen: dict[int, tuple[BaseDb, Served]] = {}
        for served in self.served.values():
            seen.setdefault(id(served.db), (served.db, served))
        return list(seen.values())

    def find_session(self, session_id: str) -> tuple[SessionRecord, Served] | None:
        """The session's record and the served object that owns it."""
        for db, first in self.databases():
            record = first.sessions.get(session_id)
            if record is not None:
                return record, self._owner(db, record, first)
        return None

    def read_state(self, session_id: str) -> tuple[StateRead, Served] | None:
        """`find_session` and the session's state (redacted by `Sessions`), read by its
        owner, in one probe (two when the first object served on the database is not the
        owner)."""
        for db, first in self.databases():
            try:
                read = first.sessions.read_state(session_id)
            except SessionNotFoundError:
                continue
            served = self._owner(db, read.record, first)
            if served is not first:
                read = served.sessions.read_state(session_id)
            return read, served
        return None

    async def aread_state(self, session_id: str) -> tuple[StateRead, Served] | None:
        """`read_state` for the event loop (see `Sessions.aread_state`)."""
        for db, first in self.databases():
            try:
                read = await first.sessions.aread_state(session_id)
            except SessionNotFoundError:
                continue
            served = self._owner(db, read.record, first)
            if served is not first:
                read = await served.sessions.aread_state(session_id)
            return read, served
        return None

    def _owner(self, db: BaseDb, record: SessionRecord, first: Served) -> Served:
        """The served object of the session's app and kind, else one of its app, else
        any object on the same database."""
        for served in self.served.values():
            if (
                served.db is db
                and served.app_name == record.app_name
                and served.kind == f"{record.kind}s"
            ):
                return served
        for served in self.served.values():
            if served.db is db and served.app_name == record.app_name:
                return served
        return first


READY_TIMEOUT = 5.0


async def check_databases(registry: Registry) -> None:
    """Every served database answers a read within `READY_TIMEOUT` seconds, or a 503
    problem naming the first that does not (its URL's password masked)."""
    for db, served in registry.databases():
        try:
            await asyncio.wait_for(db.run_io(db.get_session, "readyz-probe"), READY_TIMEOUT)
        except (StatewiseError, OSError, TimeoutError) as exc:
            reason = str(exc) or f"no answer within {READY_TIMEOUT:g} s"
            raise Problem(
                503,
                f"the database of {served.kind}/{served.name} is not ready: {reason}",
                title="Not ready",
                headers={"Retry-After": "5"},
            ) from None
