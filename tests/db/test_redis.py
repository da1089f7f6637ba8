"""RedisDb beyond the conformance suite: round trips, key layout, faults, idempotent retry."""

from __future__ import annotations

import asyncio
import secrets
import threading
from collections.abc import Callable, Iterator

import pytest

from statewise.db.records import Commit, DeltaSegment, NewEvent, ScopeKey, ScopeWrite
from statewise.db.store import SessionSpec, StateStore
from statewise.db.testing.cases import setop, write
from statewise.exceptions import DatabaseUnavailableError
from tests.db._proxy import TcpProxy

pytestmark = pytest.mark.redis
redis = pytest.importorskip("redis")


@pytest.fixture
def prefix(redis_url: str) -> Iterator[str]:
    name = f"sw-test-{secrets.token_hex(4)}"
    yield name
    client = redis.Redis.from_url(redis_url)
    keys = list(client.scan_iter(match="{" + name + "}*"))
    if keys:
        client.delete(*keys)
    client.close()


def _db(url: str, prefix: str):  # type: ignore[no-untyped-def]
    from statewise.db.redis import RedisDb

    return RedisDb(url, prefix=prefix)


def _commit(db, sid: str) -> Commit:  # type: ignore[no-untyped-def]
    keys = [ScopeKey("session", sid), ScopeKey("user", "u1"), ScopeKey("app", "app")]
    record, versions = db.probe(sid, keys)
    return Commit(
        session=record,
        writes=[
            ScopeWrite(
                key=k, base_version=v, segments=[DeltaSegment(source="t", ops=[setop("a", v)])]
            )
            for k, v in versions.items()
        ],
        events=[NewEvent(type="state_delta"), NewEvent(type="model_response", data={"x": 1})],
    )


def test_commit_probe_and_load_are_one_round_trip_each(redis_url: str, prefix: str) -> None:
    proxy = TcpProxy(redis_url)
    try:
        with _db(proxy.url, prefix) as db:
            write(db, "s1", setop("a", 0))  # loads the script (EVALSHA, NOSCRIPT, LOAD) once
            keys = [ScopeKey("session", "s1"), ScopeKey("user", "u1"), ScopeKey("app", "app")]
            db.load_scopes(keys)
            trips = []
            for _ in range(5):
                commit = _commit(db, "s1")
                before = proxy.round_trips
                db.commit(commit)
                trips.append(proxy.round_trips - before)
            assert trips == [1] * 5
            reads: list[Callable[[], object]] = [
                lambda: db.probe("s1", keys),
                lambda: db.load_scopes(keys),
            ]
            for read in reads:
                before = proxy.round_trips
                read()
                assert proxy.round_trips - before == 1
    finally:
        proxy.close()


def test_every_key_of_a_prefix_shares_one_cluster_slot(redis_url: str, prefix: str) -> None:
    with _db(redis_url, prefix) as db:
        write(db, "s1", setop("a", 1), snapshot={"a": 1})
        write(db, "s{2}", setop("a", 1), key=ScopeKey("user", "u:x"), user_id="u:x")
        write(db, "s{2}", setop("b", 1), key=ScopeKey("app", "app"), user_id="u:x")
        keys = list(db.client.scan_iter(match="{" + prefix + "}*"))
        assert len(keys) >= 15
        from redis.crc import key_slot  # the Cluster slot function (CRC16 of the hash tag)

        slots = {key_slot(k) for k in keys}
        assert len(slots) == 1, "multi-scope commits need every key in one slot"


def test_retry_after_a_lost_reply_does_not_apply_twice(redis_url: str, prefix: str) -> None:
    with _db(redis_url, prefix) as db:
        write(db, "s1", setop("a", 0))
        commit = _commit(db, "s1")
        keys, args = db._commit_args(commit, 1.0)
        first = db._commit_script(keys=keys, args=args)
        again = db._commit_script(keys=keys, args=args)  # same token: what a retry sends
        # A replay answers with the result stored with the commit id: "last_seq|..."
        replayed_seq = int(bytes(again[1]).split(b"|")[0])
        assert (first[0], again[0], first[1], replayed_seq) == (1, 2, 3, 3)
        assert [e.seq for e in db.read_events("s1")] == [1, 2, 3]
        assert db.probe("s1", [ScopeKey("session", "s1")])[1] == {ScopeKey("session", "s1"): 2}


def test_reconnects_after_the_server_drops_the_connection(redis_url: str, prefix: str) -> None:
    with _db(redis_url, prefix) as db:
        write(db, "s1", setop("a", 1))
        name = f"sw-kill-{secrets.token_hex(3)}"
        db.client.client_setname(name)
        admin = redis.Redis.from_url(redis_url)
        for client in admin.client_list():
            if client.get("name") == name:
                admin.client_kill_filter(_id=client["id"])
        admin.close()
        write(db, "s1", setop("a", 2))
        assert [d.version for d in db.read_deltas(ScopeKey("session", "s1"))] == [1, 2]


