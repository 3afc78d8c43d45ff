"""Security: bad credentials files, requests signed with another key, replayed signatures,
presigned URLs used out of bounds, bad bearer tokens."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from pathlib import Path

import boto3
import pytest
from botocore.config import Config

from s3kv.config import Settings
from s3kv.errors import ConfigError
from s3kv.gateway.server import check_settings
from tests.reliability.conftest import Report
from tests.reliability.security.tenants import (
    A_BUCKET,
    A_SHARED,
    B_BUCKET,
    CREDENTIALS_TOML,
    CREDS,
    OTHER,
    Client,
    check,
    client,
)
from tests.support.clock import EXPIRED_BY, botocore_signs_earlier
from tests.support.gateway import GW_ACCESS, SMALL, Gateway, backend_store, running_gateway
from tests.support.rawhttp import presign, send, sign, skewed
from tests.support.s3server import REGION, MotoServer

# -- configuration -----------------------------------------------------------------------------

BAD_FILES = [
    ("[[credential]]\naccess_key = 'a'\n", "secret_key"),
    ("[[credential]]\naccess_key = 'a'\nsecret_key = 's'\nnamespaces = 'x-*'\n", "list"),
    ("[[credential]]\naccess_key = 'a'\nsecret_key = 's'\nnamespaces = ['../x']\n", "pattern"),
    ("[[credential]]\naccess_key = 'a'\nsecret_key = 's'\nnamespace = ['x']\n", "unknown"),
    ("[[credential]]\naccess_key = 'a:b'\nsecret_key = 's'\n", "must not contain"),
    ("[[credential]]\naccess_key = 'a'\nsecret_key = 's'\n[[credential]]\naccess_key = 'a'\n"
     "secret_key = 't'\n", "twice"),
    ("[credential]\naccess_key = 'a'\n", "array of tables"),
    ("access_key = 'a'\n", "top-level"),
    ("[[credential\n", "credentials"),
]


def test_bad_credentials_file_refused_at_start(tmp_path: Path,
                                               reliability_report: Report) -> None:
    for i, (text, why) in enumerate(BAD_FILES):
        path = tmp_path / f"c{i}.toml"
        path.write_text(text)
        with pytest.raises(ConfigError, match=why):
            check_settings(Settings.load(env={"S3KV_CREDENTIALS_FILE": str(path)}))
    with pytest.raises(ConfigError, match="cannot read credentials file"):
        check_settings(Settings.load(env={"S3KV_CREDENTIALS_FILE": str(tmp_path / "absent.toml")}))
    good = tmp_path / "good.toml"
    good.write_text(CREDENTIALS_TOML)
    settings = Settings.load(env={"S3KV_CREDENTIALS_FILE": str(good)})
    check_settings(settings)
    assert settings.credentials_file
    reliability_report.record("security", "bad credentials files refused at start "
                              "(missing secret, bad patterns, duplicates, unknown fields...)",
                              faults=len(BAD_FILES) + 1)


def test_credentials_file_alone_enables_auth(s3_server: MotoServer, cred_file: Path,
                                             reliability_report: Report) -> None:
    """Without S3KV_ACCESS_KEY, a credentials file still turns authentication on."""
    with running_gateway(backend_store(s3_server), [*SMALL, "--credentials-file",
                                                    str(cred_file)], credentials=False) as g:
        n = [0]
        ops = Client(g, "ops", n)
        assert ops("PUT", f"/{OTHER}").status == 200
        assert check(send(g.port, "GET", "/", {})).code == "AccessDenied"
        admin = Client(g, "admin", n)  # not configured in this gateway
        assert check(admin("GET", "/")).code == "InvalidAccessKeyId"
    reliability_report.record("security", "credentials file without a main key: auth on",
                              faults=2, requests=n[0] + 1)


# -- signatures ---------------------------------------------------------------------------------

def test_signed_with_another_key(gw: Gateway, counter: list[int],
                                 reliability_report: Report) -> None:
    admin = client(gw, "admin", counter)
    a = client(gw, "team-a", counter)
    assert admin("PUT", f"/{A_BUCKET}").status in (200, 409)
    assert a("PUT", f"/{A_BUCKET}/k", b"v").status == 200
    cases = [
        # team-a's access key, team-b's secret: the signature cannot match
        (dict(access="team-a", secret=CREDS["team-b"][0]), "SignatureDoesNotMatch"),
        # admin's key id, team-a's secret: no escalation by naming a stronger key
        (dict(access=GW_ACCESS, secret=CREDS["team-a"][0]), "SignatureDoesNotMatch"),
        (dict(access="team-c", secret="whatever"), "InvalidAccessKeyId"),
        (dict(access="team-a ", secret=CREDS["team-a"][0]), "InvalidAccessKeyId"),
        (dict(access="TEAM-A", secret=CREDS["team-a"][0]), "InvalidAccessKeyId"),
    ]
    faults = 0
    for kw, code in cases:
        for method, target, body in [("GET", f"/{A_BUCKET}/k", b""),
                                     ("PUT", f"/{A_BUCKET}/k", b"evil"),
                                     ("DELETE", f"/{A_BUCKET}/k", b""),
                                     ("GET", "/", b"")]:
            r = check(a(method, target, body, **kw))
            faults += 1
            assert (r.status, r.code) == (403, code), (kw, method, target, r)
    assert a("GET", f"/{A_BUCKET}/k").body == b"v"
    reliability_report.record("security", "requests signed with another credential's key",
                              faults=faults, requests=counter[0])


def test_replayed_signatures(gw: Gateway, counter: list[int],
                             reliability_report: Report) -> None:
    a = client(gw, "team-a", counter)
    a("PUT", f"/{A_BUCKET}")
    target = f"/{A_BUCKET}/replay"
    hs = sign("PUT", target, a.host, a.access, a.secret, body=b"original")
    counter[0] += 2
    assert send(gw.port, "PUT", target, hs, b"original").status == 200
    # S3 semantics: an identical request replayed within the skew window is accepted (S3 keeps
    # no nonce; TLS and the 15-minute window are the protection). It writes the same bytes.
    assert send(gw.port, "PUT", target, hs, b"original").status == 200
    faults = 0
    # the same signature with another body: the signed payload hash no longer matches
    r = check(send(gw.port, "PUT", target, hs, b"tampered"))
    assert (r.status, r.code) == (400, "XAmzContentSHA256Mismatch")
    # another path, method or query: the signature covers them
    for method, other in [("PUT", f"/{A_BUCKET}/replay2"), ("PUT", f"/{A_SHARED}/replay"),
                          ("PUT", f"{target}?x-id=PutObject"), ("POST", target),
                          ("DELETE", target), ("PUT", target.upper())]:
        r = check(send(gw.port, method, other, hs, b"original"))
        assert (r.status, r.code) == (403, "SignatureDoesNotMatch"), (method, other, r)
        faults += 1
    # an altered signed header (x-amz-date moved within the window and within its day, which
    # the credential scope names: a minute across midnight is AuthorizationHeaderMalformed)
    signed_at = datetime.strptime(hs["x-amz-date"], "%Y%m%dT%H%M%SZ").replace(tzinfo=UTC)
    later = signed_at + timedelta(minutes=1)
    when = later if later.date() == signed_at.date() else signed_at - timedelta(minutes=1)
    moved = dict(hs, **{"x-amz-date": when.strftime("%Y%m%dT%H%M%SZ")})
    assert check(send(gw.port, "PUT", target, moved, b"original")).code == \
        "SignatureDoesNotMatch"
    # a replay outside the 15-minute window: a request signed 16 minutes ago or ahead
    for minutes in (-16, 16, -60 * 24):
        r = check(a("PUT", target, b"late", when=skewed(minutes)))
        assert (r.status, r.code) == (403, "RequestTimeTooSkewed"), (minutes, r)
        faults += 1
    counter[0] += 9
    assert a("GET", target).body == b"original"
    reliability_report.record(
        "security", "replayed signatures (other body/path/method/query/date; outside window)",
        faults=faults + 2, requests=counter[0],
        note="an identical replay within 15 min is accepted, as on S3")


def test_presigned_urls(gw: Gateway, counter: list[int], reliability_report: Report) -> None:
    a = client(gw, "team-a", counter)
    a("PUT", f"/{A_BUCKET}")
    a("PUT", f"/{A_BUCKET}/p1", b"one")
    a("PUT", f"/{A_BUCKET}/p2", b"two")
    url = presign("GET", f"/{A_BUCKET}/p1", a.host, a.access, a.secret)
    assert send(gw.port, "GET", url, {}).body == b"one"
    faults = 0
    # used for another key, bucket or method
    for method, target in [("GET", url.replace("/p1?", "/p2?")),
                           ("GET", url.replace(A_BUCKET, A_SHARED)),
                           ("PUT", url), ("DELETE", url), ("HEAD", url),
                           ("GET", url.replace("X-Amz-Expires=300", "X-Amz-Expires=600"))]:
        r = check(send(gw.port, method, target, {}, b"x" if method == "PUT" else b""))
        assert r.status == 403, (method, target, r)
        assert method == "HEAD" or r.code == "SignatureDoesNotMatch"
        faults += 1
    # another credential's bucket: the URL is valid for team-a only where team-a may go
    denied = presign("GET", f"/{B_BUCKET}/p1", a.host, a.access, a.secret)
    assert check(send(gw.port, "GET", denied, {})).code == "AccessDenied"
    # expired: signed an hour ago for 60 s; and a real client's URL after its expiry
    old = presign("GET", f"/{A_BUCKET}/p1", a.host, a.access, a.secret, expires=60,
                  when=skewed(-60))
    r = check(send(gw.port, "GET", old, {}))
    assert (r.status, r.code) == (403, "AccessDenied")
    s3 = boto3.client("s3", endpoint_url=gw.endpoint, region_name=REGION,
                      aws_access_key_id=a.access, aws_secret_access_key=a.secret,
                      config=Config(signature_version="s3v4", s3={"addressing_style": "path"}))
    with botocore_signs_earlier(EXPIRED_BY + 1):  # valid for 1 s, EXPIRED_BY s ago
        short = s3.generate_presigned_url("get_object", Params={"Bucket": A_BUCKET,
                                                                "Key": "p1"}, ExpiresIn=1)
    short_target = short.split(str(gw.port), 1)[1]
    assert check(send(gw.port, "GET", short_target, {})).code == "AccessDenied"
    put_url = s3.generate_presigned_url("put_object", Params={"Bucket": A_BUCKET, "Key": "p3"},
                                        ExpiresIn=60).split(str(gw.port), 1)[1]
    assert send(gw.port, "PUT", put_url, {}, b"three").status == 200
    assert check(send(gw.port, "GET", put_url, {})).code == "SignatureDoesNotMatch"
    # not valid yet (dated 20 minutes ahead), expiry over a week
    early = presign("GET", f"/{A_BUCKET}/p1", a.host, a.access, a.secret, when=skewed(20))
    assert check(send(gw.port, "GET", early, {})).status == 403
    week = presign("GET", f"/{A_BUCKET}/p1", a.host, a.access, a.secret, expires=604801)
    assert check(send(gw.port, "GET", week, {})).code == "AuthorizationQueryParametersError"
    faults += 6
    counter[0] += 12
    assert a("GET", f"/{A_BUCKET}/p2").body == b"two"
    reliability_report.record("security", "presigned URLs: other key/bucket/method, expired, "
                              "tampered, not yet valid", faults=faults, requests=counter[0])




def test_bearer_tokens(gw: Gateway, counter: list[int], reliability_report: Report) -> None:
    a = client(gw, "team-a", counter)
    body = b'{"keys": ["k"]}'
    bad = ["", "team-a", "team-a:", "team-a:wrong", f"team-b:{CREDS['team-a'][0]}",
           f"team-a:{CREDS['team-a'][0]}x", "ünïcödé:sécret", "team-a:" + "x" * 5000,
           f"{GW_ACCESS}:{CREDS['team-a'][0]}"]
    for tok in bad:
        r = check(a.bearer("POST", f"/v1/{A_BUCKET}/lookup", body, token=tok), native=True)
        assert (r.status, r.code) == (403, "AccessDenied"), (tok, r)
    # a bearer token is for /v1 only: on the S3 front it is an unsupported auth scheme
    r = check(a.bearer("GET", f"/{A_BUCKET}?list-type=2"))
    assert (r.status, r.code) == (400, "AuthorizationHeaderMalformed")
    reliability_report.record("security", "bad bearer tokens (wrong, other key, non-ASCII, "
                              "long, on the S3 front)", faults=len(bad) + 1,
                              requests=counter[0])


