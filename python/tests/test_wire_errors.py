"""Unit tests: the wire grammar, and errors parsed from answers as the proxy
and the control API write them (bodies copied from real answers)."""

import ast
import os
import unittest
from datetime import datetime, timezone

try:
    from . import harness
except ImportError:  # run from inside tests/
    import harness  # type: ignore[no-redef]

import fenceproxy
from fenceproxy import errors, wire


class TestWire(unittest.TestCase):
    def test_tokens(self):
        self.assertEqual(wire.parse_token("0"), 0)
        self.assertEqual(wire.parse_token("42"), 42)
        self.assertEqual(wire.parse_token(42), 42)
        self.assertEqual(wire.parse_token(str(wire.MAX_TOKEN)), wire.MAX_TOKEN)
        for bad in ["", "01", "-1", "+1", "1.0", " 1", "9223372036854775808", "12345678901234567890", "x", True]:
            with self.assertRaises(ValueError, msg=repr(bad)):
                wire.parse_token(bad)
        self.assertEqual(wire.format_token(7), "7")
        with self.assertRaises(ValueError):
            wire.format_token(wire.MAX_TOKEN + 1)
        with self.assertRaises(ValueError):
            wire.format_token(-1)

    def test_token_headers(self):
        self.assertEqual(wire.token_headers(None), {})
        self.assertEqual(wire.token_headers(5), {"X-Fencing-Token": "5"})
        self.assertEqual(wire.token_headers(5, "sig", "b/p/"),
                         {"X-Fencing-Token": "5", "X-Fencing-Token-Signature": "sig", "X-Fencing-Prefix": "b/p/"})

    def test_durations(self):
        for text, secs in [("10s", 10), ("1m30s", 90), ("1.5s", 1.5), ("250ms", 0.25), ("1h0m0s", 3600),
                           ("0", 0), ("2h45m0.5s", 9900.5), ("100us", 1e-4), ("3ns", 3e-9)]:
            self.assertAlmostEqual(wire.parse_duration(text), secs, msg=text)
        for bad in ["", "s", "10", "1x", "1.s.", "--1s"]:
            with self.assertRaises(ValueError, msg=bad):
                wire.parse_duration(bad)
        self.assertEqual(wire.format_duration(10), "10s")
        self.assertEqual(wire.format_duration(1.5), "1500ms")
        self.assertEqual(wire.format_duration("30s"), "30s")
        with self.assertRaises(ValueError):
            wire.format_duration(0)

    def test_times(self):
        t = wire.parse_time("2026-12-05T13:54:23.481521379Z")
        self.assertEqual(t, datetime(2026, 12, 5, 13, 54, 23, 481521, tzinfo=timezone.utc))
        t = wire.parse_time("2026-12-05T14:54:23+01:00")
        self.assertEqual(t, datetime(2026, 12, 5, 13, 54, 23, tzinfo=timezone.utc))
        self.assertIsNone(wire.parse_time(None))
        with self.assertRaises(ValueError):
            wire.parse_time("yesterday")

    def test_escape_name(self):
        # Go's url.PathEscape per segment: ";", ",", "?", " " escaped; "$&+=:@" kept.
        self.assertEqual(wire.escape_name("bkt/a b;c,d?e/$&+=:@/"), "bkt/a%20b%3Bc%2Cd%3Fe/$&+=:@/")
        self.assertEqual(wire.escape_name("demo/r\u00e9sum\u00e9"), "demo/r%C3%A9sum%C3%A9")

    def test_sources_parse_as_python_3_9(self):
        # requires-python is >=3.9: no grammar of later versions (match, except*, ...).
        pkg = os.path.dirname(fenceproxy.__file__)
        for fn in sorted(os.listdir(pkg)):
            if fn.endswith(".py"):
                with open(os.path.join(pkg, fn), encoding="utf-8") as f:
                    ast.parse(f.read(), filename=fn, feature_version=(3, 9))


PROBLEM = "application/problem+json"