def test_server_down_at_start_names_the_url_without_password(prefix: str) -> None:
    with pytest.raises(DatabaseUnavailableError) as info:
        _db("redis://:hunter2@127.0.0.1:1/0", prefix)
    assert "redis://:***@127.0.0.1:1/0" in str(info.value)
    assert "hunter2" not in str(info.value)


def test_url_resolution(redis_url: str) -> None:
    from statewise.db.redis import RedisDb
    from statewise.db.url import db_from_url

    db = db_from_url(redis_url)
    try:
        assert isinstance(db, RedisDb) and db.prefix == "statewise"
    finally:
        db.close()


def test_a_read_on_the_event_loop_is_one_round_trip_and_its_loop_closes_its_client(
    redis_url: str, prefix: str
) -> None:
    proxy = TcpProxy(redis_url)
    keys = [ScopeKey("session", "s1"), ScopeKey("user", "u1"), ScopeKey("app", "app")]
    try:
        with _db(proxy.url, prefix) as db:
            write(db, "s1", setop("a", 0))
            expected = db.read_scopes("s1", keys, {})
            clients = []

            async def reads() -> list[int]:
                trips = []
                held: dict[ScopeKey, int] = {}
                for _ in range(3):
                    before = proxy.round_trips
                    on = threading.current_thread()
                    record, versions, loaded = await db.aread_scopes("s1", keys, held)
                    assert threading.current_thread() is on  # no worker thread
                    assert (record, versions) == expected[:2]
                    assert {k: s.data for k, s in loaded.items()} == (
                        {} if held else {k: s.data for k, s in expected[2].items()}
                    )
                    held = versions
                    trips.append(proxy.round_trips - before)
                clients.append(await db._loop_clients.client())
                return trips

            # The first read of a loop connects (its handshake is not counted).
            assert asyncio.run(reads())[1:] == [1, 1]
            assert asyncio.run(reads())[1:] == [1, 1]
            first, second = clients
            assert first is not second  # each loop its own client ...
            for client in clients:  # ... closed by its loop as it ended
                pool = client.connection_pool
                opened = pool._available_connections + list(pool._in_use_connections)
                assert opened and not any(c.is_connected for c in opened)
    finally:
        proxy.close()


def test_a_read_of_no_scopes_reads_the_session_alone(redis_url: str, prefix: str) -> None:
    with _db(redis_url, prefix) as db:
        write(db, "s1", setop("a", 1))
        for sid, record in (("s1", db.get_session("s1")), ("nope", None)):
            read = db.read_scopes(sid, (), {})
            assert read == asyncio.run(db.aread_scopes(sid, (), {}))
            assert read == (record, {}, {})


# ---- commits on the event loop -----------------------------------------------------------


def test_a_commit_on_the_loop_whose_caller_is_cancelled_is_still_recorded(
    redis_url: str, prefix: str
) -> None:
    """The script may run after its caller is cancelled: what landed is still recorded in
    the working state, or the transaction's next commit would rebase onto its own write
    and apply it twice."""
    proxy = TcpProxy(redis_url)
    try:
        with _db(proxy.url, prefix) as db:
            store = StateStore(db)
            spec = SessionSpec(session_id="s1")

            async def main() -> None:
                txn = await store.abegin(spec)
                txn.state["items"] = []
                await txn.commit(source="start")
                txn.state["items"].append("a")
                # Redis runs one script at a time: ours waits behind a busy one.
                busy = asyncio.ensure_future(asyncio.to_thread(_busy_script, redis_url, 0.3))
                await asyncio.sleep(0.05)
                before = proxy.round_trips
                first = asyncio.ensure_future(txn.commit(source="a"))
                while proxy.round_trips == before:  # the script is on its way
                    await asyncio.sleep(0.001)
                first.cancel()
                with pytest.raises(asyncio.CancelledError):
                    await first
                await busy
                await asyncio.sleep(0.1)  # the reply to the cancelled commit arrives
                txn.state["items"].append("b")
                await txn.commit(source="b")
                txn.close()

            asyncio.run(main())
            assert store.read_state(spec)[0] == {"items": ["a", "b"]}
    finally:
        proxy.close()


def _busy_script(url: str, seconds: float) -> None:
    """Keep Redis busy for `seconds` in one script (it runs nothing else meanwhile)."""
    client = redis.Redis.from_url(url)
    try:
        client.eval(
            "local s = redis.call('TIME') "
            "while true do local n = redis.call('TIME') "
            "if (n[1] - s[1]) * 1000000 + (n[2] - s[2]) > tonumber(ARGV[1]) then break end "
            "end return 1",
            0,
            int(seconds * 1_000_000),
        )
    finally:
        client.close()
