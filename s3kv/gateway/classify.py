"""The S3 front's allow-list: every request is classified from method + path + query before a
handler runs, and anything the gateway does not implement is refused there, touching nothing.

:data:`OPERATIONS` is the one table of what the gateway answers: each operation with the method,
the level (service, bucket, object), the query parameters (or header) that select it and the
parameters it accepts. A request is the most specific operation whose selectors it carries; a
parameter that operation does not accept (a subresource such as ``?acl`` or ``?tagging``, or
any unknown name) is ``501 NotImplemented``, as is an operation the table marks unimplemented.
Parameters every request may carry (presigned-URL fields, boto3's ``x-id``) are in
:data:`COMMON`. :func:`check_headers` then refuses headers that ask for a guarantee the gateway
cannot give (encryption, object lock, ACL grants, storage classes, tags), never stored in plain,
and holds a request that names the bucket's expected owner to the gateway's one owner.

docs/api.md renders the same table; tests/gateway/test_allow_list.py checks it against
botocore's S3 model (every operation of the S3 API is either here or answered 501).
"""

from __future__ import annotations

import enum
import functools
from collections.abc import Mapping
from dataclasses import dataclass, field

from s3kv.errors import RequestError
from s3kv.gateway.s3xml import NULL_VERSION, OWNER_ID


class Level(enum.Enum):
    SERVICE = "service"
    BUCKET = "bucket"
    OBJECT = "object"


RESPONSE_OVERRIDES = frozenset({
    "response-content-type", "response-content-language", "response-expires",
    "response-cache-control", "response-content-disposition", "response-content-encoding"})


@dataclass(frozen=True)
class Operation:
    name: str
    method: str
    level: Level
    #: query parameters that must all be present for this operation (its subresource)
    selectors: frozenset[str] = frozenset()
    #: further query parameters it accepts
    params: frozenset[str] = frozenset()
    #: a header that selects it (CopyObject: x-amz-copy-source)
    header: str | None = None
    implemented: bool = True
    #: parameter -> the only values accepted (anything else: the error of ``_VALUE_ERRORS``)
    values: Mapping[str, frozenset[str]] = field(default_factory=dict)

    @property
    def specificity(self) -> int:
        return len(self.selectors) + (1 if self.header else 0)


def _op(name: str, method: str, level: Level, selectors: str = "", params: str = "", *,
        extra: frozenset[str] = frozenset(), header: str | None = None,
        implemented: bool = True, values: Mapping[str, frozenset[str]] | None = None
        ) -> Operation:
    return Operation(name, method, level, frozenset(selectors.split()),
                     frozenset(params.split()) | extra, header, implemented, values or {})


_S, _B, _O = Level.SERVICE, Level.BUCKET, Level.OBJECT
_NULL_VERSION = {"versionId": frozenset({NULL_VERSION})}
_LIST = "prefix delimiter max-keys encoding-type"

