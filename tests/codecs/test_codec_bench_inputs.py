"""`s3kv codec-bench FILE.npy` on files that hold no measurable vectors: a usage error naming
the file and what is wrong with it, never a traceback."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest

from s3kv.cli import main


@pytest.mark.parametrize(("make", "message"), [
    (lambda p: np.save(p, np.zeros((0, 128), dtype=np.float32)), "holds no vectors"),
    (lambda p: np.save(p, np.float32(3)), "holds no vectors"),
    (lambda p: p.write_bytes(b"not an array"), "is no .npy file"),
])
def test_an_npy_without_vectors_is_a_usage_error(
        make: Callable[[Path], object], message: str, tmp_path: Path,
        capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "kv.npy"
    make(path)
    assert main(["codec-bench", "--no-synthetic", "--repeat", "1", "--codec", "kvq:bits=3",
                 str(path)]) == 2
    err = capsys.readouterr().err
    assert f"s3kv codec-bench: error: cannot read {path}" in err and message in err, err
