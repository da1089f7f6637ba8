"""Schemathesis against the OpenAPI schema, over real HTTP: whatever a client sends, the
server answers with a 4xx problem, never a 500, and every answer (status, content type,
headers, body) is one the schema declares for that route."""

from __future__ import annotations

import os
from collections.abc import Iterator
from typing import Any

import pytest

if os.environ.get("CI", "").lower() != "true":
    pytest.importorskip("schemathesis", reason="pip install schemathesis (required when CI=true)")

import schemathesis
from hypothesis import HealthCheck, settings
from pydantic import BaseModel
from schemathesis.checks import (
    content_type_conformance,
    not_a_server_error,
    response_headers_conformance,
    response_schema_conformance,
    status_code_conformance,
)

from statewise import Agent
from statewise.db import InMemoryDb
from statewise.models import FunctionModel
from statewise.server import create_app
from tests.server.conftest import LiveServer, add_item, list_model, start_server, stop_server

MAX_EXAMPLES = int(os.environ.get("STATEWISE_FUZZ_EXAMPLES", "12"))


class ListState(BaseModel):
    items: list[str] = []
    count: int = 0


# A state_schema, so the responses' typed state is checked against it too.
AGENT = Agent(
    name="lister",
    model=FunctionModel(list_model, id="list-player"),
    db=InMemoryDb(),
    state_schema=ListState,
    tools=[add_item],
)
APP = create_app([AGENT])
schema = schemathesis.openapi.from_dict(APP.openapi())


@pytest.fixture(scope="module")
def fuzz_server() -> Iterator[tuple[LiveServer, Any]]:
    AGENT.run("add a, b", session_id="s1")
    AGENT.run("add c", session_id="s1")
    live = start_server(APP)
    yield live, APP
    stop_server(live)


@schema.parametrize()
@settings(
    max_examples=MAX_EXAMPLES,
    deadline=None,
    suppress_health_check=list(HealthCheck),
    database=None,
)
def test_no_server_errors(case: Any, fuzz_server: tuple[LiveServer, Any]) -> None:
    live, _app = fuzz_server
    response = case.call(base_url=live.url, timeout=30)
    assert response.status_code < 500, (
        f"{case.method} {case.formatted_path} -> {response.status_code}: {response.text[:500]}"
    )
    if response.status_code >= 400:
        assert response.headers["content-type"][0].startswith("application/problem+json")
        assert response.json()["detail"]
    case.validate_response(
        response,
        checks=[
            not_a_server_error,
            status_code_conformance,
            content_type_conformance,
            response_headers_conformance,
            response_schema_conformance,
        ],
    )
