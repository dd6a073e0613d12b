"""A JWT issuer made at test time (no key is committed): signing keys by ``kid``, their
JWK Set, valid tokens and every kind of bad one (:func:`bad_tokens`), and the ``auth``
config section that trusts it (:func:`jwt_auth`). Used by the inbound-auth tests
(test_auth_jwt.py, test_auth_file.py, test_auth_shim.py, test_secrets_in_logs.py)."""

from __future__ import annotations

import base64
import hashlib
import hmac
import json
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import jwt
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ec, rsa
from jwt.algorithms import ECAlgorithm, RSAAlgorithm

ISSUER = "https://issuer.test"
AUDIENCE = "mcp-resume-proxy-test"


# -------------------------------------------------------------------- an issuer
def _b64(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode()


@dataclass
class Issuer:
    """Signing keys by ``kid`` and the tokens they sign."""

    keys: dict[str, Any] = field(default_factory=dict)

    def rsa(self, kid: str) -> str:
        self.keys[kid] = rsa.generate_private_key(public_exponent=65537, key_size=2048)
        return kid

    def ec(self, kid: str) -> str:
        self.keys[kid] = ec.generate_private_key(ec.SECP256R1())
        return kid

    def public_pem(self, kid: str) -> bytes:
        return bytes(
            self.keys[kid]
            .public_key()
            .public_bytes(
                serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo
            )
        )

    def jwks(self, *kids: str) -> dict[str, Any]:
        """The public JWK Set of ``kids`` (all keys by default)."""
        out = []
        for kid in kids or tuple(self.keys):
            public = self.keys[kid].public_key()
            to_jwk = RSAAlgorithm.to_jwk if isinstance(public, rsa.RSAPublicKey) else None
            jwk = (to_jwk or ECAlgorithm.to_jwk)(public, as_dict=True)
            out.append({**jwk, "kid": kid, "use": "sig"})
        return {"keys": out}

    def write_jwks(self, path: Path, *kids: str) -> str:
        path.write_text(json.dumps(self.jwks(*kids)))
        return str(path)

    @staticmethod
    def claims(principal: str | None = "alice", **changes: Any) -> dict[str, Any]:
        """Valid claims for ``principal``; a change to None removes that claim."""
        now = int(time.time())
        base: dict[str, Any] = {"iss": ISSUER, "aud": AUDIENCE, "iat": now, "exp": now + 600}
        if principal is not None:
            base["sub"] = principal
        base.update(changes)
        return {k: v for k, v in base.items() if v is not None}

    def token(
        self,
        kid: str,
        principal: str | None = "alice",
        *,
        alg: str | None = None,
        signer: str | None = None,
        **changes: Any,
    ) -> str:
        """A JWT naming ``kid``, signed with ``signer``'s key (``kid``'s by default)."""
        key = self.keys[signer or kid]
        alg = alg or ("RS256" if isinstance(key, rsa.RSAPrivateKey) else "ES256")
        claims = self.claims(principal, **changes)
        return jwt.encode(claims, key, algorithm=alg, headers={"kid": kid})


def forged(alg: str, secret: bytes | None, kid: str, claims: dict[str, Any]) -> str:
    """A JWT PyJWT would refuse to make: ``alg: none`` (``secret`` None, no signature), or
    HS256 keyed with ``secret`` (say, the public key's PEM)."""
    header = {"alg": alg, "typ": "JWT", "kid": kid}
    signing_input = f"{_b64(json.dumps(header).encode())}.{_b64(json.dumps(claims).encode())}"
    signature = b""
    if secret is not None:
        signature = hmac.new(secret, signing_input.encode(), hashlib.sha256).digest()
    return f"{signing_input}.{_b64(signature)}"


def jwt_auth(**jwt_settings: Any) -> dict[str, Any]:
    return {"jwt": {"issuer": ISSUER, "audience": AUDIENCE, **jwt_settings}}


def bad_tokens(issuer: Issuer) -> dict[str, tuple[str, str]]:
    """Every kind of bad JWT, by what is wrong with it: the token and the ``why`` of its
    ``request_refused`` log line. ``issuer`` holds r1 (RSA) and e1 (EC), both in the
    JWKS, and "stranger" (RSA), not in it."""
    now = int(time.time())
    pem = issuer.public_pem("r1")
    return {
        "expired": (issuer.token("r1", exp=now - 3600), "expired"),
        "wrong issuer": (issuer.token("r1", iss="https://someone.else"), "issuer"),
        "wrong audience": (issuer.token("r1", aud="another-service"), "audience"),
        "HS256 keyed with the public key": (
            forged("HS256", pem, "r1", issuer.claims()),
            "algorithm",
        ),
        "alg none": (forged("none", None, "r1", issuer.claims()), "algorithm"),
        "unknown kid": (issuer.token("stranger"), "unknown_kid"),
        "bad signature": (issuer.token("r1", signer="stranger"), "signature"),
        "RS256 named for an EC key": (issuer.token("e1", alg="RS256", signer="r1"), "algorithm"),
        "no principal claim": (issuer.token("r1", principal=None), "no_principal"),
        "an empty principal": (issuer.token("r1", principal=""), "no_principal"),
        "no exp": (issuer.token("r1", exp=None), "missing_claim"),
        "not yet valid": (issuer.token("r1", nbf=now + 3600), "not_yet_valid"),
        "not a JWT": ("not-a-jwt-and-not-a-static-token", "malformed"),
        # Time claims are JSON numbers (RFC 7519 §2 NumericDate); PyJWT alone takes these.
        "exp a numeric string": (issuer.token("r1", exp=str(now + 3600)), "claim_type"),
        "nbf a numeric string": (issuer.token("r1", nbf=str(now - 60)), "claim_type"),
        "iat a boolean": (issuer.token("r1", iat=True), "claim_type"),
    }


def an_issuer() -> Issuer:
    """An issuer with the keys :func:`bad_tokens` needs."""
    issuer = Issuer()
    issuer.rsa("r1")
    issuer.ec("e1")
    issuer.rsa("stranger")
    return issuer
