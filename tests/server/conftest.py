"""A real uvicorn server on a random loopback port, in a thread, for each test that asks."""

from __future__ import annotations

import socket
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest
import uvicorn

from statewise import Agent
from statewise.db import SqliteDb
from statewise.models import FunctionModel, Message, ModelResponse, RequestInfo, ToolCall
from statewise.server import create_app
from tests.server._statuses import maybe_record

ALICE, BOB, ADMIN = "alice-key-0001", "bob-key-00002", "admin-key-0003"


@dataclass
class LiveServer:
    url: str
    server: uvicorn.Server
    thread: threading.Thread

    def client(self, key: str | None = None, **kwargs: Any) -> httpx.Client:
        headers = {"Authorization": f"Bearer {key}"} if key else {}
        return httpx.Client(base_url=self.url, headers=headers, timeout=30, **kwargs)


def start_server(app: Any) -> LiveServer:
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind(("127.0.0.1", 0))
    port = sock.getsockname()[1]
    config = uvicorn.Config(maybe_record(app), log_level="warning", lifespan="off", ws="none")
    server = uvicorn.Server(config)
    thread = threading.Thread(target=server.run, kwargs={"sockets": [sock]}, daemon=True)
    thread.start()
    deadline = time.monotonic() + 10
    while not server.started:
        if time.monotonic() > deadline or not thread.is_alive():
            raise RuntimeError("uvicorn did not start")
        time.sleep(0.01)
    return LiveServer(url=f"http://127.0.0.1:{port}", server=server, thread=thread)


def stop_server(live: LiveServer) -> None:
    live.server.should_exit = True
    live.thread.join(timeout=10)


# ---- an offline agent whose state the tests can watch -----------------------------------


def add_item(session_state: dict[str, Any], item: str) -> str:
    """Add an item to the list.

    Args:
        item: The item.
    """
    session_state.setdefault("items", []).append(item)
    session_state["count"] = session_state.get("count", 0) + 1
    return f"added {item}"


def list_model(messages: list[Message], info: RequestInfo) -> ModelResponse:
    """'add X' calls add_item(X) (once per comma-separated item), then answers."""
    last = messages[-1]
    if last.role == "tool":
        return ModelResponse(content="Done: " + (last.content or ""))
    text = last.content or ""
    if text.lower().startswith("add "):
        items = [i.strip() for i in text[4:].split(",") if i.strip()]
        return ModelResponse(
            tool_calls=[ToolCall("add_item", {"item": i}, f"c{n}") for n, i in enumerate(items)]
        )
    return ModelResponse(content=f"You said: {text}")


@pytest.fixture(autouse=True)
def _encryption_key(monkeypatch: pytest.MonkeyPatch) -> None:
    from cryptography.fernet import Fernet

    monkeypatch.setenv("STATEWISE_ENCRYPTION_KEY", Fernet.generate_key().decode())


def make_agent(db: Any, name: str = "lister", *, secrets: bool = True) -> Agent:
    return Agent(
        name=name,
        model=FunctionModel(list_model, id="list-player"),
        db=db,
        session_state={"items": [], "count": 0},
        tools=[add_item],
        secret_keys=["api_token"] if secrets else [],
        instructions="Items: {items}",
    )


@pytest.fixture
def make_live(tmp_path: Path) -> Iterator[Callable[..., LiveServer]]:
    started: list[LiveServer] = []

    def make(**kwargs: Any) -> LiveServer:
        db = SqliteDb(db_file=str(tmp_path / f"api{len(started)}.db"))
        apps = kwargs.pop("apps", None) or [make_agent(db)]
        live = start_server(create_app(apps, **kwargs))
        started.append(live)
        return live

    yield make
    for live in started:
        stop_server(live)


@pytest.fixture
def live(make_live: Callable[..., LiveServer]) -> LiveServer:
    """No keys: open, loopback only."""
    return make_live()


@pytest.fixture
def authed(make_live: Callable[..., LiveServer]) -> LiveServer:
    return make_live(api_keys={ALICE: "alice", BOB: "bob"}, admin_keys={ADMIN: "ops"})
