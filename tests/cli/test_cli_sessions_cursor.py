"""`statewise sessions list --cursor`: the next page's cursor is printed (on stderr, so
`--json` stays a list), and passing it back lists the page after."""

from __future__ import annotations

import json
import re
from pathlib import Path

from statewise.db import SqliteDb
from statewise.db.testing.cases import write
from tests.cli.test_cli_sessions import invoke


def test_sessions_list_pages_by_cursor(tmp_path: Path) -> None:
    path = tmp_path / "c.db"
    with SqliteDb(db_file=path) as db:
        for n in range(5):
            write(db, f"s{n}")
    url = f"sqlite:///{path}"
    walked: list[str] = []
    args = ["sessions", "list", "--db", url, "--limit", "2", "--json"]
    for _ in range(3):
        code, out, err = invoke(*args)
        assert code == 0, err
        walked += [s["session_id"] for s in json.loads(out)]
        found = re.search(r"--cursor (\S+)", err)
        if found is None:
            break
        args = ["sessions", "list", "--db", url, "--limit", "2", "--json", "--cursor", found[1]]
    assert walked == ["s4", "s3", "s2", "s1", "s0"] and found is None
    code, out, err = invoke("sessions", "list", "--db", url, "--limit", "4")
    assert code == 0 and "s1" in out and "s0" not in out and "next page: --cursor" in err
    code, _, err = invoke("sessions", "list", "--db", url, "--cursor", "nonsense")
    assert code != 0 and "cursor" in err
