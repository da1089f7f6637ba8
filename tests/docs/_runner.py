"""Runs one page's code blocks in order, in a process of its own, and reports each result.

Usage: python _runner.py job.json (written by test_code_blocks.py), one JSON line per
block appended to the job's report file. The process's working
directory is the page's scratch directory. Python blocks share one namespace, as in a
notebook, so a page can build on what an earlier block defined; a block titled as a file
(`title="app.py"`) is written there (and, for Python, imported once to check it; for
JavaScript, checked with `node --check`) for later blocks to use. Shell blocks run in
bash, each in a process group of its own that is killed when the block ends, so a server a
block starts in the background stops with it. Real model requests are switched off.
"""

from __future__ import annotations

import contextlib
import io
import json
import os
import signal
import subprocess
import sys
import time
import traceback
from pathlib import Path
from typing import Any

BLOCK_TIMEOUT = 120


def run_shell(script: str, *, check_each: bool) -> tuple[int, str]:
    """`script` in bash (stderr merged into stdout); then its process group is killed."""
    flags = ["-eo", "pipefail"] if check_each else ["-o", "pipefail"]
    proc = subprocess.Popen(
        ["bash", *flags, "-c", script],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        start_new_session=True,
    )
    try:
        out, _ = proc.communicate(timeout=BLOCK_TIMEOUT)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        out, _ = proc.communicate()
        return -1, out + f"\n[timed out after {BLOCK_TIMEOUT} s]"
    finally:
        stop_group(proc.pid)
    return proc.returncode, out


def stop_group(pgid: int) -> None:
    """SIGTERM what the block left running, and wait until it is gone (SIGKILL after
    10 s), so the next block can bind the same port."""
    try:
        os.killpg(pgid, signal.SIGTERM)
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:
            os.killpg(pgid, 0)
            time.sleep(0.05)
        os.killpg(pgid, signal.SIGKILL)
    except ProcessLookupError:
        return


def console_commands(text: str) -> list[tuple[str, str]]:
    """`$ cmd` lines (continued by a trailing backslash) and the output shown under each."""
    commands: list[tuple[str, list[str]]] = []
    continuing = False
    for line in text.splitlines():
        if continuing:
            commands[-1] = (commands[-1][0] + "\n" + line, commands[-1][1])
            continuing = line.endswith("\\")
        elif line.startswith("$ "):
            commands.append((line[2:], []))
            continuing = line.endswith("\\")
        elif commands:
            commands[-1][1].append(line)
    return [(cmd, "\n".join(out)) for cmd, out in commands]


def run_python(code: str, where: str, namespace: dict[str, Any]) -> tuple[str, str | None]:
    stdout = io.StringIO()
    try:
        with contextlib.redirect_stdout(stdout):
            exec(compile(code, where, "exec", dont_inherit=True), namespace)
    except BaseException:
        return stdout.getvalue(), traceback.format_exc()
    return stdout.getvalue(), None


def main() -> None:
    job = json.loads(Path(sys.argv[1]).read_text())
    import statewise.models

    statewise.models.ALLOW_MODEL_REQUESTS = False
    namespace: dict[str, Any] = {"__name__": "__main__"}
    with Path(job["report"]).open("a", encoding="utf-8") as report:
        for block in job["blocks"]:
            result = run_block(block, namespace)
            report.write(json.dumps(result) + "\n")
            report.flush()
            if result.get("error"):
                break  # later blocks build on this one


def run_block(block: dict[str, Any], namespace: dict[str, Any]) -> dict[str, Any]:
    lang, text, where, title = block["lang"], block["text"], block["where"], block["title"]
    result: dict[str, Any] = {"where": where, "stdout": "", "error": None}
    if title:
        Path(title).parent.mkdir(parents=True, exist_ok=True)
        Path(title).write_text(text)
    if lang == "python" and title:
        module = {"__name__": Path(title).stem}  # imported once, as the CLI would
        result["stdout"], result["error"] = run_python(text, title, module)
    elif lang == "python":
        result["stdout"], result["error"] = run_python(text, where, namespace)
    elif lang == "js" and title:  # a file a later block runs: check its syntax now
        code, result["stdout"] = run_shell(f"node --check {title}", check_each=True)
        if code != 0:
            result["error"] = f"node --check {title}: exit code {code}:\n{result['stdout']}"
    elif lang in ("bash", "js"):
        if lang == "js":
            script = Path(f"block_{block['index']}.mjs")
            script.write_text(text)
            text = f"node {script}"
        code, result["stdout"] = run_shell(text, check_each=True)
        if code != 0:
            result["error"] = f"exit code {code}:\n{result['stdout']}"
    elif lang == "console":
        result["commands"] = []
        for command, _shown in console_commands(text):
            code, out = run_shell(command, check_each=False)
            result["commands"].append({"command": command, "code": code, "output": out})
    return result


if __name__ == "__main__":
    main()
