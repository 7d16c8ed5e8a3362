"""Typed errors of fenceproxy's answers.

Every refusal fenceproxy makes itself is told apart from the backend's own
answers by its headers: the proxy listener puts ``Fencing-Refused: <reason>``
on each (and ``Fencing-Current-Token``, ``Fencing-Resource`` on a stale
409), the control listener ``Fenceproxy-Listener: control`` on every answer.
The body is an RFC 9457 problem (``application/problem+json``: ``reason``,
``detail``, ``resource``, ``token``, ``current_token``...) or, from a proxy in
S3 mode, an S3 ``<Error>`` document (``Code`` such as ``StaleFencingToken``,
``Message``). Decide by the class (by ``reason``), never by the title.

Hierarchy::

    FenceproxyError                   every error of this package
    +-- RefusedError                  a refusal with a reason (proxy or control listener)
    |   +-- StaleTokenError           409 stale: a newer holder took over; stop writing
    |   +-- TokenRequiredError        428 missing: a fenced write without a token
    |   +-- ForbiddenError            403 signature / jump / forbidden; 401, 403 of the control API
    |   +-- UnavailableError          503 with retry_after: drain_timeout, store_error, unavailable
    |   |   +-- OverloadedError       503 overloaded (FENCEPROXY_MAX_UPLOADS)
    |   |   +-- ShardUnavailableError 503 shard_unavailable (cluster mode)
    |   +-- LeaseHeldError            409 lease_held: holder, expires_at, grace_ends
    |   +-- NotFoundError             404 not_found
    |   +-- TokensExhaustedError      409 tokens_exhausted
    |   +-- NoShardError              409 no_shard: share, held, all_done, retry_at...
    |   +-- ShardDoneError            409 shard_done
    |   +-- PoolBusyError             409 pool_busy
    +-- LeaseLostError                409 lease_lost, or kept locally past its TTL: stop writing
    |   +-- LeaseExpiredError         no renew acknowledged within the TTL (decided here)
    +-- NotControlListenerError       the URL is not a control listener; no credential was sent
    +-- ShardStoppedError             Pool.run asked the work to stop (hand-back, end of run)
"""

from __future__ import annotations

import json
import re
import xml.etree.ElementTree as ET
from datetime import datetime
from typing import Any, Dict, Optional, Type
from urllib.parse import unquote

from . import wire

MAX_PROBLEM_BODY = 64 << 10
"""At most this many bytes of a refusal's body are read (as the Go client does)."""


class FenceproxyError(Exception):
    """Base of every error of this package.

    Attributes (None or "" when the answer had none):
      status: the HTTP status (int), None for an error decided locally.
      reason: the problem's ``reason`` / the ``Fencing-Refused`` value.
      title, detail: the problem's (an S3 body's Message is the detail).
      code: the S3 error code of an S3-mode answer (``StaleFencingToken``...),
        else the one the reason maps to (docs/S3.md, "Error bodies").
      retry_after: seconds from ``Retry-After`` (float), on 503s.
      listener: ``"proxy"`` (a refusal of the proxy listener) or
        ``"control"`` (of the control API), None when decided locally.
      problem: the decoded problem+json body (dict), {} if none.
      headers: the answer's headers as a dict of lower-cased names.
    """

    def __init__(self, message: str = "", *, status: Optional[int] = None, reason: str = "", title: str = "",
                 detail: str = "", code: str = "", retry_after: Optional[float] = None,
                 listener: Optional[str] = None, problem: Optional[Dict[str, Any]] = None,
                 headers: Optional[Dict[str, str]] = None):
        self.status = status
        self.reason = reason
        self.title = title
        self.detail = detail
        self.code = code or (wire.S3_CODES.get(reason, "") if listener == "proxy" else "")
        self.retry_after = retry_after
        self.listener = listener
        self.problem = problem or {}
        self.headers = headers or {}
        super().__init__(message or self._default_message())

    def _default_message(self) -> str:
        if self.listener == "control":
            msg = "fenceproxy: control API: %s %s" % (self.status, self.title or self.reason)
        elif self.status is not None:
            msg = "fenceproxy: request refused (%s %s)" % (self.status, self.reason)
        else:
            msg = "fenceproxy: " + (self.reason or "error")
        if self.detail:
            msg += ": " + self.detail
        return msg


class RefusedError(FenceproxyError):
    """A refusal made by fenceproxy itself, with a reason: on the proxy
    listener nothing was forwarded to the backend; on the control API
    nothing changed (but see UnavailableError's drain_timeout). The
    generic class of reasons without a class of their own (``malformed``,
    ``bad_resource``, ``bad_request``, ...)."""


