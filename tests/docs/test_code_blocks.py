"""Every fenced code block of README.md and docs/ is run, parsed, or marked as not run.

Each page's runnable blocks run in order in a scratch directory of their own, in a child
process (`_runner.py`); an `output` block right after a python or bash block is the stdout
that block must print, and the output under a console block's `$ command` is what that
command must print (a `...` line stands for any lines, `...` in a line for any text). The
port 7777 in a page is replaced by a free port, so pages can start `statewise serve` the
way a reader would without colliding with another test run; the PostgreSQL database a
page names (`postgresql://localhost/app`) is the test server's, so a page runs on any
machine with the test PostgreSQL, whatever databases it holds.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import socket
import subprocess
import sys
import tomllib
from pathlib import Path
from typing import Any

import pytest

from tests._env import subprocess_env
from tests.docs._runner import console_commands
from tests.docs.blocks import ROOT, Block, all_blocks, blocks_of, pages, problem

RUNNER = Path(__file__).with_name("_runner.py")
AGUI_NODE_MODULES = ROOT / "tests" / "server" / "agui_js" / "node_modules"
IN_CI = os.environ.get("CI", "").lower() == "true"
PAGE_TIMEOUT = 300
DEAD_ENDPOINT = "http://127.0.0.1:9"  # nothing listens: a real provider call fails at once
PAGE_POSTGRES = "postgresql://localhost/app"
TEST_POSTGRES = os.environ.get(
    "STATEWISE_TEST_POSTGRES_URL", "postgresql://postgres@127.0.0.1:5432/test"
)


def as_run_here(text: str, port: str) -> str:
    """A block's text as this machine runs it: a free port, the test PostgreSQL."""
    return text.replace("7777", port).replace(PAGE_POSTGRES, TEST_POSTGRES)


def runnable(block: Block) -> bool:
    return block.lang in ("python", "bash", "console", "js") and block.not_run_reason is None


def pages_with_runnable_blocks() -> list[Path]:
    return [page for page in pages() if any(map(runnable, blocks_of(page)))]


def matches(shown: str, actual: str) -> bool:
    pattern = ""
    for line in shown.strip("\n").splitlines():
        line = line.rstrip()
        if line == "...":
            pattern += r"(?:[^\n]*\n)*?"
        else:
            pattern += ".*".join(map(re.escape, line.split("..."))) + r"[ \t]*\n"
    lines = [line.rstrip() for line in actual.strip("\n").splitlines()]
    return re.fullmatch(pattern, "\n".join(lines) + "\n") is not None


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


def test_every_block_is_run_parsed_or_marked() -> None:
    problems = [f"{block.where}: {why}" for block in all_blocks() if (why := problem(block))]
    assert not problems, "\n".join(problems)


def test_every_output_block_follows_a_block_that_runs() -> None:
    for page in pages():
        blocks = blocks_of(page)
        for before, block in zip([None, *blocks], blocks, strict=False):
            if block.lang == "output":
                assert before is not None and runnable(before), (
                    f"{block.where}: an output block must follow a python or bash block "
                    "that runs (its stdout is checked against it)"
                )
                assert before.lang in ("python", "bash", "js"), block.where


def test_blocks_not_run_are_still_valid_syntax() -> None:
    for block in all_blocks():
        if block.not_run_reason is None:
            continue
        if block.lang == "python":
            compile(block.text, block.where, "exec")
        elif block.lang == "bash":
            done = subprocess.run(["bash", "-n"], input=block.text, capture_output=True, text=True)
            assert done.returncode == 0, f"{block.where}: {done.stderr}"


def test_config_blocks_parse() -> None:
    parsers: dict[str, Any] = {"toml": tomllib.loads, "json": json.loads}
    for block in all_blocks():
        if block.lang in parsers:
            try:
                parsers[block.lang](block.text)
            except Exception as exc:
                pytest.fail(f"{block.where}: not valid {block.lang}: {exc}")


def test_the_collector_finds_blocks_on_every_page_it_should() -> None:
    """A page whose fences the parser missed would pass every test above vacuously."""
    for page in pages():
        fences = len(re.findall(r"^ {0,3}```", page.read_text(encoding="utf-8"), re.M))
        assert fences == 2 * len(blocks_of(page)), page


