"""Run moto's standalone S3 server with a periodic gc.collect().

moto keeps request bodies alive until a full garbage collection, so a long test session can grow
the server to many GiB; collecting every couple of seconds keeps it small (see DESIGN.md,
"Testing"). Usage: python moto_wrapper.py HOST PORT
"""

from __future__ import annotations

import gc
import sys
import threading
import time


def _collector(period: float) -> None:
    while True:
        time.sleep(period)
        gc.collect()


def main() -> None:
    host, port = sys.argv[1], sys.argv[2]
    threading.Thread(target=_collector, args=(2.0,), daemon=True).start()
    from moto.server import main as moto_main

    moto_main(["-H", host, "-p", port])


if __name__ == "__main__":
    main()