class StaleTokenError(RefusedError):
    """409 ``stale``: the write's token is below the fence's maximum; a
    newer holder has taken over and this writer must stop. Nothing was
    forwarded (an upload in flight was cut off before its end).

    Attributes:
      resource: the fence that refused: the write's resource key, or a
        prefix fence above it ("bkt/jobs/part-7/"); from the problem's
        ``resource`` or the ``Fencing-Resource`` header; "" if unnamed.
      token: the refused token (int), None when not known.
      current: the fence's maximum (int): the newer holder's token.
    """

    def __init__(self, message: str = "", *, resource: str = "", token: Optional[int] = None,
                 current: Optional[int] = None, **kw: Any):
        self.resource = resource
        self.token = token
        self.current = current
        kw.setdefault("status", 409)
        kw.setdefault("reason", wire.REASON_STALE)
        super().__init__(message, **kw)

    def _default_message(self) -> str:
        tok = "token" if self.token is None else "token %d" % self.token
        res = ' on "%s"' % self.resource if self.resource else ""
        return "fenceproxy: stale fencing %s%s: the current token is %s" % (tok, res, self.current)


class TokenRequiredError(RefusedError):
    """428 ``missing``: a fenced write carried no token (the boto3 hook had
    none set, or the header was not sent)."""


class ForbiddenError(RefusedError):
    """403 from the proxy listener: ``signature`` (signed-token mode, no
    valid X-Fencing-Token-Signature for the token and resource; retrying the
    same headers will not help), ``jump`` (the token is more than
    FENCEPROXY_MAX_TOKEN_JUMP above the maximum), ``forbidden`` (S3 gateway
    mode: a signature or grant refused). From the control API: 401
    ``unauthorized`` (no or a wrong bearer) and 403 ``admin_disabled``."""


class UnavailableError(RefusedError):
    """503, retry later: ``retry_after`` seconds (from Retry-After).
    ``drain_timeout``: smaller-token writes were still in flight (nothing was
    forwarded; a lease grant or admin raise that timed out draining stays in
    effect, and the detail says so: acquire again with the same holder);
    ``store_error`` / ``unavailable``: the token store failed, or shutdown."""


class OverloadedError(UnavailableError):
    """503 ``overloaded``: FENCEPROXY_MAX_UPLOADS uploads were in flight.
    Nothing was read or forwarded and no maximum touched: retry after
    ``retry_after`` seconds."""


class ShardUnavailableError(UnavailableError):
    """503 ``shard_unavailable`` (cluster mode): no replica may admit writes
    or calls on this name's shard now (a handover, a new owner's lock-delay);
    retry after ``retry_after`` seconds."""


class LeaseHeldError(RefusedError):
    """409 ``lease_held``: another holder has the lease (or it is in its
    grace period). Nobody else may acquire it before ``grace_ends``.

    Attributes: name, holder, expires_at, grace_ends (aware datetimes or None).
    """

    def __init__(self, message: str = "", *, name: str = "", holder: str = "",
                 expires_at: Optional[datetime] = None, grace_ends: Optional[datetime] = None, **kw: Any):
        self.name = name
        self.holder = holder
        self.expires_at = expires_at
        self.grace_ends = grace_ends
        super().__init__(message, **kw)

    def _default_message(self) -> str:
        return 'fenceproxy: lease "%s" is held by "%s" until %s (others may acquire from %s)' % (
            self.name, self.holder, _iso(self.expires_at), _iso(self.grace_ends))


class NotFoundError(RefusedError):
    """404 ``not_found``: no such lease (never acquired, or swept), fence,
    pool, shard or endpoint."""


class TokensExhaustedError(RefusedError):
    """409 ``tokens_exhausted``: the next token would pass 2**63-1; only an
    admin reset of the fence brings the name back."""


class NoShardError(RefusedError):
    """409 ``no_shard``: a pool claim got no shard now.

    Attributes:
      share: this holder's share (ceiling of open shards over live holders).
      held: how many shards it holds now.
      at_share: it holds its share already.
      all_done: every shard of the pool is done: nothing will ever be
        dispatched again (a one-shot worker stops).
      retry_at: the earliest a held shard may free up (aware datetime), or None.
      standby: the suspect shard this holder stands by for, "" for none.
    """

    def __init__(self, message: str = "", *, share: int = 0, held: int = 0, at_share: bool = False,
                 all_done: bool = False, retry_at: Optional[datetime] = None, standby: str = "", **kw: Any):
        self.share = share
        self.held = held
        self.at_share = at_share
        self.all_done = all_done
        self.retry_at = retry_at
        self.standby = standby
        super().__init__(message, **kw)


