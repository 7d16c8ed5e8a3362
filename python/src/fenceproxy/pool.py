"""Shard pools (``/v1/pools/{pool}``): workers ask for work.

A pool is a set of shards that workers claim. A claim is a lease acquire on
the shard's lease name (``{pool}/{shard}``, or the pool's prefix template
with the shard in it, a prefix fence ending in "/"), with a new token. The
holder renews it with the lease calls; when another holder joins and this
one holds more than its share, the renew answer's ``hand_back`` names the
shards to release after the current write. One-shot pools mark a shard
done with its token: it is never dispatched again.

Pool has the single calls (define, get, claim, renew, release, done) and
run(), the whole loop of the Go client's Pool.Run.
"""

from __future__ import annotations

import random
import threading
from dataclasses import dataclass
from typing import Any, Callable, Dict, List, Optional, Sequence, Tuple

from . import errors, wire
from .leases import TTL, KeptLease, Lease, LeaseClient, log


@dataclass(frozen=True)
class Shard:
    """A claimed shard: pool, shard (its name in the pool, "0"...), lease
    (its Lease: lease.token is the fencing token; lease.name the fence it
    raised: the resource key to write, or for a pool with a prefix the
    shard's prefix such as "reports/daily/3/", below which to write)."""

    pool: str
    shard: str
    lease: Lease

    @property
    def name(self) -> str:
        return self.lease.name

    @property
    def token(self) -> int:
        return self.lease.token

    @property
    def token_signature(self) -> str:
        return self.lease.token_signature

    def headers(self, prefix: Optional[str] = None) -> Dict[str, str]:
        """The headers of a write with this shard's token (and signature)."""
        return self.lease.headers(prefix)


@dataclass(frozen=True)
class PoolEvent:
    """What Pool.run reports: kind is "claimed", "claim_failed", "hand_back"
    (asked to hand the shard back: its stop is set), "released" (handed
    back, stopped, or its work ended), "done", "lost" (renew refused, or no
    renew within the TTL). error: for "lost", "claim_failed" and a failed
    release or done. work_error: for "released", what the work function
    raised (None when it returned)."""

    kind: str
    shard: Optional[Shard] = None
    error: Optional[BaseException] = None
    work_error: Optional[BaseException] = None


def _pool_state(d: Dict[str, Any]) -> Dict[str, Any]:
    """A pool's JSON with its shards' tokens as ints and times parsed."""
    out = dict(d)
    shards = []
    for s in d.get("shards") or []:
        s = dict(s)
        if "token" in s:
            s["token"] = wire.parse_token(s["token"])
        for k in ("expires_at", "grace_ends"):
            if s.get(k):
                s[k] = wire.parse_time(s[k])
        shards.append(s)
    out["shards"] = shards
    out["holders"] = list(d.get("holders") or [])
    return out


class HeldShard:
    """A shard that Pool.run holds, as its work function sees it.

    shard: the Shard claimed. stop: a threading.Event set when the work
    must stop (``reason`` then says why: "hand_back", "lost", "stopped").
    token, token_signature, lease, headers(): the latest, from the kept
    lease (raising LeaseLostError once lost). check() raises when the work
    must stop: LeaseLostError if lost, else ShardStoppedError.
    """

    def __init__(self, shard: Shard):
        self.shard = shard
        self.stop = threading.Event()
        self.reason = ""
        self.kept: Optional[KeptLease] = None

    @property
    def name(self) -> str:
        return self.shard.lease.name

    @property
    def lease(self) -> Lease:
        return self.kept.lease if self.kept is not None else self.shard.lease

    @property
    def token(self) -> int:
        return self.kept.token if self.kept is not None else self.shard.lease.token

    @property
    def token_signature(self) -> str:
        return self.kept.token_signature if self.kept is not None else self.shard.lease.token_signature

    def headers(self, prefix: Optional[str] = None) -> Dict[str, str]:
        if self.kept is not None:
            return self.kept.headers(prefix)
        return self.shard.lease.headers(prefix)

    def signed_token(self) -> Tuple[int, Optional[str]]:
        """(token, signature or None), checked: what the boto3 hook sends."""
        if self.kept is not None:
            return self.kept.signed_token()
        return self.shard.lease.token, self.shard.lease.token_signature or None

    def check(self) -> None:
        if self.kept is not None:
            self.kept.check()
        if self.stop.is_set():
            raise errors.ShardStoppedError("fenceproxy: shard %s of pool %s: %s" % (
                self.shard.shard, self.shard.pool, self.reason or "stopped"), reason=self.reason or "stopped")


