"""Options several commands share, declared once so their flags and help agree."""

from __future__ import annotations

from typing import Annotated

import typer

DbOption = Annotated[
    str | None,
    typer.Option(
        "--db",
        envvar="STATEWISE_DB_URL",
        help="Database URL: sqlite:///relative.db, sqlite:////absolute.db, memory://, "
        "postgresql://..., redis://... (default: $STATEWISE_DB_URL).",
        show_default=False,
    ),
]
JsonOption = Annotated[bool, typer.Option("--json", help="Print JSON only, for scripts.")]

__all__ = ["DbOption", "JsonOption"]
