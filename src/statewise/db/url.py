"""Pick a backend from a URL: `sqlite:///path[?table_prefix=]`, `memory://`,
`postgresql://...[?schema=]`, `redis://...[?prefix=]`; on any of them the retention
options `keep_versions=`, `keep_days=`, `commit_id_window=` and `slack=` (see `Retention`)."""

from __future__ import annotations

import os
from importlib import import_module
from typing import Any
from urllib.parse import parse_qsl, urlencode, urlsplit, urlunsplit

from statewise.db.base import BaseDb
from statewise.db.retention import URL_OPTIONS, Retention
from statewise.exceptions import ConfigurationError


def mask_password(url: str) -> str:
    """The URL with its password replaced by ***, for error messages and logs."""
    scheme, sep, rest = url.partition("://")
    if not sep or "@" not in rest:
        return url
    credentials, _, host = rest.rpartition("@")
    user, colon, _password = credentials.partition(":")
    return f"{scheme}://{user}{':***' if colon else ''}@{host}"


def db_from_url(url: str) -> BaseDb:
    scheme, sep, rest = url.partition("://")
    if not sep:
        from statewise.db.sqlite import SqliteDb

        return SqliteDb(db_file=url)
    scheme = scheme.lower()
    if scheme == "sqlite":
        from statewise.db.sqlite import SqliteDb

        path, options = split_options(
            rest[1:] if rest.startswith("/") else rest, {"table_prefix", *URL_OPTIONS}
        )
        return SqliteDb(
            db_file=path or ":memory:",
            table_prefix=options.get("table_prefix", "statewise_"),
            retention=Retention.from_options(options),
        )
    if scheme == "memory":
        from statewise.db.memory import InMemoryDb

        _rest, options = split_options(url, URL_OPTIONS)
        return InMemoryDb(retention=Retention.from_options(options))
    backends = {
        "postgres": ("statewise.db.postgres", "PostgresDb", "db_url"),
        "postgresql": ("statewise.db.postgres", "PostgresDb", "db_url"),
        "redis": ("statewise.db.redis", "RedisDb", "url"),
        "rediss": ("statewise.db.redis", "RedisDb", "url"),
    }
    if scheme in backends:
        module, cls, arg = backends[scheme]
        factory: Any = getattr(import_module(module), cls)
        url, options = split_options(url, {"schema", "prefix", *URL_OPTIONS})
        retention = Retention.from_options(options)
        named = {k: v for k, v in options.items() if k not in URL_OPTIONS}
        db: BaseDb = factory(**{arg: url}, **named, retention=retention)
        return db
    raise ConfigurationError(
        f"unknown database URL scheme {scheme!r} in {mask_password(url)!r}; use sqlite:///path, "
        f"memory://, postgresql://... or redis://..."
    )


OWN_OPTIONS = frozenset({"schema", "prefix", "table_prefix", *URL_OPTIONS})
"""statewise's own query parameters in a database URL (no driver knows them)."""


def split_options(
    url: str, names: set[str] | frozenset[str] = OWN_OPTIONS
) -> tuple[str, dict[str, str]]:
    """Take statewise's own query parameters (`?schema=` for PostgreSQL, `?prefix=` for
    Redis, `?table_prefix=` for SQLite, the retention options) out of a URL, leaving the driver's own parameters
    in place."""
    parts = urlsplit(url)
    query = parse_qsl(parts.query, keep_blank_values=True)
    options = {k: v for k, v in query if k in names}
    rest = [(k, v) for k, v in query if k not in names]
    return urlunsplit(parts._replace(query=urlencode(rest))), options


def resolve_db(db: BaseDb | str | None) -> BaseDb:
    """A database object as given, one built from a URL, or (none given) the one named by
    STATEWISE_DB_URL, else a fresh in-memory database."""
    if isinstance(db, BaseDb):
        return db
    if isinstance(db, str):
        return db_from_url(db)
    if db is None:
        url = os.environ.get("STATEWISE_DB_URL")
        if url:
            return db_from_url(url)
        from statewise.db.memory import InMemoryDb

        return InMemoryDb()
    raise ConfigurationError(f"db must be a database object or a URL, not {type(db).__name__}")
