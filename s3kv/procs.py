"""Child Python processes of the package (the load generator's clients and its local S3 server,
bench kv's ranks) as one command line: ``python -P -m MODULE ARGS``.

``-P`` keeps the working directory off the child's ``sys.path``. With plain ``-m`` a file where
the command runs named like a package the child imports stands in for it: a ``moto.py`` beside
a user's ``s3kv sweep`` was imported by the local S3 server in place of moto, and when that
file itself starts a local server (a script named after what it runs), every server started
another, without end.
"""

from __future__ import annotations

import sys


def module_argv(module: str, *args: str) -> list[str]:
    """The command line that runs ``module`` with ``args`` in this interpreter."""
    return [sys.executable, "-P", "-m", module, *args]
