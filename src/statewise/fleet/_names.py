"""Names shared by the processes of a fleet (they must agree on them)."""

from __future__ import annotations

from typing import Any, Literal

DEFAULT_QUEUE = "statewise"
DEFAULT_APP_NAME = "statewise"
DEFAULT_APP_VERSION = "statewise-fleet-2"  # its steps changed: agents step per commit point
DEFAULT_SCHEMA = "dbos"
RUN_WORKFLOW = "statewise.fleet.run"  # the DBOS workflow every enqueued run executes

RunStatus = Literal["queued", "running", "completed", "failed", "cancelled"]

_STATUSES: dict[str, RunStatus] = {
    "DELAYED": "queued",
    "ENQUEUED": "queued",
    "PENDING": "running",
    "SUCCESS": "completed",
    "ERROR": "failed",
    "MAX_RECOVERY_ATTEMPTS_EXCEEDED": "failed",
    "CANCELLED": "cancelled",
}
FINISHED: tuple[RunStatus, ...] = ("completed", "failed", "cancelled")
RUN_STATUSES: tuple[RunStatus, ...] = ("queued", "running", *FINISHED)


def run_status(dbos_status: str) -> RunStatus:
    return _STATUSES.get(dbos_status, "running")


def dbos_statuses(status: RunStatus) -> list[str]:
    """The DBOS workflow statuses a run status stands for (to filter in the database)."""
    return [name for name, ours in _STATUSES.items() if ours == status]


def run_request(
    *, target: str, kind: str, input: Any, session_id: str, user_id: str | None
) -> dict[str, Any]:
    """The JSON arguments of one enqueued run."""
    return {
        "target": target,
        "kind": kind,
        "input": input,
        "session_id": session_id,
        "user_id": user_id,
    }
