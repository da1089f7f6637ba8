"""Errors the command line reports as one clear line and exit code 2 (usage errors)."""

from __future__ import annotations

from typing import NoReturn

import typer
from rich.console import Console
from rich.text import Text

USAGE_ERROR = 2
RUN_FAILED = 1
RUN_PAUSED = 3  # a run waits for an approval nobody gave

err_console = Console(stderr=True, soft_wrap=True)  # one error, one line


class CliError(Exception):
    """A mistake in what the user asked for: a missing file, bad JSON, an unknown session."""

    def __init__(self, message: str, hint: str | None = None) -> None:
        super().__init__(message)
        self.hint = hint


def fail(message: str, *, hint: str | None = None, code: int = USAGE_ERROR) -> NoReturn:
    err_console.print(Text("Error: ", style="bold red") + Text(message))
    if hint:
        err_console.print(Text(hint, style="dim"))
    raise typer.Exit(code)
