"""A fleet lab per test: its own PostgreSQL database (random name, dropped afterwards),
real `statewise worker` processes, and a side-channel file the workers' steps write to."""

from __future__ import annotations

import secrets
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from tests._env import subprocess_env
from tests.db.conftest import POSTGRES_URL, postgres_problem, require

APP = Path(__file__).with_name("_app.py")
READY_SECONDS = 60.0


@dataclass(frozen=True)
class SideLine:
    pid: int
    run_id: str
    step: str
    what: str
    at: float


@dataclass
class FleetLab:
    url: str
    tmp: Path
    sleep: float = 0.1
    worker_url: str | None = None  # the workers' --db, when not `url`
    app: Path = APP  # the file the workers serve
    extra_env: dict[str, str] = field(default_factory=dict)
    workers: dict[str, subprocess.Popen[bytes]] = field(default_factory=dict)
    procs: list[subprocess.Popen[bytes]] = field(default_factory=list)

    @property
    def side(self) -> Path:
        return self.tmp / "side.log"

    def env(self) -> dict[str, str]:
        return subprocess_env(
            STATEWISE_FLEET_TEST_DB=self.url,
            STATEWISE_FLEET_TEST_SIDE=str(self.side),
            STATEWISE_FLEET_TEST_SLEEP=str(self.sleep),
            **self.extra_env,
        )

    def cli(self, *args: str, timeout: float = 60) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [sys.executable, "-m", "statewise", *args],
            env=self.env(),
            capture_output=True,
            text=True,
            timeout=timeout,
        )

    def log_of(self, name: str) -> str:
        path = self.tmp / f"{name}.log"
        return path.read_text() if path.exists() else ""

    def start_worker(self, executor_id: str, *extra: str, log: str | None = None) -> int:
        """Start `statewise worker` and wait until it serves; returns its pid."""
        name = self._launch(executor_id, *extra, log=log)
        self._wait_ready(executor_id, name)
        return self.workers[executor_id].pid

    def start_workers(self, executor_ids: list[str], *extra: str) -> dict[str, int]:
        """Start several workers at once (they start in parallel); their pids by name."""
        for executor_id in executor_ids:
            self._launch(executor_id, *extra)
        for executor_id in executor_ids:
            self._wait_ready(executor_id, executor_id)
        return {executor_id: self.workers[executor_id].pid for executor_id in executor_ids}

    def _launch(self, executor_id: str, *extra: str, log: str | None = None) -> str:
        name = log or executor_id
        out = open(self.tmp / f"{name}.log", "ab")  # noqa: SIM115 - closed with the process
        proc = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "statewise",
                "worker",
                f"{self.app}",
                "--db",
                self.worker_url or self.url,
                "--executor-id",
                executor_id,
                "--drain",
                "2",
                *extra,
            ],
            env=self.env(),
            stdout=out,
            stderr=subprocess.STDOUT,
        )
        out.close()
        self.workers[executor_id] = proc
        self.procs.append(proc)
        return name

    def _wait_ready(self, executor_id: str, name: str) -> None:
        proc = self.workers[executor_id]
        deadline = time.monotonic() + READY_SECONDS
        while f"worker {executor_id} serving" not in self.log_of(name):
            if proc.poll() is not None:
                raise AssertionError(f"worker {executor_id} exited:\n{self.log_of(name)}")
            if time.monotonic() > deadline:
                raise AssertionError(f"worker {executor_id} not ready:\n{self.log_of(name)}")
            time.sleep(0.05)

    def kill(self, executor_id: str) -> None:
        proc = self.workers.pop(executor_id)
        proc.send_signal(signal.SIGKILL)
        proc.wait(10)

    def side_lines(self) -> list[SideLine]:
        if not self.side.exists():
            return []
        lines = []
        for raw in self.side.read_text().splitlines():
            parts = raw.split()
            if len(parts) == 5:
                lines.append(SideLine(int(parts[0]), parts[1], parts[2], parts[3], float(parts[4])))
        return lines

    def stop_all(self) -> None:
        for proc in self.procs:
            if proc.poll() is None:
                proc.send_signal(signal.SIGTERM)
        for proc in self.procs:
            try:
                proc.wait(20)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait(5)


def dbos_problem() -> str | None:
    try:
        import dbos  # noqa: F401
    except ImportError:
        return "the dbos extra is not installed: pip install 'statewise[dbos]'"
    return None


def _admin(sql: str) -> None:
    import psycopg

    with psycopg.connect(POSTGRES_URL, autocommit=True) as conn:
        conn.execute(sql)


def _database_url(name: str) -> str:
    base, _, _ = POSTGRES_URL.rpartition("/")
    return f"{base}/{name}"


@pytest.fixture
def fleet_db() -> Iterator[str]:
    """A fresh database for one test, dropped afterwards."""
    require(postgres_problem())
    require(dbos_problem())
    name = f"sw_fleet_{secrets.token_hex(4)}"
    _admin(f'CREATE DATABASE "{name}"')
    try:
        yield _database_url(name)
    finally:
        _admin(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


@pytest.fixture
def lab(fleet_db: str, tmp_path: Path) -> Iterator[FleetLab]:
    lab = FleetLab(url=fleet_db, tmp=tmp_path)
    try:
        yield lab
    finally:
        lab.stop_all()


@pytest.fixture
def app(fleet_db: str) -> Iterator[Any]:
    """The test app's objects (five, timed, helper) in this process, on the test database."""
    from tests.fleet._app import build

    objects = build(fleet_db)
    try:
        yield objects
    finally:
        objects[0].db.close()


@pytest.fixture
def fleet(fleet_db: str) -> Iterator[Any]:
    from statewise.fleet import Fleet

    with Fleet(fleet_db) as fleet:
        yield fleet
