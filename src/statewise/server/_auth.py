"""Who is calling: a `Principal`, from the request.

By default, bearer API keys: each key maps to a user_id; admin keys see every session.
Keys come from `create_app(api_keys=..., admin_keys=...)` or, when neither is given, from
the environment: `STATEWISE_API_KEYS="key1=alice,key2=bob"` and
`STATEWISE_ADMIN_KEYS="key3=ops"` (an admin key without `=user` acts as user "admin").

An app with its own login passes `create_app(auth=...)`: a callable that turns the
request into a `Principal` (`JWTAuth` verifies tokens from an identity provider). Every
tenancy rule applies to every principal, however it was made.
"""

from __future__ import annotations

import hmac
import os
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass

from starlette.requests import Request

from statewise.agent.service import SessionRecord, validate_id
from statewise.exceptions import ConfigurationError
from statewise.server._errors import Problem

ADMIN_USER = "admin"

KeySpec = Mapping[str, str] | Sequence[str] | str | None


@dataclass(frozen=True, slots=True)
class Principal:
    """Who is calling: a user, an admin, or anyone (no auth configured).

    `roles` are what the app's auth says the caller holds, for rules such as who may
    approve a paused run (`approvers_with_role`)."""

    user_id: str | None
    admin: bool = False
    roles: frozenset[str] = frozenset()

    def can_see(self, record: SessionRecord) -> bool:
        return self.admin or (record.user_id is not None and record.user_id == self.user_id)

    def check_shared_write(self, keys: Iterable[object], what: str) -> None:
        """The `app:` scope is shared by every user of the app: only admins write it."""
        if self.admin:
            return
        shared = sorted(str(k) for k in keys if isinstance(k, str) and k.startswith("app:"))
        if shared:
            raise Problem(
                403,
                f"{what} writes {', '.join(map(repr, shared[:5]))}: app: keys are shared by "
                "every user of the app, so only an admin key may write them",
                title="Shared state needs an admin key",
            )


OPEN = Principal(user_id=None, admin=True)


class Unauthorized(Exception):
    """Raised by an `auth=` callable: the request does not prove who it is (HTTP 401,
    with this message as the problem's detail)."""


ApprovalRule = Callable[[Principal, SessionRecord], bool]


def owner_approves(principal: Principal, record: SessionRecord) -> bool:
    """The default approval rule: the session's owner (or an admin) approves its runs."""
    return principal.can_see(record)


def approvers_with_role(role: str = "approver", *, owner_too: bool = False) -> ApprovalRule:
    """An approval rule: principals holding `role` (and admins) approve paused runs in any
    session of the app, so whoever asked for a refund need not be who approves it;
    with `owner_too=True` the session's owner may approve as well."""

    def rule(principal: Principal, record: SessionRecord) -> bool:
        return (
            principal.admin or role in principal.roles or (owner_too and principal.can_see(record))
        )

    return rule


class Authenticator:
    """What the server asks who a request is from."""

    @property
    def enabled(self) -> bool:
        """Whether requests must authenticate (otherwise the app answers loopback only)."""
        return True

    def principal(self, request: Request) -> Principal:
        raise NotImplementedError


class HookAuth(Authenticator):
    """`create_app(auth=fn)`: `fn(request)` returns a `Principal` (or a user id), or None
    or raises `Unauthorized` for a request that does not authenticate. It runs on the
    event loop for every request: no blocking I/O in it."""

    def __init__(self, hook: Callable[[Request], Principal | str | None]) -> None:
        self.hook = hook

    def principal(self, request: Request) -> Principal:
        try:
            found = self.hook(request)
        except Unauthorized as exc:
            raise unauthorized(str(exc) or "the request is not authenticated") from None
        if found is None:
            raise unauthorized("the request is not authenticated")
        if isinstance(found, str):
            return Principal(user_id=validate_id(found, "user_id"))
        if not isinstance(found, Principal):
            raise TypeError(
                f"the auth hook returned {type(found).__name__}; return a Principal, a "
                "user id, or None"
            )
        if found.user_id is not None:
            validate_id(found.user_id, "user_id")
        return found


def unauthorized(detail: str) -> Problem:
    return Problem(
        401,
        detail,
        title="Authentication required",
        headers={"WWW-Authenticate": 'Bearer realm="statewise"'},
    )


def parse_keys(spec: KeySpec, default_user: str | None = None) -> dict[str, str]:
    """`{"key": "user"}`, `["key=user", ...]` or `"key=user,key2=user2"` -> {key: user}."""
    if spec is None:
        return {}
    if isinstance(spec, Mapping):
        items = list(spec.items())
    else:
        entries = spec.split(",") if isinstance(spec, str) else list(spec)
        items = []
        for entry in entries:
            entry = entry.strip()
            if not entry:
                continue
            key, sep, user = entry.partition("=")
            if not sep:
                if default_user is None:
                    raise ConfigurationError(
                        f"API key entry {entry[:4]}... has no user: write it as key=user_id"
                    )
                user = default_user
            items.append((key.strip(), user.strip()))
    keys: dict[str, str] = {}
    for key, user in items:
        if len(key) < 8:
            raise ConfigurationError("API keys must be at least 8 characters long")
        validate_id(user, "user_id")
        keys[key] = user
    return keys


class KeyRing(Authenticator):
    """API keys (the default authenticator)."""

    def __init__(self, api_keys: KeySpec = None, admin_keys: KeySpec = None) -> None:
        if api_keys is None and admin_keys is None:
            api_keys = os.environ.get("STATEWISE_API_KEYS") or None
            admin_keys = os.environ.get("STATEWISE_ADMIN_KEYS") or None
        self._users = parse_keys(api_keys)
        self._admins = parse_keys(admin_keys, default_user=ADMIN_USER)

    @property
    def enabled(self) -> bool:
        return bool(self._users or self._admins)

    def principal(self, request: Request) -> Principal:
        return self.authenticate(request.headers.get("authorization"))

    def authenticate(self, authorization: str | None) -> Principal:
        if not self.enabled:
            return OPEN
        challenge = {"WWW-Authenticate": 'Bearer realm="statewise"'}
        if not authorization:
            raise Problem(
                401,
                "this server needs an API key: send it as 'Authorization: Bearer <key>'",
                title="Authentication required",
                headers=challenge,
            )
        scheme, _, token = authorization.partition(" ")
        token = token.strip()
        if scheme.lower() != "bearer" or not token:
            raise Problem(
                401,
                "the Authorization header must be 'Bearer <key>'",
                title="Authentication required",
                headers=challenge,
            )
        found: Principal | None = None
        # Compare against every key, so timing does not tell how much of a key matched.
        for key, user in self._admins.items():
            if hmac.compare_digest(key.encode(), token.encode()):
                found = Principal(user_id=user, admin=True)
        for key, user in self._users.items():
            if hmac.compare_digest(key.encode(), token.encode()):
                found = found or Principal(user_id=user, admin=False)
        if found is None:
            raise Problem(
                401, "the API key is not valid", title="Invalid API key", headers=challenge
            )
        return found
