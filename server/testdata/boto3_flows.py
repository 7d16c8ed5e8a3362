"""A worker's S3 flows through fenceproxy with boto3: CopyObject, both
addressing styles, a presigned PUT, a sync with deletions, a bucket per job.

Run by TestS3Boto3Flows with ENDPOINT (the proxy, http://localhost:PORT),
AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY (the backend's) and PYTHONPATH
holding examples/boto3; the buckets copies, styles, uploads and site exist.
In gateway mode (TestS3GatewayBoto3) ENDPOINT is https://localhost:PORT,
AWS_CA_BUNDLE trusts the proxy (the presigned uploads use it too), the keys
are the worker's proxy key; a SigV2 presigned URL gets 400 InvalidRequest
from the gateway as from versitygw.
Prints one line per step; exits non-zero on the first surprise.
"""

import hashlib
import os
import socket
import ssl
import sys
import urllib.error
import urllib.request
from urllib.parse import parse_qs, urlsplit

import boto3
from botocore.config import Config
from botocore.exceptions import ClientError

from fenceproxy_token import add_fencing_token

# Virtual-hosted style names {bucket}.localhost: resolve them to the loopback
# address, as a wildcard DNS record would.
_getaddrinfo = socket.getaddrinfo


def _loopback(host, *args, **kwargs):
    if isinstance(host, str) and host.endswith(".localhost"):
        host = "127.0.0.1"
    return _getaddrinfo(host, *args, **kwargs)


socket.getaddrinfo = _loopback


def client(style):
    c = boto3.client(
        "s3",
        endpoint_url=os.environ["ENDPOINT"],
        region_name="us-east-1",
        config=Config(s3={"addressing_style": style}, retries={"max_attempts": 1}),
    )
    return c, add_fencing_token(c)


s3, token = client("path")


def fail(msg):
    sys.exit(msg)


def refused(what, call, code="StaleFencingToken"):
    try:
        call()
    except ClientError as e:
        got = e.response["Error"]["Code"]
        headers = e.response["ResponseMetadata"]["HTTPHeaders"]
        if got != code or "fencing-refused" not in headers:
            fail(f"{what}: want the proxy's {code}, got {got} {headers}: {e}")
        print(f"{what}: refused {got} current={headers.get('fencing-current-token')}")
        return
    fail(f"{what}: want {code}, the call succeeded")


def contents(bucket):
    return {
        o["Key"]: s3.get_object(Bucket=bucket, Key=o["Key"])["Body"].read().decode()
        for o in s3.list_objects_v2(Bucket=bucket).get("Contents", [])
    }


def expect(bucket, want, what):
    got = contents(bucket)
    if got != want:
        fail(f"{what}: {bucket} holds {got}, want {want}")
    print(f"{what}: {bucket} holds {sorted(got)}")


# CopyObject: fenced on its destination, the source only read.
token.set(1)
s3.put_object(Bucket="copies", Key="staging/a.txt", Body=b"draft from A")
token.set(42)
s3.put_object(Bucket="copies", Key="final/report.txt", Body=b"from B (42)")
s3.put_object(Bucket="copies", Key="staging/b.txt", Body=b"draft from B")
token.set(41)
refused("copy with 41 onto B's report", lambda: s3.copy_object(
    Bucket="copies", Key="final/report.txt", CopySource={"Bucket": "copies", "Key": "staging/a.txt"}))
token.set(42)
s3.copy_object(Bucket="copies", Key="final/report.txt", CopySource={"Bucket": "copies", "Key": "staging/b.txt"})
expect("copies", {"staging/a.txt": "draft from A", "staging/b.txt": "draft from B",
                  "final/report.txt": "draft from B"}, "copy with 42 applied")

# Both addressing styles name one resource: the stale write in the other
# style is refused, each way round.
vhost, vtoken = client("virtual")
vtoken.set(42)
vhost.put_object(Bucket="styles", Key="x", Body=b"from virtual-hosted 42")
token.set(41)
refused("path style with 41 after virtual-hosted 42", lambda: s3.put_object(Bucket="styles", Key="x", Body=b"late"))
token.set(43)
s3.put_object(Bucket="styles", Key="x", Body=b"from path 43")
refused("virtual-hosted with 42 after path 43", lambda: vhost.put_object(Bucket="styles", Key="x", Body=b"late"))
if vhost.get_object(Bucket="styles", Key="x")["Body"].read() != b"from path 43":
    fail("virtual-hosted read differs")
expect("styles", {"x": "from path 43"}, "one object in both styles")


# A presigned PUT: the token in the URL, the uploader sends no header.
def upload(url, body):
    req = urllib.request.Request(url, data=body, method="PUT")
    tls = ssl.create_default_context(cafile=os.environ.get("AWS_CA_BUNDLE"))
    try:
        with urllib.request.urlopen(req, context=tls if url.startswith("https:") else None) as resp:
            return resp.status, resp.read().decode()
    except urllib.error.HTTPError as e:
        return e.code, e.read().decode()