class ShardDoneError(RefusedError):
    """409 ``shard_done``: the shard was marked done by another holder or
    with another token."""


class PoolBusyError(RefusedError):
    """409 ``pool_busy``: a pool definition would remove (or, for a prefix
    change, rename) shards that are held."""


class LeaseLostError(FenceproxyError):
    """The lease is no longer the caller's: renew or release answered 409
    ``lease_lost`` (taken over, released, past its grace, or its fence
    raised past the token), or (LeaseExpiredError) no renew was
    acknowledged within the TTL. The holder must stop writing.

    Attributes: name (the lease's), cause (the error that decided, if any).
    """

    def __init__(self, message: str = "", *, name: str = "", cause: Optional[BaseException] = None, **kw: Any):
        self.name = name
        self.cause = cause
        super().__init__(message, **kw)

    def _default_message(self) -> str:
        msg = 'fenceproxy: lease lost: "%s"' % self.name
        if self.detail:
            msg += ": " + self.detail
        return msg


class LeaseExpiredError(LeaseLostError):
    """Decided locally by a kept lease: no renew was acknowledged within the
    TTL, counted from when the last acknowledged renew (or the acquire) was
    sent. The server may still keep the lease through its grace period, but
    another holder may have it by now: stop writing."""

    def _default_message(self) -> str:
        msg = 'fenceproxy: lease "%s" expired: no renew acknowledged within its TTL' % self.name
        if self.cause is not None:
            msg += " (last error: %s)" % self.cause
        return msg


class NotControlListenerError(FenceproxyError):
    """The base URL answered, but not as fenceproxy's control API (its
    answers carry ``Fenceproxy-Listener: control``): most often the proxy
    listener, which forwards to the backend. No credential was sent there."""


class ShardStoppedError(FenceproxyError):
    """Raised by HeldShard.check() in Pool.run's work function once the
    shard must be given up: ``reason`` is ``hand_back`` (another holder
    joined: release it after the current write) or ``stopped`` (run ends).
    Raising it out of the work function releases the shard (it is not
    marked done)."""


def _iso(t: Optional[datetime]) -> str:
    return t.isoformat() if t is not None else "?"


def _lower_headers(headers: Any) -> Dict[str, str]:
    out: Dict[str, str] = {}
    if headers is None:
        return out
    items = headers.items() if hasattr(headers, "items") else headers
    for k, v in items:
        out.setdefault(str(k).lower(), v)
    return out


def _int_or_none(v: Any) -> Optional[int]:
    if v is None or v == "":
        return None
    try:
        return wire.parse_token(v)
    except ValueError:
        return None


def _time_or_none(v: Any) -> Optional[datetime]:
    try:
        return wire.parse_time(v) if isinstance(v, str) else None
    except ValueError:
        return None


_MESSAGE_TOKEN = re.compile(r"\btoken (\d{1,19})\b")


def _parse_body(headers: Dict[str, str], body: bytes) -> Dict[str, Any]:
    """The problem of a refusal's body: problem+json as it is; an S3
    <Error> as {"detail": Message, "s3_code": Code}; {} when neither."""
    if not body:
        return {}
    body = body[:MAX_PROBLEM_BODY]
    ctype = headers.get("content-type", "")
    if ctype.startswith("application/xml") or body.lstrip()[:1] == b"<":
        try:
            root = ET.fromstring(body)
        except ET.ParseError:
            return {}
        if root.tag != "Error":
            return {}
        return {"detail": root.findtext("Message") or "", "s3_code": root.findtext("Code") or ""}
    try:
        pb = json.loads(body.decode("utf-8", "replace"))
    except ValueError:
        return {}
    return pb if isinstance(pb, dict) else {}


