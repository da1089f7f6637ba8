"""The support app, end to end, as a team would deploy it: PostgreSQL, a typed state with a
secret, a refund tool that needs approval, the API behind Debian's nginx under `/ai`, and
a browser frontend on another origin (also served by nginx) that logs its users in with
JWTs. In headless Chromium: the customer's frontend speaks AG-UI and its run pauses for
approval; the customer cannot approve it; an approver's frontend finds it in its inbox
and approves it; the state holds the refund, and the secret never reaches a browser."""

from __future__ import annotations

import secrets
import shutil
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Annotated, Any

import httpx
import jwt
import pytest
from playwright.sync_api import expect, sync_playwright
from pydantic import BaseModel

from statewise import Agent, Secret, tool
from statewise.models import FunctionModel, ModelResponse, ToolCall
from statewise.server import JWTAuth, approvers_with_role, create_app
from tests.db.conftest import POSTGRES_URL, postgres_problem, require
from tests.server.test_browser import CHROMIUM, CHROMIUM_ARGS, IN_CI
from tests.server.test_browser_deploy import _free_port, _serve

pytestmark = pytest.mark.browser

JWT_SECRET = "support-app-login-secret-0123456789"
API_TOKEN = "sk-support-do-not-show-1234"


class SupportState(BaseModel):
    refunded: list[int] = []
    api_token: Annotated[str, Secret()] = API_TOKEN


@tool(requires_confirmation=True)
def refund(session_state: dict[str, Any], order_id: int) -> str:
    """Refund an order."""
    session_state["refunded"] = [*session_state.get("refunded", []), order_id]
    return f"refunded order {order_id}"


def support_model(messages: Any, info: Any) -> ModelResponse:
    last = messages[-1]
    if last.role == "user":
        return ModelResponse(tool_calls=[ToolCall("refund", {"order_id": 42}, "call-refund")])
    return ModelResponse(content=f"Done: {last.content}")


