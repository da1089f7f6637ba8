"""`JWTAuth`: principals from JSON Web Tokens an identity provider signed.

A browser app that logs its users in elsewhere (an OIDC provider, its own login) sends the
token as `Authorization: Bearer <jwt>`; the server checks its signature, expiry, issuer
and audience with PyJWT, and reads the user id and roles from its claims. Keys are an
HS256 secret, or RS256/ES256 public keys from a PEM or a JWKS file (read once, when the
app is built: the check itself does no I/O on the event loop). The `none` algorithm is
never accepted, whatever the token's header says.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from starlette.requests import Request

from statewise.exceptions import ConfigurationError, MissingDependencyError
from statewise.server._auth import Authenticator, Principal, Unauthorized, unauthorized

ASYMMETRIC = ("RS256", "RS384", "RS512", "ES256", "ES384", "ES512", "PS256")


class JWTAuth(Authenticator):
    """Verify bearer JWTs; the principal is the token's `user_claim` (default `sub`).

    Give exactly one of `secret` (HS256), `public_key` (a PEM string or file path) or
    `jwks_file` (a JSON Web Key Set file; the token's `kid` picks the key). `issuer` and
    `audience`, when given, must match. Roles come from `roles_claim` (a list, or a string
    of space-separated roles as in OAuth's `scope`); a principal holding `admin_role` sees
    every session, as an admin API key does.
    """

    def __init__(
        self,
        *,
        secret: str | None = None,
        public_key: str | Path | None = None,
        jwks_file: str | Path | None = None,
        algorithms: Sequence[str] | None = None,
        issuer: str | None = None,
        audience: str | Sequence[str] | None = None,
        user_claim: str = "sub",
        roles_claim: str = "roles",
        admin_role: str = "admin",
        leeway: float = 0.0,
    ) -> None:
        try:
            import jwt
        except ImportError as exc:  # pragma: no cover - depends on the environment
            raise MissingDependencyError("pyjwt", "server") from exc
        self._jwt = jwt
        given = [x is not None for x in (secret, public_key, jwks_file)]
        if sum(given) != 1:
            raise ConfigurationError(
                "JWTAuth needs exactly one of secret= (HS256), public_key= (a PEM) or "
                "jwks_file= (a JWKS file)"
            )
        self._keys: dict[str | None, Any] = {}
        if secret is not None:
            if len(secret) < 32:
                raise ConfigurationError(
                    "a JWT secret must be at least 32 characters: a short HS256 secret can "
                    "be guessed offline from any token it signed"
                )
            self.algorithms = list(algorithms or ["HS256"])
            self._keys[None] = secret
        elif public_key is not None:
            self.algorithms = list(algorithms or ["RS256", "ES256"])
            pem = str(public_key)
            if not pem.lstrip().startswith("-----BEGIN"):
                pem = Path(pem).read_text(encoding="utf-8")
            self._keys[None] = pem
        else:
            self.algorithms = list(algorithms or ["RS256", "ES256"])
            try:
                keyset = jwt.PyJWKSet.from_json(Path(str(jwks_file)).read_text(encoding="utf-8"))
            except (OSError, json.JSONDecodeError, jwt.PyJWTError) as exc:
                raise ConfigurationError(f"jwks_file {jwks_file}: {exc}") from None
            for key in keyset.keys:
                self._keys[key.key_id] = key.key
        if any(a.lower() == "none" for a in self.algorithms):
            raise ConfigurationError("the 'none' algorithm signs nothing: it is never accepted")
        if secret is None and not set(self.algorithms) <= set(ASYMMETRIC):
            raise ConfigurationError(
                f"with a public key, algorithms must be asymmetric ({', '.join(ASYMMETRIC)}); "
                "an HS algorithm would accept tokens signed with the public key as a secret"
            )
        self.issuer = issuer
        self.audience = audience
        self.user_claim = user_claim
        self.roles_claim = roles_claim
        self.admin_role = admin_role
        self.leeway = leeway

    def _key_for(self, token: str) -> Any:
        jwt = self._jwt
        try:
            header = jwt.get_unverified_header(token)
        except jwt.PyJWTError as exc:
            raise Unauthorized(f"the token is not a JWT: {exc}") from None
        if str(header.get("alg", "")).lower() == "none":
            raise Unauthorized("the token is not signed (alg 'none' is refused)")
        if None in self._keys:
            return self._keys[None]
        kid = header.get("kid")
        if kid not in self._keys:
            raise Unauthorized(f"the token's key id {kid!r} is not in the JWKS")
        return self._keys[kid]

    def claims(self, token: str) -> dict[str, Any]:
        """The verified claims of `token`, or `Unauthorized` saying what is wrong."""
        jwt = self._jwt
        key = self._key_for(token)
        required = ["exp", self.user_claim]
        try:
            claims: dict[str, Any] = jwt.decode(
                token,
                key,
                algorithms=self.algorithms,
                issuer=self.issuer,
                audience=self.audience,
                leeway=self.leeway,
                options={
                    "require": required + (["iss"] if self.issuer else []),
                    "verify_aud": self.audience is not None,
                },
            )
        except jwt.ExpiredSignatureError:
            raise Unauthorized("the token has expired") from None
        except jwt.InvalidAudienceError:
            raise Unauthorized("the token is not for this audience") from None
        except jwt.InvalidIssuerError:
            raise Unauthorized("the token is from another issuer") from None
        except jwt.InvalidSignatureError:
            raise Unauthorized("the token's signature does not verify") from None
        except jwt.PyJWTError as exc:
            raise Unauthorized(f"the token is not valid: {exc}") from None
        return claims

    def principal(self, request: Request) -> Principal:
        scheme, _, token = (request.headers.get("authorization") or "").partition(" ")
        if scheme.lower() != "bearer" or not token.strip():
            raise unauthorized("this server needs a token: send 'Authorization: Bearer <jwt>'")
        try:
            claims = self.claims(token.strip())
        except Unauthorized as exc:
            raise unauthorized(str(exc)) from None
        user = claims.get(self.user_claim)
        if not isinstance(user, str) or not user:
            raise unauthorized(f"the token's {self.user_claim!r} claim is not a user id")
        raw = claims.get(self.roles_claim, [])
        roles = frozenset(raw.split() if isinstance(raw, str) else map(str, raw or []))
        return Principal(user_id=user, admin=self.admin_role in roles, roles=roles)


__all__ = ["JWTAuth"]
