"""Fleet URLs with statewise's own options (`postgresql://...?schema=x`, the form the docs
give for PostgreSQL storage): honoured for session storage, never passed to DBOS, whose
driver refuses them as unknown connection options."""

from __future__ import annotations

import json
from typing import Any

import pytest

from statewise.db.postgres import PostgresDb
from tests.fleet.conftest import APP, FleetLab

pytestmark = [pytest.mark.postgres, pytest.mark.slow]


@pytest.mark.timeout(180)
def test_worker_and_enqueue_take_a_url_with_a_schema(lab: FleetLab, fleet: Any) -> None:
    fleet.queue("statewise", polling_interval=0.1)
    url = f"{lab.url}?schema=fleet_sessions"
    lab.worker_url = url
    lab.start_worker("w1")
    done = lab.cli("enqueue", f"{APP}:helper", "add tea", "--session", "u1", "--db", url, "--json")
    assert done.returncode == 0, done.stderr
    run_id = json.loads(done.stdout)["run_id"]
    assert "added" in fleet.run(run_id).result(timeout=120)
    shown = lab.cli("runs", "show", run_id, "--db", url, "--json")
    assert shown.returncode == 0, shown.stderr
    assert json.loads(shown.stdout)["status"] == "completed"
    # The worker kept the session where the URL said, not in the app's own schema.
    honoured = PostgresDb(lab.url, schema="fleet_sessions")
    try:
        assert [r.run_id for r in honoured.read_runs("u1")] == [run_id]
    finally:
        honoured.close()
    own = PostgresDb(lab.url, schema="sessions")
    try:
        assert own.read_runs("u1") == []
    finally:
        own.close()


def test_fleet_object_strips_statewise_options(fleet_db: str) -> None:
    from statewise.fleet import Fleet

    with Fleet(f"{fleet_db}?schema=x&prefix=y") as fleet:
        assert fleet.url == fleet_db
        assert fleet.runs() == []
