"""The server's default deadline (`create_app(..., run_timeout=...)`, `statewise serve
--run-timeout`): a run whose model never answers ends `failed` with the reason and its
request answers 504; an object's own `run_timeout` wins over the server's."""

from __future__ import annotations

import asyncio
import re
import subprocess
from pathlib import Path

import httpx

from statewise import Agent
from statewise.db import SqliteDb
from statewise.models import FunctionModel, Message, ModelResponse, RequestInfo
from statewise.server import create_app
from tests._env import subprocess_env
from tests.server.conftest import start_server, stop_server
from tests.server.test_api import assert_problem
from tests.server.test_serve import serve_cmd


async def never(messages: list[Message], info: RequestInfo) -> ModelResponse:
    await asyncio.sleep(3600)
    raise AssertionError("unreachable")


def test_the_servers_run_timeout_ends_a_run_that_never_finishes(tmp_path: Path) -> None:
    db = SqliteDb(db_file=str(tmp_path / "s.db"))
    stuck = Agent(name="stuck", model=FunctionModel(never), db=db)
    patient = Agent(name="patient", model=FunctionModel(never), db=db, run_timeout=1.5)
    live = start_server(create_app([stuck, patient], run_timeout=0.4))
    try:
        with live.client() as c:
            r = c.post("/v1/agents/stuck/runs", json={"input": "hi", "session_id": "s1"})
            assert_problem(r, 504, "run exceeded its run_timeout of 0.4 s")
            [run] = c.get("/v1/sessions/s1").json()["runs"]
            assert run["status"] == "failed"
            assert "run exceeded its run_timeout of 0.4 s" in run["error"]
            # The object's own deadline is the one that counts.
            r = c.post("/v1/agents/patient/runs", json={"input": "hi", "session_id": "s2"})
            assert_problem(r, 504, "run exceeded its run_timeout of 1.5 s")
    finally:
        stop_server(live)
        db.close()


NEVER_APP = """
import asyncio
from statewise import Agent
from statewise.models import FunctionModel

async def never(messages, info):
    await asyncio.sleep(3600)

stuck = Agent(name="stuck", model=FunctionModel(never), db="sqlite:///{db}")
"""


def test_statewise_serve_run_timeout_is_the_servers_default(tmp_path: Path) -> None:
    path = tmp_path / "stuckapp.py"
    path.write_text(NEVER_APP.format(db=tmp_path / "serve.db"))
    env = subprocess_env(STATEWISE_API_KEYS="", STATEWISE_ADMIN_KEYS="")
    proc = subprocess.Popen(
        serve_cmd(f"{path}:stuck", "--port", "0", "--run-timeout", "0.4"),
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        assert proc.stdout is not None
        match = re.search(r"http://127\.0\.0\.1:(\d+)/", proc.stdout.readline())
        assert match
        r = httpx.post(
            f"http://127.0.0.1:{match.group(1)}/v1/agents/stuck/runs",
            json={"input": "hi"},
            timeout=30,
        )
        assert_problem(r, 504, "run exceeded its run_timeout of 0.4 s")
    finally:
        proc.terminate()
        proc.communicate(timeout=10)


def test_statewise_serve_refuses_a_run_timeout_that_is_not_positive(tmp_path: Path) -> None:
    path = tmp_path / "stuckapp.py"
    path.write_text(NEVER_APP.format(db=tmp_path / "serve.db"))
    done = subprocess.run(
        serve_cmd(f"{path}:stuck", "--port", "0", "--run-timeout", "0"),
        env=subprocess_env(STATEWISE_API_KEYS="", STATEWISE_ADMIN_KEYS=""),
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 2
    assert "run_timeout must be a positive number of seconds, got 0.0" in done.stderr
