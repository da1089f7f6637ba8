"""A strict conflict on a secret key in a fleet run: the error DBOS records (its
`workflow_status`/`operation_outputs` tables) and `GET /v1/fleet/runs/{id}` name the key,
never the values (the plaintext grep over DBOS's system tables)."""

from __future__ import annotations

import json
import secrets
from pathlib import Path
from typing import Any

import psycopg
import pytest

from statewise.exceptions import RunError
from statewise.server import create_app
from tests.fleet.conftest import FleetLab
from tests.server.conftest import start_server, stop_server

pytestmark = [pytest.mark.postgres, pytest.mark.slow]

VAULT_APP = Path(__file__).with_name("_vault_app.py")
TAG = secrets.token_hex(4)
S = {name: f"PLAINTEXT{name.upper()}{TAG}" for name in ("token", "theirs", "ours")}


def _leaks(blob: str) -> list[str]:
    return [name for name, value in S.items() if value in blob]


def _dbos_tables(url: str) -> str:
    chunks: list[str] = []
    with psycopg.connect(url, autocommit=True) as conn:
        tables = conn.execute(
            "SELECT table_name FROM information_schema.tables WHERE table_schema = 'dbos'"
        ).fetchall()
        assert tables
        for (table,) in tables:
            rows = conn.execute(f'SELECT t::text FROM dbos."{table}" t').fetchall()
            chunks.extend(r[0] for r in rows)
    return "\n".join(chunks)


@pytest.mark.timeout(180)
def test_a_strict_secret_conflict_on_a_fleet_keeps_values_out_of_dbos(
    lab: FleetLab, fleet: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    from cryptography.fernet import Fernet

    key = Fernet.generate_key().decode()
    monkeypatch.setenv("STATEWISE_ENCRYPTION_KEY", key)
    monkeypatch.setenv("STATEWISE_FLEET_TEST_SECRETS", json.dumps(S))
    lab.app = VAULT_APP
    lab.extra_env = {"STATEWISE_ENCRYPTION_KEY": key, "STATEWISE_FLEET_TEST_SECRETS": json.dumps(S)}
    from tests.fleet._vault_app import build

    vault, _ = build(lab.url)
    vault.state.for_session("v1").set("api_token", S["token"])
    fleet.queue("statewise", polling_interval=0.1)
    lab.start_worker("w1")
    handle = fleet.enqueue(vault, "race", session_id="v1")
    with pytest.raises(RunError, match="api_token"):
        handle.result(timeout=120)
    info = fleet.info(handle.run_id)
    assert info.status == "failed" and "api_token" in (info.error or "")
    live = start_server(create_app([vault], fleet=fleet))
    try:
        with live.client() as client:
            shown = client.get(f"/v1/fleet/runs/{handle.run_id}").text
            listed = client.get("/v1/fleet/runs").text
    finally:
        stop_server(live)
        vault.db.close()
    found = {
        "dbos tables": _leaks(_dbos_tables(lab.url)),
        "fleet http": _leaks(shown + listed),
        "fleet info": _leaks(json.dumps(info.to_dict(), default=str)),
        "worker log": _leaks(lab.log_of("w1")),
    }
    assert {k: v for k, v in found.items() if v} == {}
