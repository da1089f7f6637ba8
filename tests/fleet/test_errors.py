"""Bad input to a fleet is a clear error naming what is wrong, with nothing enqueued."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from statewise import Agent, Step, Workflow
from statewise.exceptions import (
    ConfigurationError,
    MissingDependencyError,
    RunError,
    StatewiseError,
)
from tests._env import subprocess_env

BLOCK_DBOS = "import sys; sys.modules['dbos'] = None\n"


def test_without_the_extra_the_error_names_it() -> None:
    code = BLOCK_DBOS + (
        "from statewise.fleet import Fleet\n"
        "try:\n"
        "    Fleet('postgresql://postgres@127.0.0.1:5432/test')\n"
        "except Exception as exc:\n"
        "    print(type(exc).__name__, exc)\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", code],
        capture_output=True,
        text=True,
        timeout=60,
        env=subprocess_env(),
    )
    assert done.stdout.strip() == (
        "MissingDependencyError 'dbos' is not installed; install it with: "
        "pip install 'statewise[dbos]'"
    )
    assert issubclass(MissingDependencyError, ConfigurationError)

    cli = BLOCK_DBOS + (
        "from statewise.cli import main\n"
        "sys.argv = ['statewise', 'runs', 'list', '--db', 'postgresql://127.0.0.1/x']\n"
        "main()\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", cli],
        capture_output=True,
        text=True,
        timeout=60,
        env=subprocess_env(COLUMNS="200"),
    )
    assert done.returncode == 2
    assert done.stderr.strip().splitlines() == [
        "Error: 'dbos' is not installed; install it with: pip install 'statewise[dbos]'"
    ]


def test_a_fleet_needs_postgresql() -> None:
    from statewise.fleet import Fleet, Worker

    with pytest.raises(ConfigurationError, match="PostgreSQL URL"):
        Fleet("sqlite:///fleet.db")
    flow = Workflow(name="w", steps=[Step(name="a", executor=lambda: 1)], db="memory://")
    with pytest.raises(ConfigurationError, match="PostgreSQL URL"):
        Worker("redis://localhost", [flow], executor_id="w1")
    with pytest.raises(ConfigurationError, match="executor_id"):
        Worker("postgresql://localhost/x", [flow], executor_id="")
    with pytest.raises(ConfigurationError, match="name="):
        Worker("postgresql://localhost/x", [Agent(db="memory://")], executor_id="w1")


def test_enqueue_without_a_fleet_says_how_to_configure_one() -> None:
    flow = Workflow(name="w", steps=[Step(name="a", executor=lambda: 1)], db="memory://")
    with pytest.raises(ConfigurationError, match=r"statewise\.fleet\.configure"):
        flow.enqueue("hi", session_id="s")


def test_bad_enqueues_persist_nothing(fleet: Any) -> None:
    flow = Workflow(name="w", steps=[Step(name="a", executor=lambda: 1)], db="memory://")
    with pytest.raises(ConfigurationError, match="must be JSON"):
        fleet.enqueue(flow, {"when": object()}, session_id="s")
    with pytest.raises(ConfigurationError, match="needs a name"):
        fleet.enqueue(Agent(db="memory://"), "hi", session_id="s")
    with pytest.raises(ConfigurationError, match="only an Agent, Team or Workflow"):
        fleet.enqueue(object(), "hi")
    with pytest.raises(StatewiseError, match="session_id"):
        fleet.enqueue(flow, "hi", session_id="bad\x00id")
    with pytest.raises(ConfigurationError, match="queue name"):
        fleet.enqueue(flow, "hi", queue="_dbos_internal")
    with pytest.raises(ConfigurationError, match="concurrency"):
        fleet.queue("q", concurrency=0)
    with pytest.raises(ConfigurationError, match="rate_limit"):
        fleet.queue("q", rate_limit=(0, 1.0))
    assert fleet.runs() == []
    with pytest.raises(RunError, match="no fleet run 'nope'"):
        fleet.run("nope")


def test_runs_show_of_an_unknown_run_is_one_line(fleet_db: str) -> None:
    done = subprocess.run(
        [sys.executable, "-m", "statewise", "runs", "show", "nope", "--db", fleet_db],
        capture_output=True,
        text=True,
        timeout=60,
        env=subprocess_env(COLUMNS="200"),
    )
    assert done.returncode == 2
    assert done.stderr.strip().splitlines() == ["Error: no fleet run 'nope'"]


def _closed_port() -> int:
    import socket

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def test_an_unreachable_fleet_database_is_one_clear_error_with_the_password_masked() -> None:
    from statewise.exceptions import DatabaseUnavailableError
    from statewise.fleet import Fleet

    url = f"postgresql://postgres:hunter2@127.0.0.1:{_closed_port()}/test"
    with pytest.raises(
        DatabaseUnavailableError, match="cannot reach the fleet's PostgreSQL"
    ) as info:
        Fleet(url)
    assert "hunter2" not in str(info.value) and "postgres:***@127.0.0.1" in str(info.value)

    example = str(Path(__file__).resolve().parents[2] / "examples" / "shopping_list.py")
    enqueue = ["enqueue", example, "hi", "--session", "s", "--db", url]
    for args in (["runs", "list", "--db", url], enqueue):
        done = subprocess.run(
            [sys.executable, "-m", "statewise", *args],
            capture_output=True,
            text=True,
            timeout=120,
            env=subprocess_env(),
        )
        last = done.stderr.strip().splitlines()[-1]
        assert done.returncode == 2, done.stderr
        assert "Traceback" not in done.stderr and "hunter2" not in done.stderr
        assert last.startswith("Error: cannot reach the fleet's PostgreSQL"), done.stderr
