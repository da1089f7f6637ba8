"""`agent.state`: read and write a session's state outside a run.

Every call checks the session out, so it sees what other processes committed, and every
write is committed at once, recorded in the event log as an API call.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any, Protocol, TypeVar

from statewise.db.store import (
    TTL_KEY,
    SessionSpec,
    StateStore,
    clear_expiry,
    set_expiry,
    visible_state,
)
from statewise.exceptions import TempScopeError
from statewise.run.driver import initialize_state
from statewise.state.reserved import is_reserved
from statewise.state.tracked import TrackedDict, to_plain

if TYPE_CHECKING:
    from statewise.db.store import WorkingState

T = TypeVar("T")


class StateOwner(Protocol):
    """What `agent.state` reads and writes through: the owner's store, the spec of a
    session, and the state a new session starts with (`SessionConfig` is one)."""

    @property
    def store(self) -> StateStore: ...

    def spec(self, session_id: str | None, user_id: str | None) -> SessionSpec: ...

    def default_state(self) -> dict[str, Any]: ...


def _no_temp(key: str) -> None:
    if key.startswith("temp:"):
        raise TempScopeError(
            f"cannot write {key!r} outside a run: temp: keys only live for the run that writes them"
        )


class SessionStateAPI:
    """`get/set/has/delete/update/clear/get_all/increment` on the agent's current session."""

    def __init__(self, agent: StateOwner, session_id: str | None = None) -> None:
        self._agent = agent
        self._session_id = session_id

    def for_session(self, session_id: str) -> SessionStateAPI:
        return SessionStateAPI(self._agent, session_id)

    @contextmanager
    def _checked_out(self, source: str | None) -> Iterator[WorkingState]:
        spec = self._agent.spec(self._session_id, None)
        with self._agent.store.begin(spec) as txn:
            # A session that does not exist yet reads as the agent's default state.
            initialize_state(txn.working, self._agent.default_state(), None, False)
            yield txn.working
            if source is not None and txn.has_changes:
                txn.commit(source=source)

    def _read(self, fn: Callable[[TrackedDict], T]) -> T:
        with self._checked_out(None) as working:
            return fn(working.root)

    def _write(self, source: str, fn: Callable[[TrackedDict], T]) -> T:
        with self._checked_out(source) as working:
            return fn(working.root)

    def get(self, key: str, default: Any = None) -> Any:
        if is_reserved(key):
            return default
        return self._read(lambda s: to_plain(s[key]) if key in s else default)

    def has(self, key: str) -> bool:
        return not is_reserved(key) and self._read(lambda s: key in s)

    def get_all(self) -> dict[str, Any]:
        return self._read(visible_state)

    def set(self, key: str, value: Any, *, ttl: float | None = None) -> None:
        """Set `key`; with `ttl` (seconds) it vanishes from reads and prompts after that."""
        _no_temp(key)

        def write(state: TrackedDict) -> None:
            state[key] = value
            if ttl is not None:
                set_expiry(state, key, ttl)
            else:
                clear_expiry(state, key)

        self._write(f"api:state.set:{key}", write)

    def delete(self, key: str) -> None:
        _no_temp(key)
        self._write(f"api:state.delete:{key}", lambda s: s.pop(key, None))

    def update(self, key: str | Mapping[str, Any], value: Mapping[str, Any] | None = None) -> None:
        """`update(key, {...})` merges into the dict at `key`; `update({...})` sets keys."""
        if isinstance(key, str):
            _no_temp(key)
            self._write(f"api:state.update:{key}", lambda s: s.update(key, dict(value or {})))
        else:
            for name in key:
                _no_temp(name)
            self._write("api:state.update", lambda s: s.update(dict(key)))

    def increment(self, key: str, amount: int | float = 1) -> int | float:
        _no_temp(key)
        result: int | float = self._write(
            f"api:state.increment:{key}", lambda s: s.increment(key, amount)
        )
        return result

    def clear(self) -> None:
        def clear(state: TrackedDict) -> None:
            state.clear()
            if TTL_KEY in state:
                with state.engine_writes():
                    del state[TTL_KEY]

        self._write("api:state.clear", clear)

    def __getitem__(self, key: str) -> Any:
        value = self.get(key, _MISSING)
        if value is _MISSING:
            raise KeyError(key)
        return value

    def __setitem__(self, key: str, value: Any) -> None:
        self.set(key, value)

    def __contains__(self, key: object) -> bool:
        return isinstance(key, str) and self.has(key)

    def __repr__(self) -> str:
        return f"SessionStateAPI({self.get_all()!r})"


_MISSING = object()
