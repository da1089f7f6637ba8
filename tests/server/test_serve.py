"""`statewise serve`: loading the target, the demo app, and the process itself."""

from __future__ import annotations

import importlib.util
import re
import socket
import subprocess
import sys
import time
from pathlib import Path

import httpx
import pytest

from statewise.cli.serve import load_target, split_target
from statewise.exceptions import ConfigurationError
from tests._env import subprocess_env, without_modules

APP_FILE = """
from statewise import Agent
from statewise.models import FunctionModel

echo = Agent(name="echo", model=FunctionModel(lambda messages, info: "pong"))
other = Agent(name="other", model=FunctionModel(lambda messages, info: "hi"))
not_an_agent = 42

def make():
    return {"made": Agent(model=FunctionModel(lambda messages, info: "made"))}
"""


def test_split_target() -> None:
    assert split_target("app.py") == ("app.py", None)
    assert split_target("dir/app.py:agent") == ("dir/app.py", "agent")
    assert split_target("pkg.mod:apps") == ("pkg.mod", "apps")
    assert split_target("C:\\x\\app.py") == ("C:\\x\\app.py", None)


def test_load_target(tmp_path: Path) -> None:
    path = tmp_path / "myapp.py"
    path.write_text(APP_FILE)
    found = load_target(str(path))
    assert sorted(a.name for a in found) == ["echo", "other"]
    assert load_target(f"{path}:echo").name == "echo"
    assert list(load_target(f"{path}:make")) == ["made"]
    with pytest.raises(ConfigurationError, match="no attribute 'nope'"):
        load_target(f"{path}:nope")
    with pytest.raises(ConfigurationError, match="no Python file"):
        load_target(str(tmp_path / "missing.py"))
    with pytest.raises(ConfigurationError, match="cannot import"):
        load_target("no_such_module_here")


def test_demo_app_builds(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("STATEWISE_DB_URL", f"sqlite:///{tmp_path}/demo.db")
    from statewise.server.demo import build_apps

    apps = build_apps()
    assert apps[0].name == "shopping-list"
    out = apps[0].run("Add milk and eggs", session_id="d1")
    assert out.session_state["shopping_list"] == ["milk", "eggs"]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


def serve_cmd(*args: str) -> list[str]:
    return [sys.executable, "-m", "statewise", "serve", *args, "--log-level", "warning"]


def test_serve_refuses_a_public_host_without_api_keys(tmp_path: Path) -> None:
    path = tmp_path / "myapp.py"
    path.write_text(APP_FILE)
    env = subprocess_env(STATEWISE_API_KEYS="", STATEWISE_ADMIN_KEYS="")
    done = subprocess.run(
        serve_cmd(f"{path}:echo", "--host", "0.0.0.0", "--port", "0"),
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 2
    assert "refusing to serve on 0.0.0.0 without API keys" in done.stderr
    assert "STATEWISE_API_KEYS" in done.stderr and "--host 127.0.0.1" in done.stderr
    assert "Traceback" not in done.stderr and done.stdout == ""


def test_serve_port_zero_prints_the_port_it_listens_on(tmp_path: Path) -> None:
    path = tmp_path / "myapp.py"
    path.write_text(APP_FILE)
    env = subprocess_env(STATEWISE_API_KEYS="", STATEWISE_ADMIN_KEYS="")
    proc = subprocess.Popen(
        serve_cmd(f"{path}:echo", "--port", "0"),
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        assert proc.stdout is not None
        first = proc.stdout.readline()
        match = re.search(r"http://127\.0\.0\.1:(\d+)/", first)
        assert match, first
        port = int(match.group(1))
        assert port != 0
        deadline = time.monotonic() + 20
        while True:
            try:
                r = httpx.post(
                    f"http://127.0.0.1:{port}/v1/agents/echo/runs", json={"input": "ping"}
                )
                break
            except httpx.TransportError:
                if time.monotonic() > deadline or proc.poll() is not None:
                    raise
                time.sleep(0.1)
        assert r.json()["content"] == "pong"
    finally:
        proc.terminate()
        _, err = proc.communicate(timeout=10)
    assert "no API keys configured" in err


def test_serve_without_the_server_extra_is_one_line(tmp_path: Path) -> None:
    script = without_modules("fastapi", "uvicorn") + (
        "sys.argv = ['statewise', 'serve']\nfrom statewise.cli import main\nmain()\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", script],
        env=subprocess_env(),
        capture_output=True,
        text=True,
        timeout=60,
        cwd=tmp_path,
    )
    assert done.returncode == 2
    assert done.stderr.strip().splitlines() == [
        "statewise serve: 'uvicorn' is not installed; install it with: "
        "pip install 'statewise[server]'"
    ]


def test_the_server_extra_brings_uvicorns_fast_parser_and_loop() -> None:
    """`pip install statewise[server]` serves with httptools and uvloop: uvicorn picks them
    when installed, and the pure-Python ones cost the server a tenth more CPU per request."""
    import uvicorn
    from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol

    for name in ("httptools", "uvloop") if sys.platform != "win32" else ("httptools",):
        if importlib.util.find_spec(name) is None:
            pytest.fail(
                f"{name} is missing: the server extra installs it (pip install -e '.[dev]')"
            )
    config = uvicorn.Config(lambda *_: None)
    config.load()
    assert config.http_protocol_class is HttpToolsProtocol
    if sys.platform != "win32":
        import uvloop

        factory = config.get_loop_factory()
        assert factory is not None
        loop = factory()
        try:
            assert isinstance(loop, uvloop.Loop)
        finally:
            loop.close()
