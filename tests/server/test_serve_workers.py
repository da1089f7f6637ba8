"""`statewise serve` as a deployment runs it: several worker processes on PostgreSQL with
concurrent clients (nothing lost), SIGTERM while a run is in flight (it finishes and is
stored), and a database the workers could not share refused up front."""

from __future__ import annotations

import os
import re
import secrets
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import httpx
import pytest

from tests._env import subprocess_env
from tests.db.conftest import POSTGRES_URL, postgres_problem, require

APP = """
import os, time
from statewise import Agent
from statewise.models import FunctionModel, ModelResponse, ToolCall


def add_item(session_state: dict, item: str) -> str:
    \"\"\"Add an item.\"\"\"
    if item.startswith("slow"):
        time.sleep(1.5)
    session_state.setdefault("items", []).append(item)
    return f"added {item} in {os.getpid()}"


def answer(messages, info):
    last = messages[-1]
    if last.role == "user":
        return ModelResponse(tool_calls=[ToolCall("add_item", {"item": last.content}, "c1")])
    return last.content


lister = Agent(name="lister", model=FunctionModel(answer), tools=[add_item])
"""


def _start(tmp_path: Path, *args: str) -> tuple[subprocess.Popen[str], str]:
    (tmp_path / "app.py").write_text(APP)
    proc = subprocess.Popen(
        [sys.executable, "-m", "statewise", "serve", "app.py", "--port", "0",
         "--log-level", "warning", *args],
        cwd=tmp_path,
        env=subprocess_env(STATEWISE_API_KEYS="", STATEWISE_ADMIN_KEYS=""),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )  # fmt: skip
    assert proc.stdout is not None
    line = proc.stdout.readline()
    found = re.search(r"http://[^:]+:(\d+)/", line)
    if found is None:
        proc.kill()
        raise AssertionError(f"no address in {line!r}: {proc.communicate(timeout=10)}")
    url = f"http://127.0.0.1:{found.group(1)}"
    deadline = time.monotonic() + 30
    while True:  # the workers answer once they have imported the app
        try:
            if httpx.get(f"{url}/readyz", timeout=5).status_code == 200:
                return proc, url
        except httpx.TransportError:
            pass
        assert time.monotonic() < deadline and proc.poll() is None, proc.communicate(timeout=5)
        time.sleep(0.2)


def _cmdline(pid: str) -> str:
    try:
        return Path(f"/proc/{pid}/cmdline").read_text().replace("\0", " ")
    except OSError:
        return ""


def _stop(proc: subprocess.Popen[str]) -> str:
    """SIGTERM the server; what it wrote to stderr (its pipes closed)."""
    if proc.poll() is None:
        proc.send_signal(signal.SIGTERM)
    try:
        _, err = proc.communicate(timeout=60)
    except subprocess.TimeoutExpired:
        proc.kill()
        _, err = proc.communicate(timeout=10)
    return err


def test_two_workers_on_postgres_lose_nothing(tmp_path: Path) -> None:
    require(postgres_problem())
    schema = f"sw_workers_{secrets.token_hex(4)}"
    proc, url = _start(tmp_path, "--workers", "2", "--db", f"{POSTGRES_URL}?schema={schema}")
    pids: set[str] = set()
    errors: list[str] = []
    try:

        def client(n: int) -> None:
            with httpx.Client(base_url=url, timeout=60) as c:
                for i in range(6):
                    r = c.post(
                        "/v1/agents/lister/runs",
                        json={"input": f"item-{n}-{i}", "session_id": f"shared-{i % 2}"},
                    )
                    if r.status_code != 200:
                        errors.append(r.text)
                        continue
                    pids.add(r.json()["content"].rsplit(" ", 1)[-1])

        threads = [threading.Thread(target=client, args=(n,)) for n in range(8)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(120)
        assert errors == []
        with httpx.Client(base_url=url, timeout=30) as c:
            items = [
                item
                for sid in ("shared-0", "shared-1")
                for item in c.get(f"/v1/sessions/{sid}/state").json()["state"]["items"]
            ]
        assert sorted(items) == sorted(f"item-{n}-{i}" for n in range(8) for i in range(6))
        children = Path(f"/proc/{proc.pid}/task/{proc.pid}/children").read_text().split()
        workers = [c for c in children if "spawn_main" in _cmdline(c)]
        assert len(workers) >= 2, f"the server runs {children} as its children"
        assert pids <= set(children), (pids, children)  # every run ran in a worker
    finally:
        err = _stop(proc)
        import psycopg

        with psycopg.connect(POSTGRES_URL, autocommit=True) as conn:
            conn.execute(f'DROP SCHEMA IF EXISTS "{schema}" CASCADE')
    assert "Traceback" not in err


def test_sigterm_lets_the_run_in_flight_finish(tmp_path: Path) -> None:
    proc, url = _start(tmp_path, "--db", f"sqlite:///{tmp_path / 'term.db'}")
    result: dict[str, httpx.Response] = {}

    def slow_run() -> None:
        result["r"] = httpx.post(
            f"{url}/v1/agents/lister/runs",
            json={"input": "slow-one", "session_id": "t1"},
            timeout=60,
        )

    thread = threading.Thread(target=slow_run)
    thread.start()
    time.sleep(0.5)  # the tool is sleeping now
    proc.send_signal(signal.SIGTERM)
    thread.join(60)
    err = _stop(proc)
    # uvicorn shuts down cleanly, then ends by the signal it caught (as init systems expect)
    assert proc.returncode in (0, -signal.SIGTERM), (proc.returncode, err)
    assert "Traceback" not in err
    assert result["r"].status_code == 200, result["r"].text
    assert result["r"].json()["status"] == "completed"
    from statewise import Sessions

    with Sessions(f"sqlite:///{tmp_path / 'term.db'}") as sessions:
        assert sessions.state("t1").state["items"] == ["slow-one"]
        assert [r.status for r in sessions.runs("t1")] == ["completed"]


def test_workers_refuse_sessions_kept_in_memory(tmp_path: Path) -> None:
    (tmp_path / "app.py").write_text(APP)
    done = subprocess.run(
        [sys.executable, "-m", "statewise", "serve", "app.py", "--workers", "2", "--port", "0"],
        cwd=tmp_path,
        env={k: v for k, v in subprocess_env().items() if k != "STATEWISE_DB_URL"},
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 2
    assert "in memory" in done.stderr and "--db" in done.stderr
    assert os.path.exists(tmp_path / "app.py")


@pytest.mark.parametrize("flag", ["--workers"])
def test_help_names_the_options(flag: str) -> None:
    done = subprocess.run(
        [sys.executable, "-m", "statewise", "serve", "--help"],
        env=subprocess_env(COLUMNS="200"),
        capture_output=True,
        text=True,
        timeout=60,
    )
    for option in (flag, "--cors-origin", "--jwt-secret", "--root-path"):
        assert option in done.stdout
    # rich markup would eat "[dbos]" unescaped: the fleet option names its extra
    assert "statewise[dbos]" in done.stdout
