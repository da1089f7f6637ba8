"""`statewise state show|history|diff`: a session's state, read straight from a database."""

from __future__ import annotations

import json
from collections.abc import Iterator
from datetime import datetime
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.table import Table
from rich.text import Text

from statewise import Sessions
from statewise.cli._errors import CliError
from statewise.cli._run import hint_url
from statewise.exceptions import StatewiseError


def open_db(url: str | None) -> Sessions:
    """The sessions on the database at `url`, or a clear usage error."""
    if not url:
        raise CliError(
            "which database? pass --db URL (or set STATEWISE_DB_URL)",
            hint="For example: --db sqlite:///tmp/statewise_demo.db",
        )
    scheme, sep, rest = url.partition("://")
    if not sep or scheme.lower() == "sqlite":
        path = url if not sep else (rest[1:] if rest.startswith("/") else rest)
        path = path.split("?", 1)[0]  # (options such as ?keep_versions=1000 follow the path)
        if path and path != ":memory:" and not Path(path).is_file():
            raise CliError(
                f"no database file at {path}",
                hint="sqlite:///relative/path.db or sqlite:////absolute/path.db",
            )
    try:
        return Sessions(url)
    except StatewiseError as exc:
        raise CliError(f"--db {url}: {exc}") from None


def need_session(sessions: Sessions, session_id: str) -> None:
    """A usage error naming recent sessions when `session_id` is not on the database."""
    try:
        record = sessions.get(session_id)
    except StatewiseError as exc:
        raise CliError(str(exc)) from None
    if record is None:
        recent = [s.session_id for s in sessions.list_sessions(limit=5)]
        raise CliError(
            f"no session {session_id!r} in this database",
            hint=f"Recent sessions: {', '.join(recent)}" if recent else "It has no sessions.",
        )


def current(sessions: Sessions, session_id: str) -> tuple[dict[str, Any], int, Any]:
    need_session(sessions, session_id)
    found = sessions.state(session_id)
    return found.state, found.version, found.session


def version_arg(value: str | None) -> int | str | None:
    """`--from 3` is a version; `--from <run id>` is the state after that run."""
    if value is None:
        return None
    return int(value) if value.isdigit() else value


def existing_version(
    session_id: str, option: str, value: str | None, current: int
) -> int | str | None:
    """`value` as a version or run id; a version beyond the session's current one is an
    error, not the current state under another number."""
    version = version_arg(value)
    if isinstance(version, int) and version > current:
        raise CliError(
            f"{option} {version}: session {session_id!r} is at version {current}; "
            f"there is no version {version} yet",
            hint=f"Versions go from 0 to {current}: statewise state history {session_id} "
            "lists them.",
        )
    return version


def show(console: Console, db: Sessions, session_id: str, at: str | None, as_json: bool) -> None:
    state, version, record = current(db, session_id)
    if at is not None:
        wanted = existing_version(session_id, "--at", at, version)
        try:
            state = db.get_state_at(session_id, wanted)
        except StatewiseError as exc:
            raise CliError(str(exc)) from None
    if as_json:
        console.print(
            json.dumps(state, ensure_ascii=False, indent=2), markup=False, highlight=False
        )
        return
    where = f"version {at}" if at is not None else f"version {version}"
    console.print(
        Text.assemble(
            ("session ", "dim"),
            (session_id, "bold"),
            (f"  user {record.user_id or '-'}  app {record.app_name or 'default'}  {where}", "dim"),
        )
    )
    console.print_json(data=state)


HISTORY_PAGE = 200
"""Versions read and printed at a time: a long history prints as it is read, in constant
memory, instead of being built whole first."""


def history(
    console: Console,
    db: Sessions,
    session_id: str,
    limit: int | None,
    as_json: bool,
    url: str,
    before: int | None = None,
) -> None:
    """The versions before `before` (default: all), the last `limit` of them if given,
    oldest first, read and printed a page at a time. `--json` prints one JSON array with
    one version per line."""
    _, version, _ = current(db, session_id)
    upto = version if before is None else min(version, before - 1)
    after = max(0, upto - limit) if limit else 0  # the last `limit` (a limit alone: first)
    pages = _history_pages(db, session_id, after, upto)
    if as_json:
        out = console.file
        out.write("[")
        sep = "\n"
        for page in pages:
            for delta in page:
                out.write(sep + json.dumps(delta, ensure_ascii=False))
                sep = ",\n"
        out.write("\n]\n" if sep != "\n" else "]\n")
        return
    last = None
    for n, page in enumerate(pages):
        console.print(_history_table(session_id, page, first=n == 0))
        last = page[-1]["version"]
    if last is None:
        console.print(f"session {session_id} has no state changes yet")
        return
    if after > 0:
        console.print(
            Text(
                f"Earlier versions: statewise state history {session_id} --before {after + 1}"
                f"{f' --limit {limit}' if limit else ''} --db {hint_url(url)}",
                style="dim",
            )
        )
    console.print(
        Text(
            f"Compare two versions: statewise state diff {session_id} --from 0 --to "
            f"{last} --db {hint_url(url)}",
            style="dim",
        )
    )


