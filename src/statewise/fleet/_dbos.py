"""The one place that imports `dbos` (the `dbos` extra); a missing extra is one clear line."""

from __future__ import annotations

from types import ModuleType

from statewise.exceptions import ConfigurationError, MissingDependencyError


def require_dbos() -> ModuleType:
    try:
        import dbos
    except ImportError as exc:
        raise MissingDependencyError("dbos", "dbos") from exc
    return dbos


def check_url(url: str) -> str:
    """A fleet lives in PostgreSQL: DBOS keeps its queues and run records there."""
    if not isinstance(url, str) or not url.startswith(("postgresql://", "postgres://")):
        raise ConfigurationError(
            f"a fleet needs a PostgreSQL URL (postgresql://user@host:port/database), got {url!r}"
        )
    return url
