"""The one place that imports `dbos` (the `dbos` extra); a missing extra is one clear line."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from types import ModuleType

from statewise.db.url import mask_password, split_options
from statewise.exceptions import (
    ConfigurationError,
    DatabaseUnavailableError,
    MissingDependencyError,
)


def require_dbos() -> ModuleType:
    try:
        import dbos
    except ImportError as exc:
        raise MissingDependencyError("dbos", "dbos") from exc
    return dbos


def check_url(url: str) -> str:
    """A fleet lives in PostgreSQL: DBOS keeps its queues and run records there. The URL
    DBOS gets is without statewise's own options (`?schema=` of session storage, ...):
    its driver would refuse them as unknown connection options."""
    if not isinstance(url, str) or not url.startswith(("postgresql://", "postgres://")):
        raise ConfigurationError(
            f"a fleet needs a PostgreSQL URL (postgresql://user@host:port/database), got "
            f"{mask_password(url) if isinstance(url, str) else url!r}"
        )
    return split_options(url)[0]


@contextmanager
def reaching(url: str) -> Iterator[None]:
    """Connection failures from DBOS's drivers (SQLAlchemy over psycopg) as one
    `DatabaseUnavailableError` naming the server, not a driver traceback."""
    try:
        yield
    except Exception as exc:
        import psycopg
        import sqlalchemy.exc

        if not isinstance(
            exc,
            (
                sqlalchemy.exc.OperationalError,
                sqlalchemy.exc.InterfaceError,
                psycopg.OperationalError,
            ),
        ):
            raise
        cause = getattr(exc, "orig", None) or exc
        reason = str(cause).strip().splitlines()[0] if str(cause).strip() else type(cause).__name__
        raise DatabaseUnavailableError(
            f"cannot reach the fleet's PostgreSQL at {mask_password(url)}: {reason}"
        ) from None
