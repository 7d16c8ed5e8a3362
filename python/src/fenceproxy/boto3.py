"""Send the fencing token with every boto3/botocore S3 call.

::

    import boto3
    from botocore.config import Config
    from fenceproxy import LeaseClient
    from fenceproxy.boto3 import add_fencing_token, translate_client_errors

    s3 = boto3.client("s3", endpoint_url="http://fenceproxy:8080",
                      config=Config(signature_version="s3v4", s3={"addressing_style": "path"}))
    with LeaseClient("http://fenceproxy:9090").keep("reports/jobs/", holder="host-1", ttl=30) as lease:
        add_fencing_token(s3, lease)           # each call sends the lease's current token (and signature)
        with translate_client_errors():        # StaleTokenError instead of a ClientError
            s3.put_object(Bucket="reports", Key="jobs/a", Body=b"...")

The hook runs on ``before-sign.s3``, before botocore signs, so the worker's
SigV4 signature covers the headers: they reach the store unchanged
(FENCEPROXY_S3=pass), or the proxy verifies them with the worker's proxy key
(FENCEPROXY_S3=resign). A presigned URL (generate_presigned_url) carries the
token (and signature) in its query instead, covered by the URL's signature,
so the uploader that receives it adds no header; give the client
``Config(signature_version="s3v4")``: with an endpoint_url botocore presigns
with SigV2 by default, whose signature does not cover the query.

A refusal is a botocore ClientError whose ``Error.Code`` is the proxy's
(StaleFencingToken, MissingFencingToken, ...); classify_client_error turns it
into the typed error (fenceproxy.errors), translate_client_errors raises it.

This module never imports boto3: it works with the client it is given.
``examples/boto3/fenceproxy_token.py`` is the single-file version of the same
hook (without signatures), for workers that copy one file.
"""

from __future__ import annotations

import contextlib
import contextvars
import threading
from typing import Any, Callable, Iterator, Optional, Tuple, Union
from urllib.parse import parse_qsl, urlencode, urlsplit, urlunsplit

from . import wire
from .errors import classify_client_error, translate_client_errors

__all__ = ["FencingToken", "add_fencing_token", "using_token", "classify_client_error", "translate_client_errors",
           "HEADER", "SIGNATURE_HEADER"]

HEADER = wire.TOKEN_HEADER
SIGNATURE_HEADER = wire.SIGNATURE_HEADER

SignedToken = Tuple[Optional[int], Optional[str]]

_override: "contextvars.ContextVar[Optional[SignedToken]]" = contextvars.ContextVar("fenceproxy_token", default=None)


class FencingToken:
    """The token to send, and its signature in signed-token mode: set()
    them when a lease is acquired (and the signature after a renew); None
    sends none. Thread-safe."""

    def __init__(self, value: Optional[int] = None, signature: Optional[str] = None):
        self._lock = threading.Lock()
        self._value: Optional[int] = None
        self._signature: Optional[str] = None
        self.set(value, signature)

    def set(self, value: Optional[int], signature: Optional[str] = None) -> None:
        """value: an int in 0..2**63-1, or None (send no token).
        signature: X-Fencing-Token-Signature for it, or None."""
        if value is not None:
            wire.check_token(value)
        with self._lock:
            self._value, self._signature = value, (signature or None) if value is not None else None

    def set_lease(self, lease: Any) -> None:
        """Take the token and signature of a Lease (or Shard's lease)."""
        self.set(lease.token, getattr(lease, "token_signature", "") or None)

    def get(self) -> Optional[int]:
        with self._lock:
            return self._value

    def signed_token(self) -> SignedToken:
        """(token or None, signature or None)."""
        with self._lock:
            return self._value, self._signature


TokenSource = Union[FencingToken, Any, Callable[[], Any]]


def _resolve(source: Any) -> SignedToken:
    """(token, signature) of a source: an object with signed_token() (a
    FencingToken, KeptLease, HeldShard), a Lease (token, token_signature),
    a callable returning one of those, an int, a (token, signature) pair or
    None."""
    if callable(source) and not hasattr(source, "signed_token"):
        source = source()
    if source is None:
        return None, None
    if hasattr(source, "signed_token"):
        return source.signed_token()
    if isinstance(source, tuple):
        tok, sig = source
        return tok, sig or None
    if isinstance(source, int) and not isinstance(source, bool):
        return source, None
    if hasattr(source, "token"):
        return source.token, getattr(source, "token_signature", "") or None
    raise TypeError("fenceproxy: no fencing token in %r" % (source,))


@contextlib.contextmanager
def using_token(token: Optional[int], signature: Optional[str] = None) -> Iterator[None]:
    """Within the block, calls of this thread (and context) send token and
    signature instead of the hooked source's: for one client shared by
    holders of several leases (each shard of a pool, say). None: no token."""
    if token is not None:
        wire.check_token(token)
    reset = _override.set((token, signature or None))
    try:
        yield
    finally:
        _override.reset(reset)


def add_fencing_token(client: Any, token: Optional[TokenSource] = None, *, header: str = HEADER) -> Any:
    """Register a before-sign hook on client (a boto3/botocore S3 client)
    that sends the token in X-Fencing-Token (header renames it, as
    FENCEPROXY_TOKEN_HEADER does) and its signature, when there is one, in
    X-Fencing-Token-Signature.

    token: where each call takes them from, read at each request (retries
    included): a FencingToken (None: a new one, returned), a KeptLease or
    HeldShard (their latest token and signature; a lost lease raises its
    LeaseLostError from the call, which is then not sent), a Lease, or a
    callable returning any of those, an int or (token, signature). A block
    of using_token() wins over it. A token of None sends no headers (reads
    need none; a write then gets TokenRequiredError's 428).

    Calling it again on the same client (and header) replaces the hook: the
    new token source is the only one read.

    Returns token (the FencingToken created when None was given).
    """
    source: Any = token if token is not None else FencingToken()
    hname = header

    def _before_sign(request: Any, **_: Any) -> None:
        override = _override.get()
        value, signature = override if override is not None else _resolve(source)
        if value is None:
            return
        text = wire.format_token(value)
        if request.context.get("is_presign_request"):
            # botocore's query signer signs every query parameter of the URL
            # and every header; a header would bind the uploader to send it.
            url = urlsplit(request.url)
            drop = {hname.lower(), SIGNATURE_HEADER.lower()}
            query = [(k, v) for k, v in parse_qsl(url.query, keep_blank_values=True) if k.lower() not in drop]
            query.append((hname, text))
            if signature:
                query.append((SIGNATURE_HEADER, signature))
            request.url = urlunsplit(url._replace(query=urlencode(query)))
            return
        if hname in request.headers:
            del request.headers[hname]
        request.headers[hname] = text
        if SIGNATURE_HEADER in request.headers:
            del request.headers[SIGNATURE_HEADER]
        if signature:
            request.headers[SIGNATURE_HEADER] = signature

    # One hook per client and header: a second call (the next job's lease on
    # the same client) replaces the first, which would otherwise still run
    # and send, or refuse with, the earlier source's token.
    uid = "fenceproxy-fencing-token:" + hname.lower()
    client.meta.events.unregister("before-sign.s3", unique_id=uid)
    client.meta.events.register("before-sign.s3", _before_sign, unique_id=uid)
    return source
