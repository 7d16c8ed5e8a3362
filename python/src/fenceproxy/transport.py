"""HTTP for the control API and for fenced writes, on http.client alone.

Nothing here follows a redirect or reads proxy settings from the
environment: a bearer token goes only where it was meant to, and only after
the base URL answered ``GET /healthz`` as the control listener
(``Fenceproxy-Listener: control``), as the Go client's checkControl does.
"""

from __future__ import annotations

import http.client
import json
import ssl
import threading
from typing import Any, Dict, NamedTuple, Optional, Tuple
from urllib.parse import urlsplit

from . import errors, wire

MAX_ANSWER = 64 << 20
"""At most this many bytes of a control API answer are read."""


class Response(NamedTuple):
    """One answer: status (int), headers (http.client.HTTPMessage, case-insensitive), body (bytes)."""

    status: int
    headers: Any
    body: bytes


def request(method: str, url: str, body: Optional[bytes] = None, headers: Optional[Dict[str, str]] = None,
            timeout: float = 30.0, ssl_context: Optional[ssl.SSLContext] = None,
            max_body: int = MAX_ANSWER) -> Response:
    """Send one request and read its answer (at most max_body bytes).

    url: http:// or https://. Redirects are not followed. Errors: OSError
    (connection refused, timeout...), http.client.HTTPException.
    """
    u = urlsplit(url)
    if u.scheme not in ("http", "https") or not u.hostname:
        raise ValueError("fenceproxy: %r is no http:// or https:// URL" % url)
    port = u.port
    if u.scheme == "https":
        conn: http.client.HTTPConnection = http.client.HTTPSConnection(
            u.hostname, port, timeout=timeout, context=ssl_context or ssl.create_default_context())
    else:
        conn = http.client.HTTPConnection(u.hostname, port, timeout=timeout)
    path = u.path or "/"
    if u.query:
        path += "?" + u.query
    try:
        conn.request(method, path, body=body, headers=dict(headers or {}))
        resp = conn.getresponse()
        return Response(resp.status, resp.headers, _read(resp, max_body))
    finally:
        conn.close()


def _read(resp: http.client.HTTPResponse, max_body: int) -> bytes:
    """At most max_body bytes of resp's body, in chunks: read(amt) of a
    large amt allocates amt bytes at once on Python 3.9."""
    if resp.length is not None and resp.length <= max_body:
        return resp.read()
    chunks, total = [], 0
    while total < max_body:
        chunk = resp.read(min(64 << 10, max_body - total))
        if not chunk:
            break
        chunks.append(chunk)
        total += len(chunk)
    return b"".join(chunks)


def fenced_request(method: str, url: str, body: Optional[bytes] = None, *, token: Optional[int] = None,
                   signature: Optional[str] = None, prefix: Optional[str] = None,
                   headers: Optional[Dict[str, str]] = None, token_header: str = wire.TOKEN_HEADER,
                   timeout: float = 30.0, ssl_context: Optional[ssl.SSLContext] = None) -> Response:
    """A write (or read) through the proxy listener with the fencing token
    (and its signature, and a prefix fence's name) in its headers.

    Returns the answer when the proxy forwarded the request (the backend's
    answer, whatever its status) or answered a 502/504 upstream failure;
    raises the typed refusal (StaleTokenError, TokenRequiredError,
    ForbiddenError, OverloadedError, ...) when the proxy refused it.
    """
    h = dict(headers or {})
    h.update(wire.token_headers(token, signature, prefix, header=token_header))
    resp = request(method, url, body=body, headers=h, timeout=timeout, ssl_context=ssl_context)
    err = errors.error_from_response(resp.status, resp.headers, resp.body, token=token)
    if err is not None:
        raise err
    return resp


_control_bases: set = set()
_control_lock = threading.Lock()


