"""Send a fencing token with every boto3/botocore S3 call, for fenceproxy.

    import boto3
    from botocore.config import Config
    from fenceproxy_token import add_fencing_token

    s3 = boto3.client("s3", endpoint_url="http://s3.internal:8080",
                      config=Config(signature_version="s3v4", s3={"addressing_style": "path"}))
    token = add_fencing_token(s3)   # a holder of the token, changed as leases change
    token.set(42)
    s3.put_object(Bucket="reports", Key="jobs/a", Body=b"...")

The header is added before botocore signs the request, so the worker's own
SigV4 signature covers it: it reaches the store unchanged (FENCEPROXY_S3=pass),
or the proxy verifies it with the worker's proxy key and signs for the store
itself (FENCEPROXY_S3=resign, gateway mode).
A presigned URL (generate_presigned_url) carries the token in its query
instead, covered by the URL's signature, so the uploader that receives the URL
needs to add no header:

    token.set(42)
    url = s3.generate_presigned_url("put_object", Params={"Bucket": "reports", "Key": "jobs/a"})
    # http://s3.internal:8080/reports/jobs/a?X-Fencing-Token=42&X-Amz-Algorithm=...

signature_version="s3v4" matters there: with an endpoint_url botocore presigns
with SigV2 by default, whose signature does not cover the token in the query,
and stores such as versitygw refuse SigV2.

A refusal is a botocore ClientError whose error Code is the proxy's
(StaleFencingToken, MissingFencingToken, ...), with the Fencing-Current-Token
header in its response metadata.

This file stands alone, for workers that copy one file (server/TestS3Boto3
runs it). The Python client in python/ (pip install ./python) has the same
hook as fenceproxy.boto3.add_fencing_token, with the token's signature for
signed-token mode, a kept lease as the token's source, and typed refusals
(fenceproxy.boto3.classify_client_error).
"""

import threading
from urllib.parse import parse_qsl, urlencode, urlsplit, urlunsplit

HEADER = "X-Fencing-Token"


class FencingToken:
    """The token to send: set() it when a lease is acquired; None sends none."""

    def __init__(self):
        self._lock = threading.Lock()
        self._value = None

    def set(self, value):
        if value is not None and (not isinstance(value, int) or value < 0):
            raise ValueError("a fencing token is an integer >= 0")
        with self._lock:
            self._value = value

    def get(self):
        with self._lock:
            return self._value


def add_fencing_token(client, token=None):
    """Register a before-sign hook on client (a boto3 S3 client) that sends
    token's value as X-Fencing-Token; returns the FencingToken."""
    token = token or FencingToken()

    def _before_sign(request, **_):
        value = token.get()
        if value is None:
            return
        if request.context.get("is_presign_request"):
            # botocore's query signer signs every query parameter of the URL
            # and every header; a header would bind the uploader to send it.
            url = urlsplit(request.url)
            query = [(k, v) for k, v in parse_qsl(url.query, keep_blank_values=True) if k.lower() != HEADER.lower()]
            query.append((HEADER, str(value)))
            request.url = urlunsplit(url._replace(query=urlencode(query)))
            return
        request.headers[HEADER] = str(value)

    client.meta.events.register("before-sign.s3", _before_sign)
    return token
