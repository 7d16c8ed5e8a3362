"""Leases from fenceproxy's control API (``/v1/leases/{name}``).

Every acquire issues a new token, larger than every token issued for the
lease and than the resource's fence, and raises the fence to it at once:
the old holder is cut off at the takeover. The holder renews before its TTL
runs out (KeptLease does it in a background thread) and writes with the
token; a renew answered ``lease_lost`` means it must stop writing.
"""

from __future__ import annotations

import logging
import threading
import time
from dataclasses import dataclass, field, replace
from datetime import datetime, timedelta
from typing import Any, Callable, Dict, List, Optional, Tuple, Union

from . import errors, wire
from .transport import Control

log = logging.getLogger("fenceproxy")

TTL = Union[float, int, timedelta, str]
"""A TTL: seconds (float or int), a timedelta, or a Go duration string ("10s")."""


@dataclass(frozen=True)
class Lease:
    """A lease as the control API answers it.

    name: the lease's name, a resource key ("bkt/jobs/report", or a prefix
      fence "bkt/jobs/part-7/" whose token fences every key below it).
    holder: the holder id (one per process).
    token: the fencing token of the current (or last) grant, an int.
    ttl: seconds, fixed at acquire. ttl_text: as the server wrote it ("10s").
    state: held, suspect, grace, expired or released ("" when not sent).
    acquired_at, renewed_at, expires_at: aware datetimes (UTC).
    token_signature: the token's signature in signed-token mode
      (FENCEPROXY_TOKEN_KEY), on acquire, renew and claim answers: writes
      send it in X-Fencing-Token-Signature. "" otherwise.
    pool, shard: the pool shard of a claim's answer, and of a renew's when
      the lease is a pool shard's; "" otherwise.
    hand_back: on a pool shard's renew answer, the shards of the same pool
      this holder must hand back (release after its current write).
    """

    name: str
    holder: str
    token: int
    ttl: float = 0.0
    ttl_text: str = ""
    state: str = ""
    acquired_at: Optional[datetime] = None
    renewed_at: Optional[datetime] = None
    expires_at: Optional[datetime] = None
    token_signature: str = ""
    pool: str = ""
    shard: str = ""
    hand_back: List[str] = field(default_factory=list)

    @classmethod
    def from_json(cls, d: Dict[str, Any], headers: Any = None) -> "Lease":
        """A Lease from the control API's lease JSON (tokens as decimal
        strings or numbers) and, for the signature, the answer's headers."""
        ttl_text = d.get("ttl") or ""
        try:
            ttl = wire.parse_duration(ttl_text) if ttl_text else 0.0
        except ValueError:
            ttl = 0.0
        sig = d.get("token_signature") or ""
        if not sig and headers is not None:
            sig = wire.header(headers, wire.SIGNATURE_HEADER) or ""
        return cls(name=d.get("name", ""), holder=d.get("holder", ""), token=wire.parse_token(d.get("token", 0)),
                   ttl=ttl, ttl_text=ttl_text, state=d.get("state", "") or "",
                   acquired_at=wire.parse_time(d.get("acquired_at")), renewed_at=wire.parse_time(d.get("renewed_at")),
                   expires_at=wire.parse_time(d.get("expires_at")), token_signature=sig,
                   pool=d.get("pool", "") or "", shard=d.get("shard", "") or "",
                   hand_back=list(d.get("hand_back") or []))

    def headers(self, prefix: Optional[str] = None, header: str = wire.TOKEN_HEADER) -> Dict[str, str]:
        """The headers of a write with this lease: the token, and its
        signature when the proxy signs tokens."""
        return wire.token_headers(self.token, self.token_signature or None, prefix, header=header)