FRONTEND = """<!doctype html>
<html><body><pre id="log"></pre><pre id="status">starting</pre>
<script>
const params = new URLSearchParams(location.search);
const api = params.get("api"), token = params.get("token");
const auth = {"Authorization": "Bearer " + token, "Content-Type": "application/json"};
const log = (line) => { document.getElementById("log").textContent += line + "\\n"; };
const status = (text) => { document.getElementById("status").textContent = text; };

async function customer() {
  const r = await fetch(api + "/v1/agents/support/agui", {
    method: "POST", headers: {...auth, "Accept": "text/event-stream"},
    body: JSON.stringify({threadId: params.get("thread"), runId: "run-ui-1", state: {},
      messages: [{id: "m1", role: "user", content: "please refund order 42"}],
      tools: [], context: [], forwardedProps: {}}),
  });
  if (!r.ok) { status("agui " + r.status); return; }
  const text = await r.text();
  for (const block of text.split("\\n\\n")) {
    const data = block.split("\\n").filter(l => l.startsWith("data: ")).map(l => l.slice(6)).join("");
    if (!data) continue;
    const event = JSON.parse(data);
    log(event.type + " " + JSON.stringify(event.snapshot || event.outcome || ""));
    if (event.type === "RUN_FINISHED") {
      status(event.outcome && event.outcome.type === "interrupt" ? "paused" : "finished");
    }
  }
  // the customer tries to approve their own refund
  const mine = await fetch(api + "/v1/paused-runs", {headers: auth}).then(r => r.json());
  log("customer inbox " + mine.runs.length);
}

async function approver() {
  const inbox = await fetch(api + "/v1/paused-runs", {headers: auth}).then(r => r.json());
  log("approver inbox " + inbox.runs.length);
  const run = inbox.runs[0];
  const call = run.pending_tool_calls[0];
  const r = await fetch(
    api + "/v1/sessions/" + run.session_id + "/runs/" + run.run_id + "/continue",
    {method: "POST", headers: auth,
     body: JSON.stringify({approvals: {[call.tool_call_id]: {approved: true}}})});
  const body = await r.json();
  log("continued " + r.status + " " + JSON.stringify(body));
  status(body.status);
}

(params.get("mode") === "approve" ? approver() : customer()).catch(e => status("error " + e));
</script></body></html>"""

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
  types {{ text/html html; }}
  server {{
    listen 127.0.0.1:{front_port};
    root {tmp}/www;
  }}
  server {{
    listen 127.0.0.1:{api_port};
    location /ai/ {{
      proxy_pass http://127.0.0.1:{app_port}/;
      proxy_http_version 1.1;
      proxy_set_header Host $host;
      proxy_set_header X-Forwarded-For $proxy_add_x_forwarded_for;
      proxy_set_header X-Forwarded-Proto $scheme;
      proxy_buffering off;
    }}
  }}
}}
"""


@pytest.fixture
def pg_url() -> Iterator[str]:
    require(postgres_problem())
    schema = f"sw_e2e_{secrets.token_hex(4)}"
    yield f"{POSTGRES_URL}?schema={schema}"
    import psycopg

    with psycopg.connect(POSTGRES_URL, autocommit=True) as conn:
        conn.execute(f'DROP SCHEMA IF EXISTS "{schema}" CASCADE')


def _token(sub: str, **claims: Any) -> str:
    body = {"sub": sub, "aud": "support-app", "exp": time.time() + 600, **claims}
    return jwt.encode(body, JWT_SECRET, "HS256")


def test_support_app_end_to_end(tmp_path: Path, pg_url: str) -> None:
    nginx = shutil.which("nginx") or "/usr/sbin/nginx"
    if not Path(nginx).exists():
        if IN_CI:
            pytest.fail("nginx is missing: .ci/run installs Debian's nginx")
        pytest.skip("no nginx: apt-get install nginx (required when CI=true)")
    front_port, api_port = _free_port(), _free_port()
    front, api_origin = f"http://127.0.0.1:{front_port}", f"http://127.0.0.1:{api_port}"
    support = Agent(
        name="support",
        model=FunctionModel(support_model),
        tools=[refund],
        state_schema=SupportState,
        db=pg_url,
    )
    app = create_app(
        [support],
        auth=JWTAuth(secret=JWT_SECRET, audience="support-app"),
        approve=approvers_with_role("approver"),
        cors_origins=[front],
    )
    url, server, thread = _serve(app, root_path="/ai")
    (tmp_path / "www").mkdir()
    (tmp_path / "www" / "index.html").write_text(FRONTEND)
    conf = tmp_path / "nginx.conf"
    conf.write_text(
        NGINX_CONF.format(
            tmp=tmp_path, front_port=front_port, api_port=api_port, app_port=url.rsplit(":", 1)[1]
        )
    )
    proc = subprocess.Popen([nginx, "-c", str(conf), "-p", str(tmp_path)])
    api = f"{api_origin}/ai"
    try:
        deadline = time.monotonic() + 15
        while True:
            try:
                if httpx.get(f"{api}/healthz", timeout=5).status_code == 200:
                    break
            except httpx.TransportError:
                pass
            assert time.monotonic() < deadline and proc.poll() is None, "nginx did not start"
            time.sleep(0.1)
        with sync_playwright() as p:
            browser = p.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
            page = browser.new_page()
            page.goto(f"{front}/index.html?api={api}&thread=t-42&token={_token('alice')}")
            expect(page.locator("#status")).to_have_text("paused", timeout=30_000)
            expect(page.locator("#log")).to_contain_text("customer inbox 0")
            log = page.locator("#log").text_content() or ""
            assert "STATE_SNAPSHOT" in log and API_TOKEN not in log
            approver = _token("sam", roles=["approver"])
            page.goto(f"{front}/index.html?api={api}&mode=approve&token={approver}")
            expect(page.locator("#status")).to_have_text("completed", timeout=30_000)
            log = page.locator("#log").text_content() or ""
            assert "approver inbox 1" in log and "Done: refunded order 42" in log
            assert API_TOKEN not in log
            browser.close()
        alice = {"Authorization": f"Bearer {_token('alice')}"}
        state = httpx.get(f"{api}/v1/sessions/t-42/state", headers=alice, timeout=30).json()
        assert state["state"]["refunded"] == [42]
        assert API_TOKEN not in str(state)
        bob = {"Authorization": f"Bearer {_token('bob')}"}
        assert httpx.get(f"{api}/v1/sessions/t-42", headers=bob, timeout=30).status_code == 404
    finally:
        proc.terminate()
        proc.wait(10)
        server.should_exit = True
        thread.join(10)
        support.db.close()
