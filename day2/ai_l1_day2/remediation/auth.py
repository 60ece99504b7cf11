"""Request authentication: a bearer token or an HMAC-SHA256 signature, compared in
constant time. Nothing here logs or returns a secret or what the client sent as one.

HMAC header: `X-AI-L1-Signature: t=<unix seconds>,v2=<hex HMAC-SHA256(key, "<t>.<METHOD>.<target>." + body)>`,
the request's method and target (path and query, as sent) signed with the body. The older
`v1=<hex HMAC-SHA256(key, "<t>." + body)>` signs the body only: it is accepted for POST (a
webhook's body is what it asks for) and refused for anything else (a captured signature of an
empty body would open every GET endpoint).
The timestamp is signed too and must be at most max_skew_s old and at most FUTURE_SKEW_S ahead
of our clock, so a captured request cannot be replayed later (within the window, dedupe makes a
replay harmless), and a signature dated ahead does not stretch the window.
"""

from __future__ import annotations

import hashlib
import hmac
import re
import time

from .config import AuthConfig

SIGNATURE_HEADER = "X-AI-L1-Signature"
ASCII_INT = re.compile(r"[0-9]{1,12}")
FUTURE_SKEW_S = 30  # a client's clock may run this much ahead; further is a signature made to last


def sign(key: bytes, body: bytes, timestamp: int | None = None, method: str | None = None,
         target: str | None = None) -> str:
    """The header value a client sends (used by tests, the benchmark and relays): v2 (method and
    target signed) when they are given, else v1 (the body only, POST)."""
    ts = int(time.time()) if timestamp is None else int(timestamp)
    if method is not None and target is not None:
        return f"t={ts},v2={_mac_v2(key, ts, method, target, body)}"
    mac = hmac.new(key, f"{ts}.".encode() + body, hashlib.sha256).hexdigest()
    return f"t={ts},v1={mac}"


def _mac_v2(key: bytes, ts, method: str, target: str, body: bytes) -> str:
    return hmac.new(key, f"{ts}.{method}.{target}.".encode() + body, hashlib.sha256).hexdigest()


def authenticate(auth: AuthConfig, headers, body: bytes, now: float | None = None, *,  # noqa: PLR0913
                 method: str = "POST", target: str = "/webhook") -> tuple[bool, str, str]:
    """(ok, method, reason). `headers` is any mapping with case-insensitive .get(); `method` and
    `target` are the request's (what a v2 signature covers)."""
    now = time.time() if now is None else now
    reasons = []
    header = headers.get("Authorization") or ""
    if header:
        scheme, _, credential = header.partition(" ")
        if auth.token is None:
            reasons.append("bearer token sent but bearer authentication is not configured")
        elif scheme.lower() != "bearer" or not credential.strip():
            reasons.append("Authorization header is not 'Bearer <token>'")
        elif hmac.compare_digest(credential.strip().encode(), auth.token.encode()):
            return True, "bearer", ""
        else:
            reasons.append("bearer token does not match")
    signature = headers.get(SIGNATURE_HEADER) or ""
    if signature:
        ok, reason = _check_signature(auth, signature, body, now, method=method, target=target)
        if ok:
            return True, "hmac", ""
        reasons.append(reason)
    if not reasons:
        reasons.append(f"no credentials (Authorization: Bearer or {SIGNATURE_HEADER})")
    return False, "", "; ".join(reasons)


def _check_signature(auth: AuthConfig, signature: str, body: bytes, now: float, *,  # noqa: PLR0911 (one per refusal)
                     method: str = "POST", target: str = "/webhook") -> tuple[bool, str]:
    if auth.hmac_key is None:
        return False, "signature sent but HMAC authentication is not configured"
    parts = dict(p.split("=", 1) for p in signature.split(",") if "=" in p)
    ts, v1, v2 = parts.get("t", ""), parts.get("v1", ""), parts.get("v2", "")
    # ASCII digits only, at most 12 (str.isdigit takes '²' and int() then raises; thousands of
    # digits exceed int()'s limit): anything else is malformed, never an exception.
    if not ASCII_INT.fullmatch(ts) or not (v1 or v2):
        return False, f"malformed {SIGNATURE_HEADER} (expected t=<unix>,v2=<hex>)"
    if now - int(ts) > auth.max_skew_s:
        return False, f"signature timestamp is {int(now - int(ts))}s off (allowed {auth.max_skew_s}s)"
    if int(ts) - now > FUTURE_SKEW_S:
        return False, f"signature timestamp is {int(int(ts) - now)}s ahead (allowed {FUTURE_SKEW_S}s)"
    if v2:
        expected, mac = _mac_v2(auth.hmac_key, ts, method, target, body), v2
    elif method != "POST":
        return False, f"a v1 signature covers the body only: {method} needs v2 (method and target signed)"
    else:
        expected, mac = hmac.new(auth.hmac_key, f"{ts}.".encode() + body, hashlib.sha256).hexdigest(), v1
    if hmac.compare_digest(expected.encode(), mac.strip().lower().encode()):
        return True, ""
    return False, "signature does not match"


def precheck(auth: AuthConfig, headers, now: float | None = None, *, method: str = "POST",
             target: str = "/webhook") -> tuple[str, str]:
    """What the head alone says, before any body is read: ("ok", "") for a bearer token that
    matches, ("body", "") for a well-formed, fresh HMAC signature (it covers the body, which is
    read next and checked by authenticate()), else ("refused", reason)."""
    now = time.time() if now is None else now
    ok, how, reason = authenticate(auth, headers, b"", now, method=method, target=target)
    if ok and how == "bearer":
        return "ok", ""
    signature = headers.get(SIGNATURE_HEADER) or ""
    if signature and auth.hmac_key is not None:
        sig_ok, sig_reason = _check_signature(auth, signature, b"", now, method=method, target=target)
        if sig_ok or sig_reason == "signature does not match":  # well-formed and fresh: the body decides
            return "body", ""
    return "refused", reason
