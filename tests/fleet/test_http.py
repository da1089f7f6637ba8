"""Fleet runs over HTTP and on the web page: a server given a fleet lists the runs on its
queues (queued, running, completed, failed) with their worker, scoped by API key like
sessions. Real PostgreSQL, a real `statewise worker`, a real server on loopback, and the
page in headless Chromium."""

from __future__ import annotations

import os
import shutil
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.fleet.conftest import APP, FleetLab
from tests.server.conftest import LiveServer, start_server, stop_server

pytestmark = [pytest.mark.postgres, pytest.mark.slow]

ANN, BOB, ADMIN = "key-ann-0001", "key-bob-0001", "key-admin-01"
WAIT = 60.0


def _until(what: str, check: Any, timeout: float = WAIT) -> Any:
    deadline = time.monotonic() + timeout
    while True:
        value = check()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout} s waiting for {what}")
        time.sleep(0.05)


def _hold(lab: FleetLab) -> Path:
    return Path(str(lab.side) + ".hold")


@pytest.fixture
def served(lab: FleetLab, fleet: Any, app: Any) -> Iterator[tuple[LiveServer, dict[str, str]]]:
    """A worker, a server with keys for ann, bob and an admin, and four runs: ann's
    completed one, bob's failed one, ann's agent run held inside its second tool call
    (running), and ann's run on a queue no worker takes (queued)."""
    from statewise.server import create_app

    five, _, _, marker = app
    fleet.queue("statewise", polling_interval=0.1)
    fleet.queue("idle")
    _hold(lab).touch()
    lab.start_worker("w1", "--concurrency", "4")
    runs = {
        "completed": fleet.enqueue(five, "alpha", session_id="ann-1", user_id="ann"),
        "failed": fleet.enqueue(five, "boom", session_id="bob-1", user_id="bob"),
        "running": fleet.enqueue(marker, "go", session_id="ann-2", user_id="ann"),
        "queued": fleet.enqueue(five, "later", session_id="ann-3", user_id="ann", queue="idle"),
    }
    assert runs["completed"].result(timeout=WAIT) == "alpha after step 4"
    _until("the failed run", lambda: runs["failed"].status().status == "failed")
    running = runs["running"].run_id
    _until(
        "the agent run inside mark('b')",
        lambda: any(x.run_id == running and x.step == "mark-b" for x in lab.side_lines()),
    )
    live = start_server(
        create_app(
            [five, marker],
            api_keys={ANN: "ann", BOB: "bob"},
            admin_keys=[ADMIN],
            fleet=fleet,
        )
    )
    try:
        yield live, {status: handle.run_id for status, handle in runs.items()}
    finally:
        _hold(lab).unlink(missing_ok=True)
        stop_server(live)


def test_the_api_lists_fleet_runs_with_status_and_executor_scoped_by_key(
    served: tuple[LiveServer, dict[str, str]], lab: FleetLab
) -> None:
    live, run_ids = served
    seen: list[tuple[str, int]] = []

    def get(path: str, key: str | None = ADMIN) -> httpx.Response:
        with live.client(key) as client:
            response = client.get(path)
        seen.append((path, response.status_code))
        return response

    listed = get("/v1/fleet/runs")
    assert listed.status_code == 200, listed.text
    rows = {row["run_id"]: row for row in listed.json()["runs"]}
    assert {rows[run_ids[s]]["status"] for s in run_ids} == set(run_ids)
    for status, run_id in run_ids.items():
        row = rows[run_id]
        assert row["status"] == status
        assert row["created_at"] is not None
        if status != "queued":
            assert row["executor"] == "w1" and row["started_at"] is not None
    assert rows[run_ids["failed"]]["error"] == "RuntimeError: step 2 exploded"
    assert rows[run_ids["completed"]]["output"] == "alpha after step 4"
    assert rows[run_ids["completed"]]["finished_at"] is not None
    assert rows[run_ids["running"]]["target"] == "marker"
    assert rows[run_ids["queued"]]["queue"] == "idle"

    failed_only = get("/v1/fleet/runs?status=failed").json()["runs"]
    assert [r["run_id"] for r in failed_only] == [run_ids["failed"]]
    page = get("/v1/fleet/runs?limit=2").json()
    assert len(page["runs"]) == 2 and page["next_offset"] == 2

    # A user's key sees its own user's runs; another user's run looks absent.
    mine = get("/v1/fleet/runs", ANN).json()["runs"]
    assert {r["run_id"] for r in mine} == {run_ids[s] for s in ("completed", "running", "queued")}
    assert {r["user_id"] for r in mine} == {"ann"}
    assert get(f"/v1/fleet/runs/{run_ids['failed']}", ANN).status_code == 404
    own = get(f"/v1/fleet/runs/{run_ids['running']}", ANN)
    assert own.status_code == 200 and own.json()["status"] == "running"
    bobs = get(f"/v1/fleet/runs/{run_ids['failed']}", BOB).json()
    assert bobs["status"] == "failed" and bobs["executor"] == "w1"

    # Errors are problem documents naming what is wrong.
    missing = get("/v1/fleet/runs/no-such-run")
    assert missing.status_code == 404
    assert missing.headers["content-type"].startswith("application/problem+json")
    assert "no-such-run" in missing.json()["detail"]
    assert get("/v1/fleet/runs?status=lost").status_code == 422
    assert get("/v1/fleet/runs", None).status_code == 401

    # Every status answered here is declared for its route, with the problem schema.
    schema = get("/openapi.json").json()
    for path, code in seen:
        route = "/v1/fleet/runs/{run_id}" if path.startswith("/v1/fleet/runs/") else path
        route = route.split("?")[0]
        if route == "/openapi.json":
            continue
        declared = schema["paths"][route]["get"]["responses"]
        assert str(code) in declared, (route, code)
        if code >= 400:
            content = declared[str(code)]["content"]["application/problem+json"]
            assert content["schema"] == {"$ref": "#/components/schemas/Problem"}
    page_schema = schema["paths"]["/v1/fleet/runs"]["get"]["responses"]["200"]
    assert page_schema["content"]["application/json"]["schema"] == {
        "$ref": "#/components/schemas/FleetRunPage"
    }

    _through_a_generated_client(live, run_ids, lab.tmp)

    # Released, the held agent run completes, and the listing says so.
    _hold(lab).unlink()
    _until(
        "the agent run to complete",
        lambda: get(f"/v1/fleet/runs/{run_ids['running']}").json()["status"] == "completed",
    )


