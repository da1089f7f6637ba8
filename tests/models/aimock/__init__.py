"""`@copilotkit/aimock`, a mock LLM server we did not write, run for the provider tests.

`.ci/run` installs it with `npm --prefix tests/models/aimock ci` from the committed lockfile.
`AimockServer` starts its CLI on a random loopback port (it prints the URL it listens on),
and drives it through its control API: `POST /__aimock/fixtures` adds fixtures (match +
response, shared by every provider's endpoint), `POST /__aimock/error` queues a one-shot
error, `POST /__aimock/reset` forgets fixtures and the journal between tests, and
`GET /__aimock/journal` shows the requests it received. Inbound API keys are checked
(`AIMOCK_API_KEYS`), so a wrong key gets its real 401, and `--strict` turns on its
extended-thinking check (a tool-loop continuation must start with the signed thinking
block, or 400).
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import tempfile
import threading
import time
import urllib.request
from pathlib import Path
from typing import Any

HERE = Path(__file__).parent
CLI = HERE / "node_modules" / "@copilotkit" / "aimock" / "dist" / "cli.js"
PACKAGE = HERE / "node_modules" / "@copilotkit" / "aimock" / "package.json"
API_KEY = "aimock-test-key"
STARTUP_SECONDS = 20.0


def missing_reason() -> str | None:
    """Why aimock cannot run here, or None when it can."""
    if shutil.which("node") is None:
        return "node is not installed (aimock is a Node.js server)"
    if not CLI.exists():
        return (
            "@copilotkit/aimock is not installed; run "
            "`npm --prefix tests/models/aimock ci --no-audit --no-fund`"
        )
    return None


def version() -> str:
    return str(json.loads(PACKAGE.read_text())["version"])


class AimockServer:
    """One aimock process on 127.0.0.1 with a random port. With `check_keys` off it
    accepts any credentials (for AWS SigV4 signatures, which its key check refuses)."""

    def __init__(self, *, check_keys: bool = True) -> None:
        self._dir = tempfile.TemporaryDirectory(prefix="statewise-aimock-")
        fixtures = Path(self._dir.name) / "fixtures.json"
        # Strict mode refuses to start with no fixture; tests add their own.
        placeholder = {
            "match": {"userMessage": "statewise placeholder"},
            "response": {"content": "-"},
        }
        fixtures.write_text(json.dumps({"fixtures": [placeholder]}))
        self._proc = subprocess.Popen(
            [
                "node",
                str(CLI),
                *("--port", "0", "--host", "127.0.0.1", "--fixtures", str(fixtures)),
                "--strict",  # no fixture: 503 instead of 404; and Anthropic's thinking check
            ],
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
            env=self._env(check_keys),
        )
        self.url = self._wait_for_url()
        self._drain = threading.Thread(target=self._read_rest, daemon=True)
        self._drain.start()

    @staticmethod
    def _env(check_keys: bool) -> dict[str, str]:
        env = {k: v for k, v in os.environ.items() if k != "AIMOCK_API_KEYS"}
        if check_keys:
            env["AIMOCK_API_KEYS"] = API_KEY
        return env

    def _wait_for_url(self) -> str:
        assert self._proc.stdout is not None
        deadline = time.monotonic() + STARTUP_SECONDS
        seen: list[str] = []
        while time.monotonic() < deadline:
            line = self._proc.stdout.readline()
            if not line:
                break
            seen.append(line)
            found = re.search(r"listening on (http://127\.0\.0\.1:\d+)", line)
            if found:
                return found.group(1)
        self.close()
        raise RuntimeError("aimock did not start:\n" + "".join(seen))

    def _read_rest(self) -> None:
        assert self._proc.stdout is not None
        for _ in self._proc.stdout:
            pass

    def _control(self, method: str, path: str, body: Any = None) -> Any:
        data = None if body is None else json.dumps(body).encode()
        request = urllib.request.Request(
            f"{self.url}/__aimock{path}",
            data=data,
            method=method,
            headers={"Content-Type": "application/json", "Authorization": f"Bearer {API_KEY}"},
        )
        with urllib.request.urlopen(request, timeout=10) as response:
            return json.loads(response.read())

    def add(self, *fixtures: dict[str, Any]) -> None:
        """Add fixtures (`{"match": {...}, "response": {...}, ...}`); first match wins."""
        self._control("POST", "/fixtures", {"fixtures": list(fixtures)})

    def error_once(self, status: int, message: str, type: str) -> None:
        """The next request gets this error, whatever it asks."""
        self._control(
            "POST", "/error", {"status": status, "body": {"message": message, "type": type}}
        )

    def journal(self) -> list[dict[str, Any]]:
        entries: list[dict[str, Any]] = self._control("GET", "/journal")
        return entries

    def reset(self) -> None:
        self._control("POST", "/reset")

    def close(self) -> None:
        if self._proc.poll() is None:
            self._proc.terminate()
            try:
                self._proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self._proc.kill()
                self._proc.wait(timeout=10)
        if self._proc.stdout is not None:
            self._proc.stdout.close()
        self._dir.cleanup()
