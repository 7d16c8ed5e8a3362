"""What fenceproxy puts on the wire, as the Go package ``wire`` defines it.

Header names, refusal reasons, the token grammar, lease names in URLs, Go
durations and RFC 3339 timestamps. Everything here is pure and stdlib-only.

Tokens are Python ints from 0 to 2**63-1 (``MAX_TOKEN``). On the wire they
are decimal strings (JSON bodies, headers); the control API also reads a JSON
number.
"""

from __future__ import annotations

import re
from datetime import datetime, timedelta, timezone
from typing import Any, Mapping, Optional, Union
from urllib.parse import quote

# Header names (Go: wire.DefaultTokenHeader, wire.Header*).
TOKEN_HEADER = "X-Fencing-Token"
"""Request header carrying a write's fencing token (FENCEPROXY_TOKEN_HEADER may rename it)."""
SIGNATURE_HEADER = "X-Fencing-Token-Signature"
"""Request header carrying the token's signature in signed-token mode (FENCEPROXY_TOKEN_KEY);
also on acquire and renew answers."""
PREFIX_HEADER = "X-Fencing-Prefix"
"""Request header naming the prefix fence a token from an outside coordinator is for."""
REFUSED_HEADER = "Fencing-Refused"
"""On every refusal made by the proxy itself: the reason (``stale``, ``missing``, ...)."""
CURRENT_TOKEN_HEADER = "Fencing-Current-Token"
"""On a stale refusal (409): the resource's maximum, the newer holder's token."""
RESOURCE_HEADER = "Fencing-Resource"
"""On a stale refusal (409): the fence that refused, percent-encoded (maybe a prefix fence above the key)."""
LISTENER_HEADER = "Fenceproxy-Listener"
"""On every answer of the control listener, with the value ``LISTENER_CONTROL``."""
LISTENER_CONTROL = "control"

MAX_TOKEN = (1 << 63) - 1
"""The largest token the proxy accepts: 2**63-1."""

# Refusal reasons of the proxy listener: Fencing-Refused values and the
# problem's "reason".
REASON_STALE = "stale"  # 409
REASON_MISSING = "missing"  # 428
REASON_MALFORMED = "malformed"  # 400
REASON_BAD_RESOURCE = "bad_resource"  # 400
REASON_AMBIGUOUS = "ambiguous"  # 400, S3 mode
REASON_HOP_BY_HOP = "hop_by_hop"  # 400
REASON_UNSUPPORTED = "unsupported"  # 400
REASON_BAD_BODY = "bad_body"  # 400
REASON_MALFORMED_XML = "malformed_xml"  # 400, S3 mode
REASON_SIGNATURE = "signature"  # 403, signed-token mode
REASON_FORBIDDEN = "forbidden"  # 403, S3 gateway mode
REASON_JUMP = "jump"  # 403, FENCEPROXY_MAX_TOKEN_JUMP
REASON_DRAIN_TIMEOUT = "drain_timeout"  # 503 + Retry-After
REASON_STORE_ERROR = "store_error"  # 503 + Retry-After
REASON_PREFIX_LIMIT = "prefix_limit"  # 507
REASON_SHARD_UNAVAILABLE = "shard_unavailable"  # 503 + Retry-After, cluster mode
REASON_OVERLOADED = "overloaded"  # 503 + Retry-After, FENCEPROXY_MAX_UPLOADS
REASON_INTERNAL = "internal"  # 500

# Reasons of the control API's problems (it also uses bad_resource,
# drain_timeout, shard_unavailable and internal).
REASON_BAD_REQUEST = "bad_request"  # 400
REASON_UNAUTHORIZED = "unauthorized"  # 401
REASON_ADMIN_DISABLED = "admin_disabled"  # 403
REASON_NOT_FOUND = "not_found"  # 404
REASON_METHOD = "method_not_allowed"  # 405
REASON_LEASE_HELD = "lease_held"  # 409
REASON_LEASE_LOST = "lease_lost"  # 409
REASON_TOKENS_EXHAUSTED = "tokens_exhausted"  # 409
REASON_UNAVAILABLE = "unavailable"  # 503
REASON_NO_SHARD = "no_shard"  # 409
REASON_POOL_BUSY = "pool_busy"  # 409
REASON_SHARD_DONE = "shard_done"  # 409

