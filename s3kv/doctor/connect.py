"""How `s3kv doctor` reaches a target: its inputs (store URL, endpoints, credentials), the
HTTP pool and minio client (retries off, short timeouts), and what a failure means in words
(what is wrong, how to fix it)."""

from __future__ import annotations

import configparser
from collections.abc import Mapping
from pathlib import Path
from urllib.parse import parse_qs, urlsplit

import urllib3
from minio import Minio
from minio.error import S3Error

from s3kv.doctor.report import Target
from s3kv.errors import ConfigError


class S3Failure(Exception):
    """An S3 error answer (the fields minio's S3Error has, for the same explanations)."""

    def __init__(self, status: int, code: str, message: str) -> None:
        super().__init__(f"HTTP {status} {code}: {message}")
        self.status = status
        self.code = code
        self.message = message


def parse_store_url(url: str) -> tuple[str, str, list[str]]:
    """``s3://BUCKET/PREFIX?endpoint=URL[,URL...]`` -> (bucket, prefix, endpoints)."""
    parts = urlsplit(url)
    if parts.scheme != "s3" or not parts.netloc:
        raise ConfigError(f"store URL {url!r} is not s3://BUCKET/PREFIX?endpoint=URL[,URL...] "
                          "(doctor checks S3 stores; a file:// store needs no checks)")
    query = parse_qs(parts.query)
    endpoints = [e for v in query.get("endpoint", []) for e in v.split(",") if e]
    return parts.netloc, parts.path.lstrip("/"), endpoints


def split_endpoint(url: str) -> tuple[str, bool]:
    """``http://host:9000`` -> (``host:9000``, secure)."""
    parts = urlsplit(url if "://" in url else "http://" + url)
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise ConfigError(f"endpoint {url!r} is not an http:// or https:// URL")
    if parts.path not in ("", "/") or parts.query:
        raise ConfigError(f"endpoint {url!r} must be scheme://host[:port] only (no path): "
                          "buckets are addressed path-style below it")
    return parts.netloc, parts.scheme == "https"


def resolve_credentials(env: Mapping[str, str], profile: str | None = None
                        ) -> tuple[str, str, str, str]:
    """(access key, secret key, session token, where from): the standard AWS variables first,
    then the shared credentials file's profile. Never the instance metadata service."""
    access = env.get("AWS_ACCESS_KEY_ID", "")
    secret = env.get("AWS_SECRET_ACCESS_KEY", "")
    if access and secret and not profile:
        return access, secret, env.get("AWS_SESSION_TOKEN", ""), "environment"
    name = profile or env.get("AWS_PROFILE") or "default"
    path = Path(env.get("AWS_SHARED_CREDENTIALS_FILE") or Path.home() / ".aws" / "credentials")
    parser = configparser.ConfigParser()
    try:
        parser.read(path)
    except configparser.Error as exc:
        raise ConfigError(f"cannot read AWS credentials file {path}: {exc}") from None
    if parser.has_section(name):
        sec = parser[name]
        access = sec.get("aws_access_key_id", "")
        secret = sec.get("aws_secret_access_key", "")
        if access and secret:
            return access, secret, sec.get("aws_session_token", ""), f"profile {name} ({path})"
    if profile:
        raise ConfigError(f"profile {profile!r} has no keys in {path}")
    return "", "", "", "none"


# ---- running checks -------------------------------------------------------------------------


def http_pool(timeout: float, verify_tls: bool) -> urllib3.PoolManager:
    return urllib3.PoolManager(
        timeout=urllib3.Timeout(connect=timeout, read=timeout),
        retries=False,
        cert_reqs="CERT_REQUIRED" if verify_tls else "CERT_NONE",
    )


def minio_client(target: Target, endpoint: str, http: urllib3.PoolManager) -> Minio:
    host, secure = split_endpoint(endpoint)
    return Minio(host, access_key=target.access_key or None,
                 secret_key=target.secret_key or None,
                 session_token=target.session_token or None, secure=secure,
                 region=target.region, http_client=http, cert_check=target.verify_tls)


