"""Signs S3 requests with botocore and prints them as JSON for sigv4's tests.

Usage: botocore_sign.py ADDR ACCESS_KEY SECRET REGION
Prints a JSON list of {name, method, url, headers: [[name, value], ...], body}.
The Go test sends each request as printed and expects it to verify.
"""
import json
import sys

from botocore.auth import S3SigV4Auth, S3SigV4QueryAuth
from botocore.awsrequest import AWSRequest
from botocore.config import Config
from botocore.credentials import Credentials
from botocore.utils import percent_encode

addr, key, secret, region = sys.argv[1:5]
creds = Credentials(key, secret)


def path(bucket, obj):
    # As botocore's S3 client builds it: the key percent-encoded, "/" and "~" kept.
    return "/" + bucket + "/" + percent_encode(obj, safe="/~")


def sign(name, method, url, headers=None, body=b"", presign=False, unsigned=False, host=None):
    req = AWSRequest(method=method, url="http://" + addr + url, headers=dict(headers or {}), data=body)
    if host:
        req.headers["Host"] = host
    if unsigned:
        req.context["client_config"] = Config(s3={"payload_signing_enabled": False})
    if presign:
        S3SigV4QueryAuth(creds, "s3", region, expires=900).add_auth(req)
    else:
        S3SigV4Auth(creds, "s3", region).add_auth(req)
    p = req.prepare()
    return {
        "name": name,
        "method": p.method,
        "url": p.url,
        "headers": [[k, v.decode() if isinstance(v, bytes) else v] for k, v in p.headers.items()],
        "body": (p.body or b"").decode() if isinstance(p.body or b"", bytes) else p.body,
    }


out = [
    sign("PUT hex payload", "PUT", path("bucket", "dir/report.txt"), {"Content-Type": "text/plain", "x-amz-meta-owner": "w1"}, b"hello"),
    sign("PUT UNSIGNED-PAYLOAD", "PUT", path("bucket", "u.bin"), {"Content-MD5": "XUFAKrxLKna5cZ2REBfFkg=="}, b"hello", unsigned=True),
    sign("PUT key with space, plus, tilde, unicode", "PUT", path("bucket", "a b+c~d/\u00fc\u20ac.txt"), {}, b"x"),
    sign("PUT key with %2F", "PUT", "/bucket/dir%2Fkey", {}, b"x"),
    sign("GET ListObjectsV2 prefix with space", "GET", "/bucket?list-type=2&prefix=a%20b&delimiter=%2F"),
    sign("GET header with inner spaces", "GET", path("bucket", "k"), {"x-amz-meta-note": "a   b  c", "Range": "bytes=0-9"}),
    sign("PUT with aws-chunked headers (botocore signs the body hash itself)", "PUT", path("bucket", "s"), {
        "X-Amz-Content-SHA256": "STREAMING-AWS4-HMAC-SHA256-PAYLOAD", "Content-Encoding": "aws-chunked",
        "x-amz-decoded-content-length": "5"}, b""),
    sign("GET virtual-hosted with port", "GET", "/" + percent_encode("k e y", safe="/~"), host="bucket.s3.example.test:9000"),
    sign("DELETE with versionId", "DELETE", path("bucket", "k") + "?versionId=3%2B4"),
    sign("presigned GET", "GET", path("bucket", "pre sign/\u00fc.txt"), presign=True),
    sign("presigned PUT with x-amz-acl", "PUT", path("bucket", "p"), {"x-amz-acl": "private"}, b"", presign=True),
    sign("presigned ListObjectsV2", "GET", "/bucket?list-type=2&prefix=a%20b", presign=True),
]
json.dump(out, sys.stdout)
