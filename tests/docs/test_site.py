"""The documentation site: it builds with `mkdocs build --strict`, and, opened from disk in
headless Chromium (Debian's `chromium`, driven by Playwright) with every network request
blocked, its pages render, search finds `session_state`, and nothing asks the network.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests._env import subprocess_env
from tests.docs.blocks import ROOT

CHROMIUM = os.environ.get("STATEWISE_CHROMIUM", "/usr/bin/chromium")
CHROMIUM_ARGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--no-first-run",
    "--allow-file-access-from-files",
]
IN_CI = os.environ.get("CI", "").lower() == "true"
PAGES = {
    "index.html": "statewise",
    "getting-started.html": "Getting started",
    "state-contract.html": "The state contract",
    "coming-from-agno.html": "Coming from Agno",
    "api/statewise.html": "statewise",
}


@pytest.fixture(scope="module")
def site(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("site")
    done = subprocess.run(
        [sys.executable, "-m", "mkdocs", "build", "--strict", "--site-dir", str(out)],
        cwd=ROOT,
        env=subprocess_env(NO_MKDOCS_2_WARNING="1"),
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr[-4000:]
    assert "WARNING" not in done.stderr, done.stderr[-4000:]
    return out


def test_the_built_pages_load_no_asset_from_another_host(site: Path) -> None:
    asset = re.compile(
        r"<(?:script|img|iframe)[^>]*\ssrc=\"(https?:)?//|<link[^>]*stylesheet[^>]*href=\"https?:"
    )
    for page in site.rglob("*.html"):
        html = page.read_text(encoding="utf-8")
        assert not asset.search(html), f"{page.relative_to(site)} loads a remote asset"
        assert "unpkg.com" not in html and "fonts.googleapis" not in html, page
    assert (site / "search" / "search_index.js").is_file()  # the offline search index


def test_the_api_reference_documents_the_public_api(site: Path) -> None:
    for page, names in {
        "api/statewise.html": [
            "statewise.Agent",
            "statewise.Agent.get_session_state",  # inherited members are shown
            "statewise.Workflow",
            "statewise.Team",
        ],
        "api/db.html": ["statewise.db.SqliteDb", "statewise.db.postgres.PostgresDb"],
        "api/models.html": ["statewise.models.FunctionModel", "statewise.models.TestModel"],
        "api/tools.html": ["statewise.tools.Toolkit", "statewise.tools.MCPTools"],
        "api/server.html": ["statewise.server.create_app"],
        "api/fleet.html": ["statewise.fleet.Fleet", "statewise.fleet.Worker"],
    }.items():
        html = (site / page).read_text(encoding="utf-8")
        for name in names:
            assert f'id="{name}"' in html, f"{page} lacks {name}"


@pytest.fixture(scope="module")
def browser() -> Iterator[object]:
    if not Path(CHROMIUM).exists() and not shutil.which("chromium"):
        if IN_CI:
            pytest.fail(f"no Chromium at {CHROMIUM} (required when CI=true)")
        pytest.skip(f"no Chromium at {CHROMIUM}: apt-get install chromium")
    playwright = pytest.importorskip("playwright.sync_api")
    with playwright.sync_playwright() as p:
        launched = p.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
        try:
            yield launched
        finally:
            launched.close()


@pytest.mark.browser
def test_the_site_works_from_disk_with_the_network_blocked(site: Path, browser: object) -> None:
    from playwright.sync_api import Browser, Route, expect

    assert isinstance(browser, Browser)
    context = browser.new_context(viewport={"width": 1280, "height": 900})
    left: list[str] = []

    def block(route: Route) -> None:
        if route.request.url.startswith("file://"):
            route.continue_()
        else:
            left.append(route.request.url)
            route.abort()

    context.route("**/*", block)
    page = context.new_page()
    errors: list[str] = []
    page.on("pageerror", lambda exc: errors.append(str(exc)))
    try:
        for path, heading in PAGES.items():
            page.goto((site / path).as_uri())
            expect(page.locator(".md-content h1").first).to_contain_text(heading)
            expect(page.locator(".md-header__title")).to_be_visible()
            expect(page.locator(".md-sidebar--primary")).to_be_visible()
        page.goto((site / "index.html").as_uri())
        expect(page.locator(".md-content table").first).to_be_visible()  # the feature table

        page.locator("label.md-search__icon, .md-search__input").first.click()
        page.locator("input.md-search__input").press_sequentially("session_state", delay=30)
        results = page.locator(".md-search-result__item")
        expect(results.first).to_be_visible(timeout=15_000)
        assert results.count() >= 3
        expect(page.locator(".md-search-result__meta")).to_contain_text("matching")
        results.first.locator("a").first.click()
        page.wait_for_load_state()
        assert page.url.startswith("file://")
        expect(page.locator(".md-content")).to_contain_text("session_state")
    finally:
        context.close()
    assert not errors, errors
    assert left == [], f"requests left the machine: {left}"
