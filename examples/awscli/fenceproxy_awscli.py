"""An awscli plugin that sends a fencing token with every S3 request, for fenceproxy.

The token is the value of the environment variable FENCING_TOKEN when the
request is signed: an unsigned decimal integer (digits only, no leading zero,
at most 2^63-1). Unset or empty, no token is sent (fenceproxy then refuses a
fenced write: 428, MissingFencingToken); any other value stops the command
with an error before anything is sent.

awscli v2 (~/.aws/config, with the directory holding this file):

    [default]
    s3 =
        addressing_style = path
    [plugins]
    cli_legacy_plugin_path = /opt/fenceproxy/awscli
    fenceproxy = fenceproxy_awscli

awscli v1 has no cli_legacy_plugin_path (it would import that line's value
as a plugin and fail): put the directory on PYTHONPATH instead, leave that
line out, and sign with SigV4 (v1 presigns with SigV2 otherwise):

    [default]
    s3 =
        addressing_style = path
        signature_version = s3v4
    [plugins]
    fenceproxy = fenceproxy_awscli

Then, with the endpoint of the proxy:

    FENCING_TOKEN=42 aws --endpoint-url http://s3.internal:8080 s3 cp out.txt s3://reports/jobs/a

awscli v2 given the v1 block loads no plugin and says nothing: its writes
are then refused with MissingFencingToken although FENCING_TOKEN is set.

The header is added before botocore signs the request, so the worker's own
SigV4 signature covers it: it reaches the store unchanged (FENCEPROXY_S3=pass),
or the proxy verifies it with the worker's proxy key and signs for the store
itself (FENCEPROXY_S3=resign, gateway mode).
A presigned URL (aws s3 presign) carries the token in its query instead, where
a SigV4 signature covers it too and its user needs to send no header (awscli
v1 presigns with SigV2 unless the s3 section of the config file sets
signature_version = s3v4; SigV2 does not cover the query). A refusal makes the
command fail with the proxy's S3 error code in its message, for example
"An error occurred (StaleFencingToken) when calling the PutObject operation".
"""

import os

ENV = "FENCING_TOKEN"
HEADER = "X-Fencing-Token"
MAX_TOKEN = 2**63 - 1


class FencingTokenError(ValueError):
    """FENCING_TOKEN holds no valid fencing token."""


def fencing_token(environ=os.environ):
    """The token in FENCING_TOKEN as its canonical text, or None when unset
    or empty; FencingTokenError for anything that is no token."""
    value = environ.get(ENV, "")
    if value == "":
        return None
    canonical = value.isascii() and value.isdigit() and (value == "0" or value[0] != "0")
    if not canonical or len(value) > 19 or int(value) > MAX_TOKEN:
        raise FencingTokenError(
            f"{ENV}={value!r} is no fencing token: want an unsigned decimal integer "
            f"without leading zeros, at most {MAX_TOKEN}"
        )
    return value


def _before_sign(request, signature_version=None, **_):
    token = fencing_token()
    if token is None:
        return
    if isinstance(signature_version, str) and signature_version.endswith("-query"):
        # A presigned URL: its user sends no header of ours, so the token goes
        # into the query, which the signature covers.
        sep = "&" if "?" in request.url else "?"
        request.url += f"{sep}{HEADER}={token}"
        return
    # botocore's headers append on assignment: replace, so the header is
    # never sent twice (the proxy refuses that: 400, InvalidFencingToken).
    del request.headers[HEADER]
    request.headers[HEADER] = token


def awscli_initialize(cli):
    """awscli's plugin entry point: registers the before-sign hook on the
    session's events, which every S3 client of the command inherits."""
    cli.register("before-sign.s3", _before_sign)
