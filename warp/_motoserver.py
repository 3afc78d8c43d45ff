"""``python -m warp._motoserver HOST PORT``: moto's S3 server with a periodic ``gc.collect()``.

moto keeps request bodies alive until a full collection, so without it a benchmark grows the
server by the bytes it writes (DESIGN.md, "Testing"). The server also ends when the process
that started it does: a ``s3kv sweep`` or ``bench`` killed by SIGTERM/SIGKILL runs no
clean-up, and the server (in its own session, away from Ctrl-C) would live on.
"""

from __future__ import annotations

import gc
import os
import sys
import threading
import time


def _collector(period: float) -> None:
    while True:
        time.sleep(period)
        gc.collect()


def _orphan_watch(parent: int, period: float) -> None:
    while os.getppid() == parent:  # once the parent dies the server is re-parented
        time.sleep(period)
    os._exit(0)


def main() -> None:
    host, port = sys.argv[1], sys.argv[2]
    threading.Thread(target=_collector, args=(1.0,), daemon=True).start()
    threading.Thread(target=_orphan_watch, args=(os.getppid(), 0.5), daemon=True).start()
    from moto.server import main as moto_main

    moto_main(["-H", host, "-p", port])


if __name__ == "__main__":
    main()
