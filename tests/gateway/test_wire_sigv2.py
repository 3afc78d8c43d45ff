"""s3kv/wire/sigv2.py against botocore's own SigV2 signers (HmacV1Auth, HmacV1QueryAuth), pure:
whatever botocore signs verifies, anything changed does not."""

from __future__ import annotations

import time
from urllib.parse import parse_qs, quote, unquote, urlsplit

import pytest
from botocore.auth import HmacV1Auth, HmacV1QueryAuth
from botocore.awsrequest import AWSRequest
from botocore.credentials import Credentials
from hypothesis import given, settings
from hypothesis import strategies as st

from s3kv.errors import RequestError
from s3kv.wire import sigv2

KEY, SECRET = "AKIDEXAMPLE", "wJalrXUtnFEMI/K7MDENG+bPxRfiCYEXAMPLEKEY"
VERIFIER = sigv2.SigV2Verifier({KEY: SECRET})


def _params(query: str) -> dict[str, list[str]]:
    out: dict[str, list[str]] = {}
    for part in query.split("&"):
        if part:
            n, _, v = part.partition("=")
            out.setdefault(unquote(n), []).append(unquote(v))
    return out


segments = st.text(st.characters(codec="utf-8", exclude_categories=["Cs", "Cc"]),
                   min_size=1, max_size=12).filter(lambda s: s not in (".", ".."))
query_items = st.lists(st.sampled_from([
    ("uploads", None), ("uploadId", "abc"), ("partNumber", "3"), ("acl", None),
    ("response-content-type", "text/plain; charset=utf-8"), ("versionId", "null"),
    ("prefix", "a b/"), ("list-type", "2"), ("x-id", "GetObject")]), max_size=3,
    unique_by=lambda kv: kv[0])


@settings(max_examples=80, deadline=None)
@given(method=st.sampled_from(["GET", "PUT", "POST", "DELETE", "HEAD"]),
       parts=st.lists(segments, min_size=1, max_size=3), items=query_items,
       amz=st.dictionaries(st.sampled_from(["x-amz-meta-a", "x-amz-meta-b", "x-amz-acl",
                                            "x-amz-date"]),
                           st.text("abc XYZ-09", min_size=1, max_size=8), max_size=2),
       ctype=st.sampled_from([None, "text/plain", "application/octet-stream"]))
def test_botocore_header_signatures_verify(method: str, parts: list[str],
                                           items: list[tuple[str, str | None]],
                                           amz: dict[str, str], ctype: str | None) -> None:
    path = "/bucket/" + "/".join(quote(p, safe="") for p in parts)
    query = "&".join(n if v is None else f"{n}={quote(v, safe='')}" for n, v in items)
    headers = dict(amz)
    if "x-amz-date" in headers:
        headers["x-amz-date"] = time.strftime("%a, %d %b %Y %H:%M:%S GMT", time.gmtime())
    if ctype:
        headers["Content-Type"] = ctype
    req = AWSRequest(method=method, url=f"http://h:1{path}" + (f"?{query}" if query else ""),
                     headers=headers)
    HmacV1Auth(Credentials(KEY, SECRET)).add_auth(req)
    signed = dict(req.headers.items())
    now = time.time()
    auth = VERIFIER.verify(method, path, query, signed, _params(query), now)
    assert auth.access_key == KEY and not auth.presigned
    # a different method, path, subresource or header is a different request
    for changed in [("PATCH" if method != "PATCH" else "GET", path, query, signed),
                    (method, path + "x", query, signed),
                    (method, path, (query + "&" if query else "") + "torrent", signed),
                    (method, path, query, {**signed, "x-amz-meta-extra": "1"})]:
        with pytest.raises(RequestError) as exc:
            VERIFIER.verify(changed[0], changed[1], changed[2], changed[3],
                            _params(changed[2]), now)
        assert exc.value.code == "SignatureDoesNotMatch"


def test_botocore_presigned_urls_verify_and_expire() -> None:
    req = AWSRequest(method="GET", url="http://h:1/bucket/some%20key?response-expires=0")
    HmacV1QueryAuth(Credentials(KEY, SECRET), expires=60).add_auth(req)
    parts = urlsplit(req.url)
    params = {k: v for k, v in parse_qs(parts.query, keep_blank_values=True).items()}
    now = time.time()
    assert VERIFIER.verify("GET", parts.path, parts.query, {}, params, now).presigned
    with pytest.raises(RequestError) as exc:
        VERIFIER.verify("GET", parts.path, parts.query, {}, params, now + 120)
    assert (exc.value.status, exc.value.code) == (403, "AccessDenied")
    with pytest.raises(RequestError) as exc:
        VERIFIER.verify("PUT", parts.path, parts.query, {}, params, now)
    assert exc.value.code == "SignatureDoesNotMatch"
    # our own presigner signs what botocore signs
    expires = int(params["Expires"][0])
    ours = sigv2.presign_query(KEY, SECRET, "GET", parts.path, expires, "response-expires=0")
    assert _params(ours)["Signature"] == params["Signature"]


def test_header_and_query_auth_together_refused() -> None:
    with pytest.raises(RequestError) as exc:
        VERIFIER.verify("GET", "/b/k", "AWSAccessKeyId=a&Signature=s&Expires=1",
                        {"Authorization": "AWS a:s"}, _params("AWSAccessKeyId=a&Signature=s"
                                                              "&Expires=1"), time.time())
    assert exc.value.code == "InvalidArgument"