def _through_a_generated_client(live: LiveServer, run_ids: dict[str, str], tmp: Path) -> None:
    """A client generated from the live schema reads the fleet routes into their declared
    types, errors included (any undeclared status raises)."""
    import importlib
    import sys
    from datetime import datetime

    from tests.server.test_generated_client import PACKAGE, generate_client

    with live.client(ADMIN) as c:
        schema = c.get("/openapi.json").json()
    sys.modules.pop(PACKAGE, None)
    where = tmp / "generated"
    where.mkdir()
    client, _ = generate_client(schema, where)
    try:
        ops = importlib.import_module(f"{PACKAGE}.api.fleet")
        list_runs = importlib.import_module(f"{ops.__name__}.list_fleet_runs")
        get_run = importlib.import_module(f"{ops.__name__}.get_fleet_run")
        models = importlib.import_module(f"{PACKAGE}.models")
        with client.AuthenticatedClient(
            base_url=live.url, token=ADMIN, raise_on_unexpected_status=True, timeout=30
        ) as c:
            page = list_runs.sync_detailed(client=c).parsed
            assert isinstance(page, models.FleetRunPage)
            by_id = {run.run_id: run for run in page.runs}
            failed = by_id[run_ids["failed"]]
            assert isinstance(failed, models.FleetRun)
            assert str(failed.status.value) == "failed" and failed.executor == "w1"
            assert isinstance(failed.created_at, datetime)
            one = get_run.sync_detailed(client=c, run_id=run_ids["queued"]).parsed
            assert isinstance(one, models.FleetRun) and one.queue == "idle"
            missing = get_run.sync_detailed(client=c, run_id="no-such-run")
            assert missing.status_code == 404
            assert isinstance(missing.parsed, models.Problem)
    finally:
        for name in [m for m in sys.modules if m == PACKAGE or m.startswith(PACKAGE + ".")]:
            sys.modules.pop(name, None)


def test_a_server_without_a_fleet_has_no_fleet_routes() -> None:
    from statewise.db import InMemoryDb
    from statewise.server import create_app
    from tests.server.conftest import make_agent

    schema = create_app([make_agent(InMemoryDb(), secrets=False)]).openapi()
    assert not [p for p in schema["paths"] if p.startswith("/v1/fleet")]


CHROMIUM = os.environ.get("STATEWISE_CHROMIUM", "/usr/bin/chromium")
CHROMIUM_ARGS = ["--headless", "--no-sandbox", "--disable-gpu", "--no-first-run"]
IN_CI = os.environ.get("CI", "").lower() == "true"


