"""The `Harness` a backend under test implements (see the package's docstring), in a
module of its own so the case modules and harnesses import it without importing the
package `__init__`, which imports them."""

from __future__ import annotations

from collections.abc import Callable
from contextlib import AbstractContextManager, ExitStack
from typing import Literal

from statewise.db.base import BaseDb
from statewise.db.records import ScopeKey

CorruptTarget = Literal["snapshot", "delta", "event", "run"]
Factory = Callable[[], AbstractContextManager["Harness"]]


class Harness:
    """One backend under test. Subclasses implement the four hooks; `close` closes every
    database they handed out."""

    name: str = "?"

    def __init__(self) -> None:
        self._stack = ExitStack()
        self._db: BaseDb | None = None

    @property
    def db(self) -> BaseDb:
        if self._db is None:
            self._db = self.track(self.open_db())
        return self._db

    def track(self, db: BaseDb) -> BaseDb:
        self._stack.callback(db.close)
        return db

    def open_db(self) -> BaseDb:
        """A fresh, empty database (the one `db` returns)."""
        raise NotImplementedError

    def reopen(self) -> BaseDb:
        """Another handle on the storage of `db`, as a second process would open it."""
        raise NotImplementedError

    def new_db(self) -> BaseDb:
        """Another empty database, isolated from `db`."""
        raise NotImplementedError

    def corrupt(
        self,
        target: CorruptTarget,
        *,
        key: ScopeKey | None = None,
        session_id: str | None = None,
        at: int | str = 0,
    ) -> None:
        """Overwrite one stored record with bytes that are not JSON: a scope's snapshot or
        delta at version `at`, a session's event `at` (seq) or run `at` (run id)."""
        raise NotImplementedError

    def stored_rows(self, session_id: str) -> dict[str, int]:
        """How many records the session's history holds, read raw: `deltas` and
        `snapshots` of its own scope, `events`, `runs` and `commit_ids` (for the retention
        cases: storage stays bounded under a policy)."""
        raise NotImplementedError

    def close(self) -> None:
        self._stack.close()

    def __enter__(self) -> Harness:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
