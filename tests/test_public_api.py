"""The public API is what `__all__` exports: complete, sorted, importable."""

from __future__ import annotations

import importlib

import pytest

PUBLIC_MODULES = [
    "statewise",
    "statewise.models",
    "statewise.db",
    "statewise.tools",
    "statewise.state",
]


@pytest.mark.parametrize("name", PUBLIC_MODULES)
def test_all_is_importable(name: str) -> None:
    module = importlib.import_module(name)
    for symbol in module.__all__:
        assert getattr(module, symbol) is not None, f"{name}.{symbol}"


def test_issue_contract_imports() -> None:
    from statewise import (  # noqa: F401
        Agent,
        Condition,
        Loop,
        Parallel,
        Router,
        RunContext,
        RunOutput,
        Step,
        StepInput,
        StepOutput,
        Team,
        Toolkit,
        Workflow,
        tool,
    )
    from statewise.db import InMemoryDb, PostgresDb, RedisDb, SqliteDb  # noqa: F401
    from statewise.models import (  # noqa: F401
        FunctionModel,
        Message,
        Model,
        ModelResponse,
        TestModel,
        ToolCall,
    )


def test_layers_only_import_downward() -> None:
    """DESIGN §4: checked by import-linter over the installed package."""
    import subprocess
    import sys
    from pathlib import Path

    root = Path(__file__).resolve().parents[1]
    linter = Path(sys.executable).with_name("lint-imports")
    completed = subprocess.run(
        [str(linter)],
        cwd=root,
        capture_output=True,
        text=True,
        timeout=120,
        env={"PYTHONPATH": str(root / "src"), "PATH": "/usr/bin:/bin"},
    )
    assert completed.returncode == 0, completed.stdout + completed.stderr
