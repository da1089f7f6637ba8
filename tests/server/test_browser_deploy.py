"""The page and API where a real app puts them, in headless Chromium: mounted under `/ai`
in a host FastAPI app, behind Debian's nginx with a path prefix, and called from a
browser app on another origin through CORS with a JWT. Every request the page makes
stays under its prefix, and it asks for no fleet runs when there is no fleet."""

from __future__ import annotations

import shutil
import socket
import subprocess
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import jwt
import pytest
import uvicorn
from fastapi import FastAPI
from fastapi.responses import HTMLResponse
from playwright.sync_api import Page, expect, sync_playwright

from statewise.db import SqliteDb
from statewise.server import JWTAuth, create_app
from tests.server.conftest import make_agent
from tests.server.test_browser import CHROMIUM, CHROMIUM_ARGS, IN_CI, send

pytestmark = pytest.mark.browser

SECRET = "a-browser-test-secret-long-enough-0001"


def _serve(app: Any, *, root_path: str = "") -> tuple[str, uvicorn.Server, threading.Thread]:
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    port = sock.getsockname()[1]
    server = uvicorn.Server(
        uvicorn.Config(app, log_level="warning", lifespan="off", ws="none", root_path=root_path)
    )
    thread = threading.Thread(target=server.run, kwargs={"sockets": [sock]}, daemon=True)
    thread.start()
    deadline = time.monotonic() + 10
    while not server.started:
        assert time.monotonic() < deadline and thread.is_alive(), "uvicorn did not start"
        time.sleep(0.01)
    return f"http://127.0.0.1:{port}", server, thread


@pytest.fixture
def servers() -> Iterator[list[tuple[uvicorn.Server, threading.Thread]]]:
    started: list[tuple[uvicorn.Server, threading.Thread]] = []
    yield started
    for server, thread in started:
        server.should_exit = True
        thread.join(10)


@pytest.fixture
def browser_page() -> Iterator[tuple[Page, list[str], list[str]]]:
    """A page, the URLs it requested, and its errors."""
    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
        page = browser.new_page(viewport={"width": 1280, "height": 800})
        requested: list[str] = []
        errors: list[str] = []
        page.on("request", lambda request: requested.append(request.url))
        page.on("pageerror", lambda exc: errors.append(str(exc)))
        yield page, requested, errors
        browser.close()


def _chat_under(page: Page, requested: list[str], base: str) -> None:
    """Open the page at `base` (ending in /ai/), run a chat turn, and check that every
    request stayed under the prefix."""
    page.goto(base)
    expect(page.get_by_test_id("app-select")).to_contain_text("lister")
    send(page, "add kiwi")
    expect(page.get_by_test_id("messages")).to_contain_text("Done: added kiwi")
    session_id = page.get_by_test_id("session-select").input_value()
    state = httpx.get(f"{base}v1/sessions/{session_id}/state", timeout=30).json()
    assert state["state"]["items"] == ["kiwi"]
    outside = [url for url in requested if not url.startswith(base)]
    assert outside == [], f"the page reached outside {base}: {outside}"
    assert not any("/v1/fleet/runs" in url for url in requested), "asked a fleet that is not there"


def test_the_page_works_mounted_under_a_prefix(
    tmp_path: Path, servers: list[Any], browser_page: tuple[Page, list[str], list[str]]
) -> None:
    page, requested, errors = browser_page
    host = FastAPI()
    host.mount("/ai", create_app([make_agent(SqliteDb(db_file=str(tmp_path / "m.db")))]))
    url, server, thread = _serve(host)
    servers.append((server, thread))
    _chat_under(page, requested, f"{url}/ai/")
    docs = httpx.get(f"{url}/ai/openapi.json", timeout=30).json()
    assert docs["servers"] == [{"url": "/ai"}]  # "Try it out" and clients call it there
    assert not errors, errors


NGINX_CONF = """
daemon off;
master_process off;
pid {tmp}/nginx.pid;
error_log {tmp}/error.log warn;
events {{ worker_connections 64; }}
http {{
  access_log {tmp}/access.log;
  client_body_temp_path {tmp}/body;
  proxy_temp_path {tmp}/proxy;
  fastcgi_temp_path {tmp}/fastcgi;
  uwsgi_temp_path {tmp}/uwsgi;
  scgi_temp_path {tmp}/scgi;
  server {{
    listen 127.0.0.1:{port};
    location /ai/ {{
      proxy_pass http://127.0.0.1:{app_port}/;
      proxy_http_version 1.1;
      proxy_set_header Host $host;
      proxy_set_header X-Forwarded-For $proxy_add_x_forwarded_for;
      proxy_set_header X-Forwarded-Proto $scheme;
      proxy_buffering off;
      proxy_read_timeout 1h;
    }}
  }}
}}
"""


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


