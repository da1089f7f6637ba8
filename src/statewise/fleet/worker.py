"""A worker process of a fleet: runs agents, teams and workflows from DBOS queues.

One worker per process (DBOS is a per-process singleton). Give every worker its own
`executor_id`: DBOS records which executor runs what, so a worker restarted with the same
id puts its unfinished runs back on their queues (where it, or any worker of the queue,
takes them and goes on after their completed steps), and another worker can take over a
dead one's runs (`recover`).
"""

from __future__ import annotations

import logging
import signal
import threading
from collections.abc import Sequence
from types import FrameType
from typing import Any

from statewise.agent.session_owner import SessionOwner
from statewise.exceptions import ConfigurationError
from statewise.fleet._dbos import check_url, reaching, require_dbos
from statewise.fleet._names import (
    DEFAULT_APP_NAME,
    DEFAULT_APP_VERSION,
    DEFAULT_QUEUE,
    DEFAULT_SCHEMA,
)

log = logging.getLogger("statewise.fleet")

_active: Worker | None = None


class Worker:
    """Executes runs from `queues` with the given targets (Agents, Teams, Workflows,
    found by their `name`).

    `concurrency` sets the queues' per-worker limit: each worker of the queue has at most
    that many of its runs in flight. DBOS 3.4 keeps that limit in the queue's row in
    PostgreSQL and every worker re-reads it at each poll, so it is one value per queue,
    not per process: the last worker started with `concurrency` sets it for all.
    """

    def __init__(
        self,
        url: str,
        targets: Sequence[Any],
        *,
        executor_id: str,
        queues: Sequence[str] = (DEFAULT_QUEUE,),
        concurrency: int | None = None,
        app_name: str = DEFAULT_APP_NAME,
        app_version: str = DEFAULT_APP_VERSION,
        schema: str = DEFAULT_SCHEMA,
    ) -> None:
        self.url = check_url(url)
        if not executor_id or not isinstance(executor_id, str):
            raise ConfigurationError("a worker needs an executor_id (a name unique in the fleet)")
        if concurrency is not None and concurrency < 1:
            raise ConfigurationError(f"concurrency must be a positive integer, got {concurrency}")
        self.targets: dict[str, SessionOwner] = {}
        for target in targets:
            if not isinstance(target, SessionOwner):
                raise ConfigurationError(
                    f"a worker runs Agents, Teams and Workflows, not {type(target).__name__}"
                )
            if not target.name:
                raise ConfigurationError("every agent or workflow a worker serves needs a name=")
            self.targets[target.name] = target
        if not self.targets:
            raise ConfigurationError("a worker needs at least one agent, team or workflow")
        self.executor_id = executor_id
        self.queues = list(queues)
        self.concurrency = concurrency
        self.app_name = app_name
        self.app_version = app_version
        self.schema = schema
        self._stop = threading.Event()
        self._launched = False
        self._client: Any = None

    def __repr__(self) -> str:
        return f"Worker(executor_id={self.executor_id!r}, targets={sorted(self.targets)!r})"

    def start(self) -> None:
        """Launch DBOS in this process: it puts this executor's unfinished runs back on
        their queues, then dequeues runs."""
        global _active
        if _active is not None:
            raise ConfigurationError("one fleet worker per process")
        dbos = require_dbos()
        from statewise.fleet import _runs  # registers the DBOS workflow

        with reaching(self.url):
            self._client = dbos.DBOSClient(
                system_database_url=self.url,
                dbos_system_schema=self.schema,
                application_name=self.app_name,
                serializer=dbos.DBOSPortableJSONSerializer(),
            )
        try:
            # Before launch: a queue thread reloads its queue's row only between polls, so
            # a limit written after launch would not bind the first poll.
            with reaching(self.url):
                missing = self._set_worker_limits()
        except BaseException:
            self._client.destroy()
            self._client = None
            raise
        _runs.serve_targets(self.targets)
        config: dict[str, Any] = {
            "name": self.app_name,
            "system_database_url": self.url,
            "dbos_system_schema": self.schema,
            "executor_id": self.executor_id,
            "application_version": self.app_version,
            "serializer": dbos.DBOSPortableJSONSerializer(),
            "log_level": "WARNING",
        }
        dbos.DBOS(config=config)
        dbos.DBOS.listen_queues(self.queues)
        _active = self
        try:
            with reaching(self.url):
                dbos.DBOS.launch()
            for name in missing:
                if dbos.DBOS.retrieve_queue(name) is None:
                    dbos.DBOS.register_queue(
                        name, worker_concurrency=self.concurrency, polling_interval_sec=0.2
                    )
        except BaseException:
            _active = None
            dbos.DBOS.destroy()
            self._client.destroy()
            self._client = None
            raise
        self._launched = True
        log.info(
            "worker %s serving %s from queue(s) %s",
            self.executor_id,
            ", ".join(sorted(self.targets)),
            ", ".join(self.queues),
        )

    def _set_worker_limits(self) -> list[str]:
        """Write `concurrency` into each existing queue's row (DBOS keeps one per-worker
        limit per queue); the names of the queues that do not exist yet."""
        missing = []
        for name in self.queues:
            queue = self._client.retrieve_queue(name)
            if queue is None:
                missing.append(name)
            elif self.concurrency is not None and queue.worker_concurrency != self.concurrency:
                before = queue.worker_concurrency
                queue.set_worker_concurrency(self.concurrency)
                log.info(
                    "queue %s: per-worker limit %s -> %d (for every worker of it)",
                    name,
                    before,
                    self.concurrency,
                )
        return missing

    def recover(self, executor_ids: Sequence[str]) -> int:
        """Take over the unfinished runs of executors that are gone (never of a live one:
        both would run the same runs). Returns how many runs were put back on their
        queues, where any live worker of those queues takes them.

        Uses DBOS's public workflow management (`list_workflows` + `resume_workflows`): a
        resumed run keeps the steps it completed and continues after them.
        """
        dbos = require_dbos()
        from statewise.fleet._names import RUN_WORKFLOW

        pending = dbos.DBOS.list_workflows(
            status="PENDING",
            executor_id=list(executor_ids),
            app_version=self.app_version,
            name=RUN_WORKFLOW,
            load_input=False,
            load_output=False,
        )
        by_queue: dict[str | None, list[str]] = {}
        for status in pending:
            by_queue.setdefault(status.queue_name, []).append(status.workflow_id)
        for queue, run_ids in by_queue.items():
            dbos.DBOS.resume_workflows(run_ids, queue_name=queue or self.queues[0])
        log.info("recovering %d run(s) of executor(s) %s", len(pending), ", ".join(executor_ids))
        return len(pending)

    def stop(self, timeout: float = 10.0) -> None:
        """Stop dequeuing, give runs in flight up to `timeout` seconds to finish, shut down.
        Runs still unfinished stay with this executor id: restart it to resume them."""
        global _active
        self._stop.set()
        if not self._launched:
            return
        self._launched = False
        require_dbos().DBOS.destroy(workflow_completion_timeout_sec=int(timeout))
        if self._client is not None:
            self._client.destroy()
            self._client = None
        _active = None

    def request_stop(self) -> None:
        self._stop.set()

    def serve_forever(self, *, recover: Sequence[str] = (), drain_seconds: float = 10.0) -> None:
        """Start, take over `recover`'s runs, and run until SIGTERM or SIGINT."""

        def on_signal(signum: int, frame: FrameType | None) -> None:
            log.info("worker %s: %s, shutting down", self.executor_id, signal.Signals(signum).name)
            self._stop.set()

        previous = {sig: signal.signal(sig, on_signal) for sig in (signal.SIGTERM, signal.SIGINT)}
        try:
            self.start()
            if recover:
                self.recover(recover)
            while not self._stop.wait(0.2):
                pass
        finally:
            self.stop(drain_seconds)
            for sig, handler in previous.items():
                signal.signal(sig, handler)
            log.info("worker %s stopped", self.executor_id)
