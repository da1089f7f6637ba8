"""What the README and the guides say about the project, checked against the project: the
commands CI runs, the API-key examples (fed to the server's own key parser), the default
host and port, the `statewise` commands and the extras named, and the links between pages.
"""

from __future__ import annotations

import re
import tomllib
from pathlib import Path

import pytest
import typer.main

from statewise.cli import app as cli_app
from statewise.server._auth import parse_keys
from tests.docs.blocks import ROOT, blocks_of, pages

README = ROOT / "README.md"
CI_RUN = (ROOT / ".ci" / "run").read_text(encoding="utf-8")


def readme_commands() -> list[str]:
    """The command lines of the README's bash blocks, marker lines left out."""
    lines = []
    for block in blocks_of(README):
        if block.lang == "bash":
            lines += [ln for ln in block.text.splitlines() if ln and not ln.startswith("#")]
    return lines


def test_the_readme_starts_with_the_demo_and_test_commands_ci_runs_word_for_word() -> None:
    commands = readme_commands()
    demo, tests = commands[0], commands[1]
    assert demo.startswith("python3 -m venv .venv") and demo.endswith("statewise demo")
    assert tests.startswith("python3 -m venv .venv") and tests.endswith("pytest -q")
    ci_lines = CI_RUN.splitlines()
    assert demo in ci_lines, f".ci/run does not run the README's demo command: {demo}"
    assert tests in ci_lines, f".ci/run does not run the README's test command: {tests}"


def test_the_prerequisites_named_beside_the_test_command_are_what_ci_installs() -> None:
    text = README.read_text(encoding="utf-8")
    npm = re.findall(r"`(npm --prefix \S+ ci --no-audit --no-fund)`", text)
    assert len(npm) == 2
    for command in npm:
        assert command in CI_RUN, command
    assert "/usr/bin/chromium" in text and "STATEWISE_CHROMIUM" in text
    assert "mkdocs build --strict" in text and "mkdocs build --strict" in CI_RUN


def key_examples() -> list[tuple[Path, str, str]]:
    found = []
    for page in pages():
        text = page.read_text(encoding="utf-8")
        for var, spec in re.findall(r"(STATEWISE_(?:API|ADMIN)_KEYS)=\"([^\"]*)\"", text):
            found.append((page, var, spec))
    return found


def test_every_api_key_example_is_accepted_by_the_servers_key_parser() -> None:
    examples = key_examples()
    assert any(page == README for page, _, _ in examples), "the README shows no key example"
    for page, var, spec in examples:
        if "<" in spec:  # a placeholder such as "<alice's key>=alice": the form is checked
            spec = re.sub(r"<[^>]*>", "placeholder-key", spec)
        admin = var == "STATEWISE_ADMIN_KEYS"
        keys = parse_keys(spec, default_user="admin" if admin else None)
        assert keys, f"{page.name}: {var}={spec!r} parses to no key"


def test_the_port_and_host_the_docs_name_are_the_servers_defaults() -> None:
    serve = typer.main.get_command(cli_app).commands["serve"]  # type: ignore[attr-defined]
    defaults = {param.name: param.default for param in serve.params}
    assert defaults["port"] == 7777 and defaults["host"] == "127.0.0.1"
    assert "http://127.0.0.1:7777/" in README.read_text(encoding="utf-8")
    server_page = (ROOT / "docs" / "server.md").read_text(encoding="utf-8")
    assert "default 7777" in server_page and "default 127.0.0.1" in server_page


def cli_commands() -> set[str]:
    root = typer.main.get_command(cli_app)
    names = set()
    for name, command in root.commands.items():  # type: ignore[attr-defined]
        names.add(name)
        for sub in getattr(command, "commands", {}):
            names.add(f"{name} {sub}")
    return names


def test_every_statewise_command_the_docs_name_exists() -> None:
    known = cli_commands()
    for page in pages():
        text = page.read_text(encoding="utf-8")
        for match in re.finditer(r"(?<![\w/.-])statewise ([a-z]+)(?: ([a-z]+))?", text):
            first, second = match.group(1), match.group(2)
            if first not in {c.split()[0] for c in known}:
                continue  # prose: "statewise is", "statewise makes", ...
            group = {c.split()[1] for c in known if " " in c and c.startswith(first + " ")}
            if group and second is not None and second not in group:
                # "statewise state history": the second word must be a subcommand
                pytest.fail(f"{page.name}: `statewise {first} {second}` is not a command")


def test_every_extra_the_docs_name_exists() -> None:
    extras = set(
        tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["optional-dependencies"]
    )
    for page in pages():
        text = page.read_text(encoding="utf-8")
        for group in re.findall(r"(?:statewise|\.)\[([a-z,]+)\]", text):
            for extra in group.split(","):
                assert extra in extras, f"{page.name}: no extra named {extra!r}"


def test_relative_links_point_at_files_that_exist() -> None:
    for page in pages():
        text = page.read_text(encoding="utf-8")
        for target in re.findall(r"\]\(([^)\s]+)\)", text):
            if re.match(r"[a-z]+:", target) or target.startswith("#"):
                continue
            path = (page.parent / target.split("#")[0]).resolve()
            assert path.exists(), f"{page.name}: the link {target} points at nothing"
