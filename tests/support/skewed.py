"""Run a Python module with its wall clock set back, as a host whose clock is behind runs it:

    python tests/support/skewed.py SECONDS PYTHON -m MODULE ARGS...

(``Gateway(prefix=...)``'s form: the gateway's own command follows the seconds). Only
``time.time`` is set back, before the module is imported; the monotonic clock is untouched."""

from __future__ import annotations

import runpy
import sys
import time


def main() -> None:
    seconds = float(sys.argv[1])
    rest = sys.argv[2:]
    assert len(rest) >= 3 and rest[1] == "-m", "expected: SECONDS PYTHON -m MODULE ARGS..."
    real = time.time
    time.time = lambda: real() - seconds
    sys.argv = [rest[2], *rest[3:]]
    runpy.run_module(rest[2], run_name="__main__", alter_sys=True)


if __name__ == "__main__":
    main()
