"""Stopping a child that runs in its own session (``start_new_session=True``): the Ceph daemons
of tests/support/rgw.py and the S3 servers of benchmarks/servers.py; and leaving on SIGTERM
through the ``with`` blocks that stop them."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import threading
from types import FrameType


def stop_process_group(proc: subprocess.Popen[bytes], grace: float) -> None:
    """SIGTERM ``proc``'s process group, SIGKILL after ``grace`` seconds; always reaps it."""
    if proc.poll() is not None:
        return
    with contextlib.suppress(ProcessLookupError):
        os.killpg(proc.pid, signal.SIGTERM)
    try:
        proc.wait(timeout=grace)
    except subprocess.TimeoutExpired:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()


class Terminated(KeyboardInterrupt):
    """SIGTERM, raised where the main thread is, as Ctrl-C raises KeyboardInterrupt."""


def _raise_terminated(signum: int, frame: FrameType | None) -> None:
    raise Terminated(f"signal {signum}")


def exit_on_sigterm() -> None:
    """Make SIGTERM (``kill``, ``timeout``, the end of a CI job) leave the process as Ctrl-C
    does: through its ``with`` and ``finally`` blocks, which stop the servers and gateways they
    started. Python's default ends the process at once and leaves them running (children in
    their own session get no signal from the terminal either). A KeyboardInterrupt, so that
    whatever treats Ctrl-C as "stop now" does so here too (pytest ends the session and runs its
    teardowns; a SystemExit would be one failed test and the run would go on). Called by
    whatever starts a child; only in the main thread, and never over a handler set by someone
    else."""
    if threading.current_thread() is not threading.main_thread():
        return
    if signal.getsignal(signal.SIGTERM) is signal.SIG_DFL:
        signal.signal(signal.SIGTERM, _raise_terminated)
