"""To mypy --strict in a user's script, `agent.run(...).content` has the output_schema's
type: a wrong use of it is a type error, a right one is clean."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from tests._env import subprocess_env

SCRIPT = """
from pydantic import BaseModel

from statewise import Agent
from statewise.models import TestModel


class Triage(BaseModel):
    priority: str


agent = Agent(model=TestModel(), output_schema=Triage)
answer: Triage = agent.run("x").content
wrong: int = agent.run("x").content
untyped = Agent(model=TestModel())
anything: int = untyped.run("x").content
"""


def test_the_answer_has_the_schemas_type_to_mypy(tmp_path: Path) -> None:
    script = tmp_path / "user_script.py"
    script.write_text(SCRIPT)
    done = subprocess.run(
        [sys.executable, "-m", "mypy", "--strict", "--no-incremental", str(script)],
        capture_output=True,
        text=True,
        timeout=300,
        cwd=tmp_path,
        env=subprocess_env(),
    )
    errors = [line for line in done.stdout.splitlines() if ": error:" in line]
    assert len(errors) == 1, done.stdout
    assert "user_script.py:14:" in errors[0]  # `wrong: int = ...`
    assert 'expression has type "Triage", variable has type "int"' in errors[0]
