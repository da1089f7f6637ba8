"""Storage: the interface, the in-memory and SQLite backends, and URL resolution.

`PostgresDb` and `RedisDb` are imported lazily so the core needs neither driver.
"""

from __future__ import annotations

from importlib import import_module
from typing import Any

from statewise.db.base import BaseDb
from statewise.db.memory import InMemoryDb
from statewise.db.sqlite import SqliteDb, SqliteStorage
from statewise.db.url import db_from_url, resolve_db

__all__ = [
    "BaseDb",
    "InMemoryDb",
    "PostgresDb",
    "RedisDb",
    "SqliteDb",
    "SqliteStorage",
    "db_from_url",
    "resolve_db",
]

_LAZY = {"PostgresDb": "statewise.db.postgres", "RedisDb": "statewise.db.redis"}


def __getattr__(name: str) -> Any:
    if name in _LAZY:
        return getattr(import_module(_LAZY[name]), name)
    raise AttributeError(f"module 'statewise.db' has no attribute {name!r}")
