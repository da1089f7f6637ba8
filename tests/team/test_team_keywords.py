"""A team forwards Agent keywords to its leader; a type checker checks them all."""

from __future__ import annotations

import inspect
import subprocess
import sys
from pathlib import Path

from statewise import Agent, Team
from statewise.agent.options import AgentOptions
from statewise.models import TestModel


def test_agent_options_are_exactly_the_agent_keywords_a_team_forwards() -> None:
    agent = inspect.signature(Agent.__init__).parameters
    team = inspect.signature(Team.__init__).parameters
    forwarded = {
        name: p.annotation
        for name, p in agent.items()
        if p.kind is inspect.Parameter.KEYWORD_ONLY and name not in team
    }
    # Both hold the annotations as written (TypedDict wraps them in ForwardRef).
    options = {n: getattr(a, "__forward_arg__", a) for n, a in AgentOptions.__annotations__.items()}
    assert set(options) == set(forwarded)
    # Same types, spelled the same (the answer's type is Agent's type parameter).
    differ = {n for n in forwarded if options[n] != forwarded[n]}
    assert differ == {"output_schema"}


def test_every_agent_keyword_still_works_on_a_team() -> None:
    team = Team(
        [Agent(TestModel(), name="helper")],
        model=TestModel(),
        session_state={"n": 0},
        max_steps=3,
        debug_mode=False,
        output_key="answer",
    )
    assert team.max_steps == 3
    assert team.output_key == "answer"


def test_a_misspelt_team_keyword_is_a_type_error(tmp_path: Path) -> None:
    snippet = tmp_path / "snippet.py"
    snippet.write_text(
        "from statewise import Team\n"
        "Team(members=[], session_state={'n': 0}, max_steps=3)\n"
        "Team(members=[], sesion_state={'n': 0})\n"
    )
    result = subprocess.run(
        [
            sys.executable,
            "-m",
            "mypy",
            "--no-incremental",
            "--follow-imports=silent",
            "--cache-dir",
            str(tmp_path / "cache"),
            "--config-file",
            "",
            str(snippet),
        ],
        capture_output=True,
        text=True,
        cwd=tmp_path,
        timeout=120,
        check=False,
    )
    errors = [line for line in result.stdout.splitlines() if ": error:" in line]
    assert len(errors) == 1, result.stdout + result.stderr
    assert 'snippet.py:3: error: Unexpected keyword argument "sesion_state"' in errors[0]