#: every operation the gateway answers (implemented) or names in its 501 (not implemented)
OPERATIONS: tuple[Operation, ...] = (
    _op("ListBuckets", "GET", _S, "", "max-buckets continuation-token prefix bucket-region"),
    _op("CreateBucket", "PUT", _B),
    _op("HeadBucket", "HEAD", _B),
    _op("DeleteBucket", "DELETE", _B),
    _op("GetBucketLocation", "GET", _B, "location"),
    _op("GetBucketVersioning", "GET", _B, "versioning"),
    # configurations the gateway never keeps, read as S3 reads a bucket without them, and
    # the ACL, read as the one accepted (s3kv/gateway/s3_configs.py); setting any is 501
    *(_op(name, "GET", _B, selector) for name, selector in (
        ("GetBucketLifecycleConfiguration", "lifecycle"), ("GetBucketPolicy", "policy"),
        ("GetBucketCors", "cors"), ("GetBucketTagging", "tagging"),
        ("GetBucketEncryption", "encryption"), ("GetBucketWebsite", "website"),
        ("GetBucketReplication", "replication"), ("GetObjectLockConfiguration", "object-lock"),
        ("GetPublicAccessBlock", "publicAccessBlock"), ("GetBucketLogging", "logging"),
        ("GetBucketOwnershipControls", "ownershipControls"),
        ("GetBucketPolicyStatus", "policyStatus"),
        ("GetBucketNotificationConfiguration", "notification"),
        ("GetBucketAccelerateConfiguration", "accelerate"),
        ("GetBucketRequestPayment", "requestPayment"), ("GetBucketAcl", "acl"))),
    _op("ListObjects", "GET", _B, "", f"{_LIST} marker"),
    _op("ListObjectsV2", "GET", _B, "list-type",
        f"{_LIST} continuation-token start-after fetch-owner",
        values={"list-type": frozenset({"2"}), "fetch-owner": frozenset({"true", "false"})}),
    _op("ListObjectVersions", "GET", _B, "versions", f"{_LIST} key-marker version-id-marker",
        values={"version-id-marker": frozenset({NULL_VERSION, ""})}),
    _op("DeleteObjects", "POST", _B, "delete"),
    _op("ListMultipartUploads", "GET", _B, "uploads",
        "prefix delimiter encoding-type key-marker max-uploads upload-id-marker"),
    _op("PostObject", "POST", _B, implemented=False),
    _op("PutObject", "PUT", _O),
    _op("GetObject", "GET", _O, "", "partNumber versionId", extra=RESPONSE_OVERRIDES,
        values=_NULL_VERSION),
    _op("HeadObject", "HEAD", _O, "", "partNumber versionId", extra=RESPONSE_OVERRIDES,
        values=_NULL_VERSION),
    _op("DeleteObject", "DELETE", _O, "", "versionId", values=_NULL_VERSION),
    _op("GetObjectAttributes", "GET", _O, "attributes", "versionId", values=_NULL_VERSION),
    _op("GetObjectTagging", "GET", _O, "tagging", "versionId", values=_NULL_VERSION),
    _op("GetObjectAcl", "GET", _O, "acl", "versionId", values=_NULL_VERSION),
    _op("CreateMultipartUpload", "POST", _O, "uploads"),
    _op("UploadPart", "PUT", _O, "uploadId partNumber"),
    _op("CompleteMultipartUpload", "POST", _O, "uploadId"),
    _op("AbortMultipartUpload", "DELETE", _O, "uploadId"),
    _op("ListParts", "GET", _O, "uploadId", "max-parts part-number-marker"),
    _op("CopyObject", "PUT", _O, header="x-amz-copy-source"),
    _op("UploadPartCopy", "PUT", _O, "uploadId partNumber", header="x-amz-copy-source"),
)

#: accepted on every operation: presigned-URL fields (SigV4 and SigV2) and boto3's ``x-id``
COMMON = frozenset({
    "X-Amz-Algorithm", "X-Amz-Credential", "X-Amz-Date", "X-Amz-Expires",
    "X-Amz-SignedHeaders", "X-Amz-Signature", "X-Amz-Security-Token", "X-Amz-Content-Sha256",
    "AWSAccessKeyId", "Signature", "Expires", "x-id"})

#: the S3 API's subresources (botocore's S3 model and the SigV2 signing list): named in 501s
SUBRESOURCES = frozenset({
    "abac", "accelerate", "acl", "analytics", "attributes", "cors", "defaultObjectAcl",
    "delete", "encryption", "intelligent-tiering", "inventory", "legal-hold", "lifecycle",
    "list-type", "location", "logging", "metadataConfiguration", "metadataInventoryTable",
    "metadataJournalTable", "metadataTable", "metrics", "notification", "object-lock",
    "ownershipControls", "partNumber", "policy", "policyStatus", "publicAccessBlock",
    "renameObject", "replication", "requestPayment", "restore", "retention", "select",
    "select-type", "session", "storageClass", "tagging", "torrent", "uploadId", "uploads",
    "versionId", "versioning", "versions", "website"})


def _versions_message(what: str) -> str:
    return (f"s3kv does not keep object versions: {what} may only be 'null' (the one version "
            "every object has).")


#: what a value outside ``Operation.values`` answers
_VALUE_ERRORS = {
    "versionId": ("NotImplemented", 501, _versions_message("versionId")),
    "version-id-marker": ("NotImplemented", 501, _versions_message("version-id-marker")),
    "list-type": ("InvalidArgument", 400, "list-type must be 2 (ListObjectsV2); omit it for "
                  "ListObjects."),
    "fetch-owner": ("InvalidArgument", 400, "fetch-owner must be true or false."),
}

S3_METHODS = frozenset({"GET", "HEAD", "PUT", "POST", "DELETE"})
#: the headers that select an operation (CopyObject's x-amz-copy-source)
_SELECTING_HEADERS = tuple(sorted({op.header for op in OPERATIONS if op.header is not None}))


