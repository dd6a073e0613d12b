"""The time claims of a JWT must be numbers (RFC 7519 §4.1.4-6: a NumericDate is a JSON
number). PyJWT 2.x reads them with ``int()``, so a string ``"9999999999"`` (or ``true``)
would pass for a date: a token an issuer never meant to be valid for centuries, or one
made by something that is not a careful issuer. Checked after PyJWT has verified the
signature, before the token is taken."""

from __future__ import annotations

import math
from collections.abc import Mapping

TIME_CLAIMS = ("exp", "nbf", "iat")


def misshapen_time_claim(claims: Mapping[str, object]) -> str | None:
    """The first of ``exp``, ``nbf``, ``iat`` present that is not a finite JSON number
    (a string, a boolean, null, ...), or None when each present one is."""
    for name in TIME_CLAIMS:
        if name not in claims:
            continue
        value = claims[name]
        if isinstance(value, bool) or not isinstance(value, int | float):
            return name
        if not math.isfinite(value):
            return name
    return None