def _history_pages(
    db: Sessions, session_id: str, after: int, upto: int
) -> Iterator[list[dict[str, Any]]]:
    while after < upto:
        page = db.state_deltas(
            session_id, after_version=after, upto_version=upto, limit=HISTORY_PAGE
        )
        if not page:
            return
        yield page
        after = page[-1]["version"]


def _history_table(session_id: str, deltas: list[dict[str, Any]], *, first: bool) -> Table:
    table = Table(
        title=f"State history of session {session_id}" if first else None,
        title_justify="left",
        show_header=first,
    )
    table.add_column("version", justify="right")
    table.add_column("when")
    table.add_column("run", no_wrap=True)
    run_label = unique_tails([d["run_id"] for d in deltas if d["run_id"]])
    for delta in deltas:
        first_row = True
        for segment in delta["segments"]:
            table.add_row(
                str(delta["version"]) if first_row else "",
                when(delta["created_at"]) if first_row else "",
                run_label.get(delta["run_id"] or "", "-") if first_row else "",
                "" if delta["step"] is None or not first_row else str(delta["step"]),
                segment["source"],
                "\n".join(describe_op(op) for op in segment["ops"]),
            )
            first_row = False
        for conflict in delta["conflicts"]:
            table.add_row("", "", "", "", "conflict", Text(json.dumps(conflict), style="yellow"))
    return table


def diff(
    console: Console,
    db: Sessions,
    session_id: str,
    from_: str | None,
    to: str | None,
    as_json: bool,
) -> None:
    _, version, _ = current(db, session_id)
    start = existing_version(session_id, "--from", from_, version)
    end = existing_version(session_id, "--to", to, version)
    try:
        changes = db.diff_state(session_id, from_=start or 0, to=end)
    except CliError:
        raise
    except StatewiseError as exc:
        raise CliError(str(exc)) from None
    if as_json:
        console.print(
            json.dumps(changes, ensure_ascii=False, indent=2), markup=False, highlight=False
        )
        return
    if not changes:
        console.print("no changes")
        return
    for change in changes:
        path = _path(change["path"])
        if change["kind"] == "added":
            console.print(Text(f"+ {path} = {_value(change['after'])}", style="green"))
        elif change["kind"] == "removed":
            console.print(Text(f"- {path} (was {_value(change['before'])})", style="red"))
        else:
            console.print(
                Text(
                    f"~ {path}: {_value(change['before'])} -> {_value(change['after'])}",
                    style="yellow",
                )
            )


def _path(parts: list[Any]) -> str:
    out = ""
    for part in parts:
        out += f"[{part}]" if isinstance(part, int) else (f".{part}" if out else str(part))
    return out


def _value(value: Any, limit: int = 80) -> str:
    text = json.dumps(value, ensure_ascii=False)
    return text if len(text) <= limit else text[: limit - 1] + "…"


def describe_op(op: dict[str, Any]) -> str:
    kind, path = op.get("op"), _path(op.get("path", []))
    if kind == "delete":
        return f"delete {path}"
    if "index" in op:
        return f"{kind} {path}[{op['index']}] {_value(op.get('value'))}"
    return f"{kind} {path} {_value(op.get('value'))}"


def when(timestamp: float) -> str:
    """A moment with its year and zone (RFC 3339, the local zone, to the second)."""
    if not timestamp:
        return "-"
    return datetime.fromtimestamp(timestamp).astimezone().isoformat(" ", timespec="seconds")


def unique_tails(ids: list[str], shortest: int = 8) -> dict[str, str]:
    """Each id's shortest tail (at least `shortest` characters) that no other id shares.

    Run ids are time-ordered, so ids made close together share their first characters
    and differ at the end: a prefix would label every row the same."""
    distinct = sorted(set(ids))
    for n in range(shortest, max((len(i) for i in distinct), default=0) + 1):
        tails = {i: ("…" + i[-n:]) if len(i) > n else i for i in distinct}
        if len(set(tails.values())) == len(distinct):
            return tails
    return {i: i for i in distinct}