class LeaseClient:
    """The lease API of one fenceproxy control listener.

    base_url: the control listener, e.g. ``http://fenceproxy:9090`` (not the
      proxy listener: with a bearer, that is checked before it is sent).
    bearer: FENCEPROXY_LEASE_TOKEN, sent as ``Authorization: Bearer <it>``
      when set, only after ``GET {base_url}/healthz`` answered with
      ``Fenceproxy-Listener: control`` (NotControlListenerError otherwise).
    timeout: seconds per call.
    ssl_context: for an https:// control listener with its own CA.

    Errors of every call: the typed errors of fenceproxy.errors
    (LeaseHeldError, LeaseLostError, NotFoundError, ForbiddenError for a
    missing or wrong bearer, UnavailableError with retry_after...),
    NotControlListenerError, and OSError for the transport.
    """

    def __init__(self, base_url: str, bearer: Optional[str] = None, timeout: float = 10.0, ssl_context: Any = None):
        self.control = Control(base_url, bearer=bearer, timeout=timeout, ssl_context=ssl_context)

    @property
    def base_url(self) -> str:
        return self.control.base_url

    def _path(self, name: str) -> str:
        return "/v1/leases/" + wire.escape_name(name)

    def acquire(self, name: str, holder: str, ttl: TTL) -> Lease:
        """Take the lease name (a resource key; ending in "/" a prefix
        fence) for holder for ttl, with a new token; the fence is raised to
        it at once. Raises LeaseHeldError while another holder has it or it
        is in its grace period; RefusedError (400 bad_request) for a TTL
        outside the server's bounds (1s to 1h by default); UnavailableError
        (503 drain_timeout: the lease was granted, acquire again with the
        same holder); TokensExhaustedError."""
        body = {"holder": holder, "ttl": wire.format_duration(ttl)}
        out, h = self.control.call("POST", self._path(name), body, name=name)
        return Lease.from_json(out, h)

    def renew(self, name: str, holder: str, token: int, timeout: Optional[float] = None) -> Lease:
        """Extend holder's lease by its TTL, keeping the token. A pool
        shard's lease answers with pool, shard and hand_back. Raises
        LeaseLostError when the lease is no longer holder's: stop writing."""
        body = {"holder": holder, "token": wire.format_token(token)}
        out, h = self.control.call("PUT", self._path(name), body, name=name, timeout=timeout)
        return Lease.from_json(out, h)

    def release(self, name: str, holder: str, token: int, timeout: Optional[float] = None) -> Lease:
        """End holder's lease so that others may acquire it at once (state
        "released"). LeaseLostError as for renew (also when released twice)."""
        body = {"holder": holder, "token": wire.format_token(token)}
        out, h = self.control.call("DELETE", self._path(name), body, name=name, timeout=timeout)
        return Lease.from_json(out, h)

    def get(self, name: str) -> Lease:
        """The lease with its state now; NotFoundError if never acquired (or swept)."""
        out, h = self.control.call("GET", self._path(name), name=name)
        return Lease.from_json(out, h)

    def keep(self, name: str, holder: str, ttl: TTL, **kwargs: Any) -> "KeptLease":
        """A KeptLease: acquire on entering ``with``, renew in a background
        thread, release on leaving. Keyword arguments as KeptLease's."""
        return KeptLease(self, name, holder, ttl, **kwargs)

    def pool(self, name: str, holder: str, ttl: TTL, standby: bool = False) -> "Any":
        """A Pool client for the shard pool name (fenceproxy.pool.Pool)."""
        from .pool import Pool
        return Pool(self, name, holder, ttl, standby=standby)


