"""The tools package exports exactly its public API, sorted."""

from __future__ import annotations

import statewise.tools


def _isort_key(name: str) -> tuple[int, str]:
    """Ruff's RUF022 order: CONSTANTS, then Classes, then functions."""
    return (0 if name.isupper() else 1 if name[0].isupper() else 2, name)


def test_all_is_sorted_and_complete() -> None:
    exported = statewise.tools.__all__
    assert exported == sorted(exported, key=_isort_key)
    assert all(hasattr(statewise.tools, name) for name in exported)
    public = {
        name
        for name, value in vars(statewise.tools).items()
        if not name.startswith("_")
        and getattr(value, "__module__", "").startswith("statewise.tools")
    }
    assert public <= set(exported)


def test_tools_import_only_exceptions_messages_and_worker_threads() -> None:
    import ast
    import pathlib

    allowed = (
        "statewise.tools",
        "statewise.exceptions",
        "statewise.models.messages",
        "statewise._workers",  # (the threads sync tools run in on a shared loop)
    )
    for path in pathlib.Path(statewise.tools.__file__).parent.glob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ImportFrom) and (node.module or "").startswith("statewise"):
                assert node.module is not None and node.module.startswith(allowed), (
                    path,
                    node.module,
                )
            if isinstance(node, ast.Import):
                for alias in node.names:
                    assert not alias.name.startswith("statewise") or alias.name.startswith(allowed)
