"""Over real HTTP on loopback: who gets a session when two users create the same id at
once, PATCH without `If-Match` merging, `If-Match` checked and written atomically, and a
GET's ETag naming exactly the state it returns."""

from __future__ import annotations

import secrets
import threading
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from statewise.db import SqliteDb
from statewise.db.base import BaseDb
from statewise.server import create_app
from tests.server.conftest import ALICE, BOB, LiveServer, make_agent, start_server, stop_server


@pytest.fixture(params=["sqlite", "postgres"])
def server_db(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[BaseDb]:
    if request.param == "sqlite":
        with SqliteDb(db_file=str(tmp_path / "identity.db")) as db:
            yield db
        return
    from tests.db.conftest import POSTGRES_URL, postgres_problem, require

    require(postgres_problem())
    import psycopg

    from statewise.db.postgres import PostgresDb

    schema = f"sw_test_{secrets.token_hex(4)}"
    pg = PostgresDb(POSTGRES_URL, schema=schema, pool_size=4)
    yield pg
    pg.close()
    with psycopg.connect(POSTGRES_URL, autocommit=True) as conn:
        conn.execute(f'DROP SCHEMA IF EXISTS "{schema}" CASCADE')


@pytest.fixture
def served(server_db: BaseDb) -> Iterator[LiveServer]:
    live = start_server(create_app([make_agent(server_db)], api_keys={ALICE: "alice", BOB: "bob"}))
    yield live
    stop_server(live)


def _together(*calls: Callable[[], httpx.Response]) -> list[httpx.Response]:
    barrier = threading.Barrier(len(calls))
    out: list[Any] = [None] * len(calls)

    def go(i: int) -> None:
        barrier.wait()
        out[i] = calls[i]()

    threads = [threading.Thread(target=go, args=(i,)) for i in range(len(calls))]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    return out


def test_two_users_creating_one_new_session_id_one_wins_the_other_gets_an_error(
    served: LiveServer,
) -> None:
    breaches = 0
    with served.client(ALICE) as alice, served.client(BOB) as bob:
        for i in range(40):
            sid = f"new-{i}"
            ra, rb = _together(
                lambda i=i, sid=sid: alice.post(  # type: ignore[misc]
                    "/v1/agents/lister/runs", json={"input": f"add a{i}", "session_id": sid}
                ),
                lambda i=i, sid=sid: bob.post(  # type: ignore[misc]
                    "/v1/agents/lister/runs", json={"input": f"add b{i}", "session_id": sid}
                ),
            )
            codes = sorted([ra.status_code, rb.status_code])
            winner = ra if ra.status_code == 200 else rb
            loser = rb if winner is ra else ra
            items = winner.json()["session_state"]["items"] if winner.status_code == 200 else []
            ok = (
                codes[0] == 200
                and codes[1] in (404, 409)
                and len(items) == 1
                and "session_state" not in loser.json()  # nothing of the winner's leaks
            )
            breaches += not ok
    assert breaches == 0, f"{breaches} of 40 create races let both users into one session"


def test_one_users_parallel_first_runs_on_a_new_session_id_all_run_in_it(
    served: LiveServer,
) -> None:
    """One client firing its first requests on a new id at once (a page opening several
    requests, a retried POST) creates the session once and every run lands in it."""
    with served.client(ALICE) as alice:
        for round_ in range(3):
            sid = f"mine-{round_}"
            responses = _together(
                *(
                    lambda k=k, sid=sid: alice.post(
                        "/v1/agents/lister/runs", json={"input": f"add i{k}", "session_id": sid}
                    )
                    for k in range(8)
                )
            )
            assert [r.status_code for r in responses] == [200] * 8, [
                (r.status_code, r.text[:120]) for r in responses if r.status_code != 200
            ]
            items = alice.get(f"/v1/sessions/{sid}/state").json()["state"]["items"]
            assert sorted(items) == sorted(f"i{k}" for k in range(8))


def test_patch_without_if_match_merges_concurrent_writers(served: LiveServer) -> None:
    with served.client(ALICE) as alice:
        r = alice.post("/v1/agents/lister/runs", json={"input": "hi", "session_id": "p"})
        assert r.status_code == 200
        responses = _together(
            *(
                lambda k=k: alice.patch(
                    "/v1/sessions/p/state",
                    json={f"k{k}": k},
                    headers={"Content-Type": "application/merge-patch+json"},
                )
                for k in range(16)
            )
        )
        failed = [r.status_code for r in responses if r.status_code != 200]
        assert failed == [], f"{len(failed)} of 16 PATCHes without If-Match were refused"
        state = alice.get("/v1/sessions/p/state").json()["state"]
        assert {f"k{k}": k for k in range(16)}.items() <= state.items()


def test_if_match_is_one_atomic_check_and_write(served: LiveServer) -> None:
    with served.client(ALICE) as alice:
        alice.post("/v1/agents/lister/runs", json={"input": "hi", "session_id": "m"})
        for round_ in range(5):
            got = alice.get("/v1/sessions/m/state")
            etag = got.headers["ETag"]
            responses = _together(
                *(
                    lambda k=k, round_=round_, etag=etag: alice.patch(
                        "/v1/sessions/m/state",
                        json={"winner": k, f"r{round_}": k},
                        headers={
                            "If-Match": etag,
                            "Content-Type": "application/merge-patch+json",
                        },
                    )
                    for k in range(8)
                )
            )
            codes = sorted(r.status_code for r in responses)
            assert codes == [200] + [412] * 7, codes
            after = alice.get("/v1/sessions/m/state")
            won = next(r for r in responses if r.status_code == 200).json()
            assert after.json()["state"]["winner"] == won["state"]["winner"]
            assert after.headers["ETag"] == f'"{won["version"]}"'


def test_get_state_etag_names_exactly_the_state_returned(
    server_db: BaseDb, served: LiveServer
) -> None:
    from statewise import Agent

    reader = Agent(name="lister", db=server_db)
    with served.client(ALICE) as alice:
        alice.post("/v1/agents/lister/runs", json={"input": "hi", "session_id": "e"})
        stop = threading.Event()

        def writer() -> None:
            with served.client(ALICE) as w:
                n = 0
                while not stop.is_set():
                    n += 1
                    w.patch(
                        "/v1/sessions/e/state",
                        json={"n": n},
                        headers={"Content-Type": "application/merge-patch+json"},
                    )

        thread = threading.Thread(target=writer)
        thread.start()
        mismatched = 0
        try:
            for _ in range(40):
                got = alice.get("/v1/sessions/e/state")
                version = int(got.headers["ETag"].strip('"'))
                at_version = reader.get_state_at("e", version)
                mismatched += at_version.get("n") != got.json()["state"].get("n")
        finally:
            stop.set()
            thread.join(30)
    assert mismatched == 0, f"{mismatched} of 40 GETs returned an ETag of another state"