def test_the_page_works_behind_nginx_with_a_path_prefix(
    tmp_path: Path, servers: list[Any], browser_page: tuple[Page, list[str], list[str]]
) -> None:
    nginx = shutil.which("nginx") or "/usr/sbin/nginx"
    if not Path(nginx).exists():
        if IN_CI:
            pytest.fail("nginx is missing: .ci/run installs Debian's nginx")
        pytest.skip("no nginx: apt-get install nginx (required when CI=true)")
    page, requested, errors = browser_page
    app = create_app([make_agent(SqliteDb(db_file=str(tmp_path / "n.db")))])
    url, server, thread = _serve(app, root_path="/ai")
    servers.append((server, thread))
    port = _free_port()
    conf = tmp_path / "nginx.conf"
    conf.write_text(NGINX_CONF.format(tmp=tmp_path, port=port, app_port=url.rsplit(":", 1)[1]))
    proc = subprocess.Popen([nginx, "-c", str(conf), "-p", str(tmp_path)])
    try:
        base = f"http://127.0.0.1:{port}/ai/"
        deadline = time.monotonic() + 15
        while True:
            try:
                if httpx.get(f"{base}healthz", timeout=5).status_code == 200:
                    break
            except httpx.TransportError:
                pass
            assert time.monotonic() < deadline and proc.poll() is None, "nginx did not start"
            time.sleep(0.1)
        _chat_under(page, requested, base)
        assert httpx.get(f"{base}openapi.json", timeout=30).json()["servers"] == [{"url": "/ai"}]
        # a streamed run passes through the proxy as it happens
        with httpx.stream(
            "POST", f"{base}v1/agents/lister/runs/stream", json={"input": "add fig"}, timeout=30
        ) as stream:
            body = "".join(stream.iter_text())
        assert "run_completed" in body and "fig" in body
    finally:
        proc.terminate()
        proc.wait(10)
    assert not errors, errors


FRONTEND = """<!doctype html>
<html><body><pre id="out">waiting</pre>
<script>
fetch("__API__/v1/agents/lister/runs", {
  method: "POST",
  headers: {"Authorization": "Bearer __TOKEN__", "Content-Type": "application/json"},
  body: JSON.stringify({input: "add plum", session_id: "cors-1"}),
}).then(r => r.json()).then(
  body => { document.getElementById("out").textContent = "ok " + body.user_id + " " +
            JSON.stringify(body.session_state.items); },
  err => { document.getElementById("out").textContent = "blocked " + err; });
</script></body></html>"""


def test_a_browser_app_on_another_origin_calls_the_api_with_a_jwt(
    tmp_path: Path, servers: list[Any], browser_page: tuple[Page, list[str], list[str]]
) -> None:
    page, _requested, _errors = browser_page
    frontend = FastAPI()
    html: dict[str, str] = {}

    @frontend.get("/")
    def index() -> HTMLResponse:
        return HTMLResponse(html["page"])

    front_url, server, thread = _serve(frontend)
    servers.append((server, thread))
    api = create_app(
        [make_agent(SqliteDb(db_file=str(tmp_path / "c.db")))],
        auth=JWTAuth(secret=SECRET, audience="support-app"),
        cors_origins=[front_url],
    )
    api_url, server, thread = _serve(api)
    servers.append((server, thread))
    token = jwt.encode(
        {"sub": "alice", "aud": "support-app", "exp": time.time() + 300}, SECRET, "HS256"
    )
    html["page"] = FRONTEND.replace("__API__", api_url).replace("__TOKEN__", token)
    page.goto(front_url + "/")
    expect(page.locator("#out")).to_have_text('ok alice ["plum"]')

    # the same page served from an origin the API does not allow is blocked by the browser
    other = FastAPI()
    other.get("/")(index)
    other_url, server, thread = _serve(other)
    servers.append((server, thread))
    page.goto(other_url + "/")
    expect(page.locator("#out")).to_contain_text("blocked")
