"""The boto3 hook against a real fenceproxy in S3 mode: the product's own
``fenceproxy demo`` (S3 pass mode in front of an in-memory S3 store with the
bucket "demo"), once without and once with signed tokens."""

import base64
import importlib.util
import os
import unittest
from urllib.parse import parse_qs, urlsplit

try:
    from . import harness
except ImportError:  # run from inside tests/
    import harness  # type: ignore[no-redef]

import fenceproxy
from fenceproxy import errors, transport
from fenceproxy.boto3 import FencingToken, add_fencing_token, classify_client_error, translate_client_errors, \
    using_token

ADMIN_TOKEN = "admin-secret-for-tests"
demo = signed = None


def setUpModule():
    global demo, signed
    os.environ.setdefault("AWS_CONFIG_FILE", os.devnull)
    os.environ.setdefault("AWS_SHARED_CREDENTIALS_FILE", os.devnull)
    t = unittest.TestCase()
    harness.need_boto3(t)
    demo = harness.Fenceproxy(t, "demo", {"FENCEPROXY_ADMIN_TOKEN": ADMIN_TOKEN})
    try:
        key = base64.b64encode(os.urandom(32)).decode()
        signed = harness.Fenceproxy(t, "demo", {"FENCEPROXY_ADMIN_TOKEN": ADMIN_TOKEN, "FENCEPROXY_TOKEN_KEY": key})
    except BaseException:
        demo.stop()
        raise


def tearDownModule():
    for p in (demo, signed):
        if p is not None:
            p.stop()


def s3_client(endpoint):
    import boto3
    from botocore.config import Config
    return boto3.client("s3", endpoint_url=endpoint, region_name="us-east-1", aws_access_key_id="demo",
                        aws_secret_access_key="demo",
                        config=Config(signature_version="s3v4", s3={"addressing_style": "path"},
                                      retries={"max_attempts": 1}))


def sent_headers(client):
    """The headers of each request client sends, as signed."""
    seen = []
    client.meta.events.register("before-send.s3", lambda request, **_: seen.append(dict(request.headers.items())))
    return seen


def header(h, name):
    for k, v in h.items():
        if k.lower() == name.lower():
            return v.decode() if isinstance(v, bytes) else v
    return None