@pytest.mark.browser
def test_the_page_shows_fleet_runs_with_status_and_executor(
    served: tuple[LiveServer, dict[str, str]], lab: FleetLab
) -> None:
    if not IN_CI:
        if not Path(CHROMIUM).exists() and not shutil.which("chromium"):
            pytest.skip(f"no Chromium at {CHROMIUM} (required when CI=true)")
        pytest.importorskip("playwright", reason="pip install playwright (required in CI)")
    from playwright.sync_api import expect, sync_playwright

    live, run_ids = served
    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
        try:
            page = browser.new_page(viewport={"width": 1440, "height": 900})
            errors: list[str] = []
            page.on("pageerror", lambda exc: errors.append(str(exc)))
            page.add_init_script(f"localStorage.setItem('statewise.key', '{ADMIN}')")
            page.goto(f"{live.url}/")
            panel = page.get_by_test_id("fleet-panel")
            expect(panel).to_be_visible()
            rows = page.get_by_test_id("fleet-runs")
            for status, run_id in run_ids.items():
                row = rows.locator(f'tr[data-run-id="{run_id}"]')
                expect(row).to_have_attribute("data-status", status)
                expect(row).to_contain_text(status)
                if status != "queued":
                    expect(row.locator("td.executor")).to_have_text("w1")
            expect(rows.locator(f'tr[data-run-id="{run_ids["failed"]}"]')).to_contain_text(
                "step 2 exploded"
            )
            # The page follows the runs: released, the held run shows completed.
            _hold(lab).unlink()
            expect(rows.locator(f'tr[data-run-id="{run_ids["running"]}"]')).to_have_attribute(
                "data-status", "completed", timeout=WAIT * 1000
            )
            # The status filter asks the server for one status only.
            page.get_by_test_id("fleet-status").select_option("failed")
            expect(rows.locator("tr")).to_have_count(1)
            assert not errors, errors

            # Without a key the panel waits; ann's key, typed in, shows ann's runs only.
            fresh = browser.new_page(viewport={"width": 1440, "height": 900})
            fresh.goto(f"{live.url}/")
            expect(fresh.get_by_test_id("key-form")).to_be_visible()
            expect(fresh.get_by_test_id("fleet-panel")).to_be_hidden()
            fresh.locator("#key-input").fill(ANN)
            fresh.locator("#key-form button").click()
            ann_rows = fresh.get_by_test_id("fleet-runs").locator("tr")
            expect(ann_rows).to_have_count(3)
            expect(
                fresh.get_by_test_id("fleet-runs").locator(f'tr[data-run-id="{run_ids["failed"]}"]')
            ).to_have_count(0)
        finally:
            browser.close()


@pytest.mark.browser
def test_the_page_hides_the_fleet_panel_without_a_fleet(tmp_path: Path) -> None:
    if not IN_CI:
        if not Path(CHROMIUM).exists() and not shutil.which("chromium"):
            pytest.skip(f"no Chromium at {CHROMIUM} (required when CI=true)")
        pytest.importorskip("playwright", reason="pip install playwright (required in CI)")
    from playwright.sync_api import expect, sync_playwright

    from statewise.db import InMemoryDb
    from statewise.server import create_app
    from tests.server.conftest import make_agent

    live = start_server(create_app([make_agent(InMemoryDb(), secrets=False)]))
    try:
        with sync_playwright() as p:
            browser = p.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
            page = browser.new_page()
            page.goto(f"{live.url}/")
            expect(page.get_by_test_id("app-select")).to_contain_text("lister")
            expect(page.get_by_test_id("fleet-panel")).to_be_hidden()
            browser.close()
    finally:
        stop_server(live)


@pytest.mark.timeout(120)
def test_statewise_serve_with_fleet_db_lists_the_runs(lab: FleetLab, fleet: Any, app: Any) -> None:
    """`statewise serve app.py --fleet-db URL` in a real process answers /v1/fleet/runs."""
    import re
    import signal
    import subprocess
    import sys

    five, _, _, _ = app
    handle = fleet.enqueue(five, "later", session_id="srv-1", queue="idle")
    out = lab.tmp / "serve.log"
    with open(out, "wb") as log:
        proc = subprocess.Popen(
            [
                *(sys.executable, "-m", "statewise", "serve", str(APP)),
                *("--port", "0", "--fleet-db", lab.url),
            ],
            env=lab.env(),
            stdout=log,
            stderr=subprocess.STDOUT,
        )
    try:
        url = _until(
            "the server's address",
            lambda: (m := re.search(r"http://127\.0\.0\.1:\d+", out.read_text())) and m.group(0),
        )
        assert "fleet runs  GET /v1/fleet/runs" in out.read_text()
        rows = httpx.get(f"{url}/v1/fleet/runs", timeout=30).json()["runs"]
        assert [(r["run_id"], r["status"], r["queue"]) for r in rows] == [
            (handle.run_id, "queued", "idle")
        ]
    finally:
        proc.send_signal(signal.SIGTERM)
        proc.wait(20)
