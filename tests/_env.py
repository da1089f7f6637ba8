"""Environment for subprocesses in tests: this checkout's `src` first on the path, so a
child process imports the code under test even where the package is not installed."""

from __future__ import annotations

import os
from pathlib import Path

SRC = Path(__file__).resolve().parents[1] / "src"


def subprocess_env(**extra: str) -> dict[str, str]:
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([str(SRC), env.get("PYTHONPATH", "")]).rstrip(os.pathsep)
    env.update(extra)
    return env


def without_modules(*modules: str) -> str:
    """Python source that makes importing any of `modules` fail as if it were not installed,
    to prefix a `python -c` script: tests a missing extra without uninstalling it."""
    return (
        "import importlib.abc, sys\n"
        "class _Blocked(importlib.abc.MetaPathFinder):\n"
        "    def find_spec(self, name, path=None, target=None):\n"
        f"        if name.split('.')[0] in {sorted(modules)!r}:\n"
        "            raise ModuleNotFoundError(f'No module named {name!r}', name=name)\n"
        "        return None\n"
        "sys.meta_path.insert(0, _Blocked())\n"
    )