def _not_implemented(message: str) -> RequestError:
    return RequestError("NotImplemented", message, 501)


def require_null_version(version_id: str | None, what: str = "versionId") -> None:
    """A version a request names (in a DeleteObjects entry, a copy source) must be the one
    every object has, or none: ``501`` for any other, before anything is touched."""
    if version_id is not None and version_id != NULL_VERSION:
        raise _not_implemented(_versions_message(what))


def level_of(bucket: str, key: str) -> Level:
    return Level.OBJECT if key else Level.BUCKET if bucket else Level.SERVICE


def refused_before_auth(method: str, level: Level, headers: Mapping[str, str]
                        ) -> RequestError | None:
    """The answer to a request no credential could change, given before authentication (which
    would take it for an anonymous request: 403 AccessDenied); it says nothing of the bucket.
    None for every other request.

    - PostObject, a browser form upload (``POST /B``, ``multipart/form-data``), carries its
      signature in the form, which the gateway never reads: 501.
    - A CORS preflight (``OPTIONS``, never signed): S3 answers one by the bucket's CORS rules,
      403 where it has none, and the gateway keeps none (GetBucketCors: 404, PutBucketCors:
      501); without its Origin or Access-Control-Request-Method header, 400 as S3.
    """
    if method == "POST" and level is Level.BUCKET and headers.get("Content-Type", "").lower() \
            .startswith("multipart/form-data"):
        return _not_implemented("s3kv does not implement PostObject (browser form uploads): "
                                "nothing was stored; upload with a signed PutObject.")
    if method == "OPTIONS":
        if not headers.get("Origin"):
            return RequestError("BadRequest", "Insufficient information. Origin request "
                                "header needed.")
        if not headers.get("Access-Control-Request-Method"):
            return RequestError("BadRequest", "Invalid Access-Control-Request-Method: null")
        return RequestError("AccessForbidden", "CORSResponse: CORS is not enabled for this "
                            "bucket (s3kv keeps no CORS configuration).", 403)
    return None


def hoisted(params: Mapping[str, list[str]]) -> dict[str, str]:
    """Headers a SigV2 presigned URL carries in its query (botocore's HmacV1QueryAuth moves
    ``x-amz-*``, ``Content-Type`` and ``Content-MD5`` there); none without ``AWSAccessKeyId``."""
    if "AWSAccessKeyId" not in params:
        return {}
    return {n.lower(): v[-1] for n, v in params.items()
            if (n.lower().startswith("x-amz-") and n not in COMMON)
            or n.lower() in ("content-type", "content-md5")}


def classify(method: str, level: Level, params: Mapping[str, list[str]],
             headers: Mapping[str, str]) -> Operation:
    """The operation of a request (``params``: decoded query names -> values); RequestError
    for anything not in the allow-list: 501 NotImplemented, 405 MethodNotAllowed, or 400."""
    if params:
        repeated = sorted(n for n, v in params.items() if len(v) > 1)
        if repeated:
            raise RequestError("InvalidArgument", f"The query parameter {repeated[0]!r} is "
                               "given more than once.")
        names = frozenset(params) - COMMON - frozenset(hoisted(params))
    else:
        names = frozenset()
    headed = frozenset(h for h in _SELECTING_HEADERS if h in headers)
    op = _operation(method, level, names, headed)
    for name, allowed in op.values.items():
        if name in params and params[name][0] not in allowed:
            code, status, message = _VALUE_ERRORS[name]
            raise RequestError(code, message, status)
    return op


@functools.lru_cache(maxsize=1024)
def _operation(method: str, level: Level, names: frozenset[str],
               headed: frozenset[str]) -> Operation:
    """The operation of method, level, query parameter names (less COMMON and hoisted) and the
    selecting headers present; remembered (a request's shape repeats; errors are not kept)."""
    candidates = [op for op in OPERATIONS
                  if op.method == method and op.level is level and op.selectors <= names
                  and (op.header is None or op.header in headed)]
    if not candidates:
        present = sorted(names & SUBRESOURCES) or sorted(names)
        if method not in S3_METHODS:
            raise RequestError("MethodNotAllowed", f"{method} is not an S3 method.", 405)
        if present:
            raise _not_implemented(f"s3kv does not implement {method} with the "
                                   f"{present[0]!r} {_what(present[0])} on {_a(level)}.")
        raise RequestError("MethodNotAllowed", f"{method} is not allowed on {_a(level)}.",
                           405)
    op = max(candidates, key=lambda o: o.specificity)
    extra = sorted(names - op.selectors - op.params)
    if extra:
        subs = [n for n in extra if n in SUBRESOURCES]
        name = (subs or extra)[0]
        raise _not_implemented(f"s3kv does not implement the {name!r} {_what(name)} "
                               f"({method} on {_a(level)}).")
    if not op.implemented:
        raise _not_implemented(f"s3kv does not implement {op.name}.")
    return op


