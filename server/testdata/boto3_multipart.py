"""A multipart upload cut by a takeover, then the stale holder's abort, with boto3.

Run by TestS3Boto3Multipart with ENDPOINT (the proxy), BUCKET, AWS_ACCESS_KEY_ID
and AWS_SECRET_ACCESS_KEY (the backend's) and PYTHONPATH holding
examples/boto3. Prints one line per step; exits non-zero on the first
surprise.
"""

import os
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
bucket, key = os.environ["BUCKET"], "shard-5/out.bin"


def refused(call, code):
    try:
        call()
    except ClientError as e:
        got = e.response["Error"]["Code"]
        if got != code:
            sys.exit(f"want {code}, got {got}: {e}")
        current = e.response["ResponseMetadata"]["HTTPHeaders"].get("fencing-current-token")
        print(f"refused {got} current={current}")
        return
    sys.exit(f"want {code}, the call succeeded")


def uploads():
    return [u["UploadId"] for u in s3.list_multipart_uploads(Bucket=bucket).get("Uploads", [])]


token.set(41)
upload = s3.create_multipart_upload(Bucket=bucket, Key=key)["UploadId"]
part1 = s3.upload_part(Bucket=bucket, Key=key, UploadId=upload, PartNumber=1, Body=b"1" * (5 << 20))
print("41 created an upload and sent part 1")

token.set(42)
s3.put_object(Bucket=bucket, Key=key, Body=b"object of 42")
print("42 took the object over")

token.set(41)
refused(lambda: s3.upload_part(Bucket=bucket, Key=key, UploadId=upload, PartNumber=2, Body=b"tail of 41"),
        "StaleFencingToken")
refused(lambda: s3.complete_multipart_upload(
    Bucket=bucket, Key=key, UploadId=upload,
    MultipartUpload={"Parts": [{"ETag": part1["ETag"], "PartNumber": 1}]}), "StaleFencingToken")
s3.abort_multipart_upload(Bucket=bucket, Key=key, UploadId=upload)
print("41 aborted its own upload")

token.set(42)
upload42 = s3.create_multipart_upload(Bucket=bucket, Key=key)["UploadId"]
token.set(41)
refused(lambda: s3.abort_multipart_upload(Bucket=bucket, Key=key, UploadId=upload42), "StaleFencingToken")
token.set(42)
s3.abort_multipart_upload(Bucket=bucket, Key=key, UploadId=upload42)

left = uploads()
if left:
    sys.exit(f"uploads left: {left}")
print("no upload left")
body = s3.get_object(Bucket=bucket, Key=key)["Body"].read()
if body != b"object of 42":
    sys.exit(f"object holds {body[:16]!r}")
print("object holds 42's")
