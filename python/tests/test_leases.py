"""Leases against a real fenceproxy (plain mode, in front of a Python
backend), with the lease bearer and admin API on."""

import json
import threading
import time
import unittest

try:
    from . import harness
except ImportError:  # run from inside tests/
    import harness  # type: ignore[no-redef]

import fenceproxy
from fenceproxy import errors, transport

LEASE_TOKEN = "lease-secret-for-tests"
ADMIN_TOKEN = "admin-secret-for-tests"


def setUpModule():
    global backend, fp
    backend = harness.Backend()
    try:
        fp = harness.Fenceproxy(unittest.TestCase(), "serve", {
            "FENCEPROXY_UPSTREAM": backend.url,
            "FENCEPROXY_LEASE_TOKEN": LEASE_TOKEN,
            "FENCEPROXY_ADMIN_TOKEN": ADMIN_TOKEN,
        })
    except BaseException:
        backend.stop()
        raise


def tearDownModule():
    fp.stop()
    backend.stop()


def admin_raise(name, token):
    """Raise name's fence to token with the admin API (an outside coordinator's fence-ahead)."""
    c = transport.Control(fp.control_url, bearer=ADMIN_TOKEN)
    out, _ = c.call("PUT", "/v1/fences/" + name, {"token": str(token)})
    return out


class TestLeases(unittest.TestCase):
    def setUp(self):
        self.leases = fenceproxy.LeaseClient(fp.control_url, bearer=LEASE_TOKEN)

    def test_tokens_increase_across_holders(self):
        a = self.leases.acquire("inc/obj", "A", 10)
        self.assertIsInstance(a.token, int)
        self.assertEqual((a.name, a.holder, a.state, a.ttl, a.ttl_text), ("inc/obj", "A", "held", 10.0, "10s"))
        self.assertGreater(a.expires_at, a.acquired_at)
        with self.assertRaises(errors.LeaseHeldError) as cm:
            self.leases.acquire("inc/obj", "B", 10)
        self.assertEqual((cm.exception.holder, cm.exception.name, cm.exception.status), ("A", "inc/obj", 409))
        self.assertGreater(cm.exception.grace_ends, cm.exception.expires_at)
        released = self.leases.release("inc/obj", "A", a.token)
        self.assertEqual(released.state, "released")
        b = self.leases.acquire("inc/obj", "B", 10)
        self.assertGreater(b.token, a.token)
        self.leases.release("inc/obj", "B", b.token)
        a2 = self.leases.acquire("inc/obj", "A", 10)
        self.assertGreater(a2.token, b.token)
        self.assertEqual(self.leases.get("inc/obj").holder, "A")
        with self.assertRaises(errors.LeaseLostError):
            self.leases.renew("inc/obj", "B", b.token)
        with self.assertRaises(errors.NotFoundError):
            self.leases.get("inc/never-acquired")

    def test_stale_write_raises_stale_token_error(self):
        url = fp.proxy_url + "/stale/obj"
        a = self.leases.acquire("stale/obj", "A", 10)
        resp = transport.fenced_request("PUT", url, b"from A", token=a.token)
        self.assertEqual(resp.status, 200)
        self.leases.release("stale/obj", "A", a.token)
        b = self.leases.acquire("stale/obj", "B", 10)
        n = len(backend.requests)
        with self.assertRaises(errors.StaleTokenError) as cm:
            transport.fenced_request("PUT", url, b"late from A", token=a.token)
        e = cm.exception
        self.assertEqual((e.resource, e.token, e.current, e.status, e.reason), ("stale/obj", a.token, b.token, 409,
                                                                                "stale"))
        self.assertEqual(e.problem.get("current_token"), str(b.token))
        self.assertEqual(len(backend.requests), n, "a stale write reached the backend")
        self.assertEqual(backend.objects["/stale/obj"], b"from A")
        with self.assertRaises(errors.TokenRequiredError):
            transport.fenced_request("PUT", url, b"no token")
        # a prefix lease: the refusal names the prefix fence
        p = self.leases.acquire("stale/part-1/", "A", 10)
        self.leases.release("stale/part-1/", "A", p.token)
        q = self.leases.acquire("stale/part-1/", "B", 10)
        with self.assertRaises(errors.StaleTokenError) as cm:
            transport.fenced_request("PUT", fp.proxy_url + "/stale/part-1/new-key", b"x", token=p.token)
        self.assertEqual((cm.exception.resource, cm.exception.current), ("stale/part-1/", q.token))

    def test_kept_lease_renews_past_its_ttl(self):
        renewed = []
        with self.leases.keep("kept/obj", "A", 1, on_renew=renewed.append) as kept:
            first = kept.lease
            time.sleep(2.6)  # 2.6 TTLs
            self.assertFalse(kept.lost, kept.lost_error)
            self.assertGreaterEqual(kept.renewals, 4)
            self.assertEqual(len(renewed), kept.renewals)
            self.assertGreater(kept.lease.expires_at, first.expires_at)
            with self.assertRaises(errors.LeaseHeldError) as cm:
                self.leases.acquire("kept/obj", "B", 1)
            self.assertEqual(cm.exception.holder, "A")
            resp = transport.fenced_request("PUT", fp.proxy_url + "/kept/obj", b"A", headers=kept.headers())
            self.assertEqual(resp.status, 200)
            token = kept.token
        self.assertEqual(self.leases.get("kept/obj").state, "released")
        # released on exit: B acquires at once, with a larger token
        self.assertGreater(self.leases.acquire("kept/obj", "B", 1).token, token)

    def test_kept_lease_reports_loss(self):
        calls = []
        kept = self.leases.keep("lost/obj", "A", 2, on_lost=lambda k, e: calls.append(e))
        with self.assertRaises(errors.LeaseLostError) as exited:
            with kept:
                admin_raise("lost/obj", kept.token + 5)  # a fence raised past the token cuts its holder off
                self.assertTrue(kept.wait_lost(3), "the loss was not noticed within 3s")
                self.assertEqual(len(calls), 1)
                self.assertIsInstance(calls[0], errors.LeaseLostError)
                self.assertNotIsInstance(calls[0], errors.LeaseExpiredError)
                self.assertEqual(calls[0].reason, "lease_lost")
                with self.assertRaises(errors.LeaseLostError):
                    kept.check()
                with self.assertRaises(errors.LeaseLostError):
                    kept.headers()
        self.assertIs(exited.exception, calls[0])
        # another holder may acquire at once, above the raised fence
        b = self.leases.acquire("lost/obj", "B", 5)
        self.assertGreater(b.token, kept.lease.token + 5)

    def test_bearer_not_sent_to_the_proxy_listener(self):
        n = len(backend.requests)
        wrong = fenceproxy.LeaseClient(fp.proxy_url, bearer=LEASE_TOKEN)
        with self.assertRaises(errors.NotControlListenerError) as cm:
            wrong.acquire("bearer/obj", "A", 10)
        self.assertIn("no credential was sent", str(cm.exception))
        seen = backend.requests[n:]
        self.assertEqual([(r.method, r.path) for r in seen], [("GET", "/healthz")])
        for r in seen:
            self.assertNotIn("authorization", {k.lower() for k in r.headers}, "the bearer reached the backend")
        # the right listener, with no bearer and with a wrong one
        with self.assertRaises(errors.ForbiddenError) as cm:
            fenceproxy.LeaseClient(fp.control_url).acquire("bearer/obj", "A", 10)
        self.assertEqual((cm.exception.status, cm.exception.reason), (401, "unauthorized"))
        with self.assertRaises(errors.ForbiddenError):
            fenceproxy.LeaseClient(fp.control_url, bearer="wrong").acquire("bearer/obj", "A", 10)

    def test_bearer_not_sent_through_a_redirect(self):
        redirect = harness.FakeServer(lambda m, p, h, b: (307, {"Location": fp.control_url + p}, b""))
        try:
            with self.assertRaises(errors.NotControlListenerError):
                fenceproxy.LeaseClient(redirect.url, bearer=LEASE_TOKEN).acquire("redir/obj", "A", 10)
            self.assertEqual([(r.method, r.path) for r in redirect.requests], [("GET", "/healthz")])
            self.assertNotIn("authorization", {k.lower() for k in redirect.requests[0].headers})
        finally:
            redirect.stop()