def error_from_response(status: int, headers: Any, body: Optional[bytes] = b"", *,
                        token: Optional[int] = None) -> Optional[FenceproxyError]:
    """The error of one answer, or None when fenceproxy did not refuse it.

    status: the HTTP status. headers: the answer's headers, any mapping or
    http.client.HTTPMessage. body: its bytes (at most 64 KiB are read; may
    be empty: the headers alone then decide). token: the token the request
    carried, when known (an S3 body does not carry it; it is then read from
    the message).

    A proxy-listener refusal (``Fencing-Refused`` present) is a
    StaleTokenError, TokenRequiredError, ForbiddenError, OverloadedError,
    ShardUnavailableError, UnavailableError or RefusedError; an answer of the
    control listener (``Fenceproxy-Listener: control``) with a status not
    2xx is the class of its problem's reason. Anything else (2xx, the
    backend's own answers, the proxy's 502/504 upstream failures) is None.
    """
    h = _lower_headers(headers)
    refused = h.get(wire.REFUSED_HEADER.lower())
    if refused is not None:
        pb = _parse_body(h, body or b"")
        return _proxy_refusal(status, h, pb, refused, token)
    if h.get(wire.LISTENER_HEADER.lower()) == wire.LISTENER_CONTROL and not 200 <= status < 300:
        pb = _parse_body(h, body or b"")
        return control_error(status, h, pb)
    return None


def _proxy_refusal(status: int, h: Dict[str, str], pb: Dict[str, Any], reason: str,
                   token: Optional[int]) -> FenceproxyError:
    detail = pb.get("detail") or pb.get("title") or ""
    common = dict(status=status, reason=reason, title=pb.get("title", ""), detail=detail,
                  code=pb.get("s3_code", ""), retry_after=wire.retry_after(h), listener="proxy",
                  problem={k: v for k, v in pb.items() if not k.startswith("s3_")}, headers=h)
    if status == 409 and reason == wire.REASON_STALE:
        resource = pb.get("resource") or ""
        if not resource:
            resource = _unescape(h.get(wire.RESOURCE_HEADER.lower(), ""))
        current = _int_or_none(h.get(wire.CURRENT_TOKEN_HEADER.lower()))
        if current is None:
            current = _int_or_none(pb.get("current_token"))
        tok = token if token is not None else _int_or_none(pb.get("token"))
        if tok is None and detail:
            m = _MESSAGE_TOKEN.search(detail)
            tok = _int_or_none(m.group(1)) if m else None
        return StaleTokenError(resource=resource, token=tok, current=current, **common)
    cls: Type[FenceproxyError] = RefusedError
    if reason == wire.REASON_MISSING:
        cls = TokenRequiredError
    elif reason in (wire.REASON_SIGNATURE, wire.REASON_JUMP, wire.REASON_FORBIDDEN) or status in (401, 403):
        cls = ForbiddenError
    elif reason == wire.REASON_OVERLOADED:
        cls = OverloadedError
    elif reason == wire.REASON_SHARD_UNAVAILABLE:
        cls = ShardUnavailableError
    elif reason in (wire.REASON_DRAIN_TIMEOUT, wire.REASON_STORE_ERROR) or status == 503:
        cls = UnavailableError
    return cls(**common)


def _unescape(s: str) -> str:
    """s percent-decoded (the Fencing-Resource header), "" when it does not decode."""
    try:
        return unquote(s, errors="strict")
    except UnicodeDecodeError:
        return ""


def control_error(status: int, headers: Any, pb: Dict[str, Any], *, name: str = "") -> FenceproxyError:
    """The error of a control API answer with status (not 2xx) and its
    decoded problem pb. name: the lease the call named, for LeaseHeldError
    and LeaseLostError (the problem's ``name`` wins when it has one)."""
    h = _lower_headers(headers)
    reason = pb.get("reason") or ""
    title = pb.get("title") or ""
    if not title:
        try:
            from http import HTTPStatus
            title = HTTPStatus(status).phrase
        except ValueError:
            title = ""
    common = dict(status=status, reason=reason, title=title, detail=pb.get("detail", ""),
                  retry_after=wire.retry_after(h), listener="control", problem=pb, headers=h)
    if reason == wire.REASON_LEASE_HELD:
        return LeaseHeldError(name=pb.get("name") or name, holder=pb.get("holder", ""),
                              expires_at=_time_or_none(pb.get("expires_at")),
                              grace_ends=_time_or_none(pb.get("grace_ends")), **common)
    if reason == wire.REASON_LEASE_LOST:
        return LeaseLostError(name=name, **common)
    if reason == wire.REASON_NO_SHARD:
        return NoShardError(share=int(pb.get("share") or 0), held=int(pb.get("held") or 0),
                            at_share=bool(pb.get("at_share")), all_done=bool(pb.get("all_done")),
                            retry_at=_time_or_none(pb.get("retry_at")), standby=pb.get("standby", ""), **common)
    cls: Type[FenceproxyError] = {
        wire.REASON_UNAUTHORIZED: ForbiddenError,
        wire.REASON_ADMIN_DISABLED: ForbiddenError,
        wire.REASON_NOT_FOUND: NotFoundError,
        wire.REASON_TOKENS_EXHAUSTED: TokensExhaustedError,
        wire.REASON_SHARD_DONE: ShardDoneError,
        wire.REASON_POOL_BUSY: PoolBusyError,
        wire.REASON_SHARD_UNAVAILABLE: ShardUnavailableError,
        wire.REASON_OVERLOADED: OverloadedError,
        wire.REASON_DRAIN_TIMEOUT: UnavailableError,
        wire.REASON_UNAVAILABLE: UnavailableError,
    }.get(reason, RefusedError)
    if cls is RefusedError and status in (401, 403):
        cls = ForbiddenError
    elif cls is RefusedError and status == 503:
        cls = UnavailableError
    return cls(**common)


