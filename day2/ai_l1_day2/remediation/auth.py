"""Request authentication: a bearer token or an HMAC-SHA256 signature, compared in
constant time. Nothing here logs or returns a secret or what the client sent as one.

HMAC header: `X-AI-L1-Signature: t=<unix seconds>,v1=<hex HMAC-SHA256(key, "<t>." + body)>`.
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


def sign(key: bytes, body: bytes, timestamp: int | None = None) -> str:
    """The header value a client sends (used by tests, the benchmark and relays)."""
    ts = int(time.time()) if timestamp is None else int(timestamp)
    mac = hmac.new(key, f"{ts}.".encode() + body, hashlib.sha256).hexdigest()
    return f"t={ts},v1={mac}"


def authenticate(auth: AuthConfig, headers, body: bytes, now: float | None = None) -> tuple[bool, str, str]:
    """(ok, method, reason). `headers` is any mapping with case-insensitive .get()."""
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
        ok, reason = _check_signature(auth, signature, body, now)
        if ok:
            return True, "hmac", ""
        reasons.append(reason)
    if not reasons:
        reasons.append(f"no credentials (Authorization: Bearer or {SIGNATURE_HEADER})")
    return False, "", "; ".join(reasons)


def _check_signature(auth: AuthConfig, signature: str, body: bytes, now: float) -> tuple[bool, str]:
    if auth.hmac_key is None:
        return False, "signature sent but HMAC authentication is not configured"
    parts = dict(p.split("=", 1) for p in signature.split(",") if "=" in p)
    ts, mac = parts.get("t", ""), parts.get("v1", "")
    # ASCII digits only, at most 12 (str.isdigit takes '²' and int() then raises; thousands of
    # digits exceed int()'s limit): anything else is malformed, never an exception.
    if not ASCII_INT.fullmatch(ts) or not mac:
        return False, f"malformed {SIGNATURE_HEADER} (expected t=<unix>,v1=<hex>)"
    if now - int(ts) > auth.max_skew_s:
        return False, f"signature timestamp is {int(now - int(ts))}s off (allowed {auth.max_skew_s}s)"
    if int(ts) - now > FUTURE_SKEW_S:
        return False, f"signature timestamp is {int(int(ts) - now)}s ahead (allowed {FUTURE_SKEW_S}s)"
    expected = hmac.new(auth.hmac_key, f"{ts}.".encode() + body, hashlib.sha256).hexdigest()
    if hmac.compare_digest(expected.encode(), mac.strip().lower().encode()):
        return True, ""
    return False, "signature does not match"


def precheck(auth: AuthConfig, headers, now: float | None = None) -> tuple[str, str]:
    """What the head alone says, before any body is read: ("ok", "") for a bearer token that
    matches, ("body", "") for a well-formed, fresh HMAC signature (it covers the body, which is
    read next and checked by authenticate()), else ("refused", reason)."""
    now = time.time() if now is None else now
    ok, method, reason = authenticate(auth, headers, b"", now)
    if ok and method == "bearer":
        return "ok", ""
    signature = headers.get(SIGNATURE_HEADER) or ""
    if signature and auth.hmac_key is not None:
        sig_ok, sig_reason = _check_signature(auth, signature, b"", now)
        if sig_ok or sig_reason == "signature does not match":  # well-formed and fresh: the body decides
            return "body", ""
    return "refused", reason