# S3 error codes of the proxy's refusals in S3 modes (Go: s3.Code; docs/S3.md
# "Error bodies"), by reason.
S3_CODES = {
    REASON_STALE: "StaleFencingToken",
    REASON_MISSING: "MissingFencingToken",
    REASON_MALFORMED: "InvalidFencingToken",
    REASON_BAD_RESOURCE: "InvalidURI",
    REASON_AMBIGUOUS: "InvalidRequest",
    REASON_HOP_BY_HOP: "InvalidRequest",
    REASON_UNSUPPORTED: "NotImplemented",
    REASON_BAD_BODY: "IncompleteBody",
    REASON_MALFORMED_XML: "MalformedXML",
    REASON_SIGNATURE: "InvalidFencingTokenSignature",
    REASON_FORBIDDEN: "AccessDenied",
    REASON_JUMP: "FencingTokenTooFarAhead",
    REASON_DRAIN_TIMEOUT: "FencingDrainTimeout",
    REASON_STORE_ERROR: "ServiceUnavailable",
    REASON_PREFIX_LIMIT: "InsufficientStorage",
    REASON_SHARD_UNAVAILABLE: "ServiceUnavailable",
    REASON_OVERLOADED: "SlowDown",
    REASON_INTERNAL: "InternalError",
}


def parse_token(value: Union[str, int]) -> int:
    """Parse a token as the proxy does: an int, or a str of digits only, no
    sign, no leading zero (``"0"`` itself is fine), at most 2**63-1.

    Raises ValueError for anything else (bool included).
    """
    if isinstance(value, bool):
        raise ValueError("a fencing token is an integer, not a bool")
    if isinstance(value, int):
        return check_token(value)
    if not isinstance(value, str):
        raise ValueError("a fencing token is a decimal string or an int, not %s" % type(value).__name__)
    if value == "":
        raise ValueError("malformed fencing token: empty value")
    if len(value) > 19:
        raise ValueError("malformed fencing token: more than 19 digits")
    if len(value) > 1 and value[0] == "0":
        raise ValueError("malformed fencing token: leading zero")
    if not all("0" <= c <= "9" for c in value):
        raise ValueError("malformed fencing token %r: only digits 0-9 are allowed" % value)
    return check_token(int(value))


def check_token(token: int) -> int:
    """Return token if it is an int from 0 to 2**63-1; ValueError otherwise."""
    if isinstance(token, bool) or not isinstance(token, int):
        raise ValueError("a fencing token is an int, not %s" % type(token).__name__)
    if token < 0 or token > MAX_TOKEN:
        raise ValueError("fencing token %d is outside 0..2^63-1" % token)
    return token


def format_token(token: int) -> str:
    """The token as the proxy reads it: its decimal digits. ValueError outside 0..2**63-1."""
    return str(check_token(token))


def escape_name(name: str) -> str:
    """Percent-encode each segment of a resource key or lease name, keeping
    its slashes, as Go's wire.EscapeName (url.PathEscape per segment) does:
    ``/v1/leases/ + escape_name(name)`` names the lease ``name``."""
    return "/".join(quote(seg, safe="$&+=:@") for seg in name.split("/"))


def token_headers(token: Optional[int], signature: Optional[str] = None, prefix: Optional[str] = None,
                  header: str = TOKEN_HEADER) -> dict:
    """The headers of a fenced write: ``{header: "<token>"}``, plus
    X-Fencing-Token-Signature when signature is set, X-Fencing-Prefix when
    prefix is set. token None: no headers at all."""
    if token is None:
        return {}
    h = {header: format_token(token)}
    if signature:
        h[SIGNATURE_HEADER] = signature
    if prefix:
        h[PREFIX_HEADER] = prefix
    return h


