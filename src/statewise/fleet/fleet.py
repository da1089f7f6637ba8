"""The client side of a fleet: queues, enqueueing runs, and looking runs up by id.

A `Fleet` talks only to DBOS's system database in PostgreSQL (a `DBOSClient`); it never
runs anything itself, so any process can enqueue and watch runs while `statewise worker`
processes execute them.
"""

from __future__ import annotations

import json
import time
import uuid
from dataclasses import asdict, dataclass
from datetime import UTC, datetime
from typing import Any

from statewise.agent.session_owner import SessionOwner, default_enqueuer, set_default_enqueuer
from statewise.db.base import validate_id
from statewise.exceptions import ConfigurationError, RunError, RunNotFoundError
from statewise.fleet._dbos import check_url, reaching, require_dbos
from statewise.fleet._names import (
    DEFAULT_APP_NAME,
    DEFAULT_APP_VERSION,
    DEFAULT_QUEUE,
    DEFAULT_SCHEMA,
    FINISHED,
    RUN_STATUSES,
    RUN_WORKFLOW,
    RunStatus,
    dbos_statuses,
    run_request,
    run_status,
)
from statewise.workflow import Workflow

POLL_SECONDS = 0.05


@dataclass(frozen=True, kw_only=True)
class RunInfo:
    """One enqueued run as the fleet sees it."""

    run_id: str
    status: RunStatus
    target: str | None
    session_id: str | None
    user_id: str | None
    queue: str | None
    executor: str | None
    error: str | None
    output: Any
    created_at: datetime | None  # enqueued
    started_at: datetime | None  # last taken off the queue by a worker
    finished_at: datetime | None
    updated_at: datetime | None

    def to_dict(self) -> dict[str, Any]:
        data = asdict(self)
        for key in ("created_at", "started_at", "finished_at", "updated_at"):
            value = data[key]
            data[key] = value.isoformat() if value is not None else None
        return data


class RunHandle:
    """A run on a fleet's queue: `status()`, and `result(timeout=...)` to wait for it."""

    def __init__(self, fleet: Fleet, run_id: str) -> None:
        self.fleet = fleet
        self.run_id = run_id

    def __repr__(self) -> str:
        return f"RunHandle(run_id={self.run_id!r})"

    def status(self) -> RunInfo:
        return self.fleet.info(self.run_id)

    def result(self, timeout: float | None = None) -> Any:
        """Wait for the run to finish; its content, or RunError if it failed.
        TimeoutError if it is still queued or running after `timeout` seconds."""
        deadline = None if timeout is None else time.monotonic() + timeout
        while True:
            info = self.status()
            if info.status == "completed":
                return info.output
            if info.status in FINISHED:
                raise RunError(f"run {self.run_id!r} {info.status}: {info.error}")
            if deadline is not None and time.monotonic() >= deadline:
                raise TimeoutError(f"run {self.run_id!r} is still {info.status} after {timeout} s")
            time.sleep(POLL_SECONDS)


