"""Names the engine keeps for its own bookkeeping: `__x__` in any scope.

`__ttl__` (expiry times) and `__secrets__` (which keys of a scope are secret) live in state
like any other key, so they travel with it through commits, rebases, forks and rollbacks;
but nothing outside the engine may write them. The recorder enforces it: a write to a
reserved key made outside `Recorder.engine()` is undone at once and raises
`ReservedKeyError`, whoever made it (a tool, the state API, a PATCH, the model).
"""

from __future__ import annotations

from statewise.exceptions import ReservedKeyError

_SCOPE_PREFIXES = ("user:", "app:", "temp:")


def is_reserved(key: object) -> bool:
    """True for `__name__`, `user:__name__`, `app:__name__` and `temp:__name__`."""
    if type(key) is not str or "__" not in key:
        return False
    name = key.partition(":")[2] if key.startswith(_SCOPE_PREFIXES) else key
    return len(name) > 4 and name.startswith("__") and name.endswith("__")


def reserved_error(key: str) -> ReservedKeyError:
    return ReservedKeyError(
        f"state key {key!r} is reserved: names like __name__ hold statewise's own "
        "bookkeeping (expiry times, secret keys) and cannot be written from outside; "
        "pick another name"
    )


def check_writable(keys: object) -> None:
    """Raise `ReservedKeyError` for the first reserved name among `keys`."""
    for key in keys:  # type: ignore[attr-defined]
        if is_reserved(key):
            raise reserved_error(key)


__all__ = ["check_writable", "is_reserved", "reserved_error"]
