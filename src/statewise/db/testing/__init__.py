"""The conformance suite every storage backend passes.

A backend plugs in by registering a factory; it then gets every test for free::

    from statewise.db.testing import Harness, register_backend

    register_backend("mydb", my_factory)   # my_factory() -> context manager of a Harness

With pytest, `tests/db/test_conformance.py` runs every case against every registered
backend (`memory` and `sqlite` are built in; the test suite registers `postgres` and
`redis`). Without pytest, `run_conformance(factory)` runs them all and raises on the first
failure.

A `Harness` is one backend under test: an empty database (`db`), a second handle on the
same storage (`reopen()`, what another process would see), another empty database
(`new_db()`, for import), and `corrupt(...)`, which writes garbage into one stored record
through the backend's raw connection so the suite can check that decoding fails loudly.
"""

from __future__ import annotations

from collections.abc import Callable

from statewise.db.testing.base import CorruptTarget, Factory, Harness

_REGISTRY: dict[str, Factory] = {}


def register_backend(name: str, factory: Factory) -> None:
    """Make `name` part of the conformance run. `factory()` returns a context manager that
    yields a Harness and cleans up after it (drop the schema, delete the keys)."""
    _REGISTRY[name] = factory


def registered_backends() -> dict[str, Factory]:
    _builtins()
    return dict(_REGISTRY)


def run_conformance(factory: Factory, *, include_store: bool = True) -> int:
    """Run every case against `factory`'s backend; raise on the first failure. Returns
    how many cases ran."""
    count = 0
    for case in all_cases(include_store=include_store):
        with factory() as harness:
            try:
                case(harness)
            except Exception as exc:
                raise AssertionError(
                    f"{harness.name}: conformance case {case.__name__} failed"
                ) from exc
        count += 1
    return count


def all_cases(*, include_store: bool = True) -> list[Callable[[Harness], None]]:
    from statewise.db.testing import (
        cases,
        cases_history,
        cases_listing,
        cases_ownership,
        cases_retention,
        store_cases,
    )

    # registered into the same list
    assert (
        cases_history.CASES
        is cases_ownership.CASES
        is cases_listing.CASES
        is cases_retention.CASES
        is cases.CASES
    )

    found = list(cases.CASES)
    if include_store:
        found += store_cases.CASES
    return found


def _builtins() -> None:
    from statewise.db.testing.harnesses import memory_backend, sqlite_backend

    _REGISTRY.setdefault("memory", memory_backend)
    _REGISTRY.setdefault("sqlite", sqlite_backend)


__all__ = [
    "CorruptTarget",
    "Factory",
    "Harness",
    "all_cases",
    "register_backend",
    "registered_backends",
    "run_conformance",
]