class TestBoto3Hook(unittest.TestCase):
    def setUp(self):
        from botocore.exceptions import ClientError
        self.ClientError = ClientError
        self.leases = fenceproxy.LeaseClient(demo.control_url)

    def test_put_carries_the_token_and_a_stale_put_is_classified(self):
        s3a, s3b = s3_client(demo.proxy_url), s3_client(demo.proxy_url)
        tok_a, tok_b = add_fencing_token(s3a), add_fencing_token(s3b)
        seen = sent_headers(s3a)
        a = self.leases.acquire("demo/jobs/out.txt", "A", 10)
        tok_a.set(a.token)
        s3a.put_object(Bucket="demo", Key="jobs/out.txt", Body=b"from A")
        self.assertEqual(header(seen[-1], "X-Fencing-Token"), str(a.token))
        # the header is signed (SigV4 covers it, so the store sees it unchanged)
        self.assertIn("x-fencing-token", header(seen[-1], "Authorization"))
        fence = transport.request("GET", demo.control_url + "/v1/fences/demo/jobs/out.txt")
        self.assertIn(b'"token":"%d"' % a.token, fence.body)
        # B takes over and writes; A's late write is refused
        self.leases.release("demo/jobs/out.txt", "A", a.token)
        b = self.leases.acquire("demo/jobs/out.txt", "B", 10)
        tok_b.set_lease(b)
        s3b.put_object(Bucket="demo", Key="jobs/out.txt", Body=b"from B")
        with self.assertRaises(self.ClientError) as cm:
            s3a.put_object(Bucket="demo", Key="jobs/out.txt", Body=b"late from A")
        self.assertEqual(cm.exception.response["Error"]["Code"], "StaleFencingToken")
        e = classify_client_error(cm.exception)
        self.assertIsInstance(e, errors.StaleTokenError)
        self.assertEqual((e.resource, e.token, e.current, e.status, e.code),
                         ("demo/jobs/out.txt", a.token, b.token, 409, "StaleFencingToken"))
        with self.assertRaises(errors.StaleTokenError) as typed:
            with translate_client_errors():
                s3a.put_object(Bucket="demo", Key="jobs/out.txt", Body=b"late from A")
        self.assertIsInstance(typed.exception.__cause__, self.ClientError)
        self.assertEqual(typed.exception.current, b.token)
        body = s3b.get_object(Bucket="demo", Key="jobs/out.txt")["Body"].read()
        self.assertEqual(body, b"from B")
        # no token: 428 MissingFencingToken
        tok_a.set(None)
        with self.assertRaises(errors.TokenRequiredError):
            with translate_client_errors():
                s3a.put_object(Bucket="demo", Key="jobs/out.txt", Body=b"no token")
        self.assertIsNone(header(seen[-1], "X-Fencing-Token"))
        # the store's own errors are not the proxy's
        with self.assertRaises(self.ClientError) as cm:
            s3b.get_object(Bucket="demo", Key="jobs/none")
        self.assertIsNone(classify_client_error(cm.exception))

    def test_kept_lease_as_the_source(self):
        s3 = s3_client(demo.proxy_url)
        seen = sent_headers(s3)
        kept = self.leases.keep("demo/kept/", "A", 5)
        with self.assertRaises(errors.LeaseLostError), kept:  # leaving the block reports the loss
            self.assertIs(add_fencing_token(s3, kept), kept)
            s3.put_object(Bucket="demo", Key="kept/a", Body=b"a")
            self.assertEqual(header(seen[-1], "X-Fencing-Token"), str(kept.token))
            self.assertIsNone(header(seen[-1], "X-Fencing-Token-Signature"))  # the proxy signs nothing here
            with using_token(kept.token + 100):  # a block's own token wins
                s3.put_object(Bucket="demo", Key="kept/b", Body=b"b")
            self.assertEqual(header(seen[-1], "X-Fencing-Token"), str(kept.token + 100))
            n = len(seen)
            # the fence raised past the lease's token: lost; the hook refuses to send with it
            ctl = transport.Control(demo.control_url, bearer=ADMIN_TOKEN)
            ctl.call("PUT", "/v1/fences/demo/kept/", {"token": str(kept.lease.token + 1000)})
            self.assertTrue(kept.wait_lost(3))
            with self.assertRaises(errors.LeaseLostError):
                s3.put_object(Bucket="demo", Key="kept/c", Body=b"c")
            self.assertEqual(len(seen), n, "a request was sent with a lost lease's token")

    def test_a_second_source_replaces_the_first(self):
        # Two jobs in turn on one client: the second job's lease is what is
        # sent, although the first job's lease was released (lost to it).
        s3 = s3_client(demo.proxy_url)
        seen = sent_headers(s3)
        with self.leases.keep("demo/jobs/one/", "A", 5) as first:
            add_fencing_token(s3, first)
            s3.put_object(Bucket="demo", Key="jobs/one/a", Body=b"a")
        with self.leases.keep("demo/jobs/two/", "A", 5) as second:
            add_fencing_token(s3, second)
            s3.put_object(Bucket="demo", Key="jobs/two/a", Body=b"a")
            self.assertEqual(header(seen[-1], "X-Fencing-Token"), str(second.token))

    def test_presigned_url_carries_the_token(self):
        s3 = s3_client(demo.proxy_url)
        add_fencing_token(s3, FencingToken(42, "c2ln"))
        url = s3.generate_presigned_url("put_object", Params={"Bucket": "demo", "Key": "jobs/presigned"})
        q = parse_qs(urlsplit(url).query)
        self.assertEqual(q["X-Fencing-Token"], ["42"])
        self.assertEqual(q["X-Fencing-Token-Signature"], ["c2ln"])
        self.assertIn("X-Amz-Signature", q)
        # the example's single-file hook presigns the same token
        example = os.path.join(harness.REPO, "examples", "boto3", "fenceproxy_token.py")
        if os.path.exists(example):
            spec = importlib.util.spec_from_file_location("fenceproxy_token_example", example)
            mod = importlib.util.module_from_spec(spec)
            spec.loader.exec_module(mod)
            s3e = s3_client(demo.proxy_url)
            mod.add_fencing_token(s3e).set(42)
            q2 = parse_qs(urlsplit(s3e.generate_presigned_url(
                "put_object", Params={"Bucket": "demo", "Key": "jobs/presigned"})).query)
            self.assertEqual(q2["X-Fencing-Token"], ["42"])
        # uploaded by a client that adds no header
        url = s3.generate_presigned_url("put_object", Params={"Bucket": "demo", "Key": "jobs/presigned"})
        self.assertEqual(transport.request("PUT", url, b"by URL").status, 200)

    def test_signed_tokens(self):
        leases = fenceproxy.LeaseClient(signed.control_url)
        s3 = s3_client(signed.proxy_url)
        seen = sent_headers(s3)
        with leases.keep("demo/signed/", "A", 5) as kept:
            self.assertTrue(kept.token_signature)
            add_fencing_token(s3, kept)
            s3.put_object(Bucket="demo", Key="signed/a", Body=b"a")
            self.assertEqual(header(seen[-1], "X-Fencing-Token-Signature"), kept.token_signature)
            self.assertIn("x-fencing-token-signature", header(seen[-1], "Authorization"))
            with self.assertRaises(errors.ForbiddenError) as cm:
                with translate_client_errors(), using_token(kept.token):  # no signature
                    s3.put_object(Bucket="demo", Key="signed/b", Body=b"b")
            self.assertEqual((cm.exception.status, cm.exception.reason, cm.exception.code),
                             (403, "signature", "InvalidFencingTokenSignature"))


if __name__ == "__main__":
    unittest.main()
