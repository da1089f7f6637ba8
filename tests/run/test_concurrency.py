"""No lost updates: concurrent writers to one session all keep their changes (DESIGN §3)."""

from __future__ import annotations

import asyncio
import subprocess
import sys
import threading
from pathlib import Path
from typing import Any

from statewise import Agent, RunContext
from statewise.db import SqliteDb
from statewise.models import FunctionModel, Message, ModelResponse, RequestInfo, ToolCall
from tests._env import subprocess_env


def append_model(messages: list[Message], info: RequestInfo) -> ModelResponse:
    if messages[-1].role == "tool":
        return ModelResponse(content="ok")
    return ModelResponse(tool_calls=[ToolCall("add", {"item": messages[-1].content}, "c1")])


def add(session_state: dict[str, Any], item: str) -> str:
    session_state["items"].append(item)
    return "added"


def make_agent(db: SqliteDb, **kwargs: Any) -> Agent:
    return Agent(
        model=FunctionModel(append_model), tools=[add], db=db, session_state={"items": []}, **kwargs
    )


WORKER = """
import sys
from tests.run.test_concurrency import make_agent
from statewise.db import SqliteDb
agent = make_agent(SqliteDb(db_file=sys.argv[1]))
for i in range(int(sys.argv[3])):
    agent.run(f"{sys.argv[2]}-{i}", session_id="shared")
"""


def test_two_processes_appending_to_one_session_lose_nothing(tmp_path: Path) -> None:
    db_file = str(tmp_path / "shared.db")
    make_agent(SqliteDb(db_file=db_file)).run("seed", session_id="shared")
    root = Path(__file__).resolve().parents[2]
    procs = [
        subprocess.Popen(
            [sys.executable, "-c", WORKER, db_file, name, "200"],
            cwd=root,
            env=subprocess_env(PYTHONPATH=str(root / "src") + ":" + str(root)),
        )
        for name in ("p1", "p2")
    ]
    for proc in procs:
        assert proc.wait(timeout=300) == 0
    items = make_agent(SqliteDb(db_file=db_file)).get_session_state("shared")["items"]
    assert len(items) == 401
    assert sorted(items) == sorted(["seed"] + [f"p{p}-{i}" for p in (1, 2) for i in range(200)])
    for p in ("p1", "p2"):  # each writer's own appends stay in its order
        mine = [i for i in items if i.startswith(p)]
        assert mine == [f"{p}-{i}" for i in range(200)]


def test_eight_threads_appending_to_one_session_lose_nothing(tmp_path: Path) -> None:
    db = SqliteDb(db_file=tmp_path / "threads.db")
    agent = make_agent(db)
    errors: list[BaseException] = []

    def worker(n: int) -> None:
        try:
            for i in range(25):
                agent.run(f"t{n}-{i}", session_id="shared")
        except BaseException as exc:  # pragma: no cover - reported below
            errors.append(exc)

    threads = [threading.Thread(target=worker, args=(n,)) for n in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors
    items = agent.get_session_state("shared")["items"]
    assert sorted(items) == sorted(f"t{n}-{i}" for n in range(8) for i in range(25))


def test_asyncio_tasks_appending_to_one_session_lose_nothing(tmp_path: Path) -> None:
    async def slow_add(session_state: dict[str, Any], item: str) -> str:
        await asyncio.sleep(0.001)  # let the other tasks interleave inside the run
        session_state["items"].append(item)
        return "added"

    def model(messages: list[Message], info: RequestInfo) -> ModelResponse:
        if messages[-1].role == "tool":
            return ModelResponse(content="ok")
        return ModelResponse(tool_calls=[ToolCall("slow_add", {"item": messages[-1].content}, "c")])

    agent = Agent(
        model=FunctionModel(model),
        tools=[slow_add],
        session_state={"items": []},
        db=SqliteDb(db_file=tmp_path / "tasks.db"),
    )

    async def main() -> None:
        await asyncio.gather(*(agent.arun(f"a{i}", session_id="shared") for i in range(40)))

    asyncio.run(main())
    assert sorted(agent.get_session_state("shared")["items"]) == sorted(f"a{i}" for i in range(40))


def test_concurrent_counters_with_a_sum_rule_reach_the_exact_total(tmp_path: Path) -> None:
    def bump(run_context: RunContext, by: int) -> str:
        state = run_context.session_state
        state["count"] = state.get("count", 0) + by  # read-modify-write, as users write it
        return "bumped"

    def model(messages: list[Message], info: RequestInfo) -> ModelResponse:
        if messages[-1].role == "tool":
            return ModelResponse(content="ok")
        return ModelResponse(
            tool_calls=[ToolCall("bump", {"by": int(messages[-1].content or 0)}, "c")]
        )

    db = SqliteDb(db_file=tmp_path / "counter.db")
    agents = [
        Agent(
            model=FunctionModel(model),
            tools=[bump],
            db=db,
            session_state={"count": 0},
            state_rules={"count": "sum"},
        )
        for _ in range(2)
    ]
    agents[0].run("0", session_id="c")

    def worker(agent: Agent, by: int) -> None:
        for _ in range(30):
            agent.run(str(by), session_id="c")

    threads = [
        threading.Thread(target=worker, args=(a, by)) for a, by in zip(agents, (1, 10), strict=True)
    ]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert agents[0].get_session_state("c")["count"] == 30 * 1 + 30 * 10
