"""Open files: the gateway raises its soft limit to the hard one when it starts.

Every client connection, every backend connection and every mapped segment file is a file
descriptor. Linux starts a process with a soft limit of 1,024 while the hard limit is usually
far higher. Past the soft limit, ``accept()`` fails with EMFILE, and Python 3.11's event loop
then logs and re-arms the listening socket once per backlog slot: measured with the soft limit
at 256 and 400 idle clients connected, 137,000 tracebacks in a few seconds, and ``/readyz``
timed out. Go programs, MinIO among them, raise the soft limit to the hard one at start; the
gateway does the same, and warns when even the hard limit is low.
"""

from __future__ import annotations

import resource

from s3kv.log import get_logger

log = get_logger(__name__)

#: the soft limit asked for when the hard one is unlimited
CEILING = 1 << 20
#: below this, the gateway warns (a few hundred clients with pools of connections)
LOW = 4096


def raise_open_files() -> int:
    """Raise the soft limit on open files to the hard one; returns the soft limit now."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    target = CEILING if hard == resource.RLIM_INFINITY else hard
    if soft != resource.RLIM_INFINITY and soft < target:
        try:
            resource.setrlimit(resource.RLIMIT_NOFILE, (target, hard))
        except (ValueError, OSError) as exc:
            log.warning("gateway.open_files_unchanged", soft=soft, hard=hard, error=str(exc))
        else:
            soft = target
    if soft != resource.RLIM_INFINITY and soft < LOW:
        log.warning("gateway.open_files_low", limit=soft,
                    detail=f"each client connection is an open file: raise the hard limit to "
                    f"{LOW} or more (ulimit -Hn, or the container runtime's nofile)")
    else:
        log.info("gateway.open_files", limit=soft)
    return soft
