"""Reads of the bucket and object configurations the gateway never keeps, answered as S3
answers them for a bucket (or object) that has none.

S3 tools read a bucket's configurations to show or compare them (``s3cmd info``, ``mc stat``,
an infrastructure tool refreshing its state) and an object's tags to copy them. Setting any of
them is ``501 NotImplemented`` (s3kv/gateway/classify.py), so none ever exists here, and a read
says so the way S3 does: ``404`` with that configuration's own error code, or, where S3 reads
back a document even for a bucket that never had one (logging, notifications, versioning,
acceleration, request payment, an object's tags), that document, empty. ACLs read back as the
canned ``private``, the only one accepted when written. Nothing is claimed that the gateway
does not do: every answer is "there is none" or what was accepted.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable

from aiohttp import web

from s3kv.errors import RequestError
from s3kv.gateway.requests import Target, validate_key
from s3kv.gateway.s3xml import HEADER, NS, OWNER_ID, OWNER_NAME, XML, configuration
from s3kv.gateway.state import GatewayState

__all__ = ["ABSENT", "EMPTY", "HANDLERS", "PRIVATE_ACL", "get_object_acl", "get_object_tagging"]

Handler = Callable[[web.Request, GatewayState, Target], Awaitable[web.StreamResponse]]

#: GET operation -> S3's 404 error code for a bucket without that configuration, and why
ABSENT: dict[str, tuple[str, str]] = {
    "GetBucketLifecycleConfiguration": (
        "NoSuchLifecycleConfiguration", "The lifecycle configuration does not exist: s3kv "
        "evicts whole segments by its capacity budget and TTL (--capacity, --ttl) instead."),
    "GetBucketPolicy": ("NoSuchBucketPolicy", "The bucket policy does not exist: access is "
                        "per credential (--credentials-file)."),
    "GetBucketCors": ("NoSuchCORSConfiguration", "The CORS configuration does not exist."),
    "GetBucketTagging": ("NoSuchTagSet", "The TagSet does not exist: s3kv keeps no tags."),
    "GetBucketEncryption": (
        "ServerSideEncryptionConfigurationNotFoundError", "The server side encryption "
        "configuration was not found: s3kv stores blocks unencrypted (encrypt at the "
        "backend)."),
    "GetBucketWebsite": ("NoSuchWebsiteConfiguration", "The specified bucket does not have a "
                         "website configuration."),
    "GetBucketReplication": ("ReplicationConfigurationNotFoundError", "The replication "
                             "configuration was not found."),
    "GetObjectLockConfiguration": ("ObjectLockConfigurationNotFoundError", "Object Lock "
                                   "configuration does not exist for this bucket."),
    "GetPublicAccessBlock": ("NoSuchPublicAccessBlockConfiguration", "The public access block "
                             "configuration was not found."),
    "GetBucketOwnershipControls": ("OwnershipControlsNotFoundError", "The bucket ownership "
                                   "controls were not found."),
    "GetBucketPolicyStatus": ("NoSuchBucketPolicy", "The bucket policy does not exist, so the "
                              "bucket has no policy status."),
}

#: GET operation -> the document S3 reads back for a bucket that never had the configuration
EMPTY: dict[str, bytes] = {
    "GetBucketVersioning": configuration("VersioningConfiguration"),  # no Status: never enabled
    "GetBucketLogging": configuration("BucketLoggingStatus"),
    "GetBucketNotificationConfiguration": configuration("NotificationConfiguration"),
    "GetBucketAccelerateConfiguration": configuration("AccelerateConfiguration"),
    "GetBucketRequestPayment": configuration("RequestPaymentConfiguration",
                                             Payer="BucketOwner"),
}

_NO_TAGS = configuration("Tagging", TagSet="")
_ME = f"<ID>{OWNER_ID}</ID><DisplayName>{OWNER_NAME}</DisplayName>"
#: the canned ACL ``private``, the only one the gateway accepts (access beyond the owner is
#: granted per credential, as IAM policies grant it beside an ACL)
PRIVATE_ACL = (
    f'{HEADER}<AccessControlPolicy xmlns="{NS}"><Owner>{_ME}</Owner><AccessControlList><Grant>'
    '<Grantee xmlns:xsi="http://www.w3.org/2001/XMLSchema-instance" xsi:type="CanonicalUser">'
    f'{_ME}</Grantee><Permission>FULL_CONTROL</Permission></Grant></AccessControlList>'
    '</AccessControlPolicy>').encode()


def _absent(code: str, message: str) -> Handler:
    async def handler(request: web.Request, st: GatewayState, t: Target) -> web.StreamResponse:
        st.store.ns_id(t.bucket)  # NoSuchBucket first, as S3 answers
        raise RequestError(code, message, 404)
    return handler


def _empty(document: bytes) -> Handler:
    async def handler(request: web.Request, st: GatewayState, t: Target) -> web.StreamResponse:
        st.store.ns_id(t.bucket)
        return web.Response(body=document, content_type=XML)
    return handler


#: the bucket handlers, by operation name
HANDLERS: dict[str, Handler] = {
    **{name: _absent(code, message) for name, (code, message) in ABSENT.items()},
    **{name: _empty(document) for name, document in EMPTY.items()},
    "GetBucketAcl": _empty(PRIVATE_ACL),
}


async def get_object_tagging(request: web.Request, st: GatewayState,
                             t: Target) -> web.StreamResponse:
    """GetObjectTagging: an object's tags are always none (tags are refused when written)."""
    return _of_object(st, t, _NO_TAGS)


async def get_object_acl(request: web.Request, st: GatewayState,
                         t: Target) -> web.StreamResponse:
    """GetObjectAcl: always ``private`` (any other ACL is refused when written)."""
    return _of_object(st, t, PRIVATE_ACL)


def _of_object(st: GatewayState, t: Target, document: bytes) -> web.StreamResponse:
    if st.store.head(t.bucket, validate_key(t.key)) is None:
        raise RequestError("NoSuchKey", "The specified key does not exist.", 404)
    return web.Response(body=document, content_type=XML)
