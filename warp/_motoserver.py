"""``python -m warp._motoserver HOST PORT``: moto's S3 server with a periodic ``gc.collect()``.

moto keeps request bodies alive until a full collection, so without it a benchmark grows the
server by the bytes it writes (DESIGN.md, "Testing").
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
    threading.Thread(target=_collector, args=(1.0,), daemon=True).start()
    from moto.server import main as moto_main

    moto_main(["-H", host, "-p", port])


if __name__ == "__main__":
    main()
