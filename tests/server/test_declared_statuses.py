"""Every status the server answers in the API tests is declared in `/openapi.json` for that
route (with the problem schema, for errors). Runs the other server tests in a subprocess
that records each (method, route, status), then compares with the schema."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from statewise.db import InMemoryDb
from statewise.server import create_app
from tests.server._statuses import RECORD_ENV
from tests.server.conftest import make_agent

HERE = Path(__file__).parent
# Tests that do not go through start_server, or that check the schema themselves.
SKIP = {
    "test_browser.py",
    "test_fuzz.py",
    "test_serve.py",
    "test_generated_client.py",
    Path(__file__).name,
}


def test_every_status_the_api_tests_see_is_declared(tmp_path: Path) -> None:
    record = tmp_path / "statuses.jsonl"
    files = sorted(str(p) for p in HERE.glob("test_*.py") if p.name not in SKIP)
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "pytest",
            "-q",
            "-p",
            "no:cacheprovider",
            "-m",
            "not browser",
            *files,
        ],
        env={**os.environ, RECORD_ENV: str(record)},
        capture_output=True,
        text=True,
        timeout=600,
        cwd=HERE.parent.parent,
    )
    assert record.exists(), done.stdout[-3000:] + done.stderr[-3000:]
    seen = {
        (r["method"].lower(), r["path"], str(r["status"]))
        for r in map(json.loads, record.read_text().splitlines())
    }
    schema = create_app([make_agent(InMemoryDb())]).openapi()
    undeclared = sorted(
        f"{method.upper()} {path} -> {status}"
        for method, path, status in seen
        if status not in schema["paths"][path][method]["responses"]
    )
    assert not undeclared, (
        "statuses the server answered but /openapi.json does not declare for the route "
        "(add them to the route's responses=, e.g. problems(409)):\n" + "\n".join(undeclared)
    )
    # The recording saw the API: each of these routes answered at least once.
    core = {
        (m, p)
        for p, item in schema["paths"].items()
        for m in item
        if p == "/healthz" or p.startswith(("/v1/sessions", "/v1/apps", "/v1/me"))
    } | {("post", "/v1/{kind}/{name}/runs")}
    assert core <= {(m, p) for m, p, _ in seen}, core - {(m, p) for m, p, _ in seen}
    problem_refs = {
        json.dumps(r["content"])
        for item in schema["paths"].values()
        for op in item.values()
        for code, r in op["responses"].items()
        if int(code) >= 400
    }
    assert problem_refs == {
        json.dumps(
            {"application/problem+json": {"schema": {"$ref": "#/components/schemas/Problem"}}}
        )
    }
