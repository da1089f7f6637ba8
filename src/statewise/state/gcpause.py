"""Pausing Python's cyclic garbage collector while a big JSON value is built, for a
process that lets statewise manage its collector.

Copying or decoding a large value allocates one container per dict and list in it, and
every 700 allocations the collector runs; as the new containers age into the older
generations, those collections walk them again and again (`bench/bench_state.py`,
`bigwrite`, shows what that costs). JSON values hold no reference cycles, so nothing the
collector could free is made meanwhile: the pause changes when it runs, not what it frees.

The collector belongs to the whole process, so a library has no business switching it
off behind its host application's back: nothing here touches it until the process opts
in with `tune_collector()` (`statewise serve` does, as the owner of its process; an
application that embeds statewise may). Once allowed, the pause is counted so that
overlapping pauses from several threads end when the last one does, and it never
re-enables a collector that was disabled before the first one began.
"""

from __future__ import annotations

import gc
import threading
from collections.abc import Iterator
from contextlib import contextmanager

PAUSE_ITEMS = 4096
"""A container with at least this many items is copied with the collector paused."""

PAUSE_BYTES = 256 * 1024
"""JSON text at least this long is decoded with the collector paused."""

_lock = threading.Lock()
_holders = 0
_resume = False  # whether the collector was enabled when the first pause began
_tuned = False


def tune_collector(enabled: bool = True) -> None:
    """Let statewise manage this process's cyclic garbage collector (off by default).

    With it on, big JSON values are built with the collector paused, and a server started
    by `statewise serve` moves the objects alive at its startup out of the collector's
    full collections (`gc.freeze`) while it serves. Call it from a process you own, not
    from a library."""
    global _tuned
    _tuned = enabled


def collector_tuned() -> bool:
    """Whether the process let statewise manage its collector (`tune_collector`)."""
    return _tuned


def pause_wanted() -> bool:
    """Whether building a big value now should pause the collector: the process allowed
    it, and the collector is running (inside a pause, or switched off by the user, it is
    not)."""
    return _tuned and gc.isenabled()


@contextmanager
def collector_paused() -> Iterator[None]:
    """Run the block with the cyclic garbage collector disabled, if the process allowed it
    (see the module); otherwise just run it."""
    global _holders, _resume
    if not _tuned:
        yield
        return
    with _lock:
        if _holders == 0:
            _resume = gc.isenabled()
            gc.disable()
        _holders += 1
    try:
        yield
    finally:
        with _lock:
            _holders -= 1
            if _holders == 0 and _resume:
                gc.enable()


__all__ = [
    "PAUSE_BYTES",
    "PAUSE_ITEMS",
    "collector_paused",
    "collector_tuned",
    "pause_wanted",
    "tune_collector",
]
