"""What a user gets from the package itself: type information, `--version` and `-h`, project
metadata, and one clear line when an optional extra is missing (tested in a subprocess
whose import of the extra's module is blocked, not by uninstalling it)."""

from __future__ import annotations

import re
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest
from typer.testing import CliRunner

import statewise
from statewise.cli import app
from tests._env import subprocess_env, without_modules

ROOT = Path(__file__).resolve().parents[1]
runner = CliRunner()


def run_python(script: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-c", script],
        env=subprocess_env(),
        capture_output=True,
        text=True,
        timeout=120,
        cwd=cwd,
    )


def test_package_ships_type_information(tmp_path: Path) -> None:
    assert (ROOT / "src" / "statewise" / "py.typed").is_file()
    user_script = tmp_path / "my_agent.py"
    user_script.write_text(
        "from statewise import Agent\n"
        "from statewise.db import SqliteDb\n\n"
        "agent = Agent(db=SqliteDb(db_file='x.db'), session_state={'items': []})\n"
        "count: int = agent.get_session_state()\n"  # a real type error mypy must see
    )
    done = subprocess.run(
        [sys.executable, "-m", "mypy", "--strict", "--no-incremental", str(user_script)],
        capture_output=True,
        text=True,
        timeout=300,
        cwd=tmp_path,
        env=subprocess_env(),
    )
    assert "missing library stubs or py.typed marker" not in done.stdout
    assert 'Incompatible types in assignment (expression has type "dict[str, Any]"' in (
        done.stdout
    ), done.stdout


def test_version_flag_prints_the_package_version() -> None:
    for flag in ("--version", "-V"):
        result = runner.invoke(app, [flag])
        assert result.exit_code == 0
        assert result.stdout.strip() == f"statewise {statewise.__version__}"


def test_short_help_flag_works_on_every_command() -> None:
    for args in ([], ["run"], ["state"], ["state", "show"], ["serve"], ["demo"]):
        result = runner.invoke(app, [*args, "-h"])
        assert result.exit_code == 0, (args, result.output)
        assert "Usage: statewise" in result.stdout


def test_project_metadata_has_classifiers_urls_and_a_changelog() -> None:
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    assert "Typing :: Typed" in project["classifiers"]
    assert {"Homepage", "Source", "Issues", "Changelog"} <= set(project["urls"])
    changelog = (ROOT / "CHANGELOG.md").read_text()
    assert re.search(rf"^## \[?{re.escape(project['version'])}\]?", changelog, re.M)
    assert project["version"] == statewise.__version__


@pytest.mark.parametrize(
    ("url", "blocked", "extra"),
    [
        ("postgresql://postgres@127.0.0.1:1/test", ("psycopg", "psycopg_pool"), "postgres"),
        ("redis://127.0.0.1:1/0", ("redis",), "redis"),
    ],
)
def test_a_missing_database_extra_is_one_error_naming_it(
    url: str, blocked: tuple[str, ...], extra: str, tmp_path: Path
) -> None:
    script = without_modules(*blocked) + (
        "from statewise import Agent\n"
        "from statewise.exceptions import MissingDependencyError\n"
        "try:\n"
        f"    Agent(db={url!r})\n"
        "except MissingDependencyError as exc:\n"
        "    print(exc)\n"
    )
    done = run_python(script, tmp_path)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip().splitlines() == [
        f"{blocked[0]!r} is not installed; install it with: pip install 'statewise[{extra}]'"
    ]


def test_cli_with_a_missing_database_extra_prints_one_line(tmp_path: Path) -> None:
    script = without_modules("psycopg", "psycopg_pool") + (
        "sys.argv = ['statewise', 'state', 'show', 's1', '--db', "
        "'postgresql://postgres@127.0.0.1:1/test']\n"
        "from statewise.cli import main\n"
        "main()\n"
    )
    done = run_python(script, tmp_path)
    assert done.returncode == 2
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and "pip install 'statewise[postgres]'" in lines[0], done.stderr


@pytest.mark.parametrize(
    ("spec", "blocked", "package", "extra"),
    [
        ("google:gemini-2.5-flash", ("google",), "google-genai", "google"),
        ("vertex:gemini-2.5-flash", ("google",), "google-genai", "google"),
        ("bedrock:amazon.nova-pro-v1:0", ("boto3", "botocore"), "boto3", "bedrock"),
        ("azure:my-deployment", ("openai",), "openai", "openai"),
    ],
)
def test_a_missing_provider_extra_is_one_error_naming_it(
    spec: str, blocked: tuple[str, ...], package: str, extra: str, tmp_path: Path
) -> None:
    script = without_modules(*blocked) + (
        "from statewise import Agent\n"
        "from statewise.exceptions import MissingDependencyError\n"
        "try:\n"
        f"    Agent(model={spec!r})\n"
        "except MissingDependencyError as exc:\n"
        "    print(exc)\n"
    )
    done = run_python(script, tmp_path)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip().splitlines() == [
        f"{package!r} is not installed; install it with: pip install 'statewise[{extra}]'"
    ]
