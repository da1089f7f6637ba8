"""The Redis harness: each harness uses its own key prefixes and deletes their keys."""

from __future__ import annotations

import secrets
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager, contextmanager

from statewise.db.base import BaseDb
from statewise.db.records import ScopeKey
from statewise.db.testing.base import CorruptTarget, Harness
from statewise.db.testing.harnesses import GARBAGE, _need


class RedisHarness(Harness):
    name = "redis"

    def __init__(self, url: str, prefix: str) -> None:
        super().__init__()
        self.url = url
        self.prefix = f"{prefix}-{secrets.token_hex(4)}"
        self.prefixes = [self.prefix]

    def _open(self, prefix: str) -> BaseDb:
        from statewise.db.redis import RedisDb

        return RedisDb(self.url, prefix=prefix)

    def open_db(self) -> BaseDb:
        return self._open(self.prefix)

    def reopen(self) -> BaseDb:
        return self.track(self._open(self.prefix))

    def new_db(self) -> BaseDb:
        prefix = f"{self.prefix}-{len(self.prefixes)}"
        self.prefixes.append(prefix)
        return self.track(self._open(prefix))

    def corrupt(
        self,
        target: CorruptTarget,
        *,
        key: ScopeKey | None = None,
        session_id: str | None = None,
        at: int | str = 0,
    ) -> None:
        from statewise.db.redis import RedisDb

        db = self.db
        assert isinstance(db, RedisDb)
        k = db.keys
        if target == "snapshot":
            name, field = k.snap(_need(key, "key")), str(at)
        elif target == "delta":
            name, field = k.dseg(_need(key, "key")), str(at)
        elif target == "event":
            name, field = k.ev(_need(session_id, "session_id")), str(at)
        else:
            name, field = k.runs(_need(session_id, "session_id")), f"messages:{at}"
        assert db.client.hexists(name, field), f"corrupt {target}: no such record"
        db.client.hset(name, field, GARBAGE)

    def stored_rows(self, session_id: str) -> dict[str, int]:
        from statewise.db.redis import RedisDb

        db = self.db
        assert isinstance(db, RedisDb)
        k, key = db.keys, ScopeKey("session", session_id)
        return {
            "deltas": db.client.hlen(k.dseg(key)),
            "snapshots": db.client.zcard(k.snapv(key)),
            "events": db.client.hlen(k.evm(session_id)),
            "runs": db.client.zcard(k.runord(session_id)),
            "commit_ids": db.client.hlen(k.commits(session_id)),
        }

    def close(self) -> None:
        import redis

        super().close()
        client = redis.Redis.from_url(self.url)
        try:
            for prefix in self.prefixes:
                batch = list(client.scan_iter(match="{" + prefix + "}*", count=1000))
                for i in range(0, len(batch), 500):
                    client.delete(*batch[i : i + 500])
        finally:
            client.close()


def redis_backend(
    url: str, prefix: str = "sw-test"
) -> Callable[[], AbstractContextManager[Harness]]:
    """A factory for `register_backend`: every harness uses fresh prefixes `prefix-*`."""

    @contextmanager
    def factory() -> Iterator[Harness]:
        with RedisHarness(url, prefix) as harness:
            yield harness

    return factory


__all__ = ["RedisHarness", "redis_backend"]