class Fleet:
    """Durable queues of agent, team and workflow runs in PostgreSQL (DBOS Transact).

    `url` is the PostgreSQL database DBOS keeps its queues and run records in (the same
    server as a `PostgresDb` or another). Every process of one fleet (enqueuers and
    workers) must use the same `url`, `app_name`, `app_version` and `schema`.
    """

    def __init__(
        self,
        url: str,
        *,
        app_name: str = DEFAULT_APP_NAME,
        app_version: str = DEFAULT_APP_VERSION,
        schema: str = DEFAULT_SCHEMA,
    ) -> None:
        self.url = check_url(url)
        self.app_name = app_name
        self.app_version = app_version
        self.schema = schema
        self._queues: set[str] = set()  # known to exist: not looked up again per enqueue
        dbos = require_dbos()
        with reaching(self.url):
            dbos.DBOS.migrate(self.url, schema=schema)  # creates DBOS's tables; cheap after
            self._client = dbos.DBOSClient(
                system_database_url=self.url,
                dbos_system_schema=schema,
                application_name=app_name,
                serializer=dbos.DBOSPortableJSONSerializer(),
            )

    def __repr__(self) -> str:
        return f"Fleet(app_name={self.app_name!r}, schema={self.schema!r})"

    def close(self) -> None:
        if default_enqueuer() is self:
            set_default_enqueuer(None)
        self._client.destroy()

    def __enter__(self) -> Fleet:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # ---- queues ----------------------------------------------------------------------------

    def queue(
        self,
        name: str = DEFAULT_QUEUE,
        *,
        concurrency: int | None = None,
        worker_concurrency: int | None = None,
        rate_limit: tuple[int, float] | None = None,
        polling_interval: float = 0.2,
    ) -> None:
        """Create or update a queue. `concurrency`: runs in flight across all workers;
        `worker_concurrency`: per worker; `rate_limit=(n, seconds)`: at most n runs start
        in any window of that many seconds (all enforced by DBOS)."""
        for label, value in (
            ("concurrency", concurrency),
            ("worker_concurrency", worker_concurrency),
        ):
            if value is not None and (not isinstance(value, int) or value < 1):
                raise ConfigurationError(f"{label} must be a positive integer, got {value!r}")
        limiter = None
        if rate_limit is not None:
            limit, period = rate_limit
            if limit < 1 or period <= 0:
                raise ConfigurationError(
                    f"rate_limit must be (runs >= 1, seconds > 0), got {rate_limit!r}"
                )
            limiter = {"limit": int(limit), "period": float(period)}
        self._client.register_queue(
            _queue_name(name),
            global_concurrency=concurrency,
            worker_concurrency=worker_concurrency,
            limiter=limiter,
            polling_interval_sec=polling_interval,
            on_conflict="always_update",
        )
        self._queues.add(_queue_name(name))

    def _ensure_queue(self, name: str) -> None:
        if name in self._queues:
            return
        if self._client.retrieve_queue(name) is None:
            self.queue(name)
        self._queues.add(name)

    # ---- runs ------------------------------------------------------------------------------

    def enqueue(
        self,
        target: Any,
        input: Any,
        *,
        session_id: str | None = None,
        user_id: str | None = None,
        queue: str | None = None,
    ) -> RunHandle:
        """Put one run of `target` (an Agent, Team or Workflow, which workers know by its
        `name`) on `queue`; returns its handle at once."""
        if not isinstance(target, SessionOwner):
            raise ConfigurationError(
                f"only an Agent, Team or Workflow can be enqueued, not {type(target).__name__}"
            )
        if not target.name:
            raise ConfigurationError(
                "an enqueued agent or workflow needs a name= (workers find it by name)"
            )
        if input is None:
            raise ConfigurationError("enqueue needs an input")
        try:
            json.dumps(input)
        except (TypeError, ValueError) as exc:
            raise ConfigurationError(f"an enqueued run's input must be JSON: {exc}") from None
        session = validate_id(session_id) if session_id else target.session_id or str(uuid.uuid4())
        user = validate_id(user_id, "user_id") if user_id is not None else target.user_id
        queue_name = _queue_name(queue or DEFAULT_QUEUE)
        self._ensure_queue(queue_name)
        run_id = str(uuid.uuid4())
        dbos = require_dbos()
        options = dbos.EnqueueOptions(
            workflow_name=RUN_WORKFLOW,
            queue_name=queue_name,
            workflow_id=run_id,
            app_version=self.app_version,
            serialization_type=dbos.WorkflowSerializationFormat.PORTABLE,
        )
        if user is not None:
            options["authenticated_user"] = user  # so runs can be listed by user
        kind = "workflow" if isinstance(target, Workflow) else "agent"
        request = run_request(
            target=target.name, kind=kind, input=input, session_id=session, user_id=user
        )
        self._client.enqueue(options, request)
        return RunHandle(self, run_id)

    def run(self, run_id: str) -> RunHandle:
        """The handle of a run enqueued by any process; RunError if there is none."""
        self.info(run_id)
        return RunHandle(self, run_id)

    def info(self, run_id: str) -> RunInfo:
        found = self._client.list_workflows(workflow_ids=[run_id], name=RUN_WORKFLOW)
        if not found:
            raise RunNotFoundError(f"no fleet run {run_id!r}")
        return _info(found[0])

    def runs(
        self,
        *,
        status: RunStatus | None = None,
        user_id: str | None = None,
        limit: int = 100,
        offset: int = 0,
    ) -> list[RunInfo]:
        """Runs on this fleet's queues, newest first; only `status`'s, or `user_id`'s."""
        if status is not None and status not in RUN_STATUSES:
            raise ConfigurationError(
                f"unknown run status {status!r}; one of: {', '.join(RUN_STATUSES)}"
            )
        found = self._client.list_workflows(
            name=RUN_WORKFLOW,
            status=dbos_statuses(status) if status is not None else None,
            user=user_id,
            limit=limit,
            offset=offset or None,
            sort_desc=True,
        )
        return [_info(s) for s in found]


def configure(
    url: str,
    *,
    app_name: str = DEFAULT_APP_NAME,
    app_version: str = DEFAULT_APP_VERSION,
    schema: str = DEFAULT_SCHEMA,
) -> Fleet:
    """Connect to a fleet in PostgreSQL and make it where `agent.enqueue(...)` and
    `workflow.enqueue(...)` put runs."""
    fleet = Fleet(url, app_name=app_name, app_version=app_version, schema=schema)
    set_default_enqueuer(fleet)
    return fleet


def _queue_name(name: str) -> str:
    if not isinstance(name, str) or not name or name.startswith("_dbos_"):
        raise ConfigurationError(f"not a queue name: {name!r}")
    return name


def _info(status: Any) -> RunInfo:
    request: dict[str, Any] = {}
    inputs = status.input
    if inputs is not None:
        args = list(inputs.get("args") or ())
        if args and isinstance(args[0], dict):
            request = args[0]
    error = status.error
    return RunInfo(
        run_id=status.workflow_id,
        status=run_status(status.status),
        target=request.get("target"),
        session_id=request.get("session_id"),
        user_id=request.get("user_id"),
        queue=status.queue_name,
        executor=status.executor_id,
        error=None if error is None else _error_text(error),
        output=status.output,
        created_at=_time(status.created_at),
        started_at=_time(status.dequeued_at),
        finished_at=_time(status.completed_at),
        updated_at=_time(status.updated_at),
    )


def _error_text(error: Any) -> str:
    name = getattr(error, "name", None) or type(error).__name__
    message = getattr(error, "message", None) or str(error)
    return f"{name}: {message}"


def _time(ms: int | None) -> datetime | None:
    return None if ms is None else datetime.fromtimestamp(ms / 1000, UTC)