_DURATION_UNITS = {
    "ns": 1e-9,
    "us": 1e-6,
    "\u00b5s": 1e-6,  # micro sign
    "\u03bcs": 1e-6,  # Greek mu
    "ms": 1e-3,
    "s": 1.0,
    "m": 60.0,
    "h": 3600.0,
}
_DURATION_PART = re.compile(r"([0-9]*(?:\.[0-9]*)?)(ns|us|\u00b5s|\u03bcs|ms|s|m|h)")


def parse_duration(text: str) -> float:
    """Parse a Go duration (``"10s"``, ``"1m30s"``, ``"1.5s"``, ``"250ms"``,
    ``"1h0m0s"``, ``"0"``) into seconds. ValueError for anything else."""
    s = text.strip()
    if s in ("0", "+0", "-0"):
        return 0.0
    sign = 1.0
    if s[:1] in "+-" and s:
        sign = -1.0 if s[0] == "-" else 1.0
        s = s[1:]
    if not s:
        raise ValueError("invalid duration %r" % text)
    total, pos = 0.0, 0
    while pos < len(s):
        m = _DURATION_PART.match(s, pos)
        if not m or m.group(1) in ("", "."):
            raise ValueError("invalid duration %r" % text)
        total += float(m.group(1)) * _DURATION_UNITS[m.group(2)]
        pos = m.end()
    return sign * total


def format_duration(seconds: Union[float, int, timedelta, str]) -> str:
    """A TTL for the control API: a Go duration string. A str is passed as
    it is (``"10s"``); a number of seconds or a timedelta becomes whole
    milliseconds (``1.5`` -> ``"1500ms"``). ValueError if not positive."""
    if isinstance(seconds, str):
        return seconds
    if isinstance(seconds, timedelta):
        seconds = seconds.total_seconds()
    ms = int(round(float(seconds) * 1000))
    if ms <= 0:
        raise ValueError("a TTL must be positive, not %r" % (seconds,))
    if ms % 1000 == 0:
        return "%ds" % (ms // 1000)
    return "%dms" % ms


_TIMESTAMP = re.compile(
    r"^(\d{4})-(\d{2})-(\d{2})[Tt](\d{2}):(\d{2}):(\d{2})(?:\.(\d+))?(?:([Zz])|([+-])(\d{2}):(\d{2}))$")


def parse_time(text: Optional[str]) -> Optional[datetime]:
    """Parse an RFC 3339 timestamp as Go writes it (``time.Time`` in JSON,
    nanoseconds and ``Z`` included) into an aware datetime (microseconds);
    None for None or "". ValueError for anything else."""
    if text is None or text == "":
        return None
    m = _TIMESTAMP.match(text)
    if not m:
        raise ValueError("invalid RFC 3339 timestamp %r" % text)
    year, month, day, hour, minute, second = (int(g) for g in m.group(1, 2, 3, 4, 5, 6))
    frac = m.group(7) or ""
    micro = int((frac + "000000")[:6])
    if m.group(8):
        tz = timezone.utc
    else:
        off = timedelta(hours=int(m.group(10)), minutes=int(m.group(11)))
        tz = timezone(-off if m.group(9) == "-" else off)
    return datetime(year, month, day, hour, minute, second, micro, tzinfo=tz)


def header(headers: Any, name: str) -> Optional[str]:
    """The first value of header name in headers, whatever their kind
    (http.client.HTTPMessage, a requests/urllib3 case-insensitive dict,
    botocore's lower-cased HTTPHeaders dict, a plain dict), or None."""
    if headers is None:
        return None
    getter = getattr(headers, "get", None)
    if getter is not None:
        for key in (name, name.lower()):
            v = getter(key)
            if v is not None:
                return v
    if isinstance(headers, Mapping) or hasattr(headers, "items"):
        low = name.lower()
        for k, v in headers.items():
            if str(k).lower() == low:
                return v
    return None


def retry_after(headers: Any) -> Optional[float]:
    """Retry-After in seconds (the proxy sends whole seconds), or None when
    absent or not a number of seconds."""
    v = header(headers, "Retry-After")
    if v is None:
        return None
    try:
        secs = float(v.strip())
    except ValueError:
        return None
    return secs if secs >= 0 else None