def _a(level: Level) -> str:
    return ("an " if level is Level.OBJECT else "a ") + level.value


def _what(name: str) -> str:
    return "subresource" if name in SUBRESOURCES else "query parameter"


# -- headers that ask for a guarantee the gateway cannot give ---------------------------------

#: header prefix -> why it is refused (501 NotImplemented)
_REFUSED_PREFIXES = {
    "x-amz-server-side-encryption": "server-side encryption: s3kv stores blocks unencrypted "
                                    "(encrypt on the backend, e.g. an SSE-S3 bucket policy)",
    "x-amz-copy-source-server-side-encryption": "server-side encryption",
    "x-amz-object-lock-": "object lock (retention, legal hold)",
    "x-amz-bypass-governance-retention": "object lock (retention, legal hold)",
    "x-amz-grant-": "ACL grants (access is per credential, see --credentials-file)",
    "x-amz-tagging": "object tags",
    "x-amz-website-redirect-location": "website redirects",
    "x-amz-mfa": "MFA delete",
    "x-amz-write-offset-bytes": "appends",
}
#: header -> the values accepted (anything else: 501 NotImplemented)
_ACCEPTED_VALUES = {
    "x-amz-acl": frozenset({"private", "bucket-owner-full-control"}),
    "x-amz-bucket-object-lock-enabled": frozenset({"false"}),
    "x-amz-object-ownership": frozenset({"bucketownerenforced"}),
    # a copy's tags: the source's (none) or those given, and any given are refused above
    "x-amz-tagging-directive": frozenset({"copy", "replace"}),
}


_REFUSED = tuple(_REFUSED_PREFIXES)
#: a request conditional on who owns its bucket (a copy's source bucket): every bucket here is
#: the one owner's that listings name (``OWNER_ID``); any other owner is S3's 403
_OWNER_HEADERS = frozenset({"x-amz-expected-bucket-owner",
                            "x-amz-source-expected-bucket-owner"})


def check_headers(headers: Mapping[str, str], extra: Mapping[str, str] | None = None) -> None:
    """Refuse headers (and SigV2-hoisted query headers, ``extra``) asking for what the gateway
    cannot do; the storage class must be STANDARD (``400 InvalidStorageClass`` otherwise)."""
    for name, value in headers.items():
        # only x-amz-* headers are ever refused: the others are not even lowercased
        if name[:1] in "xX" and name[:6].lower() == "x-amz-":
            _check_header(name.lower(), value)
    for name, value in (extra or {}).items():
        if name[:6].lower() == "x-amz-":
            _check_header(name.lower(), value)


def _check_header(name: str, value: str) -> None:
    """One ``x-amz-*`` header (``name`` in lowercase)."""
    if name.startswith(_REFUSED) and name not in _ACCEPTED_VALUES:
        for prefix, why in _REFUSED_PREFIXES.items():
            if name.startswith(prefix):
                raise _not_implemented(f"s3kv does not implement {why}: header {name} is "
                                       "refused and nothing was stored.")
    accepted = _ACCEPTED_VALUES.get(name)
    if accepted is not None and value.strip().lower() not in accepted:
        raise _not_implemented(f"s3kv does not implement {name}: {value.strip()!r} (it "
                               f"accepts {', '.join(sorted(accepted))}).")
    if name in _OWNER_HEADERS and value.strip() != OWNER_ID:
        raise RequestError("AccessDenied", f"{name}: the bucket is not owned by "
                           f"{value.strip()!r}; every bucket of this gateway is owned by "
                           f"{OWNER_ID!r}. Nothing was done.", 403)
    if name == "x-amz-storage-class" and value.strip() != "STANDARD":
        raise RequestError("InvalidStorageClass", "The storage class you specified is not "
                           "valid: s3kv stores every object as STANDARD.")
