"""`statewise chat` driven through a real pseudo-terminal: tool calls, state changes and an
approval asked inline; the conversation is shown again when the session is reopened."""

from __future__ import annotations

import json
import os
import pty
import select
import subprocess
import sys
import time
from pathlib import Path

from statewise import Sessions
from tests._env import subprocess_env
from tests.cli.test_cli_pauses import AGENT_FILE, _read_until


def _chat(tmp_path: Path, *args: str) -> tuple[subprocess.Popen[bytes], int]:
    leader, follower = pty.openpty()
    proc = subprocess.Popen(
        [sys.executable, "-m", "statewise", "chat", "support_app.py", *args],
        cwd=tmp_path,
        env=subprocess_env(COLUMNS="200", TERM="dumb", NO_COLOR="1"),
        stdin=follower,
        stdout=follower,
        stderr=follower,
        close_fds=True,
    )
    os.close(follower)
    return proc, leader


def _finish(proc: subprocess.Popen[bytes], leader: int, seen: list[str]) -> str:
    try:
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:  # what it prints on its way out
            ready, _, _ = select.select([leader], [], [], 1)
            if not ready:
                if proc.poll() is not None:
                    break
                continue
            try:
                chunk = os.read(leader, 4096)
            except OSError:
                break
            if not chunk:
                break
            seen.append(chunk.decode(errors="replace"))
        assert proc.wait(30) == 0, "".join(seen)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(10)
        os.close(leader)
    return "".join(seen)


def test_chat_shows_tools_state_and_asks_for_approval(tmp_path: Path) -> None:
    (tmp_path / "support_app.py").write_text(AGENT_FILE)
    proc, leader = _chat(tmp_path, "--session", "c1")
    seen: list[str] = []
    try:
        _read_until(leader, "you>", seen)
        os.write(leader, b"refund order 42\n")
        _read_until(leader, "Approve refund?", seen)
        assert "[paused] refund(" in "".join(seen)
        os.write(leader, b"y\n")
        _read_until(leader, "support> done: refunded 42", seen)
        _read_until(leader, "you>", seen)
        os.write(leader, b"/state\n")
        _read_until(leader, '"refunded"', seen)
        os.write(leader, b"/exit\n")
    finally:
        text = _finish(proc, leader, seen)
    assert "<- refunded 42" in text  # the tool's result, as it happened
    assert "state: append refunded" in text  # the state change, as it happened
    assert "statewise chat support_app.py --session c1" in text
    with Sessions("sqlite:///" + str(tmp_path / "app.db")) as sessions:
        assert sessions.state("c1").state == {"refunded": [42]}

    proc, leader = _chat(tmp_path, "--session", "c1")
    seen = []
    try:
        _read_until(leader, "you>", seen)
        os.write(leader, b"refund order 7\n")
        _read_until(leader, "Approve refund?", seen)
        os.write(leader, b"n\n")
        _read_until(leader, "Why not?", seen)
        os.write(leader, b"duplicate\n")
        _read_until(leader, "support> done: ", seen)
        os.write(leader, b"\x04")  # Ctrl-D leaves
    finally:
        text = _finish(proc, leader, seen)
    assert "you> refund order 42" in text  # the earlier turn, shown on reopening
    assert "duplicate" in text
    with Sessions("sqlite:///" + str(tmp_path / "app.db")) as sessions:
        assert sessions.state("c1").state == {"refunded": [42]}
        assert json.dumps([r.status for r in sessions.runs("c1")]) == '["completed", "completed"]'
