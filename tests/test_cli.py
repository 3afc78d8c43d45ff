"""The ``s3kv`` command line from a user's side: mistakes end in a message and an exit code.

Every case runs the real ``main()``: a bad flag value, an unusable path or address must print
``s3kv CMD: error: ...`` naming what to change and exit 2, never a Python traceback.
"""

from __future__ import annotations

import pytest

from s3kv.cli import main

BAD_FLAG_VALUES = [
    (["sweep", "--obj-size", "-1"], "--obj-size", "invalid size '-1'"),
    (["sweep", "--duration", "abc"], "--duration", "invalid duration 'abc'"),
    (["sweep", "--trim", "-1"], "--trim", "invalid duration '-1'"),
    (["sweep", "--mixed-ratio", "get=x"], "--mixed-ratio", "invalid weight"),
    (["bench", "get", "--part-size", "1.5XB"], "--part-size", "invalid size unit 'XB'"),
    (["bench", "put", "--request-timeout", "soon"], "--request-timeout", "invalid duration"),
    (["bench", "kv", "--context-tokens", "many"], "--context-tokens", "uniform:LO-HI"),
    (["bench", "kv", "--batch-size", "32MB/s"], "--batch-size", "invalid size"),
    (["tune", "--endpoint", "http://x", "--bucket", "b", "--segment-sizes", "64MiB,12XB"],
     "--segment-sizes", "invalid size unit 'XB'"),
    (["tune", "--endpoint", "http://x", "--bucket", "b", "--concurrency", "1,four"],
     "--concurrency", "invalid list of integers"),
    (["tune", "--endpoint", "http://x", "--bucket", "b", "--budget", "1 minute"],
     "--budget", "invalid duration"),
    (["analyze", "--trim", "x", "f.csv.zst"], "--trim", "invalid duration 'x'"),
    (["plan", "--bytes-per-token", "-1"], "--bytes-per-token", "invalid size '-1'"),
]


@pytest.mark.parametrize(("argv", "flag", "message"), BAD_FLAG_VALUES,
                         ids=[f"{a[0][0]} {a[1]}" for a in BAD_FLAG_VALUES])
def test_a_bad_flag_value_is_a_usage_error(argv: list[str], flag: str, message: str,
                                           capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exc:
        main(argv)
    assert exc.value.code == 2
    err = capsys.readouterr().err
    assert f"error: argument {flag}: " in err and message in err, err
    assert "Traceback" not in err
