"""Find the agent a command is about: load a Python file by path, pick the object.

`path/to/agent.py` or `path/to/dir` (which holds `agent.py`), optionally `:name`.
Without a name: the only Agent/Team/Workflow defined in the module, else `root_agent`,
else `agent`.
"""

from __future__ import annotations

import hashlib
import importlib.util
import sys
from pathlib import Path
from types import ModuleType
from typing import Any

from statewise import Agent, Workflow
from statewise.cli._errors import CliError

DEFAULT_NAMES = ("root_agent", "agent")


def split_target(target: str) -> tuple[str, str | None]:
    """`file.py:name` -> ("file.py", "name"); a bare path has no name."""
    path, sep, name = target.rpartition(":")
    if sep and path and name.isidentifier() and not Path(target).exists():
        return path, name
    return target, None


def module_file(path: str) -> Path:
    file = Path(path).expanduser()
    if file.is_dir():
        for candidate in (file / "agent.py", file / "__init__.py"):
            if candidate.is_file():
                return candidate
        raise CliError(
            f"{path} is a directory without an agent.py",
            hint="Point at the Python file that defines your agent, e.g. my_agent/agent.py.",
        )
    if not file.is_file():
        raise CliError(f"no such file: {path}", hint="Check the path to your agent's .py file.")
    if file.suffix != ".py":
        raise CliError(f"{path} is not a Python file (.py)")
    return file


def load_module(file: Path) -> ModuleType:
    """Import `file` as a fresh module; its folder goes on sys.path for sibling imports."""
    file = file.resolve()
    folder = str(file.parent)
    if folder not in sys.path:
        sys.path.insert(0, folder)
    digest = hashlib.sha1(str(file).encode()).hexdigest()[:8]
    name = f"statewise_cli_{file.parent.name if file.stem == '__init__' else file.stem}_{digest}"
    spec = importlib.util.spec_from_file_location(name, file)
    if spec is None or spec.loader is None:
        raise CliError(f"cannot import {file}")
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    try:
        spec.loader.exec_module(module)
    except BaseException:
        sys.modules.pop(name, None)
        raise
    return module


def is_runnable(obj: Any) -> bool:
    """An Agent, Team or Workflow: something with a session state that can run."""
    return isinstance(obj, (Agent, Workflow))


def find_runnable(module: ModuleType, name: str | None, where: str) -> tuple[str, Any]:
    """(variable name, object) of the agent to run."""
    if name is not None:
        if not hasattr(module, name):
            raise CliError(f"{where} has no {name!r}", hint=_candidates_hint(module))
        obj = getattr(module, name)
        if not is_runnable(obj):
            raise CliError(
                f"{where}:{name} is a {type(obj).__name__}, not an Agent, Team or Workflow"
            )
        return name, obj
    found = _runnables(module)
    if len(found) == 1:
        return next(iter(found.items()))
    for default in DEFAULT_NAMES:
        if default in found:
            return default, found[default]
    if not found:
        raise CliError(
            f"no Agent, Team or Workflow in {where}",
            hint="Define one at module level, e.g. `root_agent = Agent(...)`.",
        )
    raise CliError(
        f"{where} defines several agents ({', '.join(sorted(found))})",
        hint=f"Pick one: {where}:{sorted(found)[0]}",
    )


def _runnables(module: ModuleType) -> dict[str, Any]:
    return {
        key: value
        for key, value in vars(module).items()
        if not key.startswith("_") and is_runnable(value)
    }


def _candidates_hint(module: ModuleType) -> str | None:
    found = _runnables(module)
    return f"It defines: {', '.join(sorted(found))}" if found else None


def load_target(target: str) -> tuple[Any, str]:
    """The object `target` names and a printable name for it."""
    path, name = split_target(target)
    file = module_file(path)
    module = load_module(file)
    variable, obj = find_runnable(module, name, path)
    return obj, getattr(obj, "name", None) or variable