class TestErrors(unittest.TestCase):
    def test_stale_problem(self):
        body = (b'{"type":"about:blank","title":"Stale fencing token","status":409,"detail":"stale fencing token 0 '
                b'for resource \\"a/b\\": current maximum is 1","reason":"stale","resource":"a/b","token":"0",'
                b'"current_token":"1"}\n')
        e = errors.error_from_response(409, {"Content-Type": PROBLEM, "Fencing-Refused": "stale",
                                             "Fencing-Current-Token": "1", "Fencing-Resource": "a/b"}, body)
        self.assertIsInstance(e, errors.StaleTokenError)
        self.assertIsInstance(e, errors.RefusedError)
        self.assertEqual((e.resource, e.token, e.current, e.status, e.reason), ("a/b", 0, 1, 409, "stale"))
        self.assertEqual(e.code, "StaleFencingToken")
        self.assertEqual(e.listener, "proxy")
        self.assertIn('stale fencing token 0 on "a/b"', str(e))

    def test_stale_s3_xml(self):
        body = (b'<?xml version="1.0" encoding="UTF-8"?><Error><Code>StaleFencingToken</Code><Message>stale fencing '
                b'token 41 for resource &#34;demo/jobs/out.txt&#34;: current maximum is 42</Message>'
                b'<Resource>/demo/jobs/out.txt</Resource><RequestId>3C27E9FF278EA852</RequestId></Error>')
        h = {"Content-Type": "application/xml", "Fencing-Refused": "stale", "Fencing-Current-Token": "42",
             "Fencing-Resource": "demo/jobs/out%20x.txt"}
        e = errors.error_from_response(409, h, body)
        self.assertIsInstance(e, errors.StaleTokenError)
        # the resource from the header, percent-decoded; the token from the message
        self.assertEqual((e.resource, e.token, e.current, e.code), ("demo/jobs/out x.txt", 41, 42, "StaleFencingToken"))
        # the request's own token wins
        self.assertEqual(errors.error_from_response(409, h, body, token=40).token, 40)
        # headers alone
        e = errors.error_from_response(409, h, b"")
        self.assertEqual((e.resource, e.token, e.current), ("demo/jobs/out x.txt", None, 42))

    def test_proxy_reasons(self):
        cases = [
            (428, "missing", errors.TokenRequiredError, "MissingFencingToken"),
            (403, "signature", errors.ForbiddenError, "InvalidFencingTokenSignature"),
            (403, "jump", errors.ForbiddenError, "FencingTokenTooFarAhead"),
            (503, "overloaded", errors.OverloadedError, "SlowDown"),
            (503, "shard_unavailable", errors.ShardUnavailableError, "ServiceUnavailable"),
            (503, "drain_timeout", errors.UnavailableError, "FencingDrainTimeout"),
            (503, "store_error", errors.UnavailableError, "ServiceUnavailable"),
            (400, "malformed", errors.RefusedError, "InvalidFencingToken"),
        ]
        for status, reason, cls, code in cases:
            body = ('{"title":"t","status":%d,"detail":"d","reason":"%s"}' % (status, reason)).encode()
            e = errors.error_from_response(status, {"Content-Type": PROBLEM, "Fencing-Refused": reason,
                                                    "Retry-After": "3"}, body)
            self.assertIs(type(e), cls, reason)
            self.assertEqual((e.reason, e.code, e.detail, e.retry_after), (reason, code, "d", 3.0))
        self.assertTrue(issubclass(errors.OverloadedError, errors.UnavailableError))

    def test_not_refusals(self):
        # the backend's own 409, the proxy's 502 (no Fencing-Refused), a 200
        self.assertIsNone(errors.error_from_response(409, {"Content-Type": "text/plain"}, b"conflict"))
        self.assertIsNone(errors.error_from_response(502, {"Content-Type": PROBLEM}, b'{"status":502}'))
        self.assertIsNone(errors.error_from_response(200, {"Fenceproxy-Listener": "control"}, b"{}"))

    def test_control_problems(self):
        held = (b'{"type":"about:blank","title":"Lease held","status":409,"detail":"lease is held","reason":'
                b'"lease_held","name":"a/b","holder":"A","expires_at":"2026-12-05T13:54:23.481521379Z",'
                b'"grace_ends":"2026-12-05T13:54:30.148188045Z"}')
        e = errors.error_from_response(409, {"Fenceproxy-Listener": "control", "Content-Type": PROBLEM}, held)
        self.assertIsInstance(e, errors.LeaseHeldError)
        self.assertEqual((e.name, e.holder, e.listener), ("a/b", "A", "control"))
        self.assertEqual(e.grace_ends, datetime(2026, 12, 5, 13, 54, 30, 148188, tzinfo=timezone.utc))
        no_shard = (b'{"title":"No shard to claim","status":409,"reason":"no_shard","share":2,"held":0,'
                    b'"retry_at":"2026-12-05T13:54:30Z"}')
        e = errors.error_from_response(409, {"Fenceproxy-Listener": "control"}, no_shard)
        self.assertIsInstance(e, errors.NoShardError)
        self.assertEqual((e.share, e.held, e.all_done, e.at_share), (2, 0, False, False))
        self.assertIsNotNone(e.retry_at)
        for status, reason, cls in [(409, "lease_lost", errors.LeaseLostError), (404, "not_found", errors.NotFoundError),
                                    (401, "unauthorized", errors.ForbiddenError),
                                    (403, "admin_disabled", errors.ForbiddenError),
                                    (409, "tokens_exhausted", errors.TokensExhaustedError),
                                    (409, "shard_done", errors.ShardDoneError), (409, "pool_busy", errors.PoolBusyError),
                                    (503, "unavailable", errors.UnavailableError),
                                    (503, "shard_unavailable", errors.ShardUnavailableError),
                                    (400, "bad_request", errors.RefusedError)]:
            body = ('{"title":"x","status":%d,"reason":"%s"}' % (status, reason)).encode()
            e = errors.error_from_response(status, {"Fenceproxy-Listener": "control"}, body)
            self.assertIs(type(e), cls, reason)
            self.assertEqual(e.status, status)

    def test_check_response_duck_typed(self):
        class RequestsLike:
            status_code = 428
            headers = {"fencing-refused": "missing", "content-type": PROBLEM}
            content = b'{"status":428,"reason":"missing","detail":"send the token"}'

        with self.assertRaises(errors.TokenRequiredError) as cm:
            errors.check_response(RequestsLike())
        self.assertEqual(cm.exception.detail, "send the token")

        class Ok:
            status = 200
            headers = {}

        self.assertIsNone(errors.check_response(Ok()))

    def test_classify_client_error_shape(self):
        # The shape of botocore's ClientError.response, without botocore.
        class FakeClientError(Exception):
            def __init__(self, response):
                super().__init__("An error occurred")
                self.response = response

        err = FakeClientError({
            "Error": {"Code": "StaleFencingToken", "Message": 'stale fencing token 41 for resource "demo/x": '
                      'current maximum is 42'},
            "ResponseMetadata": {"HTTPStatusCode": 409, "HTTPHeaders": {
                "fencing-refused": "stale", "fencing-current-token": "42", "fencing-resource": "demo/x"}},
        })
        e = errors.classify_client_error(err)
        self.assertIsInstance(e, errors.StaleTokenError)
        self.assertEqual((e.resource, e.token, e.current, e.code), ("demo/x", 41, 42, "StaleFencingToken"))
        self.assertIs(e.__cause__, err)
        # the store's own error: not the proxy's
        store = FakeClientError({"Error": {"Code": "NoSuchKey"},
                                 "ResponseMetadata": {"HTTPStatusCode": 404, "HTTPHeaders": {}}})
        self.assertIsNone(errors.classify_client_error(store))
        self.assertIsNone(errors.classify_client_error(ValueError("x")))
        with self.assertRaises(errors.StaleTokenError):
            with errors.translate_client_errors():
                raise err
        with self.assertRaises(FakeClientError):
            with errors.translate_client_errors():
                raise store


if __name__ == "__main__":
    unittest.main()
