"""S3 bucket operations; a bucket is a store namespace.

The request has been classified (s3kv/gateway/classify.py) before it reaches
:func:`dispatch`: ``request[OP]`` names an implemented bucket operation.
"""

from __future__ import annotations

import ipaddress
from collections.abc import Awaitable, Callable

from aiohttp import web

from s3kv.errors import BackendError, Backpressure, RequestError
from s3kv.gateway.bodies import read_small
from s3kv.gateway.classify import require_null_version
from s3kv.gateway.multipart_listing import list_uploads_handler
from s3kv.gateway.reqkeys import OP
from s3kv.gateway.requests import Target, validate_key
from s3kv.gateway.s3_configs import HANDLERS as CONFIG_HANDLERS
from s3kv.gateway.s3_listing import (
    list_buckets,
    list_object_versions_handler,
    list_objects_v1_handler,
    list_objects_v2_handler,
)
from s3kv.gateway.s3_objects import check_demands
from s3kv.gateway.s3xml import (
    XML,
    DeleteError,
    ObjectVersion,
    delete_result,
    location_constraint,
)
from s3kv.gateway.s3xml_parse import parse_create_bucket_configuration, parse_delete
from s3kv.gateway.state import GatewayState
from s3kv.gateway.translate import to_request_error
from s3kv.gateway.uploads import uploads_of
from s3kv.store.codecs import HEADER_CODEC

__all__ = ["dispatch", "list_buckets"]

RESERVED = {"healthz", "readyz", "metrics"}
#: what S3's bucket naming rules reserve: punycode labels, its own prefixes, and the suffixes of
#: access point, Object Lambda and Multi-Region Access Point aliases, directory and table buckets
S3_RESERVED_PREFIXES = ("xn--", "sthree-", "amzn-s3-demo-")
S3_RESERVED_SUFFIXES = ("-s3alias", "--ol-s3", ".mrap", "--x-s3", "--table-s3")
BucketHandler = Callable[[web.Request, GatewayState, Target], Awaitable[web.StreamResponse]]


async def _location(request: web.Request, st: GatewayState, t: Target) -> web.StreamResponse:
    st.store.ns_id(t.bucket)
    return web.Response(body=location_constraint(None), content_type=XML)


async def _head(request: web.Request, st: GatewayState, t: Target) -> web.StreamResponse:
    st.store.ns_id(t.bucket)
    return web.Response(headers={"x-amz-bucket-region": "us-east-1"})


async def _delete(request: web.Request, st: GatewayState, t: Target) -> web.StreamResponse:
    await st.store.delete_namespace(t.bucket)  # uploads in progress do not keep it (S3's rule)
    uploads_of(request).drop_bucket(t.bucket, st)
    return web.Response(status=204)


async def dispatch(request: web.Request, st: GatewayState, t: Target) -> web.StreamResponse:
    handler = _HANDLERS.get(request.get(OP, ""))
    if handler is None:  # classify() lets only the operations below through
        raise RuntimeError(f"bucket operation {request.get(OP)!r} has no handler")
    return await handler(request, st, t)


def is_ip_address(name: str) -> bool:
    try:
        ipaddress.ip_address(name)
    except ValueError:
        return False
    return True


async def create_bucket(request: web.Request, st: GatewayState, t: Target) -> web.StreamResponse:
    body = await read_small(request, st)
    if body.strip():
        parse_create_bucket_configuration(body)
    if is_ip_address(t.bucket):
        raise RequestError("InvalidBucketName", f"{t.bucket!r} is formatted as an IP address; "
                           "bucket names must not be.")
    if t.bucket.startswith(S3_RESERVED_PREFIXES) or t.bucket.endswith(S3_RESERVED_SUFFIXES):
        raise RequestError("InvalidBucketName", f"{t.bucket!r} has a prefix or suffix S3's "
                           "bucket naming rules reserve.")
    if t.bucket in RESERVED:
        raise RequestError("InvalidBucketName", f"{t.bucket!r} is reserved by the gateway's "
                           "operations endpoints.")
    await st.store.create_namespace(t.bucket, request.headers.get(HEADER_CODEC))
    return web.Response(headers={"Location": f"/{t.bucket}"})


async def delete_objects(request: web.Request, st: GatewayState, t: Target) -> web.StreamResponse:
    st.store.ns_id(t.bucket)
    req = parse_delete(await read_small(request, st))
    deleted: list[ObjectVersion] = []
    errors: list[DeleteError] = []
    for obj, demands in zip(req.objects, req.demands, strict=True):
        try:
            # a version other than the one every object has is refused, never the object
            require_null_version(obj.version_id)
            key = validate_key(obj.key)
            if demands.asked():  # checked and deleted under the key's lock, as DeleteObject
                async with st.key_locks.hold(t.bucket, key):
                    check_demands(st, t.bucket, key, demands)
                    await st.store.delete(t.bucket, key)
            else:
                await st.store.delete(t.bucket, key)
            deleted.append(obj)
        except (RequestError, Backpressure, BackendError) as exc:  # 503s: the object stays
            err = to_request_error(exc)
            errors.append(DeleteError(obj, err.code, str(err)))
    return web.Response(body=delete_result(deleted, errors, req.quiet), content_type=XML)


_HANDLERS: dict[str, BucketHandler] = {
    "GetBucketLocation": _location,
    "ListMultipartUploads": list_uploads_handler,
    "DeleteObjects": delete_objects,
    "ListObjects": list_objects_v1_handler,
    "ListObjectsV2": list_objects_v2_handler,
    "ListObjectVersions": list_object_versions_handler,
    "CreateBucket": create_bucket,
    "HeadBucket": _head,
    "DeleteBucket": _delete,
    **CONFIG_HANDLERS,  # GetBucketVersioning and the configurations never kept
}
