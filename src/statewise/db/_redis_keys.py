"""RedisDb's key names (see the layout in `statewise.db.redis`) and record decoding."""

from __future__ import annotations

from typing import Any, Protocol

from statewise.db import _codec
from statewise.db.records import RunRecord, ScopeKey, SessionRecord
from statewise.exceptions import CorruptRecordError

RUN_FIELDS = (
    "status",
    "agent_name",
    "input",
    "content",
    "messages",
    "metrics",
    "error",
    "created_at",
    "updated_at",
    "order",
)


def dec(value: bytes | str | None) -> str | None:
    if value is None:
        return None
    return value.decode() if isinstance(value, bytes) else value


def corrupt(message: str) -> CorruptRecordError:
    return CorruptRecordError(message)


class Keys:
    def __init__(self, prefix: str) -> None:
        self.p = "{" + prefix + "}"

    def session(self, sid: str) -> str:
        return f"{self.p}:s:{sid}"

    def sessions(self) -> str:
        return f"{self.p}:sessions"

    def by_user(self, user_id: str) -> str:
        return f"{self.p}:by_user:{user_id}"

    def by_app(self, app_name: str) -> str:
        return f"{self.p}:by_app:{app_name}"

    def scope(self, key: ScopeKey) -> str:
        return f"{self.p}:scope:{key.kind}:{key.id}"

    def dseg(self, key: ScopeKey) -> str:
        return f"{self.p}:dseg:{key.kind}:{key.id}"

    def dmeta(self, key: ScopeKey) -> str:
        return f"{self.p}:dmeta:{key.kind}:{key.id}"

    def snap(self, key: ScopeKey) -> str:
        return f"{self.p}:snap:{key.kind}:{key.id}"

    def snapv(self, key: ScopeKey) -> str:
        return f"{self.p}:snapv:{key.kind}:{key.id}"

    def ev(self, sid: str) -> str:
        return f"{self.p}:ev:{sid}"

    def evm(self, sid: str) -> str:
        return f"{self.p}:evm:{sid}"

    def runs(self, sid: str) -> str:
        return f"{self.p}:runs:{sid}"

    def runord(self, sid: str) -> str:
        return f"{self.p}:runord:{sid}"

    def commits(self, sid: str) -> str:
        """The session's landed commit ids and their results (exactly-once retries)."""
        return f"{self.p}:commits:{sid}"

    def leases(self, sid: str) -> str:
        """The session's run leases: run id -> "owner|expiry"."""
        return f"{self.p}:leases:{sid}"

    def scope_keys(self, key: ScopeKey) -> list[str]:
        return [self.scope(key), self.dseg(key), self.dmeta(key), self.snap(key), self.snapv(key)]

    def owned_by_session(self, sid: str) -> list[str]:
        """Every key a session owns (its `user:`/`app:` scopes are shared, not included)."""
        return [
            self.session(sid),
            self.ev(sid),
            self.evm(sid),
            self.runs(sid),
            self.runord(sid),
            self.commits(sid),
            self.leases(sid),
            *self.scope_keys(ScopeKey("session", sid)),
        ]

    def session_record(self, sid: str, raw: dict[bytes, bytes]) -> SessionRecord:
        f = {dec(k): dec(v) for k, v in raw.items()}
        try:
            return SessionRecord(
                session_id=sid,
                user_id=f.get("user_id"),
                app_name=f.get("app_name"),
                kind=f.get("kind") or "agent",
                created_at=float(f["created_at"] or 0),
                updated_at=float(f["updated_at"] or 0),
                last_seq=int(f["last_seq"] or 0),
                metadata=_codec.loads(f.get("metadata") or "{}"),
            )
        except (KeyError, ValueError, TypeError) as exc:
            raise corrupt(f"session {sid!r}: the session record is corrupt ({exc})") from exc


def run_record(sid: str, run_id: str, values: list[Any]) -> RunRecord:
    f = dict(zip(RUN_FIELDS, (dec(v) for v in values), strict=True))
    try:
        return RunRecord(
            session_id=sid,
            run_id=run_id,
            status=f["status"],  # type: ignore[arg-type]
            agent_name=f["agent_name"],
            input=f["input"],
            content=f["content"],
            messages=_codec.loads(f["messages"] or "[]"),
            metrics=_codec.loads(f["metrics"] or "{}"),
            error=f["error"],
            created_at=float(f["created_at"] or 0),
            updated_at=float(f["updated_at"] or 0),
        )
    except (ValueError, TypeError) as exc:
        raise corrupt(f"session {sid!r}: run {run_id!r} is not valid JSON") from exc


def run_fields(run_id: str) -> list[str]:
    return [f"{name}:{run_id}" for name in RUN_FIELDS]


class RedisTarget(Protocol):
    """What the admin and retention functions use of a `RedisDb`, typed here so that
    `redis.py` imports their modules at its top and they never import it (no circle)."""

    keys: Keys
    client: Any

    def _call(self, what: str, fn: Any, *args: Any, **kwargs: Any) -> Any: ...
