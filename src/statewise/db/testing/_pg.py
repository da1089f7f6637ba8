"""The PostgreSQL harness: each harness gets its own schemas and drops them afterwards."""

from __future__ import annotations

import secrets
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager, contextmanager

from statewise.db.base import BaseDb
from statewise.db.records import ScopeKey
from statewise.db.testing.base import CorruptTarget, Harness
from statewise.db.testing.harnesses import _corrupt_sql, stored_rows_sql


class PostgresHarness(Harness):
    name = "postgres"

    def __init__(self, url: str, prefix: str) -> None:
        super().__init__()
        self.url = url
        self.schema = f"{prefix}_{secrets.token_hex(4)}"
        self.schemas = [self.schema]

    def _open(self, schema: str) -> BaseDb:
        from statewise.db.postgres import PostgresDb

        return PostgresDb(self.url, schema=schema, pool_size=8)

    def open_db(self) -> BaseDb:
        return self._open(self.schema)

    def reopen(self) -> BaseDb:
        return self.track(self._open(self.schema))

    def new_db(self) -> BaseDb:
        schema = f"{self.schema}_{len(self.schemas)}"
        self.schemas.append(schema)
        return self.track(self._open(schema))

    def corrupt(
        self,
        target: CorruptTarget,
        *,
        key: ScopeKey | None = None,
        session_id: str | None = None,
        at: int | str = 0,
    ) -> None:
        import psycopg

        sql, params = _corrupt_sql(f'"{self.schema}".', "%s", target, key, session_id, at)
        with psycopg.connect(self.url, autocommit=True) as conn:
            changed = conn.execute(sql, params).rowcount
        assert changed == 1, f"corrupt {target}: no such record"

    def stored_rows(self, session_id: str) -> dict[str, int]:
        import psycopg

        with psycopg.connect(self.url, autocommit=True) as conn:
            return {
                name: conn.execute(sql, (session_id,)).fetchone()[0]  # type: ignore[index]
                for name, sql in stored_rows_sql(f'"{self.schema}".', "%s").items()
            }

    def close(self) -> None:
        import psycopg

        super().close()
        with psycopg.connect(self.url, autocommit=True) as conn:
            for schema in self.schemas:
                conn.execute(f'DROP SCHEMA IF EXISTS "{schema}" CASCADE')


def postgres_backend(
    url: str, prefix: str = "sw_test"
) -> Callable[[], AbstractContextManager[Harness]]:
    """A factory for `register_backend`: every harness uses fresh schemas named `prefix_*`."""

    @contextmanager
    def factory() -> Iterator[Harness]:
        with PostgresHarness(url, prefix) as harness:
            yield harness

    return factory


__all__ = ["PostgresHarness", "postgres_backend"]