def check_control(base_url: str, timeout: float = 10.0, ssl_context: Optional[ssl.SSLContext] = None) -> None:
    """Make sure base_url is fenceproxy's control listener before a bearer
    token is sent to it: ``GET {base_url}/healthz`` must answer with
    ``Fenceproxy-Listener: control`` (a redirect is not followed). Checked
    once per base URL and process. Raises NotControlListenerError, or the
    transport's OSError."""
    base = base_url.rstrip("/")
    with _control_lock:
        if base in _control_bases:
            return
    resp = request("GET", base + "/healthz", timeout=timeout, ssl_context=ssl_context, max_body=64 << 10)
    if resp.headers.get(wire.LISTENER_HEADER) != wire.LISTENER_CONTROL:
        raise _not_control(base, resp)
    with _control_lock:
        _control_bases.add(base)


def _not_control(base: str, resp: Response) -> errors.NotControlListenerError:
    what = "an answer %d" % resp.status
    refused = resp.headers.get(wire.REFUSED_HEADER)
    if refused:
        what += " refused by a fenceproxy proxy listener (%s: %s)" % (wire.REFUSED_HEADER, refused)
    return errors.NotControlListenerError(
        "fenceproxy: not a fenceproxy control listener: %s gave %s without the %s header; the proxy listener "
        "(FENCEPROXY_LISTEN, :8080 by default) forwards to the backend, the control API is on "
        "FENCEPROXY_CONTROL_LISTEN (:9090 by default); no credential was sent there"
        % (base, what, wire.LISTENER_HEADER), status=resp.status)


class Control:
    """Calls on one control listener: JSON in, JSON out, problems as typed
    errors. Shared by LeaseClient and Pool.

    base_url: e.g. ``http://127.0.0.1:9090``. bearer: FENCEPROXY_LEASE_TOKEN
    (sent as ``Authorization: Bearer``) or None. timeout: seconds per call.
    """

    def __init__(self, base_url: str, bearer: Optional[str] = None, timeout: float = 10.0,
                 ssl_context: Optional[ssl.SSLContext] = None):
        self.base_url = base_url.rstrip("/")
        self.bearer = bearer or None
        self.timeout = timeout
        self.ssl_context = ssl_context

    def call(self, method: str, path: str, body: Optional[Dict[str, Any]] = None, *, name: str = "",
             timeout: Optional[float] = None) -> Tuple[Dict[str, Any], Any]:
        """One call: path is below base_url (``/v1/leases/a/b``), body a
        JSON object or None. Returns (the decoded JSON answer, the headers).
        Raises the typed error of a refusal (name: the lease named, for its
        errors), NotControlListenerError when what answered is not the
        control listener, OSError for the transport."""
        t = self.timeout if timeout is None else timeout
        headers = {"Accept": "application/json, application/problem+json"}
        data = None
        if body is not None:
            data = json.dumps(body).encode()
            headers["Content-Type"] = "application/json"
        if self.bearer:
            # A bearer goes only to an address known to be the control API.
            check_control(self.base_url, timeout=t, ssl_context=self.ssl_context)
            headers["Authorization"] = "Bearer " + self.bearer
        resp = request(method, self.base_url + path, body=data, headers=headers, timeout=t,
                       ssl_context=self.ssl_context)
        if resp.headers.get(wire.LISTENER_HEADER) != wire.LISTENER_CONTROL:
            raise _not_control(self.base_url, resp)
        if not 200 <= resp.status < 300:
            try:
                pb = json.loads(resp.body.decode("utf-8", "replace")) if resp.body else {}
            except ValueError:
                pb = {}
            if not isinstance(pb, dict):
                pb = {}
            raise errors.control_error(resp.status, resp.headers, pb, name=name)
        try:
            out = json.loads(resp.body.decode("utf-8"))
        except ValueError as e:
            raise errors.FenceproxyError("fenceproxy: %s %s: decoding the answer: %s" % (method, path, e),
                                         status=resp.status, listener="control")
        return out, resp.headers
