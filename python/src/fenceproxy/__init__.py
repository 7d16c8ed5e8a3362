"""Python client of fenceproxy, the HTTP proxy that enforces fencing tokens.

- LeaseClient: acquire, renew, release and read leases on the control
  listener (``/v1/leases/{name}``); LeaseClient.keep() gives a KeptLease,
  renewed by a background thread, which reports its loss.
- Pool: claim shards of a shard pool, renew with hand-back, release, done;
  Pool.run() runs the whole loop.
- fenceproxy.boto3: the hook that puts the token (and its signature) on
  every boto3 S3 call, and the classification of botocore ClientErrors.
- fenceproxy.errors: typed errors parsed from problem+json bodies, S3
  ``<Error>`` bodies and the ``Fencing-*`` headers.
- fenceproxy.transport.fenced_request: a write through the proxy listener
  with the token, raising the typed refusal.

Tokens are Python ints (0 to 2**63-1); the wire's decimal strings are
converted both ways. Standard library only; boto3 is optional.
"""

from .errors import (
    FenceproxyError,
    ForbiddenError,
    LeaseExpiredError,
    LeaseHeldError,
    LeaseLostError,
    NoShardError,
    NotControlListenerError,
    NotFoundError,
    OverloadedError,
    PoolBusyError,
    RefusedError,
    ShardDoneError,
    ShardStoppedError,
    ShardUnavailableError,
    StaleTokenError,
    TokenRequiredError,
    TokensExhaustedError,
    UnavailableError,
    check_response,
    classify_client_error,
    error_from_response,
    translate_client_errors,
)
from .leases import KeptLease, Lease, LeaseClient
from .pool import HeldShard, Pool, PoolEvent, Shard
from .transport import fenced_request
from .wire import MAX_TOKEN, format_token, parse_token, token_headers

__version__ = "0.1.0"

__all__ = [
    "FenceproxyError", "ForbiddenError", "LeaseExpiredError", "LeaseHeldError", "LeaseLostError", "NoShardError",
    "NotControlListenerError", "NotFoundError", "OverloadedError", "PoolBusyError", "RefusedError", "ShardDoneError",
    "ShardStoppedError", "ShardUnavailableError", "StaleTokenError", "TokenRequiredError", "TokensExhaustedError",
    "UnavailableError", "check_response", "classify_client_error", "error_from_response", "translate_client_errors",
    "KeptLease", "Lease", "LeaseClient", "HeldShard", "Pool", "PoolEvent", "Shard", "fenced_request",
    "MAX_TOKEN", "format_token", "parse_token", "token_headers",
]
