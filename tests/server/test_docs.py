"""`/openapi.json`, `/docs` and `/redoc`: served from local files (no CDN), behind the API
keys when keys are configured, public with `public_docs=True`; Swagger UI renders the API in
headless Chromium with no network."""

from __future__ import annotations

import os
import re
import shutil
from collections.abc import Callable
from pathlib import Path

import pytest

from tests.server.conftest import ADMIN, ALICE, LiveServer

CHROMIUM = os.environ.get("STATEWISE_CHROMIUM", "/usr/bin/chromium")
IN_CI = os.environ.get("CI", "").lower() == "true"


def test_docs_load_only_local_assets(live: LiveServer) -> None:
    with live.client() as c:
        for page, asset in (("/docs", "swagger-ui-bundle.js"), ("/redoc", "redoc.standalone.js")):
            r = c.get(page, headers={"Accept": "text/html"})
            assert r.status_code == 200 and r.headers["content-type"].startswith("text/html")
            urls = re.findall(r'(?:src|href)="([^"]+)"', r.text)
            # nothing remote; relative, so the page works under a mount prefix too
            assert urls and all(u.startswith("docs-assets/") for u in urls), urls
            assert f"docs-assets/{asset}" in urls
            for url in urls:
                got = c.get(f"/{url}")
                assert got.status_code == 200 and len(got.content) > 1000, url


def test_docs_and_schema_need_a_key(authed: LiveServer) -> None:
    with authed.client() as anon:
        r = anon.get("/openapi.json")
        assert r.status_code == 401
        assert r.headers["content-type"].startswith("application/problem+json")
        assert r.headers["www-authenticate"].startswith("Bearer")
        assert "paths" not in r.text
        # a program gets the problem; a browser gets a page that asks for the key
        assert anon.get("/docs").status_code == 401
        assert anon.get("/docs").headers["content-type"].startswith("application/problem+json")
        page = anon.get("/docs", headers={"Accept": "text/html"})
        assert page.status_code == 401 and "API key" in page.text and "/v1/" not in page.text
        assert anon.get("/redoc", headers={"Accept": "text/html"}).status_code == 401
        assert (
            anon.get("/openapi.json", headers={"Authorization": "Bearer nope-nope"}).status_code
            == 401
        )
        assert anon.get("/docs-assets/swagger-ui.css").status_code == 200  # public library files
    with authed.client(ALICE) as c:
        schema = c.get("/openapi.json").json()
        assert schema["components"]["securitySchemes"]["apiKey"]["scheme"] == "bearer"
        assert schema["paths"]["/v1/sessions"]["get"]["security"] == [{"apiKey": []}]
        assert "security" not in schema["paths"]["/healthz"]["get"]
        assert c.get("/docs", headers={"Accept": "text/html"}).status_code == 200


def test_public_docs_opt_out(make_live: Callable[..., LiveServer]) -> None:
    live = make_live(api_keys={ALICE: "alice"}, admin_keys={ADMIN: "ops"}, public_docs=True)
    with live.client() as anon:
        assert anon.get("/openapi.json").status_code == 200
        assert anon.get("/docs", headers={"Accept": "text/html"}).status_code == 200
        assert anon.get("/v1/sessions").status_code == 401  # the API itself still needs a key


@pytest.mark.browser
def test_swagger_ui_renders_offline_after_asking_for_the_key(
    make_live: Callable[..., LiveServer],
) -> None:
    if not IN_CI:
        if not Path(CHROMIUM).exists() and not shutil.which("chromium"):
            pytest.skip(
                f"no Chromium at {CHROMIUM}: apt-get install chromium (required when CI=true)"
            )
        pytest.importorskip("playwright", reason="pip install playwright (required when CI=true)")
    from playwright.sync_api import Route, expect, sync_playwright

    from tests.server.test_browser import CHROMIUM_ARGS

    live = make_live(api_keys={ALICE: "alice"}, admin_keys={ADMIN: "ops"})
    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
        context = browser.new_context()
        remote: list[str] = []

        def refuse(route: Route) -> None:
            remote.append(route.request.url)
            route.abort()

        context.route(re.compile(r"^(?!http://127\.0\.0\.1).*"), refuse)
        page = context.new_page()
        errors: list[str] = []
        page.on("pageerror", lambda exc: errors.append(str(exc)))
        page.goto(f"{live.url}/docs")
        page.get_by_label("API key").fill(ALICE, timeout=30_000)
        page.get_by_role("button", name="Show the API").click()
        # generous timeouts: parsing Swagger UI's 1.5 MB of JavaScript is slow on a busy machine
        paths = page.locator("#ui .opblock-summary-path")
        expect(paths.first).to_be_visible(timeout=60_000)
        expect(page.locator("#ui")).to_contain_text(
            "/v1/sessions/{session_id}/state", timeout=30_000
        )
        expect(page.locator("#ui")).to_contain_text("/v1/{kind}/{name}/runs/stream", timeout=30_000)
        browser.close()
    assert not errors, errors
    assert not remote, f"the docs page reached out: {remote}"
