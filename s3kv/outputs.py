"""Paths a command writes its results to, checked before the run that fills them.

A benchmark or a tuning run takes minutes; finding at the end that ``--out``/``--benchdata``/
``--write-config`` names a place that cannot be written would lose the run (and used to end
in a traceback). These checks create what is missing and raise ConfigError naming the flag.
"""

from __future__ import annotations

import tempfile
from pathlib import Path

from s3kv.errors import ConfigError


def output_dir(path: str | Path, flag: str) -> Path:
    """Create directory ``path`` (and its parents) if missing; it must be writable."""
    out = Path(path)
    problem = _make_dir(out)
    if problem:
        raise ConfigError(f"{flag} {out}: {problem}; give a writable directory")
    return out


def output_file(path: str | Path, flag: str) -> Path:
    """Create the parent directory of file ``path`` if missing; the file must be writable."""
    out = Path(path)
    if out.is_dir():
        raise ConfigError(f"{flag} {out}: is a directory; give a file name")
    problem = _make_dir(out.parent)
    if problem:
        raise ConfigError(f"{flag} {out}: {problem.replace('the directory', 'its directory')}; "
                          "give a path in a writable directory")
    existed = out.exists()
    try:
        with open(out, "ab"):  # the file itself (access() tells root yes to almost anything)
            pass
    except OSError as exc:
        raise ConfigError(f"{flag} {out}: cannot write the file ({exc.strerror}); give "
                          "another path") from None
    if not existed:
        out.unlink()
    return out


def _make_dir(path: Path) -> str:
    """Create ``path``; what is wrong with it as an output directory, or ''."""
    try:
        path.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        return f"cannot create the directory ({exc.strerror})"
    try:
        with tempfile.TemporaryFile(dir=path):
            pass
    except OSError as exc:
        return f"the directory is not writable ({exc.strerror})"
    return ""