@pytest.mark.parametrize(
    "page", pages_with_runnable_blocks(), ids=lambda p: str(p.relative_to(ROOT))
)
def test_page_blocks_run_and_print_what_the_page_shows(page: Path, tmp_path: Path) -> None:
    blocks = blocks_of(page)
    if any(b.lang == "js" and runnable(b) for b in blocks) and not AGUI_NODE_MODULES.is_dir():
        if IN_CI:
            pytest.fail("npm --prefix tests/server/agui_js ci first (required when CI=true)")
        pytest.skip("npm --prefix tests/server/agui_js ci first (needed for the js blocks)")
    if any("curl " in b.text for b in blocks if runnable(b)) and shutil.which("curl") is None:
        if IN_CI:
            pytest.fail("curl is not installed (required when CI=true)")
        pytest.skip("curl is not installed (this page's shell examples use it)")
    port = str(free_port())
    job_blocks = []
    for index, block in enumerate(blocks):
        if runnable(block) or (block.title and block.not_run_reason is None):
            job_blocks.append(
                {
                    "index": index,
                    "lang": block.lang,
                    "text": as_run_here(block.text, port),
                    "title": block.title,
                    "where": block.where,
                }
            )
    (tmp_path / "examples").symlink_to(ROOT / "examples")
    if AGUI_NODE_MODULES.is_dir():
        (tmp_path / "node_modules").symlink_to(AGUI_NODE_MODULES)
    report = tmp_path / ".report.jsonl"
    job = tmp_path / ".job.json"
    job.write_text(json.dumps({"blocks": job_blocks, "report": str(report)}))
    env = subprocess_env(
        PATH=os.pathsep.join([str(Path(sys.executable).parent), os.environ["PATH"]]),
        OPENAI_BASE_URL=DEAD_ENDPOINT,
        ANTHROPIC_BASE_URL=DEAD_ENDPOINT,
        OLLAMA_HOST=DEAD_ENDPOINT,
        NO_COLOR="1",
        TERM="dumb",
        COLUMNS="120",
    )
    env.pop("STATEWISE_DB_URL", None)
    done = subprocess.run(
        [sys.executable, str(RUNNER), str(job)],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=PAGE_TIMEOUT,
    )
    results = (
        [json.loads(line) for line in report.read_text().splitlines()] if report.exists() else []
    )
    assert len(results) == len(job_blocks) or any(r["error"] for r in results), (
        f"the runner stopped early (exit {done.returncode}):\n{done.stderr[-3000:]}"
    )
    by_where = {block.where: (i, block) for i, block in enumerate(blocks)}
    for result in results:
        index, block = by_where[result["where"]]
        assert result["error"] is None, f"{block.where} failed:\n{result['error']}"
        following = blocks[index + 1] if index + 1 < len(blocks) else None
        if following is not None and following.lang == "output":
            shown = following.text.replace("7777", port)
            assert matches(shown, result["stdout"]), (
                f"{following.where}: the page shows\n{shown}\nbut {block.where} printed\n"
                f"{result['stdout']}"
            )
        if block.lang == "console":
            for (command, shown), ran in zip(
                console_commands(as_run_here(block.text, port)),
                result["commands"],
                strict=True,
            ):
                if shown.strip():
                    assert matches(shown, ran["output"]), (
                        f"{block.where}: the page shows, for `{command}`,\n{shown}\n"
                        f"but it printed (exit {ran['code']})\n{ran['output']}"
                    )
                else:
                    assert ran["code"] == 0, (
                        f"{block.where}: `{command}` failed (exit {ran['code']}):\n{ran['output']}"
                    )


def test_matching_of_shown_output() -> None:
    assert matches("a\n...\nd", "a\nb\nc\nd\n")
    assert matches("session ... created", "session 9f3c created")
    assert not matches("a\nb", "a\nc")
    assert not matches("a", "a\nextra")


def test_node_is_there_when_pages_have_js_blocks() -> None:
    if any(b.lang == "js" and runnable(b) for b in all_blocks()) and IN_CI:
        assert shutil.which("node"), "the docs' js blocks run with Node.js"
