"""The keys that sign bearer JWTs, read from a JWK Set (RFC 7517 §5) document or file:
pure parsing, no I/O beyond reading a file, so the config check can use it
(``auth.jwt.jwks_file``) without loading the HTTP side (fetching a set from a URL is
:mod:`proxy.downstream.jwks`).

Only public keys of asymmetric algorithms are kept. A JWK with private members (``d``) is
refused, and a symmetric one (``kty: oct``) is never used: a key published for anyone to
verify with must not be able to sign (nor be taken for an HMAC secret, the classic
"HS256 signed with the public key" confusion). A key serves the algorithms its type can
verify (RSA: RS*/PS*, EC: the ES* of its curve, OKP: EdDSA), narrowed to its ``alg`` when
it names one and to the configured ``auth.jwt.algorithms``. Messages never hold key
material (a misplaced private key would be a secret).

PyJWT and cryptography are imported when a key is parsed, not with this module: importing
``proxy.config`` (``mcp-resume-proxy check``, every test) stays light.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from proxy.config_rules import read_text

# Every algorithm a public key can verify: nothing symmetric, never "none".
ASYMMETRIC_ALGORITHMS = (
    "RS256",
    "RS384",
    "RS512",
    "PS256",
    "PS384",
    "PS512",
    "ES256",
    "ES384",
    "ES512",
    "ES256K",
    "EdDSA",
)
_EC_CURVES = {
    "ES256": "secp256r1",
    "ES384": "secp384r1",
    "ES512": "secp521r1",
    "ES256K": "secp256k1",
}
_PRIVATE_MEMBERS = ("d", "p", "q", "dp", "dq", "qi", "oth", "k")


class JwksError(Exception):
    """A JWK Set that cannot be used; the message says why (never with key material)."""


def _verifiable_with(key: Any) -> frozenset[str]:
    """The algorithms that verify with this public key."""
    from cryptography.hazmat.primitives.asymmetric import ec, ed448, ed25519, rsa

    if isinstance(key, rsa.RSAPublicKey):
        return frozenset(a for a in ASYMMETRIC_ALGORITHMS if a[:2] in ("RS", "PS"))
    if isinstance(key, ec.EllipticCurvePublicKey):
        return frozenset(a for a, curve in _EC_CURVES.items() if key.curve.name == curve)
    if isinstance(key, ed25519.Ed25519PublicKey | ed448.Ed448PublicKey):
        return frozenset({"EdDSA"})
    return frozenset()


@dataclass(frozen=True)
class SigningKey:
    kid: str | None
    key: Any  # a cryptography public key
    algorithms: frozenset[str]  # what it may verify (never empty)


@dataclass(frozen=True)
class KeySet:
    keys: tuple[SigningKey, ...] = ()

    def __len__(self) -> int:
        return len(self.keys)

    def find(self, kid: str | None) -> SigningKey | None:
        """The key ``kid`` names; a token without ``kid`` only when there is one key."""
        if kid is None:
            return self.keys[0] if len(self.keys) == 1 else None
        return next((k for k in self.keys if k.kid == kid), None)

    def kids(self) -> list[str]:
        return [k.kid for k in self.keys if k.kid is not None]


def _signing_key(jwk: Any, allowed: frozenset[str]) -> SigningKey:
    """One JWK as a :class:`SigningKey`, or JwksError saying why it cannot serve."""
    if not isinstance(jwk, Mapping):
        raise JwksError("not a JSON object")
    kty = jwk.get("kty")
    if kty == "oct":
        raise JwksError("a symmetric key (kty oct): only public keys verify here")
    if any(member in jwk for member in _PRIVATE_MEMBERS):
        raise JwksError("holds private key material: publish only the public key")
    if jwk.get("use", "sig") != "sig":
        raise JwksError(f"use is {jwk.get('use')!r}, not 'sig'")
    kid = jwk.get("kid")
    if kid is not None and not isinstance(kid, str):
        raise JwksError("kid is not a string")
    named = jwk.get("alg")
    if named is not None and named not in ASYMMETRIC_ALGORITHMS:
        raise JwksError(f"alg {named!r} is not an asymmetric signing algorithm")
    import jwt  # only once a key is read: importing the config must not load PyJWT

    try:
        # Parsed by its kty alone: whether its alg fits is decided below.
        key = jwt.PyJWK(dict(jwk), algorithm=_guess(jwk)).key
    except (jwt.PyJWTError, ValueError, TypeError, KeyError):
        # PyJWT's own message may quote the JWK: say only what kind of key it was.
        raise JwksError(f"not a valid {kty or 'untyped'} public key") from None
    algorithms = _verifiable_with(key) & allowed
    if named is not None:
        algorithms &= {named}
    if not algorithms:
        raise JwksError(f"verifies none of the configured algorithms ({', '.join(allowed)})")
    return SigningKey(kid, key, algorithms)


def _guess(jwk: Mapping[str, Any]) -> str:
    """An algorithm PyJWK will parse ``jwk`` with (what it may verify is decided after)."""
    kty, crv = jwk.get("kty"), jwk.get("crv")
    if kty == "EC":
        by_curve = {"P-256": "ES256", "P-384": "ES384", "P-521": "ES512"}
        return by_curve.get(str(crv), "ES256K")
    if kty == "OKP":
        return "EdDSA"
    return "RS256"


def key_set_from(document: Any, algorithms: Iterable[str]) -> tuple[KeySet, list[str]]:
    """The usable keys of a JWKS document, and why each other key was left out."""
    if not isinstance(document, Mapping) or not isinstance(document.get("keys"), list):
        raise JwksError('not a JWK Set (a JSON object with a "keys" list)')
    allowed = frozenset(algorithms)
    keys: list[SigningKey] = []
    problems: list[str] = []
    for i, jwk in enumerate(document["keys"]):
        try:
            found = _signing_key(jwk, allowed)
        except JwksError as exc:
            kid = jwk.get("kid") if isinstance(jwk, Mapping) else None
            problems.append(f"key {i}" + (f" (kid {kid!r})" if kid else "") + f": {exc}")
            continue
        if found.kid is not None and found.kid in {k.kid for k in keys}:
            problems.append(f"key {i}: kid {found.kid!r} is listed twice")
            continue
        keys.append(found)
    return KeySet(tuple(keys)), problems


def read_jwks_file(path: str, algorithms: Iterable[str]) -> KeySet:
    """Every key of the JWKS file at ``path``; JwksError for a file that is unreadable,
    not a JWK Set, has a key that cannot serve, or no key at all."""
    try:
        text = read_text(path)
    except ValueError as exc:
        raise JwksError(f"cannot read {path}: {exc}") from None
    try:
        document = json.loads(text)
    except (ValueError, RecursionError):  # RecursionError: nested too deep
        raise JwksError(f"{path} is not JSON") from None
    keys, problems = key_set_from(document, algorithms)
    if problems:
        raise JwksError(f"{path}: {problems[0]}")
    if not keys:
        raise JwksError(f"{path} holds no key")
    return keys


def loggable_url(url: str) -> str:
    """The URL without user info, query or fragment (any may carry a credential)."""
    from yarl import URL  # aiohttp's URL type: the same form the fetch logs elsewhere

    return str(URL(url).with_user(None).with_query(None).with_fragment(None))
