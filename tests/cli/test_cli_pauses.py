"""`statewise run` shows a run that pauses for approval instead of hiding it: it names the
call it waits on and answers it with --approve / --reject, asks at a terminal (a real
pseudo-terminal here), or exits 3 saying how to answer it; `--continue` answers later."""

from __future__ import annotations

import json
import os
import pty
import re
import select
import subprocess
import sys
import time
from pathlib import Path

import pytest
from typer.testing import CliRunner

from statewise.cli import app
from tests._env import subprocess_env

runner = CliRunner()

AGENT_FILE = '''
from statewise import Agent, RunContext, tool
from statewise.db import SqliteDb
from statewise.models import FunctionModel, ModelResponse, ToolCall


@tool(requires_confirmation=True)
def refund(run_context: RunContext, order_id: int) -> str:
    """Refund an order."""
    run_context.session_state.setdefault("refunded", []).append(order_id)
    return f"refunded {order_id}"


def answer(messages, info):
    last = messages[-1]
    if last.role == "user":
        return ModelResponse(tool_calls=[ToolCall("refund", {"order_id": 42}, "call-1")])
    return "done: " + str(last.content)


support = Agent(
    model=FunctionModel(answer), name="support", tools=[refund], db=SqliteDb(db_file="app.db")
)
'''


@pytest.fixture()
def workdir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.chdir(tmp_path)
    (tmp_path / "support_app.py").write_text(AGENT_FILE)
    return tmp_path


def invoke(*args: str) -> tuple[int, str, str]:
    result = runner.invoke(app, list(args))
    return result.exit_code, result.stdout, result.stderr


def refunded(session: str) -> list[int]:
    code, out, err = invoke("state", "show", session, "--db", "sqlite:///app.db", "--json")
    assert code == 0, err
    found: list[int] = json.loads(out).get("refunded", [])
    return found


def test_a_paused_run_is_shown_and_exits_3_without_running_the_tool(workdir: Path) -> None:
    code, out, err = invoke("run", "support_app.py", "refund order 42", "--session", "s1")
    assert code == 3, (out, err)
    assert "[paused]" in err and "refund(order_id=42)" in err and "call-1" in err
    run_id = re.search(r"run (\S+), tool call call-1", err)
    assert run_id is not None
    assert f"--continue {run_id.group(1)} --approve" in err
    assert "[support]: " not in out  # no empty answer printed as if the run had ended
    assert refunded("s1") == []


def test_approve_runs_the_tool_and_prints_the_answer(workdir: Path) -> None:
    code, out, err = invoke(
        "run", "support_app.py", "refund order 42", "--session", "s2", "--approve"
    )
    assert code == 0, err
    assert "[paused]" in err
    assert out.splitlines()[-1] == "[support]: done: refunded 42"
    assert refunded("s2") == [42]


def test_reject_tells_the_model_why_and_runs_nothing(workdir: Path) -> None:
    code, out, err = invoke(
        "run", "support_app.py", "refund order 42", "--session", "s3", "--reject", "not eligible"
    )
    assert code == 0, err
    last = out.splitlines()[-1]
    assert last.startswith("[support]: done: ") and "not eligible" in last
    assert refunded("s3") == []


def test_continue_answers_a_run_paused_earlier(workdir: Path) -> None:
    code, _, err = invoke("run", "support_app.py", "refund order 42", "--session", "s4")
    assert code == 3
    match = re.search(r"run (\S+), tool call", err)
    assert match is not None
    code, out, err = invoke(
        "run", "support_app.py", "--session", "s4", "--continue", match.group(1), "--approve"
    )
    assert code == 0, err
    assert out.splitlines()[-1] == "[support]: done: refunded 42"
    assert refunded("s4") == [42]
    code, _, err = invoke(
        "run", "support_app.py", "--session", "s4", "--continue", match.group(1), "--approve"
    )
    assert code == 2 and "no paused run" in err


def test_approve_and_reject_together_are_a_usage_error(workdir: Path) -> None:
    code, _, err = invoke("run", "support_app.py", "hi", "--approve", "--reject", "no")
    assert code == 2 and "not both" in err


def _read_until(fd: int, pattern: str, seen: list[str], timeout: float = 30) -> None:
    deadline = time.monotonic() + timeout
    while pattern not in "".join(seen):
        left = deadline - time.monotonic()
        assert left > 0, f"never saw {pattern!r} in {''.join(seen)!r}"
        ready, _, _ = select.select([fd], [], [], left)
        if ready:
            try:
                chunk = os.read(fd, 4096)
            except OSError:  # the child closed the terminal
                chunk = b""
            assert chunk, f"the command ended before {pattern!r}: {''.join(seen)!r}"
            seen.append(chunk.decode(errors="replace"))


@pytest.mark.parametrize(("answer", "expected"), [("y", [42]), ("n", [])])
def test_at_a_terminal_the_approval_is_asked(
    tmp_path: Path, answer: str, expected: list[int]
) -> None:
    (tmp_path / "support_app.py").write_text(AGENT_FILE)
    leader, follower = pty.openpty()
    proc = subprocess.Popen(
        [sys.executable, "-m", "statewise", "run", "support_app.py", "refund 42", "--session", "t"],
        cwd=tmp_path,
        env=subprocess_env(COLUMNS="200", TERM="dumb"),
        stdin=follower,
        stdout=follower,
        stderr=follower,
        close_fds=True,
    )
    os.close(follower)
    seen: list[str] = []
    try:
        _read_until(leader, "Approve refund?", seen)
        os.write(leader, f"{answer}\n".encode())
        if answer == "n":
            _read_until(leader, "Why not?", seen)
            os.write(leader, b"too late\n")
        _read_until(leader, "[support]: done: ", seen)
        assert proc.wait(30) == 0, "".join(seen)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(10)
        os.close(leader)
    text = "".join(seen)
    assert "[paused]" in text and "refund(order_id=42)" in text
    show = subprocess.run(
        [sys.executable, "-m", "statewise", "state", "show", "t", "--json",
         "--db", "sqlite:///app.db"],
        cwd=tmp_path, env=subprocess_env(), capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert show.returncode == 0, show.stderr
    assert json.loads(show.stdout).get("refunded", []) == expected
    if answer == "n":
        assert "too late" in text