def network_problem(exc: BaseException, endpoint: str, timeout: float) -> tuple[str, str]:
    """(what is wrong, how to fix it) for a transport-level failure."""
    reason: BaseException = exc
    while isinstance(reason, urllib3.exceptions.MaxRetryError) and reason.reason is not None:
        reason = reason.reason
    text = str(reason)
    host = urlsplit(endpoint).netloc
    if isinstance(reason, urllib3.exceptions.NameResolutionError) or "resolve" in text.lower():
        return (f"cannot resolve the host of {endpoint}",
                "check the host name in --endpoint (in Kubernetes: the Service name and "
                "namespace, e.g. http://minio.minio.svc:9000) and DNS")
    if "refused" in text.lower() or isinstance(reason, ConnectionRefusedError):
        return (f"connection refused: nothing listens on {host}",
                "check the port in --endpoint and that the server runs there (MinIO: "
                "`systemctl status minio` on the node, or the Service/Pod in Kubernetes)")
    if isinstance(reason, (urllib3.exceptions.ConnectTimeoutError,
                           urllib3.exceptions.ReadTimeoutError, TimeoutError)):
        return (f"no answer from {host} within {timeout:g}s",
                "the host is up but silent: check firewalls/NetworkPolicy between here and "
                "the endpoint, that the port is the S3 API port (MinIO: 9000, not the console "
                "9001), and the server's load; raise --timeout if it is merely slow")
    if isinstance(reason, urllib3.exceptions.SSLError):
        return (f"TLS handshake with {host} failed: {text}",
                "use http:// for a plain-HTTP endpoint, or trust the server's CA "
                "(SSL_CERT_FILE), or --insecure for a test cluster")
    return (f"cannot reach {host}: {text}",
            "check --endpoint, the network path and that the server is running")


CRED_FIXES = {
    "InvalidAccessKeyId": ("the server does not know the access key {key}",
                           "set AWS_ACCESS_KEY_ID to a key that exists on this server (MinIO: "
                           "`mc admin user list ALIAS`; the root user is MINIO_ROOT_USER)"),
    "SignatureDoesNotMatch": ("the secret key does not match the access key {key}",
                              "set AWS_SECRET_ACCESS_KEY to that key's secret (in Kubernetes: "
                              "the chart's Secret / existingSecret), and check --region"),
    "RequestTimeTooSkewed": ("the server rejected the request for clock skew",
                             "synchronise this host's clock (chrony/NTP) with the server's"),
    "ExpiredToken": ("the session token has expired", "refresh the temporary credentials"),
    "InvalidToken": ("the session token is invalid", "unset AWS_SESSION_TOKEN or refresh it"),
    "AuthorizationHeaderMalformed": ("the server rejected the signing region",
                                     "pass --region with the server's region (MinIO default: "
                                     "us-east-1, or its MINIO_SITE_REGION)"),
}


def s3_problem(exc: S3Error | S3Failure, target: Target, what: str) -> tuple[str, str]:
    code = exc.code or ""
    if code in CRED_FIXES:
        detail, fix = CRED_FIXES[code]
        return detail.format(key=target.access_key), fix
    if code == "AccessDenied":
        return (f"{what}: access denied for key {target.access_key}",
                f"grant the key's policy s3:GetObject, s3:PutObject, s3:DeleteObject, "
                f"s3:ListBucket, s3:AbortMultipartUpload and s3:ListMultipartUploadParts on "
                f"arn:aws:s3:::{target.bucket} and arn:aws:s3:::{target.bucket}/*")
    if code == "NoSuchBucket":
        return f"bucket {target.bucket} does not exist", setup_hint(target)
    return f"{what}: {code or 'error'}: {exc.message}", "see the server's log for this request"


def setup_hint(target: Target) -> str:
    return (f"run s3kv doctor --setup --endpoint "
            f"{target.endpoints[0]} --bucket {target.bucket}"
            + (f" --prefix {target.prefix}" if target.prefix else "")
            + " (creates the bucket if missing, applies s3kv's lifecycle rules)")

