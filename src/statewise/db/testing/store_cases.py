"""Conformance cases through the state engine (`StateStore`), written as every writer
writes: a transaction that checks out, mutates, commits with CAS + rebase, and releases. These are what users rely on: no lost update, on every backend."""

from __future__ import annotations

import functools
import threading
from collections.abc import Callable
from typing import Any

from statewise.db.base import BaseDb
from statewise.db.records import ScopeKey
from statewise.db.testing.base import Harness

CASES: list[Callable[[Harness], None]] = []


def case(fn: Callable[[Harness], None]) -> Callable[[Harness], None]:
    CASES.append(fn)
    return fn


def append_items(db: BaseDb, session_id: str, items: list[str]) -> None:
    """Commit each item in a transaction of its own, as a run does."""
    from statewise.db.store import SessionSpec, StateStore

    store = StateStore(db)
    spec = SessionSpec(session_id=session_id, user_id="u1", app_name="app")
    for item in items:
        with store.begin(spec) as txn:
            if "items" not in txn.state:
                txn.state["items"] = []
            txn.state["items"].append(item)
            txn.commit(source=f"item:{item}")


def add_to_counter(db: BaseDb, session_id: str, times: int) -> None:
    from statewise.db.store import SessionSpec, StateStore
    from statewise.state.merge import Rules

    store = StateStore(db, rules=Rules({"n": "sum"}))
    spec = SessionSpec(session_id=session_id, user_id="u1", app_name="app")
    for _ in range(times):
        with store.begin(spec) as txn:
            txn.state["n"] = txn.state.get("n", 0) + 1
            txn.commit(source="counter")


def stored_state(db: BaseDb, session_id: str) -> dict[str, Any]:
    key = ScopeKey("session", session_id)
    return db.load_scopes([key])[key].data


def run_threads(targets: list[Callable[[], None]]) -> None:
    """Run each target in a thread of its own; the first error any raised, raised here."""
    errors: list[BaseException] = []

    def run(fn: Callable[[], None]) -> None:
        try:
            fn()
        except BaseException as exc:  # pragma: no cover - reported below
            errors.append(exc)

    threads = [threading.Thread(target=run, args=(fn,)) for fn in targets]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    if errors:
        raise errors[0]


@case
def store_concurrent_appends_keep_every_item(h: Harness) -> None:
    append_items(h.db, "shared", ["first"])
    handles = [h.db, h.db, h.reopen(), h.reopen()]
    per_thread = 12
    expected = ["first"] + [f"{n}-{i}" for n in range(len(handles)) for i in range(per_thread)]
    run_threads(
        [
            functools.partial(append_items, db, "shared", [f"{n}-{i}" for i in range(per_thread)])
            for n, db in enumerate(handles)
        ]
    )
    items = stored_state(h.db, "shared")["items"]
    assert sorted(items) == sorted(expected), f"{len(items)} items, expected {len(expected)}"
    for n in range(len(handles)):  # each writer's items stay in its own order
        mine = [x for x in items if x.startswith(f"{n}-")]
        assert mine == [f"{n}-{i}" for i in range(per_thread)]


@case
def store_concurrent_sum_counters_reach_exact_total(h: Harness) -> None:
    add_to_counter(h.db, "counter", 1)
    handles = [h.db, h.reopen()]
    run_threads([functools.partial(add_to_counter, db, "counter", 25) for db in handles])
    assert stored_state(h.db, "counter")["n"] == 51


@case
def store_checkout_sees_other_handles_commits(h: Harness) -> None:
    append_items(h.db, "s", ["a"])
    other = h.reopen()
    append_items(other, "s", ["b"])
    append_items(h.db, "s", ["c"])  # the cached tree must be refreshed, not reused
    assert stored_state(h.db, "s")["items"] == ["a", "b", "c"]
    assert stored_state(other, "s")["items"] == ["a", "b", "c"]
