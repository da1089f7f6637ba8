"""The workflow and team examples run offline, reach the documented state, and leave it,
with their runs and step commits, in SQLite (read back through a fresh database object)."""

from __future__ import annotations

import importlib.util
import subprocess
import sys
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

from statewise import Agent
from statewise.db import SqliteDb
from tests._env import subprocess_env

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"


@pytest.fixture(autouse=True)
def _in_tmp_path(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Examples build their `statewise run` object on import, under ./tmp: keep it out of
    the checkout."""
    monkeypatch.chdir(tmp_path)


def load(name: str) -> ModuleType:
    spec = importlib.util.spec_from_file_location(name, EXAMPLES / f"{name}.py")
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module


def stored(db_file: Path, session_id: str) -> tuple[dict[str, Any], SqliteDb]:
    db = SqliteDb(db_file=str(db_file))
    return Agent(db=db).get_session_state(session_id), db


def test_shopping_list_workflow(tmp_path: Path) -> None:
    result = load("workflow_shopping_list").main(str(tmp_path))
    assert [s["shopping_list"] for s in result["states"]] == [
        ["milk", "bread", "eggs"],
        ["milk", "bread", "eggs", "apples", "bananas"],
        ["milk", "eggs", "apples", "bananas"],
        [],
    ]
    # The list manager's answer (the workflow's content) shows the list it found.
    assert result["answers"][1] == ("Shopping list:\n- milk\n- bread\n- eggs\n- apples\n- bananas")
    assert result["answers"][2] == "Shopping list:\n- milk\n- eggs\n- apples\n- bananas"
    assert (
        result["answers"][3] == "Removed all items from the shopping list.\nShopping list is empty."
    )
    state, db = stored(tmp_path / "workflow.db", result["session_id"])
    try:
        assert state == {"shopping_list": []}
        runs = db.read_runs(result["session_id"])
        assert [r.status for r in runs] == ["completed"] * 4
        assert runs[0].input == "Please add milk, bread, and eggs to my shopping list."
        steps = [
            e.data["name"] for e in db.read_events(result["session_id"], types=["step_completed"])
        ]
        assert steps == ["manage_items", "view_list"] * 4
        tools = [
            (e.data["agent"], e.data["name"])
            for e in db.read_events(result["session_id"], types=["tool_call"])
        ]
        assert tools[:4] == [
            ("Shopping Assistant", "add_item"),
            ("Shopping Assistant", "add_item"),
            ("Shopping Assistant", "add_item"),
            ("List Manager", "list_items"),
        ]
        assert ("List Manager", "remove_all_items") in tools
    finally:
        db.close()


def test_condition_and_router_on_state(tmp_path: Path) -> None:
    result = load("workflow_condition_router").main(str(tmp_path))
    tickets = result["state"]["tickets"]
    assert [(t["customer"], t["category"], t["resolution"]) for t in tickets] == [
        ("ada", "billing", "refund issued"),
        ("bob", "tech", "bug filed"),
        ("cy", "billing", "refund issued"),
    ]
    assert tickets[0]["priority"] == "high" and "priority" not in tickets[1]
    assert result["state"]["escalations"] == 1
    assert result["answers"] == ["Refund issued done.", "Bug filed done.", "Refund issued done."]
    state, db = stored(tmp_path / "triage.db", "support")
    try:
        assert state == result["state"]
        completed = [e.data for e in db.read_events("support", types=["step_completed"])]
        vip = [e["output"]["skipped"] for e in completed if e["name"] == "vip_escalation"]
        assert vip == [False, True, True]
        routed = [
            e["output"]["steps"][0]["step_name"]
            for e in completed
            if e["name"] == "route_by_category"
        ]
        assert routed == ["billing_desk", "tech_desk", "billing_desk"]
    finally:
        db.close()


def test_parallel_fanout_counts_into_state(tmp_path: Path) -> None:
    result = load("workflow_parallel_fanout").main(str(tmp_path))
    state = result["state"]
    assert state["total_words"] == 13 == sum(state["word_counts"].values())
    assert state["word_counts"]["never"] == 3
    assert state["processed"] == ["intro", "middle", "outro"], "declaration order, not finish order"
    assert state["longest"] == 7
    assert result["output"].content == "13 words; top: [('never', 3), ('is', 2), ('lost', 2)]"
    assert [c["rule"] for c in result["output"].conflicts] == ["max", "max"]
    stored_state, db = stored(tmp_path / "fanout.db", "fanout")
    try:
        assert stored_state == state
        conflicts = [e.data for e in db.read_events("fanout", types=["conflict_resolved"])]
        assert conflicts == result["output"].conflicts
    finally:
        db.close()


def test_team_members_edit_one_shopping_list(tmp_path: Path) -> None:
    result = load("team_shopping_list").main(str(tmp_path))
    assert [s["shopping_list"] for s in result["states"]] == [
        ["milk", "eggs", "bread"],
        ["milk", "bread", "apples"],
        ["apples", "coffee"],
    ]
    # The leader's last prompt was rendered after both members wrote.
    assert result["answers"][1] == 'Done. Shopping list: ["milk","bread","apples"]'
    state, db = stored(tmp_path / "team.db", "household")
    try:
        assert state == {"shopping_list": ["apples", "coffee"]}
        assert db.get_session("household").kind == "team"  # type: ignore[union-attr]
        agents = {e.data["agent"] for e in db.read_events("household", types=["tool_call"])}
        assert agents == {"Adder", "Remover", "Shopping Team"}
        assert [r.status for r in db.read_runs("household")] == ["completed"] * 3
    finally:
        db.close()


@pytest.mark.parametrize(
    "name",
    [
        "workflow_shopping_list",
        "workflow_condition_router",
        "workflow_parallel_fanout",
        "team_shopping_list",
    ],
)
def test_examples_run_as_scripts(name: str, tmp_path: Path) -> None:
    completed = subprocess.run(
        [sys.executable, str(EXAMPLES / f"{name}.py")],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=120,
        env=subprocess_env(),
    )
    assert completed.returncode == 0, completed.stderr
