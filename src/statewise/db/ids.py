"""Fresh ids for runs and commits."""

from __future__ import annotations

import os
import time

_RANDOM_BATCH = 64
_random_halves: list[str] = []  # hex strings of 64 random bits each, taken from the end


def _refill_random_halves() -> None:
    text = os.urandom(8 * _RANDOM_BATCH).hex()
    _random_halves.extend(text[i : i + 16] for i in range(0, len(text), 16))


# A forked child must not hand out the ids its parent will also hand out.
os.register_at_fork(after_in_child=_random_halves.clear)


def new_id() -> str:
    """A fresh id: 32 hex digits, the time in nanoseconds then 64 random bits.

    Time first, so ids made one after another sort one after another: the database
    indexes keyed by run and commit ids then grow at their end instead of at a random
    page, and a commit rewrites fewer pages. The random half keeps ids unique across
    processes and unguessable; it comes from the OS's generator in batches, because a
    system call per id was a noticeable part of a small run (a run takes four ids).
    `list.pop` and `list.extend` are atomic, so threads never share a half; a thread
    whose refill other threads emptied before it could take one refills again.
    """
    while True:
        try:
            half = _random_halves.pop()
        except IndexError:
            _refill_random_halves()
        else:
            return f"{time.time_ns():016x}{half}"
