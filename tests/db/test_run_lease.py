"""One run lease keeper (`statewise.run.lease`): a run's lease is renewed off the run's
event loop, so a sync step that blocks the loop for longer than the lease does not let
another owner claim the still-running run; leases expire by the database's clock, not
each client's."""

from __future__ import annotations

import secrets
import threading
import time
from collections.abc import Iterator
from typing import Any

import pytest

from statewise import RunContext, StepInput, Workflow
from statewise.db.base import BaseDb
from statewise.db.testing import Harness


def test_a_sync_step_blocking_the_loop_past_the_lease_keeps_the_run(harness: Harness) -> None:
    intruder = harness.reopen()
    tries: list[bool] = []

    def blocking(step_input: StepInput, run_context: RunContext) -> str:
        # A sync step runs on the run's loop and blocks it (0.7 s, over twice the lease).
        # Meanwhile another process tries to take the run, again and again.
        ends = time.monotonic() + 0.7
        while time.monotonic() < ends:
            tries.append(
                intruder.claim_run(run_context.session_id, run_context.run_id, "intruder", 0.3)
            )
            time.sleep(0.05)
        return "blocked"

    flow = Workflow(name="leased", steps=[blocking], db=harness.db, run_lease_seconds=0.3)
    out = flow.run("go", session_id="s")
    assert out.content == "blocked"
    assert len(tries) >= 5 and not any(tries), f"another owner took the running run: {tries}"
    # Released at the end: anyone may take it now.
    assert intruder.claim_run("s", out.run_id, "intruder", 0.3)


def test_lease_claim_renew_expiry_and_release(harness: Harness) -> None:
    db, other = harness.db, harness.reopen()
    assert db.claim_run("s", "r", "a", 0.4)
    assert not other.claim_run("s", "r", "b", 0.4)  # a's lease is live
    assert db.claim_run("s", "r", "a", 0.4)  # renewed by its owner
    time.sleep(0.2)
    assert not other.claim_run("s", "r", "b", 0.4)  # still live (renewed 0.2 s ago)
    time.sleep(0.4)
    assert other.claim_run("s", "r", "b", 0.4)  # expired: b takes it
    assert not db.claim_run("s", "r", "a", 0.4)
    db.release_run("s", "r", "a")  # not a's to release: nothing happens
    assert not db.claim_run("s", "r", "a", 0.4)
    other.release_run("s", "r", "b")
    assert db.claim_run("s", "r", "a", 0.4)


# ---- the database's clock, not the client's ----------------------------------------------


@pytest.fixture(params=["postgres", "redis"])
def network_db(request: pytest.FixtureRequest) -> Iterator[BaseDb]:
    if request.param == "postgres":
        import psycopg

        from statewise.db.postgres import PostgresDb

        url = request.getfixturevalue("pg_url")
        schema = f"sw_lease_{secrets.token_hex(4)}"
        pg = PostgresDb(url, schema=schema, pool_size=2)
        yield pg
        pg.close()
        with psycopg.connect(url, autocommit=True) as conn:
            conn.execute(f'DROP SCHEMA IF EXISTS "{schema}" CASCADE')
    else:
        from statewise.db.redis import RedisDb

        url = request.getfixturevalue("redis_url")
        prefix = f"sw-lease-{secrets.token_hex(4)}"
        rd = RedisDb(url, prefix=prefix)
        yield rd
        keys = list(rd.client.scan_iter(match="{" + prefix + "}*"))
        if keys:
            rd.client.delete(*keys)
        rd.close()


def test_lease_expiry_is_decided_by_the_database_clock(
    network_db: BaseDb, monkeypatch: pytest.MonkeyPatch
) -> None:
    assert network_db.claim_run("s", "r", "a", 30)
    # Another client whose clock runs an hour ahead must not see a's lease as expired,
    # and one whose clock runs an hour behind must not keep an expired lease alive.
    real = time.time
    monkeypatch.setattr(time, "time", lambda: real() + 3600)
    assert not network_db.claim_run("s", "r", "b", 30)
    monkeypatch.setattr(time, "time", lambda: real() - 3600)
    assert network_db.claim_run("s", "r2", "a", 0.2)
    time.sleep(0.4)
    assert network_db.claim_run("s", "r2", "b", 30)


def test_a_renewal_thread_keeps_a_lease_alive_while_the_caller_blocks(harness: Harness) -> None:
    from statewise.run.lease import RunLease

    lease = RunLease.claim(harness.db, "s", "r", 0.3)
    assert lease is not None
    other = harness.reopen()
    taken: list[Any] = []
    blocker = threading.Event()
    blocker.wait(0.8)  # this thread blocks; the lease's own thread renews it
    taken.append(other.claim_run("s", "r", "b", 0.3))
    lease.release()
    taken.append(other.claim_run("s", "r", "b", 0.3))
    assert taken == [False, True]
