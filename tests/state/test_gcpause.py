"""Big JSON values are copied and decoded with the cyclic garbage collector paused when the
process allows it (`tune_collector()`), and never otherwise; the pause always ends as it
began: re-enabled if it was on, left off if the user turned it off."""

from __future__ import annotations

import gc
import json
import threading
from collections.abc import Callable, Iterator
from typing import Any

import pytest

from statewise.db import _codec
from statewise.exceptions import StateSerializationError
from statewise.state.gcpause import PAUSE_ITEMS, collector_paused, tune_collector
from statewise.state.jsonvalue import copy_json, to_json_value

BIG = [{"sku": f"SKU-{i:06d}", "tags": ["a", "b"]} for i in range(3 * PAUSE_ITEMS)]

BUILDS = [
    lambda: to_json_value({"items": BIG}),
    lambda: copy_json({"items": BIG}),
    lambda: _codec.loads(json.dumps({"items": BIG})),
]


@pytest.fixture
def tuned() -> Iterator[None]:
    """The process lets statewise manage its collector, as `statewise serve` does."""
    tune_collector()
    try:
        yield
    finally:
        tune_collector(False)


@pytest.fixture
def collections() -> Iterator[list[int]]:
    """The generation of each collection that starts while the test runs."""
    started: list[int] = []

    def note(phase: str, info: dict[str, Any]) -> None:
        if phase == "start":
            started.append(info["generation"])

    gc.enable()
    gc.callbacks.append(note)
    try:
        yield started
    finally:
        gc.callbacks.remove(note)
        gc.enable()


@pytest.mark.parametrize("build", BUILDS, ids=["to_json_value", "copy_json", "loads"])
def test_by_default_the_collector_is_left_alone(build: Callable[[], Any]) -> None:
    seen: list[bool] = []

    def note(phase: str, info: dict[str, Any]) -> None:
        seen.append(gc.isenabled())

    gc.enable()
    gc.callbacks.append(note)
    try:
        build()
    finally:
        gc.callbacks.remove(note)
    assert gc.isenabled()
    # the collector ran as usual while the value was built: dozens of collections
    assert len(seen) > 5 and all(seen)


@pytest.mark.usefixtures("tuned")
@pytest.mark.parametrize("build", BUILDS, ids=["to_json_value", "copy_json", "loads"])
def test_a_big_value_is_built_without_a_collection(
    collections: list[int], build: Callable[[], Any]
) -> None:
    text = json.dumps({"items": BIG})
    collections.clear()
    out = build()
    # ~25,000 containers: dozens of collections without the pause; with it, at most the
    # one that is due as the pause ends
    assert len(collections) <= 1
    assert gc.isenabled()
    assert json.dumps(out) == text


@pytest.mark.usefixtures("tuned")
def test_a_small_value_does_not_pause(collections: list[int]) -> None:
    small = [{"n": i} for i in range(PAUSE_ITEMS - 1)]
    for _ in range(3):
        to_json_value(small)
    assert collections  # the collector ran as usual


@pytest.mark.usefixtures("tuned")
def test_a_failed_copy_ends_the_pause() -> None:
    bad = [*BIG, {"when": object()}]
    with pytest.raises(StateSerializationError, match=rf"state\[{len(BIG)}\]\['when'\]"):
        to_json_value(bad)
    assert gc.isenabled()


@pytest.mark.usefixtures("tuned")
def test_a_collector_the_user_disabled_stays_disabled() -> None:
    gc.disable()
    try:
        to_json_value(BIG)
        with collector_paused():
            pass
        assert not gc.isenabled()
    finally:
        gc.enable()


@pytest.mark.usefixtures("tuned")
def test_overlapping_pauses_end_with_the_last() -> None:
    entered, release = threading.Event(), threading.Event()

    def hold() -> None:
        with collector_paused():
            entered.set()
            release.wait(10)

    other = threading.Thread(target=hold)
    other.start()
    try:
        assert entered.wait(10)
        with collector_paused():
            assert not gc.isenabled()
        assert not gc.isenabled()  # the other thread's pause still holds
    finally:
        release.set()
        other.join()
    assert gc.isenabled()