class Pool:
    """A holder's client of one shard pool.

    leases: the LeaseClient of the control listener (its bearer is sent
      on every pool call). name: the pool (1 to 128 of [A-Za-z0-9._-]).
    holder: this holder's id, unique per process. ttl: each shard lease's
      TTL. standby: when no shard is free, stand by for a suspect one.
    """

    def __init__(self, leases: LeaseClient, name: str, holder: str, ttl: TTL, standby: bool = False):
        self.leases = leases
        self.name = name
        self.holder = holder
        self.ttl_text = wire.format_duration(ttl)
        self.ttl = wire.parse_duration(self.ttl_text)
        self.standby = standby

    def _path(self, tail: str = "") -> str:
        return "/v1/pools/" + wire.escape_name(self.name) + tail

    def define(self, shards: Optional[int] = None, names: Optional[Sequence[str]] = None,
               prefix: Optional[str] = None) -> Dict[str, Any]:
        """Create the pool or change its shards (PUT /v1/pools/{pool}):
        shards N ("0".."N-1") or names; prefix, optional, a template with
        "{shard}" once, ending in "/" ("reports/daily/{shard}/"). Returns
        the pool's state (as get()). Raises RefusedError (400) for a bad
        definition, PoolBusyError when shards to remove are held."""
        body: Dict[str, Any] = {}
        if shards is not None:
            body["shards"] = shards
        if names is not None:
            body["names"] = list(names)
        if prefix is not None:
            body["prefix"] = prefix
        out, _ = self.leases.control.call("PUT", self._path(), body)
        return _pool_state(out)

    def get(self) -> Dict[str, Any]:
        """The pool's state (GET /v1/pools/{pool}): "pool", "prefix",
        "share", "open", "done", "shards" (each "shard", "name", "state":
        free/held/suspect/grace/done, "holder", "token" as an int,
        "expires_at"/"grace_ends" as datetimes, "standby"), "holders"
        (each "holder", "shards", "hand_back", "waiting")."""
        out, _ = self.leases.control.call("GET", self._path())
        return _pool_state(out)

    def claim(self) -> Shard:
        """Claim one shard for this holder (sticky: the free shard it held
        last first). Raises NoShardError when it gets none now (at_share,
        retry_at; all_done once every shard is done), NotFoundError for an
        unknown pool, TokensExhaustedError."""
        body: Dict[str, Any] = {"holder": self.holder, "ttl": self.ttl_text}
        if self.standby:
            body["standby"] = True
        out, h = self.leases.control.call("POST", self._path("/claim"), body)
        lease = Lease.from_json(out, h)
        return Shard(pool=lease.pool or self.name, shard=lease.shard, lease=lease)

    def renew(self, shard: Shard) -> Tuple[Lease, List[str]]:
        """Renew shard's lease: (the renewed Lease, the shards of this pool
        this holder must hand back; [] for none). Raises LeaseLostError:
        stop writing to the shard."""
        lease = self.leases.renew(shard.lease.name, self.holder, shard.lease.token)
        if not lease.token_signature and shard.lease.token_signature:
            from dataclasses import replace
            lease = replace(lease, token_signature=shard.lease.token_signature)
        return lease, list(lease.hand_back)

    def release(self, shard: Shard) -> Lease:
        """Release shard's lease (a hand-back): the next claim of another
        holder gets it at once. LeaseLostError when no longer held."""
        return self.leases.release(shard.lease.name, self.holder, shard.lease.token)

    def done(self, shard: Shard) -> Dict[str, Any]:
        """Mark shard done with its token (one-shot pools): released and
        never dispatched again; returns the shard's state. Raises
        LeaseLostError for a stale holder, ShardDoneError when it was done
        by another holder or token."""
        body = {"holder": self.holder, "token": wire.format_token(shard.lease.token)}
        out, _ = self.leases.control.call("POST", self._path("/shards/" + wire.escape_name(shard.shard) + "/done"),
                                          body, name=shard.lease.name)
        if "token" in out:
            out = dict(out, token=wire.parse_token(out["token"]))
        return out

    def run(self, work: Callable[[HeldShard], Any], *, one_shot: bool = False, max_shards: int = 0,
            on_event: Optional[Callable[[PoolEvent], None]] = None, stop: Optional[threading.Event] = None) -> None:
        """Claim shards and run work(held) for each in a thread of its own,
        renewing each lease every TTL/3 and handing back what renew answers
        list, until stop is set (then every shard's stop is set, run waits
        for the work functions, releases the shards still held and
        returns), or, one_shot, until the pool has no open shard left.

        work must stop writing once held.stop is set (held.check() raises
        then). What it does decides: one_shot and returning marks the shard
        done; raising, or not one_shot, releases it (unless it was lost).
        Claims are tried every TTL/4 (with jitter) while below the share
        (and max_shards, when above 0). Errors of single calls are reported
        as events (on_event, called from run's threads) and retried, never
        raised.
        """
        stop = stop or threading.Event()
        lock = threading.Lock()
        held: Dict[str, HeldShard] = {}
        threads: List[threading.Thread] = []

        def emit(ev: PoolEvent) -> None:
            if on_event is not None:
                try:
                    on_event(ev)
                except Exception:
                    log.exception("fenceproxy: pool %r: on_event failed", self.name)

        def ask_back(names: List[str]) -> None:
            with lock:
                for n in names:
                    h = held.get(n)
                    if h is not None and not h.stop.is_set():
                        h.reason = "hand_back"
                        emit(PoolEvent("hand_back", h.shard))
                        h.stop.set()

        def keep(h: HeldShard) -> None:
            s = h.shard

            def lost(_kept: KeptLease, err: Exception) -> None:
                h.reason = "lost"
                h.stop.set()
                emit(PoolEvent("lost", s, error=err))

            kept = KeptLease(self.leases, s.lease.name, self.holder, self.ttl_text, lease=s.lease,
                             on_lost=lost, on_hand_back=ask_back, release_on_exit=False)
            h.kept = kept
            work_error: Optional[BaseException] = None
            try:
                kept.start()
                try:
                    work(h)
                except Exception as e:
                    work_error = e
                kept.stop()
                if kept.lost:
                    return
                cur = Shard(s.pool, s.shard, kept.lease)
                if one_shot and work_error is None:
                    try:
                        self.done(cur)
                        emit(PoolEvent("done", cur))
                    except Exception as e:
                        emit(PoolEvent("done", cur, error=e))
                    return
                try:
                    self.release(cur)
                    emit(PoolEvent("released", cur, work_error=work_error))
                except Exception as e:
                    emit(PoolEvent("released", cur, error=e, work_error=work_error))
            finally:
                with lock:
                    held.pop(s.shard, None)

        def wait_all() -> None:
            for t in threads:
                t.join()

        every = self.ttl / 4
        while True:
            while not stop.is_set():
                with lock:
                    full = max_shards > 0 and len(held) >= max_shards
                if full:
                    break
                try:
                    s = self.claim()
                except errors.NoShardError as e:
                    # all_done; or, from a server before it, at_share with share 0.
                    if one_shot and (e.all_done or (e.at_share and e.share == 0)):
                        wait_all()
                        return
                    break
                except Exception as e:
                    emit(PoolEvent("claim_failed", error=e))
                    break
                emit(PoolEvent("claimed", s))
                h = HeldShard(s)
                with lock:
                    held[s.shard] = h
                t = threading.Thread(target=keep, args=(h,), name="fenceproxy-shard-%s-%s" % (self.name, s.shard),
                                     daemon=True)
                threads.append(t)
                t.start()
            if stop.wait(every / 2 + random.random() * every / 2):
                with lock:
                    for h in held.values():
                        if not h.stop.is_set():
                            h.reason = "stopped"
                            h.stop.set()
                wait_all()
                return
            threads[:] = [t for t in threads if t.is_alive()]