# botocore presigns with SigV2 unless told s3v4 (with an endpoint_url); a
# SigV2 signature does not cover the query's token, and versitygw refuses it
# (400), as does the gateway, which verifies SigV4 only.
token.set(42)
url = s3.generate_presigned_url("put_object", Params={"Bucket": "uploads", "Key": "in/file.bin"}, ExpiresIn=900)
got, answer = upload(url, b"sigv2")
if got != 400 or "<Code>InvalidRequest</Code>" not in answer:
    fail(f"presigned PUT signed SigV2: {got} {answer}")
print(f"presigned PUT signed SigV2 (botocore's default): {got} InvalidRequest")
s3v4 = boto3.client("s3", endpoint_url=os.environ["ENDPOINT"], region_name="us-east-1",
                    config=Config(s3={"addressing_style": "path"}, signature_version="s3v4"))
add_fencing_token(s3v4, token)
for tok, body, status in ((42, b"from 42", 200), (41, b"late from 41", 409)):
    token.set(tok)
    url = s3v4.generate_presigned_url("put_object", Params={"Bucket": "uploads", "Key": "in/file.bin"}, ExpiresIn=900)
    q = parse_qs(urlsplit(url).query)
    if q.get("X-Fencing-Token") != [str(tok)] or "x-fencing-token" in q["X-Amz-SignedHeaders"][0]:
        fail(f"presigned URL {url}: want the token in the query and not a signed header")
    got, answer = upload(url, body)
    if got != status or (status == 409 and "<Code>StaleFencingToken</Code>" not in answer):
        fail(f"presigned PUT with {tok}: {got} {answer}")
    print(f"presigned PUT with {tok}: {got} (signed headers {q['X-Amz-SignedHeaders'][0]})")
expect("uploads", {"in/file.bin": "from 42"}, "presigned")


# A sync with deletions, as a sync tool does it: list, put what changed
# (the ETag of a single-part upload is its MD5), then one DeleteObjects for
# the objects that are gone; a failed call does not stop it.
def sync(bucket, files):
    remote = {o["Key"]: o["ETag"].strip('"') for o in s3.list_objects_v2(Bucket=bucket).get("Contents", [])}
    put, deleted, errors = [], [], []
    for key in sorted(files):
        if remote.get(key) == hashlib.md5(files[key].encode()).hexdigest():
            continue
        try:
            s3.put_object(Bucket=bucket, Key=key, Body=files[key].encode())
            put.append(key)
        except ClientError as e:
            errors.append(e.response["Error"]["Code"])
    gone = sorted(set(remote) - set(files))
    if gone:
        try:
            s3.delete_objects(Bucket=bucket, Delete={"Objects": [{"Key": k} for k in gone]})
            deleted = gone
        except ClientError as e:
            errors.append(e.response["Error"]["Code"])
    print(f"sync with {token.get()}: put {put} deleted {deleted} errors {errors}")
    return put, deleted, errors


v1 = {"index.html": "v1 index", "a.css": "v1 css", "old.js": "v1 old", "logo.png": "logo"}
v2 = {"index.html": "v2 index", "a.css": "v1 css", "new.js": "v2 new", "logo.png": "logo"}
token.set(41)
if sync("site", v1) != (sorted(v1), [], []):
    fail("A's first sync")
token.set(42)
if sync("site", v2) != (["index.html", "new.js"], ["old.js"], []):
    fail("B's sync")
expect("site", v2, "after B's sync")
token.set(41)
if sync("site", v1) != ([], [], ["StaleFencingToken"] * 3):
    fail("A's stale sync: want index.html, old.js and the batch refused")
expect("site", v2, "stale sync changed nothing")

# A bucket created before each of two jobs with unrelated token sequences.
for tok, key in ((100, "job1/out.txt"), (5, "job2/out.txt")):
    token.set(tok)
    try:
        s3.create_bucket(Bucket="nightly")
        print(f"create bucket with {tok}: created")
    except ClientError as e:
        if "fencing-refused" in e.response["ResponseMetadata"]["HTTPHeaders"]:
            fail(f"create bucket with {tok}: refused by the proxy: {e}")
        if e.response["Error"]["Code"] != "BucketAlreadyOwnedByYou":
            fail(f"create bucket with {tok}: {e}")
        print(f"create bucket with {tok}: the store's BucketAlreadyOwnedByYou")
    s3.put_object(Bucket="nightly", Key=key, Body=b"from job")
expect("nightly", {"job1/out.txt": "from job", "job2/out.txt": "from job"}, "both jobs wrote")
print("all flows done")