class TestKeptLeaseExpiry(unittest.TestCase):
    """A control listener that stops answering renews (503): the kept lease
    is reported lost once its TTL has passed since the last acknowledged renew."""

    def test_expiry_is_reported(self):
        lease = {"name": "x/obj", "holder": "A", "token": "9", "state": "held", "ttl": "1s",
                 "acquired_at": "2026-12-05T13:54:13.481521379Z", "renewed_at": "2026-12-05T13:54:13.481521379Z",
                 "expires_at": "2026-12-05T13:54:14.481521379Z"}
        ctl = {"Fenceproxy-Listener": "control"}

        def handler(method, path, headers, body):
            if path == "/healthz":
                return 200, ctl, b'{"status":"ok"}'
            if method == "POST":
                return 201, dict(ctl, **{"X-Fencing-Token-Signature": "c2ln"}), json.dumps(lease).encode()
            return 503, dict(ctl, **{"Retry-After": "1", "Content-Type": "application/problem+json"}), \
                b'{"title":"Lease store unavailable","status":503,"reason":"unavailable"}'

        srv = harness.FakeServer(handler)
        try:
            lost = threading.Event()
            kept = fenceproxy.LeaseClient(srv.url, bearer="b").keep("x/obj", "A", 1, on_lost=lambda k, e: lost.set())
            t0 = time.monotonic()
            with self.assertRaises(errors.LeaseExpiredError):
                with kept:
                    self.assertEqual((kept.token, kept.token_signature), (9, "c2ln"))
                    self.assertTrue(lost.wait(3))
                    waited = time.monotonic() - t0
                    self.assertGreaterEqual(waited, 0.9)
                    self.assertLess(waited, 2.0)
                    self.assertIsInstance(kept.last_error, errors.UnavailableError)
                    self.assertEqual(kept.last_error.retry_after, 1.0)
                    self.assertIsInstance(kept.lost_error, errors.LeaseExpiredError)
            renews = [r for r in srv.requests if r.method == "PUT"]
            self.assertGreaterEqual(len(renews), 2, "failed renews are retried")
            self.assertEqual(json.loads(renews[0].body), {"holder": "A", "token": "9"})
            self.assertEqual(renews[0].headers.get("Authorization"), "Bearer b")
            self.assertFalse([r for r in srv.requests if r.method == "DELETE"], "a lost lease is not released")
        finally:
            srv.stop()


if __name__ == "__main__":
    unittest.main()
