"""`GET /v1/fleet/runs[/{run_id}]`: the runs on a fleet's durable queues (queued, running,
completed, failed) with the worker that ran them, when the server is given a fleet
(`create_app(..., fleet=Fleet(url))`, `statewise serve --fleet-db URL`).

A user's API key sees the runs of its own user only, like sessions: other users' runs
look absent. Reading runs goes to DBOS's tables in PostgreSQL, never to a worker.
"""

from __future__ import annotations

from datetime import datetime
from typing import Annotated, Any

from fastapi import APIRouter, Depends, Path, Query, Request
from pydantic import BaseModel, Field

from statewise.agent.service import validate_id
from statewise.exceptions import RunNotFoundError
from statewise.fleet import Fleet, RunStatus
from statewise.server._auth import Principal
from statewise.server._deps import get_principal
from statewise.server._errors import Problem
from statewise.server._schema import AUTH, DB, ok, problems

MAX_PAGE = 200


class FleetRun(BaseModel):
    """A run on a fleet's queue, as DBOS records it."""

    run_id: str
    status: RunStatus
    target: str | None = Field(description="The agent, team or workflow it runs (its name)")
    session_id: str | None
    user_id: str | None
    queue: str | None
    executor: str | None = Field(
        description="The worker (executor id) that runs or ran it; null while queued"
    )
    error: str | None = Field(description="Why a failed run failed")
    output: Any = Field(description="A completed run's answer")
    created_at: datetime | None = Field(description="When it was enqueued")
    started_at: datetime | None = Field(description="When a worker last took it")
    finished_at: datetime | None
    updated_at: datetime | None


class FleetRunPage(BaseModel):
    runs: list[FleetRun] = Field(description="Newest first")
    limit: int
    offset: int
    next_offset: int | None = Field(description="Pass as offset for the next page")


async def get_fleet(request: Request) -> Fleet:  # no I/O: no thread-pool hop (see _deps)
    fleet: Fleet = request.app.state.statewise_fleet
    return fleet


router = APIRouter(tags=["fleet"])
FleetDep = Annotated[Fleet, Depends(get_fleet)]
Who = Annotated[Principal, Depends(get_principal)]


@router.get(
    "/v1/fleet/runs",
    summary="Runs on the fleet's queues",
    description="Queued, running, completed, failed and cancelled runs, newest first, with "
    "the worker that runs them. A user's key sees its own user's runs only.",
    response_model=None,
    responses={**ok(FleetRunPage, "A page of runs"), **problems(*AUTH, 422, *DB)},
)
def list_fleet_runs(
    fleet: FleetDep,
    principal: Who,
    status: Annotated[RunStatus | None, Query(description="Only runs in this status")] = None,
    limit: Annotated[int, Query(ge=1, le=MAX_PAGE)] = 50,
    offset: Annotated[int, Query(ge=0, le=1_000_000)] = 0,
) -> dict[str, Any]:
    user_id = None if principal.admin else principal.user_id
    infos = fleet.runs(status=status, user_id=user_id, limit=limit + 1, offset=offset)
    return {
        "runs": [i.to_dict() for i in infos[:limit]],
        "limit": limit,
        "offset": offset,
        "next_offset": offset + limit if len(infos) > limit else None,
    }


@router.get(
    "/v1/fleet/runs/{run_id}",
    summary="One run on the fleet's queues",
    response_model=None,
    responses={**ok(FleetRun, "The run"), **problems(400, *AUTH, 404, 422, *DB)},
)
def get_fleet_run(
    fleet: FleetDep,
    principal: Who,
    run_id: Annotated[str, Path(min_length=1, max_length=256)],
) -> dict[str, Any]:
    validate_id(run_id, "run_id")
    try:
        info = fleet.info(run_id)
    except RunNotFoundError:
        info = None
    if info is None or not (principal.admin or info.user_id == principal.user_id):
        raise Problem(404, f"no fleet run {run_id!r}", title="Run not found")
    return info.to_dict()
