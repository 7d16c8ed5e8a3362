"""The takeover and a stale DeleteObjects through fenceproxy with boto3.

Run by TestS3Boto3 (and over TLS by TestS3Boto3OverTLS) with ENDPOINT (the
proxy), AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY (the backend's) and
PYTHONPATH holding examples/boto3. In gateway mode (TestS3GatewayBoto3) the
keys are the worker's proxy key, AWS_CA_BUNDLE trusts the proxy, and
OUTSIDE_GRANT=bucket/key names an object the key is not granted: a write, a
read and a listing of it must get the proxy's 403 AccessDenied. Prints one
line per step, then the payload forms botocore sent; exits non-zero on the
first surprise.
"""

import os
import re
import sys

import boto3
from botocore.config import Config
from botocore.exceptions import ClientError

from fenceproxy_token import add_fencing_token

s3 = boto3.client(
    "s3",
    endpoint_url=os.environ["ENDPOINT"],
    region_name="us-east-1",
    config=Config(s3={"addressing_style": "path"}, retries={"max_attempts": 1}),
)
token = add_fencing_token(s3)
bucket = os.environ["BUCKET"]
forms = set()  # how botocore sent each write's payload


def _record_form(request, **_):
    if request.method not in ("PUT", "POST"):
        return
    values = [request.headers.get(k, "-") for k in ("Content-Encoding", "X-Amz-Content-SHA256", "X-Amz-Trailer")]
    values = [v.decode() if isinstance(v, bytes) else v for v in values]
    if re.fullmatch("[0-9a-f]{64}", values[1]):
        values[1] = "hex-sha256"
    forms.add(f"{request.method} {' '.join(values)}")


s3.meta.events.register("before-send.s3", _record_form)


def refused(call, code):
    try:
        call()
    except ClientError as e:
        got = e.response["Error"]["Code"]
        current = e.response["ResponseMetadata"]["HTTPHeaders"].get("fencing-current-token")
        if got != code:
            sys.exit(f"want {code}, got {got}: {e}")
        print(f"refused {got} current={current} message={e.response['Error'].get('Message')!r}")
        return
    sys.exit(f"want {code}, the call succeeded")


token.set(41)
s3.put_object(Bucket=bucket, Key="report.txt", Body=b"from A (41)")
token.set(42)
s3.put_object(Bucket=bucket, Key="report.txt", Body=b"from B (42)")
token.set(41)
refused(lambda: s3.put_object(Bucket=bucket, Key="report.txt", Body=b"late from A (41)"), "StaleFencingToken")
body = s3.get_object(Bucket=bucket, Key="report.txt")["Body"].read()
if body != b"from B (42)":
    sys.exit(f"object holds {body!r}")
print("object holds from B (42)")

token.set(None)
refused(lambda: s3.put_object(Bucket=bucket, Key="other.txt", Body=b"x"), "MissingFencingToken")

# DeleteObjects: one stale key refuses the batch, a current batch deletes all.
token.set(50)
s3.put_object(Bucket=bucket, Key="a.txt", Body=b"a")
s3.put_object(Bucket=bucket, Key="b.txt", Body=b"b")
token.set(42)
batch = {"Objects": [{"Key": "report.txt"}, {"Key": "a.txt"}, {"Key": "b.txt"}]}
refused(lambda: s3.delete_objects(Bucket=bucket, Delete=batch), "StaleFencingToken")
left = sorted(o["Key"] for o in s3.list_objects_v2(Bucket=bucket).get("Contents", []))
if left != ["a.txt", "b.txt", "report.txt"]:
    sys.exit(f"after the refused batch: {left}")
print("stale batch deleted nothing")
token.set(50)
s3.delete_objects(Bucket=bucket, Delete=batch)
left = sorted(o["Key"] for o in s3.list_objects_v2(Bucket=bucket).get("Contents", []))
if left:
    sys.exit(f"after the current batch: {left}")
print("current batch deleted all")

# Gateway mode: a key used outside its grant is refused before any fencing,
# reads included.
outside = os.environ.get("OUTSIDE_GRANT")
if outside:
    other_bucket, other_key = outside.split("/", 1)
    token.set(60)
    for what, call in (
        ("PutObject", lambda: s3.put_object(Bucket=other_bucket, Key=other_key, Body=b"outside")),
        ("GetObject", lambda: s3.get_object(Bucket=other_bucket, Key=other_key)),
        ("ListObjectsV2", lambda: s3.list_objects_v2(Bucket=other_bucket)),
    ):
        try:
            call()
        except ClientError as e:
            got, status = e.response["Error"]["Code"], e.response["ResponseMetadata"]["HTTPStatusCode"]
            if got != "AccessDenied" or status != 403:
                sys.exit(f"{what} outside the grant: want 403 AccessDenied, got {status} {got}: {e}")
            print(f"{what} of {outside} outside the grant: {status} {got}")
            continue
        sys.exit(f"{what} of {outside} outside the grant succeeded")
for form in sorted(forms):
    print(f"sent as {form}")
