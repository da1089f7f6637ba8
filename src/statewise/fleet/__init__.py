"""Fleets: agent, team and workflow runs on DBOS durable queues in PostgreSQL, executed by
many worker processes on one machine or many (`pip install 'statewise[dbos]'`).

    fleet = statewise.fleet.configure("postgresql://localhost/app")
    handle = workflow.enqueue("input", session_id="s1")
    handle.result(timeout=60)

and, in as many processes as you like: `statewise worker app.py --db postgresql://...
--executor-id worker-1`.
"""

from statewise.fleet._names import DEFAULT_QUEUE, RunStatus
from statewise.fleet.fleet import Fleet, RunHandle, RunInfo, configure
from statewise.fleet.worker import Worker

__all__ = [
    "DEFAULT_QUEUE",
    "Fleet",
    "RunHandle",
    "RunInfo",
    "RunStatus",
    "Worker",
    "configure",
]
