"""Every agent example runs offline and leaves the state its docstring describes."""

from __future__ import annotations

import importlib.util
import sqlite3
import sys
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

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


def stored_session_count(db_file: Path) -> int:
    with sqlite3.connect(db_file) as conn:
        return int(conn.execute("SELECT count(*) FROM statewise_sessions").fetchone()[0])


def test_second_model_call_sees_the_customer_created_by_the_first() -> None:
    result = load("dynamic_session_state").main()
    prompts = result["system_prompts"]
    assert len(prompts) == 3
    assert "789" not in prompts[0]
    assert '"789":{"name":"Tom"}' in prompts[1]  # re-rendered before the second model call
    assert result["state"]["customer_profiles"] == {
        "123": {"name": "Jane Doe"},
        "789": {"name": "Tom"},
    }
    assert 'Profile for 789: {"name": "Tom"}' in result["output"].content


def test_shopping_list_persists_across_runs(tmp_path: Path) -> None:
    result = load("shopping_list").main(str(tmp_path))
    assert result["first"] == {"shopping_list": ["milk", "eggs", "bread"]}
    lists = [state["shopping_list"] for state in result["runs"]]
    assert lists == [
        ["milk", "eggs", "bread"],
        ["milk", "eggs"],
        ["milk", "eggs", "apples", "oranges"],
        ["milk", "eggs", "apples", "oranges"],
        ["bananas", "yogurt"],
    ]
    assert stored_session_count(tmp_path / "example.db") == 1


def test_agentic_state(tmp_path: Path) -> None:
    result = load("agentic_state").main(str(tmp_path / "agents.db"))
    assert result["state"] == {"shopping_list": ["milk", "eggs", "bread"]}
    # The answer read the updated state back from the re-rendered system message.
    assert '"shopping_list": ["milk", "eggs", "bread"]' in result["output"].content


def test_state_in_instructions_sessions_and_overwrite(tmp_path: Path) -> None:
    result = load("state_in_instructions").main(str(tmp_path))
    assert result["name"] == "Your name is John."
    assert result["answers"] == [
        "Your name is John.",
        "You are 30 years old.",
        "Your name is Jane.",
        "You are 25 years old.",
    ]
    assert result["overwrite"] == [{"shopping_list": ["Potatoes"]}, {"secret_number": 43}]


def test_state_api(tmp_path: Path) -> None:
    result: dict[str, Any] = load("state_api").main(str(tmp_path))
    assert result["basic"]["user_name"] == "Alice"
    assert result["basic"]["preferences"] == {"theme": "dark", "language": "en"}
    assert '"user_name": "Alice"' in result["basic"]["response"]
    first, second = result["persistence"]
    assert first["session_count"] == 1 and second["session_count"] == 2
    user = result["complex"]
    assert user["preferences"]["notifications"] is False
    assert user["login_count"] == 1 and "last_login" in user and user["name"] == "Alice"
    assert result["tools"]["counter"] == 1
    assert result["tools"]["user"]["preferences"] == {"theme": "dark"}
    chat = result["chat"]
    assert chat["conversation_count"] == 12 and chat["session_count"] == 1
    assert [m["message_id"] for m in chat["recent_messages"]] == list(range(3, 13))
    assert result["safe_rejected"] is False
    assert result["safe_after_restore"] == {"user": {"name": "Ann", "preferences": {}}}


@pytest.mark.parametrize(
    "name",
    [
        "dynamic_session_state",
        "shopping_list",
        "agentic_state",
        "state_in_instructions",
        "state_api",
    ],
)
def test_examples_run_as_scripts(name: str, tmp_path: Path) -> None:
    import subprocess

    completed = subprocess.run(
        [sys.executable, str(EXAMPLES / f"{name}.py")],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=120,
        env=subprocess_env(),
    )
    assert completed.returncode == 0, completed.stderr