def check_response(resp: Any, body: Optional[bytes] = None, *, token: Optional[int] = None) -> None:
    """Raise the error of resp when fenceproxy refused it; return None
    otherwise (a 2xx, or the backend's own answer, a backend 409 included).

    resp is duck-typed: an http.client.HTTPResponse or urllib response
    (``status``, ``headers``), a requests/httpx response (``status_code``,
    ``headers``, ``content``). body: the bytes already read, if any; else
    ``content`` is used, or, only for a refusal, up to 64 KiB are read from
    ``resp.read``. token: the request's token, when known.
    """
    status = getattr(resp, "status_code", None)
    if status is None:
        status = getattr(resp, "status", None)
    if status is None:
        status = resp.getcode()
    headers = getattr(resp, "headers", None)
    if headers is None and hasattr(resp, "getheaders"):
        headers = resp.getheaders()
    h = _lower_headers(headers)
    is_refusal = wire.REFUSED_HEADER.lower() in h or (
        h.get(wire.LISTENER_HEADER.lower()) == wire.LISTENER_CONTROL and not 200 <= int(status) < 300)
    if not is_refusal:
        return None
    if body is None:
        content = getattr(resp, "content", None)
        if isinstance(content, (bytes, bytearray)):
            body = bytes(content)
        elif hasattr(resp, "read"):
            body = resp.read(MAX_PROBLEM_BODY)
        else:
            body = b""
    err = error_from_response(int(status), h, body, token=token)
    if err is not None:
        raise err
    return None


def classify_client_error(err: BaseException, *, token: Optional[int] = None) -> Optional[FenceproxyError]:
    """The typed error of a botocore ClientError that fenceproxy's proxy
    listener answered (its response headers carry ``Fencing-Refused``),
    else None (the store's own errors, and anything that is no
    ClientError).

    err.response is botocore's parsed answer: ``Error.Code`` (the proxy's S3
    code, StaleFencingToken...), ``Error.Message`` (the detail, which names
    the token, resource and current maximum), and
    ``ResponseMetadata.HTTPStatusCode`` / ``HTTPHeaders`` (lower-cased:
    fencing-refused, fencing-current-token, fencing-resource, retry-after).
    token: the token the call sent, when known; else it is read from the
    message. The returned error's ``__cause__`` is err.
    """
    response = getattr(err, "response", None)
    if not isinstance(response, dict):
        return None
    meta = response.get("ResponseMetadata") or {}
    headers = meta.get("HTTPHeaders") or {}
    h = _lower_headers(headers)
    reason = h.get(wire.REFUSED_HEADER.lower())
    if reason is None:
        return None
    status = meta.get("HTTPStatusCode") or 0
    e = response.get("Error") or {}
    pb = {"detail": e.get("Message") or "", "s3_code": e.get("Code") or ""}
    out = _proxy_refusal(int(status), h, pb, reason, token)
    out.__cause__ = err
    return out


class translate_client_errors:
    """A context manager (and decorator) that re-raises a botocore
    ClientError answered by fenceproxy's proxy listener as its typed error
    (StaleTokenError, ...), chained to the ClientError; other exceptions
    pass unchanged::

        with translate_client_errors():
            s3.put_object(Bucket="demo", Key="a", Body=b"x")
    """

    def __init__(self, token: Optional[int] = None):
        self.token = token

    def __enter__(self) -> "translate_client_errors":
        return self

    def __exit__(self, typ: Any, value: Any, tb: Any) -> bool:
        if value is None or not isinstance(value, Exception):
            return False
        typed = classify_client_error(value, token=self.token)
        if typed is None:
            return False
        raise typed from value

    def __call__(self, fn: Any) -> Any:
        import functools

        @functools.wraps(fn)
        def wrapped(*args: Any, **kwargs: Any) -> Any:
            with translate_client_errors(self.token):
                return fn(*args, **kwargs)

        return wrapped