class KeptLease:
    """A lease kept renewed by a background thread.

    ::

        leases = LeaseClient("http://fenceproxy:9090")
        with leases.keep("bkt/jobs/report", holder="host-1234", ttl=10) as lease:
            for part in parts:
                lease.check()                      # LeaseLostError once lost
                put(part, headers=lease.headers())  # X-Fencing-Token (+ signature)

    On entering (or start()) it acquires the lease (a Lease given as
    ``lease`` is adopted instead: a pool claim). A daemon thread renews it
    every ``ttl * renew_fraction`` seconds (1/3 by default). A renew that
    fails without a refusal (a timeout, a 503) is retried every TTL/20 until
    the local deadline: the TTL counted from when the last acknowledged
    renew (or the acquire) was sent.

    The lease is lost when a renew is answered ``lease_lost``
    (LeaseLostError) or the deadline passes (LeaseExpiredError). Then: the
    thread stops, ``lost`` is True, ``lost_error`` holds the error,
    ``on_lost(kept, error)`` is called from the thread, and every later
    use (``token``, ``headers()``, ``check()``, the boto3 hook) raises it,
    so nothing more is sent with the lost token. Leaving the ``with`` block
    releases the lease when it was not lost; when it was and the block
    raised nothing, the loss is raised there.

    on_renew(lease): called after each acknowledged renew (from the thread).
    on_hand_back(shards): called with a pool shard renew's non-empty
    hand_back list (from the thread).
    """

    def __init__(self, client: LeaseClient, name: str, holder: str, ttl: TTL, *,
                 renew_fraction: float = 1.0 / 3, on_lost: Optional[Callable[["KeptLease", Exception], None]] = None,
                 on_renew: Optional[Callable[[Lease], None]] = None,
                 on_hand_back: Optional[Callable[[List[str]], None]] = None,
                 release_on_exit: bool = True, lease: Optional[Lease] = None):
        if not 0 < renew_fraction < 1:
            raise ValueError("renew_fraction must be between 0 and 1")
        self.client = client
        self.name = name
        self.holder = holder
        self.ttl_text = wire.format_duration(ttl)
        self.ttl = wire.parse_duration(self.ttl_text)
        self.interval = self.ttl * renew_fraction
        self.on_lost = on_lost
        self.on_renew = on_renew
        self.on_hand_back = on_hand_back
        self.release_on_exit = release_on_exit
        self._lock = threading.Lock()
        self._lease: Optional[Lease] = lease
        self._lost: Optional[errors.LeaseLostError] = None
        self._lost_event = threading.Event()
        self._stop = threading.Event()
        self._thread: Optional[threading.Thread] = None
        self._deadline = 0.0
        self._last_sent = 0.0
        self._released = False
        self.renewals = 0
        """Acknowledged renews so far."""
        self.last_error: Optional[BaseException] = None
        """The last renew failure that was retried (None after a success)."""

    # -- lifecycle

    def start(self) -> "KeptLease":
        """Acquire (unless a lease was adopted) and start renewing. Errors
        of the acquire are raised (LeaseHeldError...)."""
        if self._thread is not None:
            raise RuntimeError("fenceproxy: KeptLease already started")
        sent = time.monotonic()
        if self._lease is None:
            self._lease = self.client.acquire(self.name, self.holder, self.ttl_text)
        with self._lock:
            self._last_sent = sent
            self._deadline = sent + self.ttl
        self._thread = threading.Thread(target=self._run, name="fenceproxy-lease-" + self.name, daemon=True)
        self._thread.start()
        return self

    def stop(self) -> None:
        """Stop renewing (the lease is neither released nor lost: it runs
        out after its TTL and grace). Waits for the thread."""
        self._stop.set()
        t = self._thread
        if t is not None and t is not threading.current_thread():
            t.join()

    def release(self) -> Optional[Lease]:
        """Stop renewing and release the lease, unless it was lost (then
        None). Raises LeaseLostError when the release finds it lost."""
        self.stop()
        if self._lost is not None or self._lease is None:
            return None
        lease = self._lease
        try:
            out = self.client.release(lease.name, self.holder, lease.token, timeout=max(self.ttl, 1.0))
        except errors.LeaseLostError as e:
            self._lose(e)
            raise
        with self._lock:
            self._released = True
        return out

    def __enter__(self) -> "KeptLease":
        if self._thread is None:
            self.start()
        return self

    def __exit__(self, typ: Any, value: Any, tb: Any) -> bool:
        if not self.release_on_exit:
            self.stop()
        else:
            try:
                self.release()
            except errors.LeaseLostError:
                if value is None:
                    raise
            except Exception as e:  # the lease runs out by itself
                log.warning("fenceproxy: releasing lease %r failed: %s", self.name, e)
        if value is None and self._lost is not None:
            raise self._lost
        return False

    # -- state

    @property
    def lease(self) -> Lease:
        """The latest Lease (its expires_at and token_signature move with
        renews), also after a loss."""
        with self._lock:
            if self._lease is None:
                raise RuntimeError("fenceproxy: KeptLease not started")
            return self._lease

    @property
    def lost(self) -> bool:
        """True once the lease is lost (never False again)."""
        return self._lost_event.is_set()

    @property
    def lost_error(self) -> Optional[errors.LeaseLostError]:
        """The LeaseLostError (or LeaseExpiredError) that lost it, or None."""
        return self._lost

    def check(self) -> None:
        """Raise the loss (LeaseLostError / LeaseExpiredError) if the lease
        was lost; call before each write."""
        err = self._lost
        if err is not None:
            raise err
        with self._lock:
            released = self._released
            expired = bool(self._deadline) and time.monotonic() >= self._deadline
        if released:
            raise errors.LeaseLostError(name=self.name, detail="released by this holder")
        if expired:
            self._lose(errors.LeaseExpiredError(name=self.name, cause=self.last_error))
            raise self._lost  # type: ignore[misc]

    @property
    def token(self) -> int:
        """The fencing token; raises the loss once lost."""
        self.check()
        return self.lease.token

    @property
    def token_signature(self) -> str:
        """The latest token signature ("" without signed tokens); raises the loss once lost."""
        self.check()
        return self.lease.token_signature

    def signed_token(self) -> Tuple[int, Optional[str]]:
        """(token, signature or None), checked: what the boto3 hook sends."""
        self.check()
        lease = self.lease
        return lease.token, lease.token_signature or None

    def headers(self, prefix: Optional[str] = None, header: str = wire.TOKEN_HEADER) -> Dict[str, str]:
        """The headers of a write with this lease (token, signature); raises the loss once lost."""
        self.check()
        return self.lease.headers(prefix, header=header)

    def wait_lost(self, timeout: Optional[float] = None) -> bool:
        """Block until the lease is lost or timeout seconds passed; True if lost."""
        return self._lost_event.wait(timeout)

    # -- the renew thread

    def _lose(self, err: errors.LeaseLostError) -> None:
        with self._lock:
            if self._lost is not None:
                return
            self._lost = err
        self._lost_event.set()
        self._stop.set()
        if self.on_lost is not None:
            try:
                self.on_lost(self, err)
            except Exception:
                log.exception("fenceproxy: on_lost callback of lease %r failed", self.name)

    def _run(self) -> None:
        with self._lock:
            next_at = self._last_sent + self.interval
        while True:
            with self._lock:
                deadline = self._deadline
            now = time.monotonic()
            if now >= deadline:
                self._lose(errors.LeaseExpiredError(name=self.name, cause=self.last_error))
                return
            wait = min(next_at, deadline) - now
            if wait > 0:
                if self._stop.wait(wait):
                    return
                continue
            if self._stop.is_set():
                return
            lease = self.lease
            sent = time.monotonic()
            try:
                renewed = self.client.renew(lease.name, self.holder, lease.token,
                                            timeout=max(0.05, min(self.client.control.timeout, self.ttl / 2,
                                                                  deadline - sent)))
            except errors.LeaseLostError as e:
                self._lose(e)
                return
            except Exception as e:  # retried until the deadline
                self.last_error = e
                next_at = time.monotonic() + self.ttl / 20
                continue
            if renewed.token != lease.token:  # never: the server keeps the token
                self._lose(errors.LeaseLostError(name=self.name, detail="renew answered token %d" % renewed.token))
                return
            if not renewed.token_signature and lease.token_signature:
                renewed = replace(renewed, token_signature=lease.token_signature)
            with self._lock:
                self._lease = renewed
                self._last_sent = sent
                self._deadline = sent + self.ttl
                self.renewals += 1
            self.last_error = None
            next_at = sent + self.interval
            if self.on_renew is not None:
                try:
                    self.on_renew(renewed)
                except Exception:
                    log.exception("fenceproxy: on_renew callback of lease %r failed", self.name)
            if renewed.hand_back and self.on_hand_back is not None:
                try:
                    self.on_hand_back(list(renewed.hand_back))
                except Exception:
                    log.exception("fenceproxy: on_hand_back callback of lease %r failed", self.name)
