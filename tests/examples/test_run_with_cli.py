"""Every example runs the way the README runs agents: `statewise run examples/<x> "message"`
(a real subprocess, from another directory), and answers from the message it was given."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from tests._env import subprocess_env

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"

# What each example answers to one message: (message, a piece of the answer).
EXPECTED = {
    "agentic_state.py": ("Add milk and eggs", '["milk", "eggs"]'),
    "dynamic_session_state.py": (
        "Create customer 789 named Tom",
        'Profile for 789: {"name": "Tom"}',
    ),
    "shopping_list.py": ("Add milk and eggs", "milk, eggs"),
    "state_api.py": ("Increment the counter", "Counter incremented to: 1"),
    "state_in_instructions.py": ("What is my name?", "Your name is Ann."),
    "team_shopping_list.py": ("Add milk and eggs", '["milk","eggs"]'),
    "workflow_condition_router.py": ("ada: please refund my charge", "done"),
    "workflow_parallel_fanout.py": ("count the documents", "13 words"),
    "workflow_shopping_list.py": ("Add milk and eggs", "- eggs"),
    "session_state_agent": ("hello world!", "How can I help you verify something today?"),
}


def test_every_example_is_listed() -> None:
    found = {p.name for p in EXAMPLES.glob("*.py")} | {
        p.parent.name for p in EXAMPLES.glob("*/agent.py")
    }
    assert found == set(EXPECTED)


@pytest.mark.parametrize("example", sorted(EXPECTED))
def test_example_runs_with_statewise_run(example: str, tmp_path: Path) -> None:
    message, answer = EXPECTED[example]
    extra = ["--state", '{"user_name": "Ann", "age": 41}'] if "instructions" in example else []
    done = subprocess.run(
        [sys.executable, "-m", "statewise", "run", str(EXAMPLES / example), message, *extra],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=120,
        env=subprocess_env(),
    )
    assert done.returncode == 0, done.stderr
    assert f"[user]: {message}" in done.stdout
    assert answer in done.stdout, done.stdout
